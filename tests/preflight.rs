//! `preflight::check_model_cpu` (the CPU side of loading, which the `load_cpu` fuzz target runs)
//! against the real `Engine::load` on the GPU: on the tiny model and on broken variants of it,
//! both accept, or both refuse with the same error. The check mirrors the load's sequence of
//! steps, so this is what catches the two drifting apart.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use hotprefix::engine::{Engine, EngineOptions};
use hotprefix::gguf::Value;
use hotprefix::preflight::check_model_cpu;
use hotprefix::testmodel::{tiny_gguf, tiny_gguf_with, TensorEntry};

mod common;
mod dual;

/// The tiny model with its metadata and tensor table edited.
fn tiny_with(edit: impl FnOnce(&mut BTreeMap<String, Value>, &mut Vec<TensorEntry>)) -> Vec<u8> {
    tiny_gguf_with(1, edit)
}

fn set(key: &'static str, v: Value) -> impl FnOnce(&mut BTreeMap<String, Value>, &mut Vec<TensorEntry>) {
    move |m, _| drop(m.insert(key.to_string(), v))
}

/// The tiny model with `blk.0.ffn_down` as MXFP4 (ggml type 39: 32-value blocks of 17 bytes).
fn mxfp4_down() -> Vec<u8> {
    tiny_with(|_, t| {
        for (_, d, ty, b) in t.iter_mut().filter(|(n, ..)| n == "blk.0.ffn_down.weight") {
            *ty = 39;
            *b = vec![0; (d[0] / 32 * 17 * d[1]) as usize];
        }
    })
}

/// The tiny model with one more F32 tensor `name` of `n` values.
fn extra_tensor(name: &'static str, n: u64) -> Vec<u8> {
    tiny_with(move |_, t| t.push((name.to_string(), vec![n], 0, vec![0; n as usize * 4])))
}

/// A tensor the loader would not read is refused by name before anything loads, never ignored:
/// a llama file's `attn_output.bias` (llama.cpp adds it; hotprefix has no such bias), a block past
/// `block_count`, a tensor no architecture has, and split Q/K/V beside a fused `attn_qkv` (the
/// loader reads the fused one). The tiny model itself, and Qwen2-style Q/K/V biases, still load.
#[test]
fn a_tensor_the_loader_does_not_read_is_refused_by_name() {
    for name in [
        "blk.0.attn_output.bias",
        "blk.0.ffn_down.bias",
        "blk.2.attn_norm.weight",
        "blk.01.attn_norm.weight",
        "dense_2.weight",
        "output.bias",
    ] {
        let Err(err) = check_model_cpu(&extra_tensor(name, 96)) else { panic!("{name} was accepted") };
        assert!(matches!(err, hotprefix::Error::Model(_)), "{err:?}");
        assert!(err.to_string().contains(&format!("tensor {name} is not one hotprefix reads for a llama model of 2 layers")), "{err}");
    }
    let fused_and_split = tiny_with(|_, t| {
        let q = t.iter().find(|(n, ..)| n == "blk.0.attn_q.weight").cloned().expect("attn_q");
        t.push((
            "blk.0.attn_qkv.weight".into(),
            vec![q.1[0], 160],
            q.2,
            [&q.3[..], &q.3[..], &q.3[..]].concat()[..q.3.len() / 96 * 160].to_vec(),
        ));
    });
    let Err(err) = check_model_cpu(&fused_and_split) else { panic!("a fused and a split Q|K|V were accepted") };
    assert!(err.to_string().contains("tensor blk.0.attn_q.weight is not one hotprefix reads"), "{err}");
    check_model_cpu(&extra_tensor("blk.1.attn_v.bias", 32)).expect("a Q/K/V bias is read by every architecture");
}

/// A tensor of the shared set that llama.cpp's loader does not take for the file's architecture
/// (QK-norm or Gemma's post-norms on llama, LongRoPE factors beside llama): refused by name, as
/// llama.cpp refuses the file, not applied. The same QK-norm in a `qwen3` file loads.
#[test]
fn a_tensor_the_architecture_does_not_take_is_refused() {
    let norms = |names: &'static [&'static str], n: u64| {
        tiny_with(move |_, t| {
            for l in 0..2 {
                for w in names {
                    t.push((format!("blk.{l}.{w}.weight"), vec![n], 0, 1f32.to_le_bytes().repeat(n as usize)));
                }
            }
        })
    };
    let cases = [
        (norms(&["attn_q_norm", "attn_k_norm"], 16), "blk.0.attn_q_norm.weight"),
        (norms(&["post_attention_norm", "post_ffw_norm"], 96), "blk.0.post_attention_norm.weight"),
        (extra_tensor("rope_factors_long.weight", 8), "rope_factors_long.weight"),
    ];
    for (file, name) in cases {
        let Err(err) = check_model_cpu(&file) else { panic!("{name} was accepted") };
        assert!(err.to_string().contains(&format!("tensor {name} is not one hotprefix reads for a llama model")), "{err}");
    }
    let qwen3 = tiny_with(|m, t| {
        let keys: Vec<String> = m.keys().filter(|k| k.starts_with("llama.")).cloned().collect();
        for k in keys {
            if let Some(v) = m.remove(&k) {
                m.insert(k.replacen("llama", "qwen3", 1), v);
            }
        }
        m.insert("general.architecture".into(), Value::Str("qwen3".into()));
        for l in 0..2 {
            for w in ["attn_q_norm", "attn_k_norm"] {
                t.push((format!("blk.{l}.{w}.weight"), vec![16], 0, 1f32.to_le_bytes().repeat(16)));
            }
        }
    });
    check_model_cpu(&qwen3).expect("QK-norm in a qwen3 file");
}

/// The reader knows every type llama.cpp defines, so a file with one hotprefix does not run is a
/// good file with an unsupported format, named with its tensor, not a bad file.
#[test]
fn a_known_format_hotprefix_does_not_run_is_refused_by_name() {
    let file = mxfp4_down();
    hotprefix::gguf::Gguf::parse(&file).expect("the reader takes an MXFP4 tensor");
    let Err(err) = check_model_cpu(&file) else { panic!("an MXFP4 tensor was accepted") };
    let msg = err.to_string();
    assert!(matches!(err, hotprefix::Error::Model(_)), "{err:?}");
    assert!(msg.contains("blk.0.ffn_down.weight: MXFP4 (ggml type 39) is not a weight format hotprefix runs"), "{msg}");
}

#[test]
fn the_cpu_check_accepts_and_refuses_what_the_load_does() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("the tiny model", tiny_gguf(1)),
        ("no merges", tiny_with(|m, _| drop(m.remove("tokenizer.ggml.merges")))),
        ("a template that does not parse", tiny_with(set("tokenizer.chat_template", Value::Str("{% for %}".into())))),
        (
            "a looping template (renders fail, the load does not)",
            tiny_with(set(
                "tokenizer.chat_template",
                Value::Str("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}".into()),
            )),
        ),
        ("3 layers declared", tiny_with(set("llama.block_count", Value::U32(3)))),
        ("1 layer declared (blk.1's tensors are then unread)", tiny_with(set("llama.block_count", Value::U32(1)))),
        ("ffn 128", tiny_with(set("llama.feed_forward_length", Value::U32(128)))),
        ("4 KV heads", tiny_with(set("llama.attention.head_count_kv", Value::U32(4)))),
        ("width 2^32 + 96", tiny_with(set("llama.embedding_length", Value::U64((1 << 32) | 96)))),
        ("bos 2^32 + 257", tiny_with(set("tokenizer.ggml.bos_token_id", Value::U64((1 << 32) | 257)))),
        ("a tensor missing", tiny_with(|_, t| t.retain(|(n, ..)| n != "blk.1.ffn_up.weight"))),
        ("a bias the loader does not read", extra_tensor("blk.0.attn_output.bias", 96)),
        ("a block past block_count", extra_tensor("blk.2.attn_norm.weight", 96)),
        (
            "a norm of the wrong shape",
            tiny_with(|_, t| t.iter_mut().filter(|(n, ..)| n == "blk.0.ffn_norm.weight").for_each(|(_, d, ..)| *d = vec![32, 3])),
        ),
        (
            "an F32 embedding (every format runs as the embedding now)",
            tiny_with(|_, t| {
                for (n, d, ty, b) in t.iter_mut().filter(|(n, ..)| n == "token_embd.weight") {
                    let _ = n;
                    *ty = 0;
                    *d = vec![96, 320];
                    *b = vec![0; 96 * 320 * 4];
                }
            }),
        ),
        ("an MXFP4 projection (a ggml type the reader knows and hotprefix does not run)", mxfp4_down()),
        (
            "a tokenizer larger than the model",
            tiny_with(|m, _| {
                let Some(Value::Array(tokens)) = m.get_mut("tokenizer.ggml.tokens") else { panic!("tokens") };
                tokens.push(Value::Str("extra".into()));
                let Some(Value::Array(types)) = m.get_mut("tokenizer.ggml.token_type") else { panic!("types") };
                types.push(Value::I32(1));
            }),
        ),
    ];
    let mut failures = Vec::new();
    let mut refused = 0;
    for (what, file) in &cases {
        let cpu = check_model_cpu(file).map(|c| c.config);
        let opts = EngineOptions { context: Some(64), kv_budget_mb: Some(1.0), ..EngineOptions::default() };
        let gpu = pollster::block_on(dual::gpu());
        let load = pollster::block_on(Engine::load(gpu, file, opts)).map(|e| e.model().config().clone());
        match (&cpu, &load) {
            (Ok(a), Ok(b)) if a == b => {}
            (Err(a), Err(b)) if a.to_string() == b.to_string() => refused += 1,
            _ => failures.push(format!("{what}: the CPU check gives {cpu:?}, the load {load:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(refused, cases.len() - 3, "all but the tiny model, the looping template and the F32 embedding are refused");
}

#[test]
fn the_default_model_passes_and_its_template_renders() {
    let c = check_model_cpu(&common::model_bytes()).unwrap();
    assert_eq!((c.config.n_layer, c.config.dim, c.config.vocab, c.config.context), (30, 576, 49152, 8192));
    assert_eq!(c.tokenizer.vocab_size(), 49152);
    let t = c.template.expect("SmolLM2 has a chat template");
    let s = t.render(&[hotprefix::chat::Message::new("user", "hi")], true).unwrap();
    assert!(s.ends_with("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "{s}");
    assert!(c.gpu_weight_bytes > 90 << 20, "{}", c.gpu_weight_bytes);
}

/// `tokenizer.ggml.add_bos_token` is applied: a model that asks for BOS gets it first in every
/// chat prompt (once, with the message ranges shifted), one that does not never does.
#[test]
fn add_bos_is_applied_to_chat_prompts() {
    let msgs = [hotprefix::chat::Message::new("user", "hello there")];
    let gpu = || pollster::block_on(dual::gpu());
    // BOS = <|endoftext|> (256): the ChatML text does not start with it (it starts with
    // <|im_start|>, which is SmolLM2's BOS and so already first there).
    let model = |add: bool| {
        tiny_with(|m, _| {
            m.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(256));
            m.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(add));
        })
    };
    let plain = pollster::block_on(Engine::load(gpu(), &model(false), EngineOptions::default())).unwrap();
    let bos_first = pollster::block_on(Engine::load(gpu(), &model(true), EngineOptions::default())).unwrap();
    let bos = bos_first.tokenizer().bos_id().expect("the tiny model names a BOS token");
    let a = plain.encode_messages(&msgs).unwrap();
    let b = bos_first.encode_messages(&msgs).unwrap();
    assert_ne!(a.ids.first(), Some(&bos), "add_bos false: no BOS added");
    assert_eq!(b.ids[0], bos);
    assert_eq!(b.ids[1..], a.ids[..], "BOS, then the same prompt");
    assert_eq!(b.contents[0], a.contents[0].start + 1..a.contents[0].end + 1, "content ranges follow the shift");
    assert_eq!(b.ids.iter().filter(|&&t| t == bos).count(), a.ids.iter().filter(|&&t| t == bos).count() + 1);
}
