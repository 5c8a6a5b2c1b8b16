//! The building blocks an architecture's forward pass is made of (as llama.cpp builds each model
//! from `build_norm`, `build_attn`, `build_ffn`): the embedding, a pre-norm attention block, a
//! pre-norm feed-forward block and the head, each recorded into one batch of dispatches.
//!
//! A [`Pass`] records in one of two modes:
//! - **prefill** (`T` tokens): tiled matmuls and fixed attention slices, so that every row comes
//!   out the same whatever chunk it is in (`ops::matmul_exact`): a prompt whose prefix came from
//!   the cache gets the K/V a cold run computes, bit for bit. RoPE and the KV write are one
//!   dispatch, and the gated activation is fused into the gate|up matmul's store: 8 dispatches a
//!   llama layer (9 when attention merges slices), 10 (11) before these fusions;
//! - **decode** (one token): matrix-vector kernels with the RMSNorms and the gated activation fused
//!   into their x-loads (when `Model::fuse_decode`), and RoPE and the KV write fused into attention:
//!   5 dispatches a layer fused (6 when attention splits its positions and merges them), 8 (9)
//!   unfused, plus the embedding, the head and the argmax.

use crate::cache::kv::KvCache;
use crate::error::Result;
use crate::gpu::Batch;
use crate::ops::{self, AttnShape, HeadsShape, Split, Weight, XLoad};

use super::config::Act;
use super::{Logits, Model};

/// What a pass computes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// `t` tokens at positions `start..`, and the logits asked for.
    Prefill { start: usize, t: usize, logits: Logits },
    /// One token at `pos`; `feed`: write its argmax to `ids[slot]` and feed it to the next step
    /// (greedy decoding queued ahead).
    Decode { pos: usize, feed: Option<usize> },
}

/// One forward pass being recorded: the model, its KV cache, the sequence's page table, and the
/// batch the dispatches go into.
pub(crate) struct Pass<'a, 'g> {
    pub(crate) b: &'a mut Batch<'g>,
    pub(crate) m: &'a Model,
    pub(crate) kv: &'a KvCache,
    pub(crate) table: &'a wgpu::Buffer,
    pub(crate) table_len: usize,
    pub(crate) mode: Mode,
}

impl Pass<'_, '_> {
    /// Transformer blocks.
    pub(crate) fn layers(&self) -> usize {
        self.m.layers.len()
    }

    /// Tokens in the pass.
    fn t(&self) -> usize {
        match self.mode {
            Mode::Prefill { t, .. } => t,
            Mode::Decode { .. } => 1,
        }
    }

    /// `y = x · Wᵀ` (`acc`: `y += x · Wᵀ`, the residual add fused in) for the pass's rows.
    fn project(&mut self, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, acc: bool) -> Result<()> {
        match self.mode {
            Mode::Prefill { t, .. } => ops::matmul_exact(self.b, x, w, y, t, acc, self.m.variant),
            Mode::Decode { .. } => ops::matvec(self.b, x, 0, XLoad::Plain, w, y, acc, self.m.variant),
        }
    }

    /// `y = rmsnorm(x; nw) · Wᵀ`: the norm its own dispatch into `xn`, or, decoding with fusion,
    /// fused into the projection's x-load.
    fn norm_project(&mut self, nw: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer) -> Result<()> {
        let (c, s) = (&self.m.cfg, &self.m.s);
        if matches!(self.mode, Mode::Decode { .. }) && self.m.fuse {
            return ops::matvec(self.b, &s.x, 0, XLoad::RmsNorm { w: nw, eps: c.eps }, w, y, false, self.m.variant);
        }
        ops::rmsnorm(self.b, &s.x, nw, &s.xn, self.t(), c.dim, c.eps)?;
        self.project(&s.xn, w, y, false)
    }

    /// `x = embedding[tokens]`.
    pub(crate) fn embed(&mut self) -> Result<()> {
        let s = &self.m.s;
        ops::embed(self.b, &s.tokens, &self.m.embed, &s.x, self.t(), self.m.cfg.embed_scale)
    }

    /// Block `l`'s attention, pre-norm with a residual: `x += attention(rmsnorm(x)) · Woᵀ`, with
    /// Q|K|V from one fused projection (plus its bias, and the QK-norm, where the file has them),
    /// RoPE on Q and K, the new K/V written to the sequence's
    /// pages, and causal grouped-query attention over them.
    pub(crate) fn attention(&mut self, l: usize) -> Result<()> {
        let (m, c, s) = (self.m, &self.m.cfg, &self.m.s);
        let (layer, kv) = (&m.layers[l], &self.kv.layers[l]);
        let (hd, qkv_w) = (c.head_dim, c.qkv_width());
        let scale = c.attn_scale;
        // A local layer (Gemma-3) sees its last `window` positions, with its own RoPE table.
        let local = c.swa.as_ref().filter(|w| w.is_local(l));
        let window = local.map_or(0, |w| w.window);
        let rope_table = match (local, &m.rope_local) {
            (Some(_), Some(t)) => t,
            _ => &m.rope,
        };
        self.norm_project(&layer.attn_norm, &layer.qkv, &s.qkv)?;
        let t = self.t();
        if let Some(bias) = &layer.qkv_bias {
            ops::add_bias(self.b, &s.qkv, bias, t, qkv_w)?; // Qwen2
        }
        if let Some((qn, kn)) = &layer.qk_norm {
            // Qwen3: RMSNorm of each Q and K head before RoPE.
            // Q's heads with Q's weight, then K's with K's: one dispatch.
            let heads = HeadsShape { t, heads: c.n_head + c.n_kv_head, row_stride: qkv_w, off: 0, head_dim: hd, split: c.n_head };
            ops::head_norm(self.b, &s.qkv, [qn, kn], &heads, c.eps)?;
        }
        let shape = match self.mode {
            Mode::Prefill { start, t, .. } => {
                ops::rope_kv_write(self.b, &s.qkv, t, c.n_head, qkv_w, &s.pos, rope_table, self.table, self.table_len, kv)?;
                AttnShape {
                    t,
                    n_head: c.n_head,
                    q_stride: qkv_w,
                    scale,
                    ctx: start + t,
                    split: Split::Fixed,
                    fused: false,
                    kind: m.variant,
                    window,
                }
            }
            // RoPE, the KV write and attention in one dispatch.
            Mode::Decode { pos, .. } => AttnShape {
                t: 1,
                n_head: c.n_head,
                q_stride: qkv_w,
                scale,
                ctx: pos + 1,
                split: Split::Auto,
                fused: true,
                kind: m.variant,
                window,
            },
        };
        ops::attention(self.b, &s.qkv, &shape, &s.pos, self.table, self.table_len, kv, rope_table, &s.att, &s.part)?;
        match &layer.post_norms {
            // Gemma-3: x += rmsnorm(att · Woᵀ)
            Some((post, _)) => {
                self.project(&s.att, &layer.wo, &s.xn, false)?;
                ops::rmsnorm_add(self.b, &s.xn, post, &s.x, t, c.dim, c.eps)
            }
            None => self.project(&s.att, &layer.wo, &s.x, true), // x += att · Woᵀ
        }
    }

    /// Block `l`'s feed-forward, pre-norm with a residual: `x += act(rmsnorm(x) · W_gateᵀ) ·
    /// (rmsnorm(x) · W_upᵀ) · W_downᵀ`, gate|up one projection. The gated activation is fused: in
    /// prefill into the gate|up matmul's store (where its rows are one part), decoding with
    /// fusion into the down projection's x-load.
    pub(crate) fn ffn(&mut self, l: usize) -> Result<()> {
        let (m, c, s) = (self.m, &self.m.cfg, &self.m.s);
        let layer = &m.layers[l];
        let t = self.t();
        let decode = matches!(self.mode, Mode::Decode { .. });
        let (glu, xl) = match c.act {
            Act::Silu => (ops::Glu::SwiGlu, XLoad::SwiGlu),
            Act::Gelu => (ops::Glu::GeGlu, XLoad::GeGlu),
        };
        // Gemma-3's post-FFN norm: x += rmsnorm(h · W_downᵀ), the projection into xn first.
        let (out, acc) = match &layer.post_norms {
            Some(_) => (&s.xn, false),
            None => (&s.x, true),
        };
        if decode && m.fuse {
            self.norm_project(&layer.ffn_norm, &layer.gate_up, &s.gu)?;
            ops::matvec(self.b, &s.gu, 0, xl, &layer.down, out, acc, m.variant)?;
        } else if !decode && ops::glu_fuses(&layer.gate_up) {
            ops::rmsnorm(self.b, &s.x, &layer.ffn_norm, &s.xn, t, c.dim, c.eps)?;
            ops::matmul_glu(self.b, &s.xn, &layer.gate_up, &s.h, t, glu, m.variant)?;
            self.project(&s.h, &layer.down, out, acc)?;
        } else {
            self.norm_project(&layer.ffn_norm, &layer.gate_up, &s.gu)?;
            match c.act {
                Act::Silu => ops::swiglu(self.b, &s.gu, &s.h, t, c.ffn)?,
                Act::Gelu => ops::geglu(self.b, &s.gu, &s.h, t, c.ffn)?,
            }
            self.project(&s.h, &layer.down, out, acc)?;
        }
        match &layer.post_norms {
            Some((_, post)) => ops::rmsnorm_add(self.b, &s.xn, post, &s.x, t, c.dim, c.eps),
            None => Ok(()),
        }
    }

    /// The final RMSNorm and the logits the pass asks for (the tied embedding when the file has
    /// no `output.weight`), and their argmax.
    pub(crate) fn head(&mut self) -> Result<()> {
        let (m, c, s) = (self.m, &self.m.cfg, &self.m.s);
        let head = m.output.as_ref().unwrap_or(&m.embed);
        match self.mode {
            Mode::Prefill { logits: Logits::None, .. } => Ok(()),
            Mode::Prefill { t, logits: Logits::Last, .. } => {
                // Only the last row's norm and logits (the norm fused into the head's x-load).
                let norm = XLoad::RmsNorm { w: &m.output_norm, eps: c.eps };
                ops::matvec(self.b, &s.x, t - 1, norm, head, &s.logits, false, m.variant)?;
                ops::argmax(self.b, &s.logits, &s.argmax, 1, c.vocab)
            }
            Mode::Prefill { t, logits: Logits::All, .. } => {
                ops::rmsnorm(self.b, &s.x, &m.output_norm, &s.xn, t, c.dim, c.eps)?;
                ops::matmul(self.b, &s.xn, head, &s.logits, t)?;
                ops::argmax(self.b, &s.logits, &s.argmax, t, c.vocab)
            }
            Mode::Decode { feed, .. } => {
                self.norm_project(&m.output_norm, head, &s.logits)?;
                match feed {
                    None => ops::argmax(self.b, &s.logits, &s.argmax, 1, c.vocab),
                    Some(slot) => ops::argmax_feed(self.b, &s.logits, c.vocab, &s.ids, slot, &s.tokens, &s.pos),
                }
            }
        }
    }
}
