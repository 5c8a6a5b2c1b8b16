//! Causal grouped-query attention over paged KV (`shaders/attention.wgsl`, and
//! `attention_lanes.wgsl` for the subgroup variant): online softmax in f32, split over positions
//! and merged for few queries over a long context.

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Gpu, Kernel};

use super::{groups_1d, groups_2d, need, u, KvPages, Variant};

static ATTENTION: Kernel = kernel!("attention", "main", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);
static ATTENTION_COOP: Kernel = kernel!("attention", "coop", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);
// attention_lanes.wgsl uses attention.wgsl's bindings and helpers: one module of the two.
static ATTENTION_LANES: Kernel = Kernel {
    name: "attention_lanes",
    source: concat!(include_str!("../../shaders/attention.wgsl"), include_str!("../../shaders/attention_lanes.wgsl")),
    entry: "lanes",
    bindings: &[Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read, ReadWrite, ReadWrite],
};
static ATTENTION_COMBINE: Kernel = kernel!("attention", "combine", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);

/// Shape of an attention call: `t` query rows of `q_stride` floats with `n_head` heads at the start,
/// the last query at position `ctx - 1`.
pub struct AttnShape {
    /// Query rows.
    pub t: usize,
    /// Query heads a row.
    pub n_head: usize,
    /// Floats from one query row to the next.
    pub q_stride: usize,
    /// Score scale (`1/√head_dim`).
    pub scale: f32,
    /// Positions the last query sees (its position + 1).
    pub ctx: usize,
    /// How positions are split over invocations.
    pub split: Split,
    /// One token (decode) whose Q and K are not rotated and whose K/V are not in the pages yet:
    /// attention rotates them with the RoPE table, reads the token's own K/V from its row and
    /// writes them to the pages (rope + kv_write + attention in one dispatch). The row holds
    /// Q | K | V, K right after the `n_head` query heads.
    pub fused: bool,
    /// The kernel variant.
    pub kind: Variant,
    /// A sliding window: a query at position `p` attends to positions `p + 1 − window ..= p`
    /// (0: to all of `0 ..= p`).
    pub window: usize,
}

/// How attention spreads a query's positions over invocations (flash-decoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// As many slices as keep the adapter busy when there are few queries (decode). The slices
    /// depend on the pass, and so does the order of the softmax sums.
    Auto,
    /// Slices of [`ATTN_SPAN`] positions at multiples of it: a query's result depends only on its
    /// own position, whatever other queries share the pass (prefill, see `matmul_exact`), and a few
    /// queries over a long cached prefix still spread over many invocations.
    Fixed,
}

/// Positions per attention slice with [`Split::Fixed`].
pub const ATTN_SPAN: usize = 256;

/// Invocations from which attention is parallel enough without splitting positions.
const ATTN_PARALLEL: usize = 256;
/// `Variant::Lanes` decode: items (lane clusters) from which attention is parallel enough.
const ATTN_LANE_ITEMS: usize = 24;
/// Fewest positions one attention split covers.
const ATTN_MIN_SPLIT: usize = 32;

/// `Variant::Lanes` attention's split of a head (`head_dim / 4` quads) over the lanes of a subgroup:
/// (lanes per item, quads per lane), the lanes a power of two within the subgroup and at most 8
/// quads each (Gemma-3's heads of 256: 8 lanes of 8 quads); `None` (the `Rows` kernel) when the
/// adapter has no fixed subgroup size or the head dim does not split so.
fn lanes_split(gpu: &Gpu, kind: Variant, head_dim: usize) -> Option<(usize, usize)> {
    let sg = gpu.caps.subgroup_size? as usize;
    if kind != Variant::Lanes || !gpu.caps.int64 || !head_dim.is_multiple_of(4) {
        return None;
    }
    let hd4 = head_dim / 4;
    let lanes = (0..=sg.ilog2()).rev().map(|e| 1usize << e).find(|l| hd4.is_multiple_of(*l) && hd4 / l <= 8)?;
    Some((lanes, hd4 / lanes))
}

/// Bytes of the `part` scratch buffer `attention` needs for one query (decode, [`Split::Auto`])
/// and for up to `t` queries over up to `ctx` positions ([`Split::Fixed`]), of `n_head` heads.
pub fn attention_scratch_bytes(t: usize, n_head: usize, head_dim: usize, ctx: usize) -> u64 {
    let auto = ATTN_PARALLEL.div_ceil(n_head).max(1) * n_head;
    let fixed = t * n_head * ctx.div_ceil(ATTN_SPAN);
    (auto.max(fixed) * (head_dim / 4 + 1) * 16) as u64
}

/// Causal GQA attention of `t` queries at positions `pos` over the pages in `table`. Few queries
/// over a long context are split over positions (partials in `part`, then merged). `rope` is the
/// `(cos, sin)` table `[max_pos, head_dim/2]` ([`AttnShape::fused`] uses it).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    b: &mut Batch,
    q: &wgpu::Buffer,
    s: &AttnShape,
    pos: &wgpu::Buffer,
    table: &wgpu::Buffer,
    table_len: usize,
    kv: &KvPages,
    rope: &wgpu::Buffer,
    out: &wgpu::Buffer,
    part: &wgpu::Buffer,
) -> Result<()> {
    if !s.n_head.is_multiple_of(kv.n_kv) || !s.q_stride.is_multiple_of(4) || s.n_head * kv.head_dim > s.q_stride {
        return Err(Error::shape("attention", format!("{} query heads over {} KV heads, rows of {}", s.n_head, kv.n_kv, s.q_stride)));
    }
    if rope.size() < 16 {
        return Err(Error::shape("attention", "the RoPE table binding needs at least 16 bytes"));
    }
    if s.fused && (s.t != 1 || (s.n_head + 2 * kv.n_kv) * kv.head_dim > s.q_stride || (rope.size() as usize) < 4 * kv.head_dim) {
        return Err(Error::shape(
            "attention",
            format!("fused RoPE + KV write needs one token with Q|K|V rows ({} tokens, rows of {}) and a RoPE table", s.t, s.q_stride),
        ));
    }
    need("attention", "q", q, s.t * s.q_stride)?;
    need("attention", "positions", pos, s.t)?;
    need("attention", "page table", table, table_len.max(1))?;
    need("attention", "out", out, s.t * s.n_head * kv.head_dim)?;
    if s.ctx > table_len * kv.page_size {
        return Err(Error::shape("attention", format!("context {} beyond {table_len} pages of {}", s.ctx, kv.page_size)));
    }
    let heads = s.t * s.n_head;
    let stride = 16 * (kv.head_dim / 4 + 1) as u64;
    let by_room = (part.size() / (stride * heads as u64)) as usize;
    // GPUs: a workgroup per (token, head, slice) of at most ATTN_SPAN positions (`coop`). CPU
    // adapters: an invocation (`main`) per (token, KV head's query heads, slice), or, where the
    // subgroup size is fixed (lavapipe), a cluster of subgroup lanes (`attention_lanes`) per
    // (4, 8 or 16 query rows of a KV head, slice); each reads a K/V row once for all its rows.
    let coop = s.kind == Variant::Coop;
    let ratio = s.n_head / kv.n_kv;
    // Variant::Lanes: items of 4 query rows of a KV head (the heads of one token, or of neighbouring
    // tokens), of 8 (more than 4 rows) or of 16 (more than 8): each K/V word loaded serves them
    // all. Measured on lavapipe: the default model's warm request over 1,675 cached tokens (2 quads
    // a lane), 16-row items cut this kernel from ~145 to ~115 ms against 8-row ones, and 32-row
    // items left too many rows idle in the last item and were no faster; Gemma-3's prefill (8 quads
    // a lane), 1,106 ms with 4-row items, 725–804 with 8, 606–644 with 16 (500 tokens after 1,000).
    let lanes = lanes_split(b.gpu(), s.kind, kv.head_dim);
    let lane_sets = match lanes {
        Some(_) if s.t * ratio > 8 => 4,
        Some(_) if s.t * ratio > 4 => 2,
        _ => 1,
    };
    let lane_chunks = (s.t * ratio).div_ceil(4 * lane_sets);
    let (splits, span) = match s.split {
        Split::Auto if coop => {
            // Slices of at most ATTN_SPAN positions (the kernel's workgroup memory), more when
            // there is room and few queries.
            let splits = ATTN_PARALLEL.div_ceil(heads).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(s.ctx.div_ceil(ATTN_SPAN));
            if splits > by_room.max(1) {
                return Err(Error::shape("attention", format!("{splits} slices of {} queries need a larger partials buffer", s.t)));
            }
            (splits.max(1), 0)
        }
        Split::Auto if lanes.is_some() => {
            // Lane clusters: a few items per CPU thread (measured: 12–24 items beat 48–87).
            (ATTN_LANE_ITEMS.div_ceil(kv.n_kv * lane_chunks).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(1), 0)
        }
        Split::Auto => (ATTN_PARALLEL.div_ceil(heads).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(1), 0),
        Split::Fixed => {
            let splits = s.ctx.div_ceil(ATTN_SPAN);
            if splits > by_room.max(1) {
                return Err(Error::shape("attention", format!("{splits} slices of {} queries need a larger partials buffer", s.t)));
            }
            (splits, ATTN_SPAN)
        }
    };
    let group = if !coop && ratio <= 8 && ratio * kv.head_dim / 4 <= 128 { ratio } else { 1 };
    let params = [
        u(s.t),
        u(s.n_head),
        u(kv.n_kv),
        u(kv.head_dim),
        u(kv.page_size),
        u(s.q_stride),
        s.scale.to_bits(),
        u(table_len),
        u(splits),
        u(span),
        u(s.window),
    ];
    let buffers = [q, pos, table, &kv.k, &kv.v, out, part, rope];
    if coop {
        b.dispatch(&ATTENTION_COOP, &[("FUSED", s.fused as u32 as f64)], &params, &buffers, groups_2d(b.gpu(), heads * splits))?;
    } else if let Some((lanes, quads)) = lanes {
        // `lanes` lanes per item, at least 8 lanes (one AVX2 vector) per workgroup.
        let wg = lanes * (8 / lanes).max(1);
        // Items that are a whole subgroup of 8 lanes: each lane keeps its own rows' softmax state
        // (measured on lavapipe, the default model's warm pass: this kernel ~105–153 → ~72–90 ms).
        let wide = lanes == 8 && b.gpu().caps.subgroup_size == Some(8);
        let consts = [
            ("FUSED", s.fused as u32 as f64),
            ("L", lanes as f64),
            ("QPL", quads as f64),
            ("SETS", lane_sets as f64),
            ("WIDE", wide as u32 as f64),
            ("WG", wg as f64),
        ];
        let items = kv.n_kv * lane_chunks * splits;
        let buffers = [q, pos, table, &kv.k, &kv.v, out, part, rope, &kv.k, &kv.v];
        b.dispatch(&ATTENTION_LANES, &consts, &params, &buffers, groups_2d(b.gpu(), items.div_ceil(wg / lanes)))?;
    } else {
        // One SIMD width per workgroup: a decode step has only 12–90 invocations here.
        const WG: usize = 8;
        let consts = [("GROUP", group as f64), ("FUSED", s.fused as u32 as f64), ("WG", WG as f64)];
        b.dispatch(&ATTENTION, &consts, &params, &buffers, groups_2d(b.gpu(), (heads / group * splits).div_ceil(WG)))?;
    }
    if splits > 1 {
        b.dispatch(&ATTENTION_COMBINE, &[], &params, &buffers, groups_1d(b.gpu(), heads * (kv.head_dim / 4)))?;
    }
    Ok(())
}
