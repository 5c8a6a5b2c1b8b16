//! The architectures hotprefix runs, one short file each: the forward pass over the shared blocks
//! of `super::blocks` (as llama.cpp's `src/models/*.cpp` build each model from `build_norm`,
//! `build_attn`, `build_ffn`). Adding one: its file here, its row in [`ARCHITECTURES`], what its
//! hyper-parameters need in `Config::from_gguf`, and a test.

mod gemma3;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use crate::error::{Error, Result};
use crate::model::gguf::{self, Gguf};

use super::blocks::Pass;
use super::config::{Act, Rope};

/// An architecture: its `general.architecture` name, how it lays out RoPE, the tensors each
/// block must have beyond llama's, and its forward pass.
pub(crate) struct Arch {
    /// The name in `general.architecture`, also the prefix of its metadata keys.
    pub(crate) name: &'static str,
    /// How RoPE pairs a head's dims.
    pub(crate) rope: Rope,
    /// Tensors every block `blk.N.` must have beyond llama's (a file without them is refused, as
    /// llama.cpp refuses it), e.g. Qwen2's `attn_q.bias`. Optional tensors any block may have:
    /// `attn_{q,k,v}.bias`, `attn_{q,k}_norm.weight`; and fused forms: `attn_qkv` (+ `.bias`)
    /// for Q, K and V, `ffn_up` of gate and up rows without `ffn_gate`.
    pub(crate) required: &'static [&'static str],
    /// Tensors of the shared set that llama.cpp's loader does not take for this architecture (a
    /// top-level name, or a block's `blk.N.` suffix): a file with one is refused, as llama.cpp
    /// refuses it, rather than run with a tensor its own runtime would not apply.
    pub(crate) not_taken: &'static [&'static str],
    /// The feed-forward's gate activation.
    pub(crate) act: Act,
    /// The embedding is multiplied by √dim (Gemma).
    pub(crate) embed_scaled: bool,
    /// Layer `l` is a sliding-window layer unless `(l + 1) % swa_pattern == 0`; the window is
    /// `attention.sliding_window`. 0: no sliding window, and the key is not read (llama.cpp
    /// ignores it for such an architecture: Phi-3's is disabled there).
    pub(crate) swa_pattern: usize,
    /// The local layers' RoPE base when the file does not say (`rope.freq_base_swa`).
    pub(crate) swa_rope_base: f64,
    /// The attention's scale on q·k from (layers, width, heads, head width): 1/√(head width),
    /// but what llama.cpp's `load_hparams` sets for a model type (Gemma-3-27B's).
    pub(crate) attn_scale: fn(usize, usize, usize, usize) -> f32,
    /// Records one forward pass: embedding, blocks, head.
    pub(crate) forward: fn(&mut Pass<'_, '_>) -> Result<()>,
}

/// 1/√(head width): every architecture's attention scale but where its row says otherwise.
pub(crate) fn head_scale(_layers: usize, _dim: usize, _heads: usize, head_dim: usize) -> f32 {
    1.0 / (head_dim as f32).sqrt()
}

// The optional tensors some architectures' loaders take and others' do not.
pub(crate) const ROPE_FREQS: &str = "rope_freqs.weight";
pub(crate) const ROPE_LONG: &str = "rope_factors_long.weight";
pub(crate) const ROPE_SHORT: &str = "rope_factors_short.weight";
pub(crate) const Q_NORM: &str = "attn_q_norm.weight";
pub(crate) const K_NORM: &str = "attn_k_norm.weight";
pub(crate) const POST_ATTN: &str = "post_attention_norm.weight";
pub(crate) const POST_FFW: &str = "post_ffw_norm.weight";

/// Llama's row of the table, for architectures to start from (`..LLAMA_LIKE`).
pub(crate) const LLAMA_LIKE: Arch = Arch {
    name: "llama",
    rope: Rope::Norm,
    required: &[],
    not_taken: &[ROPE_LONG, ROPE_SHORT, Q_NORM, K_NORM, POST_ATTN, POST_FFW],
    act: Act::Silu,
    embed_scaled: false,
    swa_pattern: 0,
    swa_rope_base: 10000.0,
    attn_scale: head_scale,
    forward: llama::forward,
};

/// Every architecture hotprefix runs.
pub(crate) const ARCHITECTURES: &[&Arch] = &[&llama::LLAMA, &qwen2::QWEN2, &qwen3::QWEN3, &gemma3::GEMMA3, &phi3::PHI3];

/// What the file's architecture uses beyond a plain llama block, as `hotprefix info` names it:
/// the RoPE layout and scaling, biases, QK-norm, head width, the output head. Read from the
/// metadata and the tensor names alone (a file the config refuses still gets its list).
pub fn features(g: &Gguf) -> Vec<String> {
    let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    let known = ARCHITECTURES.iter().find(|a| a.name == arch);
    let num = |k: &str| g.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64());
    let has = |suffix: &str| g.tensors.iter().any(|t| t.name.starts_with("blk.") && t.name.ends_with(suffix));
    let mut f = Vec::new();
    match known.map(|a| a.rope) {
        Some(Rope::Norm) => f.push("RoPE on adjacent pairs".to_string()),
        Some(Rope::Neox) => f.push("RoPE on halves (NEOX)".to_string()),
        None => {}
    }
    if g.tensors.iter().any(|t| t.name == "rope_freqs.weight") {
        f.push("RoPE frequency factors (Llama-3 scaling)".into());
    }
    if g.tensors.iter().any(|t| t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight") {
        let orig = num("rope.scaling.original_context_length").or_else(|| num("context_length"));
        f.push(format!("LongRoPE factors (long past a context of {})", orig.map_or("?".into(), |o| o.to_string())));
    }
    if let Some(t) = g.get(&format!("{arch}.rope.scaling.type")).and_then(|v| v.as_str()) {
        f.push(format!("RoPE scaling {t}"));
    }
    if let Some(a) = g.get(&format!("{arch}.rope.scaling.attn_factor")).and_then(|v| v.as_f64()) {
        f.push(format!("RoPE attention factor {a:.4}"));
    }
    let (dim, heads) = (num("embedding_length"), num("attention.head_count"));
    let hd = num("attention.key_length").or_else(|| Some(dim? / heads.filter(|h| *h > 0)?));
    if let (Some(rot), Some(hd)) = (num("rope.dimension_count"), hd) {
        if rot < hd {
            f.push(format!("partial rotary ({rot} of {hd} dims)"));
        }
    }
    if let (Some(k), Some(d), Some(h)) = (num("attention.key_length"), dim, heads) {
        if k * h != d {
            f.push(format!("heads of {k} ({h} × {k} ≠ width {d})"));
        }
    }
    if ["attn_q.bias", "attn_k.bias", "attn_v.bias"].iter().any(|s| has(s)) {
        f.push("Q/K/V biases".into());
    }
    if has("attn_qkv.weight") {
        f.push("fused Q|K|V".into());
    }
    if !has("ffn_gate.weight") && has("ffn_up.weight") {
        f.push("fused gate|up".into());
    }
    if has("attn_q_norm.weight") {
        f.push("QK-norm".into());
    }
    if has("post_attention_norm.weight") || has("post_ffw_norm.weight") {
        f.push("post-attention and post-FFN norms".into());
    }
    if let Some(a) = known {
        if a.act == Act::Gelu {
            f.push("GeGLU feed-forward".into());
        }
        if a.embed_scaled {
            f.push("embedding × √width".into());
        }
    }
    if let Some(w) = num("attention.sliding_window") {
        match known.map(|a| a.swa_pattern) {
            Some(0) => f.push(format!("sliding window {w} declared, not applied (as llama.cpp)")),
            Some(p) => match g.get(&format!("{arch}.attention.sliding_window_pattern")) {
                Some(gguf::Value::Array(a)) => {
                    let local = a.iter().filter(|v| matches!(v, gguf::Value::Bool(true))).count();
                    f.push(format!("sliding window {w} (on {local} of {} layers, by the file's pattern)", a.len()))
                }
                Some(v) => match v.as_u64() {
                    Some(n) => f.push(format!("sliding window {w} (every layer but each {n}th, by the file's pattern)")),
                    None => f.push(format!("sliding window {w}")),
                },
                None => f.push(format!("sliding window {w} (every layer but each {p}th)")),
            },
            None => f.push(format!("sliding window {w}")),
        }
    }
    let tied = !g.tensors.iter().any(|t| t.name == "output.weight");
    f.push(if tied { "output head tied to the embedding" } else { "untied output head" }.into());
    f
}

impl Arch {
    /// The architecture the file declares; an unknown one is refused by name.
    pub(crate) fn of(g: &Gguf) -> Result<&'static Arch> {
        let name = g.str("general.architecture")?;
        ARCHITECTURES.iter().copied().find(|a| a.name == name).ok_or_else(|| {
            let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.name).collect();
            Error::Model(format!("architecture {name:?} (only {} is supported)", known.join(", ")))
        })
    }
}
