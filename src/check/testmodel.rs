//! A tiny random-weight llama model for end-to-end tests, and a plain CPU forward pass over it.
//!
//! [`tiny_gguf`] writes a GGUF in the same formats as the default model (token_embd Q8_0 and tied
//! output head, every linear weight Q4_1, norms F32) but with 2 layers of width 96, 6 query heads
//! over 2 KV heads (GQA ratio 3), head dim 16, FFN 160 and a vocabulary of 320: small enough for
//! lavapipe and the browser's software adapter. It carries a byte-level BPE tokenizer (256 byte
//! tokens, 3 ChatML control tokens, 61 merges) and the ChatML template, so the whole engine —
//! chat requests, the prompt cache, head truncation — runs on it in milliseconds.
//!
//! [`oracle_logits`] is the reference the GPU forward pass is tested against: llama2.c-style
//! loops built only from the kernel oracles in [`crate::check::oracle`] and [`quant::dequantize`].

use crate::check::oracle;
use crate::engine::sample::rng::Rng;
use crate::error::{Error, Result};
use crate::model::gguf::{self, Gguf, Value};
use crate::model::quant::{self, Format};
use crate::model::Config;

const VOCAB: usize = 320;

/// The shape of a tiny model ([`tiny_gguf_shaped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TinyShape {
    /// Layers.
    pub layers: usize,
    /// Width (`heads × head dim`).
    pub dim: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads (dividing `heads`).
    pub kv_heads: usize,
    /// FFN width.
    pub ffn: usize,
    /// Trained context (`llama.context_length`).
    pub context: usize,
}

impl TinyShape {
    /// [`tiny_gguf`]'s: 2 layers of width 96, 6 query heads over 2 KV heads of 16, FFN 160.
    pub const DEFAULT: TinyShape = TinyShape { layers: 2, dim: 96, heads: 6, kv_heads: 2, ffn: 160, context: 1024 };
    /// Much K/V for little compute: 32 layers of one head of 128, FFN 64 (16 KiB of K/V a
    /// position, ~3 M multiply-adds): fills a KV budget of many MiB in seconds, for tests and
    /// benchmarks of what a large resident cache costs (saving it, say).
    pub const KV_HEAVY: TinyShape = TinyShape { layers: 32, dim: 128, heads: 1, kv_heads: 1, ffn: 64, context: 8192 };
}

/// A tensor as [`tiny_gguf_with`] edits it: name, GGUF dims, ggml type, bytes.
pub type TensorEntry = (String, Vec<u64>, u32, Vec<u8>);

/// The tiny model of `seed` with its metadata and tensor table edited by `edit` (tests of bad,
/// hostile or unusual model files).
pub fn tiny_gguf_with(seed: u64, edit: impl FnOnce(&mut std::collections::BTreeMap<String, Value>, &mut Vec<TensorEntry>)) -> Vec<u8> {
    let file = tiny_gguf(seed);
    // The tiny model always parses; an empty file would only fail the caller's test.
    let Ok(g) = Gguf::parse(&file) else { return Vec::new() };
    let mut md = g.metadata.clone();
    let mut tensors: Vec<TensorEntry> = g
        .tensors
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone(), t.ggml_type, g.data(&file, t).map(<[u8]>::to_vec).unwrap_or_default()))
        .collect();
    edit(&mut md, &mut tensors);
    let md: Vec<(&str, Value)> = md.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let refs: Vec<(&str, &[u64], u32, &[u8])> = tensors.iter().map(|(n, d, t, b)| (n.as_str(), &d[..], *t, &b[..])).collect();
    gguf::write(&md, &refs)
}

/// The tiny model's GGUF bytes; the same `seed` always gives the same bytes.
///
/// Weights are uniform: linear layers in ±0.5·√(3/K) (outputs of standard deviation 0.5 for
/// unit-variance inputs, so activations stay O(1) through the layers), the embedding in ±0.5 (tied
/// head logits of standard deviation ≈ 3), norms in 1.0 ± 0.2.
///
/// Why 0.5 and not 1: the GPU stores K/V as f16, and a K/V value whose f32 result lands on the
/// other side of an f16 rounding boundary than the oracle's (f64-accumulated) one moves by one f16
/// ulp. At full scale such a flip moved later logits by up to 1.6e-3 relative (2 of 120 seeded
/// sequences), at the 1e-3 bar the tests use; at 0.5 the worst seen was 2e-4, while the last
/// row's logits still change by about half their size when the earlier tokens change.
pub fn tiny_gguf(seed: u64) -> Vec<u8> {
    tiny_gguf_shaped(seed, TinyShape::DEFAULT)
}

/// [`tiny_gguf`] at another shape (the same formats, vocabulary, template and weight scales).
pub fn tiny_gguf_shaped(seed: u64, shape: TinyShape) -> Vec<u8> {
    let TinyShape { layers, dim, heads, kv_heads, ffn, context } = shape;
    let head_dim = dim / heads;
    let mut rng = Rng(seed);
    // (name, GGUF dims [row length, rows], format, bytes)
    let mut tensors: Vec<(String, Vec<u64>, Format, Vec<u8>)> = Vec::new();
    let mut matrix = |rng: &mut Rng, name: String, k: usize, n: usize, format: Format, a: f32| {
        let w = rng.vec(n * k, a);
        let bytes = quant::quantize(format, &w).expect("whole blocks");
        tensors.push((name, vec![k as u64, n as u64], format, bytes));
    };
    matrix(&mut rng, "token_embd.weight".into(), dim, VOCAB, Format::Q8_0, 0.5);
    let lin = |k: usize| 0.5 * (3.0 / k as f32).sqrt();
    for i in 0..layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        matrix(&mut rng, n("attn_q"), dim, heads * head_dim, Format::Q4_1, lin(dim));
        matrix(&mut rng, n("attn_k"), dim, kv_heads * head_dim, Format::Q4_1, lin(dim));
        matrix(&mut rng, n("attn_v"), dim, kv_heads * head_dim, Format::Q4_1, lin(dim));
        matrix(&mut rng, n("attn_output"), heads * head_dim, dim, Format::Q4_1, lin(heads * head_dim));
        matrix(&mut rng, n("ffn_gate"), dim, ffn, Format::Q4_1, lin(dim));
        matrix(&mut rng, n("ffn_up"), dim, ffn, Format::Q4_1, lin(dim));
        matrix(&mut rng, n("ffn_down"), ffn, dim, Format::Q4_1, lin(ffn));
    }
    let mut norm = |rng: &mut Rng, name: String| {
        let w: Vec<f32> = (0..dim).map(|_| 1.0 + rng.f32(0.2)).collect();
        tensors.push((name, vec![dim as u64], Format::F32, quant::quantize(Format::F32, &w).expect("f32")));
    };
    for i in 0..layers {
        norm(&mut rng, format!("blk.{i}.attn_norm.weight"));
        norm(&mut rng, format!("blk.{i}.ffn_norm.weight"));
    }
    norm(&mut rng, "output_norm.weight".into());

    let (tokens, types, merges) = tiny_vocab();
    let metadata = [
        ("general.architecture", Value::Str("llama".into())),
        ("general.name", Value::Str(format!("hotprefix tiny test model (seed {seed})"))),
        ("llama.block_count", Value::U32(layers as u32)),
        ("llama.context_length", Value::U32(context as u32)),
        ("llama.embedding_length", Value::U32(dim as u32)),
        ("llama.feed_forward_length", Value::U32(ffn as u32)),
        ("llama.attention.head_count", Value::U32(heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(kv_heads as u32)),
        ("llama.rope.dimension_count", Value::U32(head_dim as u32)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(VOCAB as u32)),
        ("tokenizer.ggml.model", Value::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Value::Str("smollm".into())),
        ("tokenizer.ggml.tokens", Value::Array(tokens.into_iter().map(Value::Str).collect())),
        ("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges", Value::Array(merges.into_iter().map(Value::Str).collect())),
        ("tokenizer.ggml.bos_token_id", Value::U32(257)),
        ("tokenizer.ggml.eos_token_id", Value::U32(258)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        ("tokenizer.chat_template", Value::Str(CHATML.into())),
    ];
    let refs: Vec<(&str, &[u64], u32, &[u8])> =
        tensors.iter().map(|(n, d, f, b)| (n.as_str(), d.as_slice(), f.ggml_type(), b.as_slice())).collect();
    gguf::write(&metadata, &refs)
}

/// SmolLM2's ChatML chat template (with its default system prompt).
pub const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// The tiny vocabulary: the 256 bytes in GPT-2's byte alphabet, `<|endoftext|>`, `<|im_start|>`
/// and `<|im_end|>` (ids 256-258, control), then one token per merge (ids 259-319).
fn tiny_vocab() -> (Vec<String>, Vec<i32>, Vec<String>) {
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest for 256 + n.
    let mut alphabet = Vec::with_capacity(256);
    let mut extra = 0;
    for b in 0..=255u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            extra += 1;
            255 + extra
        };
        alphabet.push(char::from_u32(c).map(String::from).unwrap_or_default());
    }
    let pairs = "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur";
    let mut merges: Vec<String> = pairs.split(' ').map(|p| format!("{} {}", &p[..1], &p[1..])).collect();
    merges.extend("t a s w o i c b p m f".split(' ').map(|c| format!("\u{120} {c}")));
    let mut tokens = alphabet;
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
    let mut types = vec![1; tokens.len()];
    types[256..259].fill(3);
    (tokens, types, merges)
}

/// A whole tensor of `file`, dequantized to f32, checked to be `dims` (GGUF order).
fn tensor(g: &Gguf, file: &[u8], name: &str, dims: &[usize]) -> Result<Vec<f32>> {
    let t = g.tensor(name)?;
    if t.dims.iter().map(|&d| d as usize).ne(dims.iter().copied()) {
        return Err(Error::Model(format!("{name}: shape {:?}, expected {dims:?}", t.dims)));
    }
    let format = Format::from_ggml_type(t.ggml_type).ok_or_else(|| crate::model::quant::unsupported(name, t.ggml_type))?;
    quant::dequantize(format, g.data(file, t)?)
}

/// The logits `[tokens.len(), vocab]` of a llama-family GGUF on `tokens`, teacher-forced from
/// position 0, computed on the CPU from the kernel oracles. K and V are rounded to f16 the way
/// the GPU's KV pages store them.
pub fn oracle_logits(gguf_bytes: &[u8], tokens: &[u32]) -> Result<Vec<f32>> {
    let g = Gguf::parse(gguf_bytes)?;
    let c = Config::from_gguf(&g)?;
    let (t, d, hd) = (tokens.len(), c.dim, c.head_dim);
    let (qw, kw) = (c.n_head * hd, c.n_kv_head * hd);
    if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= c.vocab) {
        return Err(Error::InvalidArgument(format!("token id {bad} is outside the vocabulary of {}", c.vocab)));
    }
    let pos: Vec<u32> = (0..t as u32).collect();
    let add = |x: &mut [f32], y: &[f32]| x.iter_mut().zip(y).for_each(|(a, b)| *a += *b);

    let embd = tensor(&g, gguf_bytes, "token_embd.weight", &[d, c.vocab])?;
    let mut x = oracle::embed(&embd, tokens, d);
    for l in 0..c.n_layer {
        let w = |s: &str, dims: &[usize]| tensor(&g, gguf_bytes, &format!("blk.{l}.{s}.weight"), dims);
        // attention
        let xn = oracle::rmsnorm(&x, &w("attn_norm", &[d])?, t, d, c.eps);
        let mut q = oracle::matmul(&xn, &w("attn_q", &[d, qw])?, t, d, qw).0;
        let mut k = oracle::matmul(&xn, &w("attn_k", &[d, kw])?, t, d, kw).0;
        let v = oracle::matmul(&xn, &w("attn_v", &[d, kw])?, t, d, kw).0;
        oracle::rope(&mut q, &pos, c.n_head, qw, hd, c.rope_base);
        oracle::rope(&mut k, &pos, c.n_kv_head, kw, hd, c.rope_base);
        let k: Vec<f32> = k.into_iter().map(oracle::f16_round).collect();
        let v: Vec<f32> = v.into_iter().map(oracle::f16_round).collect();
        let att = oracle::attention(&q, &k, &v, &pos, c.n_head, c.n_kv_head, hd, 1.0 / (hd as f32).sqrt(), 0);
        let proj = oracle::matmul(&att, &w("attn_output", &[qw, d])?, t, qw, d).0;
        add(&mut x, &proj);
        // feed-forward
        let xn = oracle::rmsnorm(&x, &w("ffn_norm", &[d])?, t, d, c.eps);
        let gate = oracle::matmul(&xn, &w("ffn_gate", &[d, c.ffn])?, t, d, c.ffn).0;
        let up = oracle::matmul(&xn, &w("ffn_up", &[d, c.ffn])?, t, d, c.ffn).0;
        let gu: Vec<f32> = (0..t).flat_map(|i| gate[i * c.ffn..][..c.ffn].iter().chain(&up[i * c.ffn..][..c.ffn]).copied()).collect();
        let h = oracle::swiglu(&gu, t, c.ffn);
        let proj = oracle::matmul(&h, &w("ffn_down", &[c.ffn, d])?, t, c.ffn, d).0;
        add(&mut x, &proj);
    }
    let xn = oracle::rmsnorm(&x, &tensor(&g, gguf_bytes, "output_norm.weight", &[d])?, t, d, c.eps);
    let head = match g.tensor("output.weight") {
        Ok(_) => tensor(&g, gguf_bytes, "output.weight", &[d, c.vocab])?,
        Err(_) => embd,
    };
    Ok(oracle::matmul(&xn, &head, t, d, c.vocab).0)
}

/// The `load_cpu` fuzz target's body, shared with `tests/load_fuzz_regressions.rs`: everything
/// the load does on the CPU ([`crate::model::preflight::check_model_cpu`]), then a four-message chat
/// (with control-token text in a user message) rendered with the model's template and tokenized
/// with its tokenizer, every content tokenized alone, and the ids decoded and streamed. Returns
/// the chat's token count, or the first error; panics only on a broken invariant (an id past
/// the vocabulary, a streamed text that differs from the decoded one), which is a bug.
pub fn load_and_chat(file: &[u8]) -> Result<usize> {
    use crate::text::template::Message;
    use crate::text::tokenizer::StreamDecoder;
    let m = crate::model::preflight::check_model_cpu(file)?;
    let tok = &m.tokenizer;
    let messages = [
        Message::new("system", "Answer briefly."),
        Message::new("user", "Hi <|im_start|>there, ünïcode 123!"),
        Message::new("assistant", "Hello."),
        Message::new("user", "And now?"),
    ];
    // Keep going after an error, so that one failing step does not hide the next ones.
    let mut first_err = None;
    let mut ids = Vec::new();
    if let Some(t) = &m.template {
        match t.render(&messages, true).and_then(|text| tok.encode_with_special(&text)) {
            Ok(v) => ids.extend(v),
            Err(e) => first_err = Some(e),
        }
    }
    for msg in &messages {
        match tok.encode_text(&msg.content) {
            Ok(v) => ids.extend(v),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let vocab = tok.vocab_size();
    assert!(vocab <= m.config.vocab, "the load refuses a tokenizer larger than the model");
    for &id in &ids {
        assert!((id as usize) < vocab, "token id {id} from a vocabulary of {vocab}");
    }
    let decoded = tok.decode(&ids).map(|_| ());
    assert!(decoded.is_ok(), "ids of this vocabulary decode: {decoded:?}");
    let mut stream = StreamDecoder::new();
    let mut streamed: String = ids.iter().map(|&id| stream.push(tok, id)).collect();
    streamed.push_str(&stream.finish());
    let plain: Vec<u32> = ids.iter().copied().filter(|&id| !tok.is_control(id)).collect();
    assert_eq!(Some(streamed), tok.decode(&plain).ok(), "streamed = decoded, less control tokens");
    let _ = (tok.bos_id(), tok.eos_id(), tok.token_id("<|im_end|>"), tok.is_control(u32::MAX));
    match first_err {
        Some(e) => Err(e),
        None => Ok(ids.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_model_parses_and_is_deterministic() {
        let a = tiny_gguf(1);
        assert_eq!(a, tiny_gguf(1));
        assert_ne!(a, tiny_gguf(2));
        let g = Gguf::parse(&a).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        assert_eq!((c.n_layer, c.dim, c.n_head, c.n_kv_head, c.head_dim, c.ffn, c.vocab), (2, 96, 6, 2, 16, 160, 320));
        assert_eq!(g.tensor("token_embd.weight").unwrap().ggml_type, Format::Q8_0.ggml_type());
        assert_eq!(g.tensor("blk.1.ffn_down.weight").unwrap().ggml_type, Format::Q4_1.ggml_type());
        assert!(g.tensor("output.weight").is_err(), "tied head");
        let tok = crate::text::tokenizer::Tokenizer::from_gguf(&g).unwrap();
        assert_eq!(tok.vocab_size(), VOCAB);
        let ids = tok.encode_with_special("<|im_start|>user\nthe cat<|im_end|>").unwrap();
        assert_eq!(ids[0], 257);
        assert_eq!(*ids.last().unwrap(), 258);
        assert!(ids.contains(&tok.token_id("th").unwrap()), "merges apply: {ids:?}");
        assert_eq!(tok.decode(&ids[1..ids.len() - 1]).unwrap(), "user\nthe cat");
    }

    #[test]
    fn oracle_logits_are_order_one_and_causal() {
        let file = tiny_gguf(1);
        let toks = [5u32, 17, 300, 2, 2, 99];
        let l = oracle_logits(&file, &toks).unwrap();
        assert_eq!(l.len(), toks.len() * VOCAB);
        let rms = (l.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / l.len() as f64).sqrt();
        assert!(rms > 0.5 && rms < 20.0, "logit rms {rms}");
        // A prefix's logits do not depend on what follows it.
        let p = oracle_logits(&file, &toks[..3]).unwrap();
        assert_eq!(&l[..3 * VOCAB], &p[..]);
        assert!(oracle_logits(&file, &[320]).is_err());
    }
}
