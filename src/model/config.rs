//! A model's hyper-parameters, read from its GGUF metadata and checked once.

use crate::cache::kv::KvShape;
use crate::error::{Error, Result};

use super::arch::Arch;
use super::gguf::{self, Gguf, Value};

/// Hyper-parameters of a llama-family model, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width (d_model).
    pub dim: usize,
    /// Attention (query) heads.
    pub n_head: usize,
    /// Key/value heads: fewer than `n_head` with grouped-query attention, else equal.
    pub n_kv_head: usize,
    /// Width of one head: `attention.key_length`, else `dim / n_head` (a multiple of 4, at most
    /// 256). Qwen3's and Gemma-3's heads are wider than `dim / n_head`.
    pub head_dim: usize,
    /// Dims of each head RoPE rotates (`rope.dimension_count`, else `head_dim`): even, at most
    /// `head_dim`; the rest pass through.
    pub n_rot: usize,
    /// How RoPE pairs a head's dims (the architecture's).
    pub rope: Rope,
    /// Linear RoPE scaling (`rope.scaling.type = linear`): positions are divided by this factor
    /// (1 without scaling).
    pub rope_linear: f64,
    /// RoPE's attention factor (`rope.scaling.attn_factor`, 1 when absent; LongRoPE files): the
    /// rotated dims of Q and K are multiplied by it (ggml's `mscale`, cos and sin scaled).
    pub rope_attn_factor: f64,
    /// The context the model was first trained at (`rope.scaling.original_context_length`, else
    /// `context_length`): LongRoPE's long factors apply to a context window past it.
    pub rope_orig_context: usize,
    /// Sliding-window attention on some layers (Gemma-3's local layers), if the model has it.
    pub swa: Option<Swa>,
    /// The embedding is multiplied by this (Gemma: √dim; 1 elsewhere).
    pub embed_scale: f32,
    /// The attention's scale on q·k (1/√(head width) but where the architecture says otherwise).
    pub attn_scale: f32,
    /// The feed-forward's gate activation (the architecture's).
    pub act: Act,
    /// FFN hidden width.
    pub ffn: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// RoPE frequency base (`llama.rope.freq_base`; 10000 when absent).
    pub rope_base: f64,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`), in (0, 1).
    pub eps: f32,
}

/// A model's sliding-window attention: which layers are local, how far they see and their RoPE base.
#[derive(Clone, Debug, PartialEq)]
pub struct Swa {
    /// A query on a local layer sees its last `window` positions.
    pub window: usize,
    /// Which layers are local: `attention.sliding_window_pattern` (a count `p`: every layer but
    /// each `p`th, llama.cpp's `set_swa_pattern`; or one flag a layer), else the architecture's
    /// pattern (Gemma-3: 6).
    pub local: Vec<bool>,
    /// The local layers' RoPE frequency base (Gemma-3: 10,000, not in the file).
    pub rope_base: f64,
}

impl Swa {
    /// Whether layer `l` is a local (sliding-window) layer.
    pub fn is_local(&self, l: usize) -> bool {
        self.local.get(l).copied().unwrap_or(false)
    }
}

/// The gate activation of the feed-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU: `gelu(gate) · up`, GELU's tanh approximation (Gemma).
    Gelu,
}

/// How RoPE pairs the dims of a head (llama.cpp's `LLAMA_ROPE_TYPE_NORM` / `_NEOX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// Adjacent pairs `(2i, 2i+1)`: llama files (converted with their Q/K rows permuted).
    Norm,
    /// Halves `(i, i + n_rot/2)`: Qwen, Gemma, Phi-3. hotprefix permutes the Q and K rows (and
    /// their biases and norms) of such a file at load so that its halves become adjacent pairs:
    /// the same dot products, and one RoPE kernel for both.
    Neox,
}

/// The largest width, FFN width, vocabulary and layer count [`Config::from_gguf`] accepts: far above
/// real llama-family models (Llama 3.1 405B: 16,384, 53,248, 128,256 tokens, 126 layers) and small
/// enough that the buffer sizes computed from them fit in wasm32's 32-bit `usize` for chunks of up
/// to 1,024 tokens.
const MAX_DIM: usize = 1 << 16;
const MAX_FFN: usize = 1 << 18;
const MAX_VOCAB: usize = 1 << 21;
const MAX_LAYERS: usize = 1 << 10;
/// The trained context is used up to this many positions (the RoPE table is sized by it).
pub const MAX_CONTEXT: usize = 1 << 18;

impl Config {
    /// Reads and checks the architecture's metadata (`llama.*` for llama: keys are prefixed with
    /// its name) and the vocabulary size from `token_embd`. Sizes
    /// are converted with `try_from`, never `as` (on wasm32 `as usize` keeps the low 32 bits), and
    /// bounded (`MAX_DIM`…); the context is capped at [`MAX_CONTEXT`].
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        let arch = Arch::of(g)?;
        let key = |k: &str| format!("{}.{k}", arch.name);
        let size = |k: &str, v: u64| gguf::fit::<usize>(v).ok_or_else(|| Error::Model(format!("{k} = {v} does not fit in memory sizes")));
        let u = |k: &str| -> Result<usize> {
            let k = key(k);
            size(&k, g.u64(&k)?)
        };
        let (dim, n_head) = (u("embedding_length")?, u("attention.head_count")?);
        let head_dim = match g.get(&key("attention.key_length")) {
            Some(_) => u("attention.key_length")?,
            None if n_head > 0 && dim.is_multiple_of(n_head) => dim / n_head,
            None => return Err(Error::Model(format!("{n_head} heads must divide width {dim} (no attention.key_length)"))),
        };
        if g.get(&key("attention.value_length")).is_some() && u("attention.value_length")? != head_dim {
            return Err(Error::Model(format!(
                "V heads of {} beside K heads of {head_dim} are not supported",
                u("attention.value_length")?
            )));
        }
        let n_rot = match g.get(&key("rope.dimension_count")) {
            Some(_) => u("rope.dimension_count")?,
            None => head_dim,
        };
        let n_kv_head = match g.get(&key("attention.head_count_kv")) {
            Some(_) => u("attention.head_count_kv")?,
            None => n_head,
        };
        let embd = g.tensor("token_embd.weight")?;
        // RoPE scaling: linear is a factor on the positions; the others (YaRN, LongRoPE) are refused.
        // A factor without a type is linear, as in llama.cpp (its default type), which also reads
        // the older `rope.scale_linear`; a factor of 0 means none.
        // A key of the wrong type is refused, as llama.cpp refuses it ("has wrong type"), not
        // taken as absent.
        let num = |k: &str| -> Result<Option<f64>> {
            match g.get(k) {
                None => Ok(None),
                Some(Value::F32(f)) => Ok(Some(f64::from(*f))),
                Some(Value::F64(f)) => Ok(Some(*f)),
                Some(v) => Err(Error::Model(format!("{k} = {v:?}: a float expected (llama.cpp refuses another type)"))),
            }
        };
        let mut factor = None;
        for k in [key("rope.scaling.factor"), key("rope.scale_linear")] {
            factor = factor.or(num(&k)?);
        }
        let factor = || factor.filter(|&f| f != 0.0).unwrap_or(1.0);
        let scaling = match g.get(&key("rope.scaling.type")) {
            None => None,
            Some(_) => Some(g.str(&key("rope.scaling.type"))?),
        };
        let rope_linear = match scaling {
            Some("none") => 1.0,
            None | Some("linear") => factor(),
            Some(other) => {
                return Err(Error::Model(format!("RoPE scaling {other:?} is not supported (none, linear and llama3's rope_freqs are)")))
            }
        };
        let rope_attn_factor = num(&key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
        if let Some(v) = g.get(&key("final_logit_softcapping")) {
            return Err(Error::Model(format!("final logit soft-capping ({v:?}) is not supported")));
        }
        // Bidirectional attention (an embedding model converted from `is_causal: false`): the
        // kernels are causal, so such a file would run as another model.
        match g.get(&key("attention.causal")) {
            None | Some(Value::Bool(true)) => {}
            Some(v) => return Err(Error::Model(format!("{} = {v:?}: only causal attention is supported", key("attention.causal")))),
        }
        // The local layers rotating fewer dims than the global ones (llama.cpp reads it for Gemma).
        if g.get(&key("rope.dimension_count_swa")).is_some() && u("rope.dimension_count_swa")? != n_rot {
            return Err(Error::Model(format!(
                "{} = {} beside rope.dimension_count {n_rot} is not supported",
                key("rope.dimension_count_swa"),
                u("rope.dimension_count_swa")?
            )));
        }
        let n_layer = u("block_count")?;
        // Flags for at most one layer past the bound (a larger count is refused below).
        let flags = n_layer.min(MAX_LAYERS + 1);
        let swa = match (arch.swa_pattern, g.get(&key("attention.sliding_window"))) {
            (0, _) => None,
            (pattern, Some(_)) => {
                let local = match g.get(&key("attention.sliding_window_pattern")) {
                    None => (0..flags).map(|l| l % pattern < pattern - 1).collect(),
                    Some(Value::Array(a)) if a.len() == n_layer => a
                        .iter()
                        .map(|v| match v {
                            Value::Bool(b) => Ok(*b),
                            other => Err(Error::Model(format!("{}: {other:?} is not a flag", key("attention.sliding_window_pattern")))),
                        })
                        .collect::<Result<Vec<bool>>>()?,
                    Some(v) => match v.as_u64().filter(|p| *p > 0) {
                        Some(p) => (0..flags as u64).map(|l| l % p < p - 1).collect(),
                        None => return Err(Error::Model(format!("{} = {v:?}", key("attention.sliding_window_pattern")))),
                    },
                };
                Some(Swa {
                    window: u("attention.sliding_window")?,
                    local,
                    rope_base: num(&key("rope.freq_base_swa"))?.unwrap_or(arch.swa_rope_base),
                })
            }
            (_, None) => return Err(Error::Model(format!("{} file without {}", arch.name, key("attention.sliding_window")))),
        };
        let c = Config {
            n_layer,
            dim,
            n_head,
            n_kv_head,
            head_dim,
            n_rot,
            rope: arch.rope,
            rope_linear,
            rope_attn_factor,
            rope_orig_context: match g.get(&key("rope.scaling.original_context_length")) {
                Some(_) => u("rope.scaling.original_context_length")?,
                None => u("context_length")?,
            },
            swa,
            embed_scale: if arch.embed_scaled { (dim as f32).sqrt() } else { 1.0 },
            attn_scale: (arch.attn_scale)(n_layer, dim, n_head, head_dim),
            act: arch.act,
            ffn: u("feed_forward_length")?,
            vocab: size("token_embd rows", embd.dims.get(1).copied().unwrap_or(0))?,
            context: u("context_length")?.min(MAX_CONTEXT),
            rope_base: num(&key("rope.freq_base"))?.unwrap_or(10000.0),
            eps: g.f64(&key("attention.layer_norm_rms_epsilon"))? as f32,
        };
        let bad = |m: String| Err(Error::Model(m));
        if c.n_layer == 0 || c.dim == 0 || c.n_head == 0 || c.n_kv_head == 0 || c.ffn == 0 || c.vocab == 0 || c.context == 0 {
            return bad(format!("zero-sized dimension in {c:?}"));
        }
        if c.dim > MAX_DIM || c.ffn > MAX_FFN || c.vocab > MAX_VOCAB || c.n_layer > MAX_LAYERS {
            return bad(format!("width, FFN, vocabulary or layers above {MAX_DIM}, {MAX_FFN}, {MAX_VOCAB}, {MAX_LAYERS} in {c:?}"));
        }
        if !c.n_head.is_multiple_of(c.n_kv_head) {
            return bad(format!("{} heads must be a multiple of {} KV heads", c.n_head, c.n_kv_head));
        }
        if !c.head_dim.is_multiple_of(4) || c.head_dim > crate::ops::MAX_HEAD_DIM {
            return bad(format!("head dim {} (a multiple of 4, at most {}, is supported)", c.head_dim, crate::ops::MAX_HEAD_DIM));
        }
        if c.n_rot == 0 || !c.n_rot.is_multiple_of(2) || c.n_rot > c.head_dim {
            return bad(format!("RoPE over {} of {} dims (an even count, at most the head, is supported)", c.n_rot, c.head_dim));
        }
        if c.rope_linear.is_nan() || c.rope_linear < 1.0 {
            return bad(format!("RoPE linear scaling factor {} (at least 1 expected)", c.rope_linear));
        }
        if !(c.rope_attn_factor.is_finite() && c.rope_attn_factor > 0.0 && c.rope_attn_factor < 16.0) {
            return bad(format!("RoPE attention factor {} (between 0 and 16 expected)", c.rope_attn_factor));
        }
        if let Some(s) = &c.swa {
            if s.window == 0 || s.rope_base.is_nan() || s.rope_base <= 1.0 {
                return bad(format!("sliding window {} / local RoPE base {}", s.window, s.rope_base));
            }
        }
        let eps_ok = c.eps > 0.0 && c.eps < 1.0; // false for NaN
        if !eps_ok || c.rope_base.is_nan() || c.rope_base <= 1.0 {
            return bad(format!("rms eps {} / rope base {}", c.eps, c.rope_base));
        }
        if embd.dims.first().and_then(|&d| gguf::fit::<usize>(d)) != Some(c.dim) {
            return bad(format!("token_embd is {:?}, width is {}", embd.dims, c.dim));
        }
        Ok(c)
    }

    /// Floats in one row of the fused Q|K|V projection.
    pub fn qkv_width(&self) -> usize {
        (self.n_head + 2 * self.n_kv_head) * self.head_dim
    }

    /// What the KV cache stores per position: layers, KV heads, head width.
    pub fn kv_shape(&self) -> KvShape {
        KvShape { layers: self.n_layer, kv_heads: self.n_kv_head, head_dim: self.head_dim }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testmodel::tiny_gguf_with;

    /// A RoPE factor without a type is linear scaling, as in llama.cpp (whose default type is
    /// linear): applied, never dropped. `rope.scale_linear` is the older key for it.
    #[test]
    fn a_rope_factor_without_a_type_is_linear() {
        let linear = |meta: &[(&str, Value)]| {
            let file = tiny_gguf_with(1, |m, _| {
                for (k, v) in meta {
                    m.insert(format!("llama.{k}"), v.clone());
                }
            });
            Config::from_gguf(&Gguf::parse(&file).unwrap()).unwrap().rope_linear
        };
        assert_eq!(linear(&[]), 1.0);
        assert_eq!(linear(&[("rope.scaling.factor", Value::F32(2.0))]), 2.0);
        assert_eq!(linear(&[("rope.scale_linear", Value::F32(4.0))]), 4.0);
        assert_eq!(linear(&[("rope.scaling.type", Value::Str("linear".into())), ("rope.scaling.factor", Value::F32(8.0))]), 8.0);
        assert_eq!(linear(&[("rope.scaling.type", Value::Str("none".into())), ("rope.scaling.factor", Value::F32(8.0))]), 1.0);
        assert_eq!(linear(&[("rope.scaling.factor", Value::F32(0.0))]), 1.0);
    }

    /// The tiny model with `meta` set under its architecture's prefix.
    fn with(meta: &[(&str, Value)]) -> Result<Config> {
        let file = tiny_gguf_with(1, |m, _| {
            for (k, v) in meta {
                m.insert(format!("llama.{k}"), v.clone());
            }
        });
        Config::from_gguf(&Gguf::parse(&file).unwrap())
    }

    /// What llama.cpp applies and hotprefix does not run is refused, never run as another model:
    /// bidirectional attention, local layers rotating other dims than the global ones, and keys
    /// of the wrong type (llama.cpp: "has wrong type"), which were taken as absent.
    #[test]
    fn keys_that_would_change_the_model_are_refused() {
        assert!(with(&[("attention.causal", Value::Bool(true))]).is_ok());
        let refused = [
            ("attention.causal", Value::Bool(false)),
            ("rope.dimension_count_swa", Value::U32(8)),
            ("rope.scaling.factor", Value::Str("8".into())),
            ("rope.freq_base", Value::Str("1e6".into())),
            ("rope.freq_base", Value::U32(1_000_000)),
            ("rope.scaling.type", Value::U32(1)),
            ("rope.scaling.attn_factor", Value::U32(1)),
        ];
        for (k, v) in refused {
            let e = with(&[(k, v.clone())]).unwrap_err();
            assert!(matches!(&e, Error::Model(m) | Error::Gguf(m) if m.contains(k)), "{k} = {v:?}: {e}");
        }
        // The same head width for the local layers is what every file has.
        assert!(with(&[("rope.dimension_count_swa", Value::U32(16))]).is_ok());
        assert_eq!(with(&[("rope.scaling.attn_factor", Value::F32(1.5))]).unwrap().rope_attn_factor, 1.5);
    }

    /// Gemma-3-27B (62 layers; `query_pre_attn_scalar` 168 = width / heads, heads of 128) scales
    /// q·k by 1/√(width / heads), as llama.cpp does; every other model by 1/√(head width).
    #[test]
    fn gemma3_27b_scales_attention_by_width_over_heads() {
        let scale = |arch: &str, layers: u32| {
            let file = tiny_gguf_with(1, |m, _| {
                let keys: Vec<String> = m.keys().filter(|k| k.starts_with("llama.")).cloned().collect();
                for k in keys {
                    if let Some(v) = m.remove(&k) {
                        m.insert(k.replacen("llama", arch, 1), v);
                    }
                }
                m.insert("general.architecture".into(), Value::Str(arch.into()));
                m.insert(format!("{arch}.block_count"), Value::U32(layers));
                m.insert(format!("{arch}.attention.key_length"), Value::U32(32));
                m.insert(format!("{arch}.attention.value_length"), Value::U32(32));
                m.insert(format!("{arch}.attention.sliding_window"), Value::U32(8));
            });
            Config::from_gguf(&Gguf::parse(&file).unwrap()).unwrap().attn_scale
        };
        // The tiny model: width 96, 6 heads (16 = width / heads), heads made 32 wide.
        assert_eq!(scale("gemma3", 62), 1.0 / 16f32.sqrt());
        assert_eq!(scale("gemma3", 26), 1.0 / 32f32.sqrt());
        assert_eq!(scale("llama", 62), 1.0 / 32f32.sqrt());
    }
}
