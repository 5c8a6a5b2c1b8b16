//! Per-row argmax, lowest id on ties, and the greedy step that feeds its id to the next decode
//! step on the GPU (`shaders/argmax.wgsl`).

use crate::error::Result;
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{need, u};

static ARGMAX: Kernel = kernel!("argmax", "main", [Read, ReadWrite]);
static ARGMAX_FEED: Kernel = kernel!("argmax", "feed", [Read, ReadWrite, ReadWrite, ReadWrite]);

/// `out[r] = argmax(x[r, :n])` for `rows` rows (u32 ids; lowest on ties).
pub fn argmax(b: &mut Batch, x: &wgpu::Buffer, out: &wgpu::Buffer, rows: usize, n: usize) -> Result<()> {
    need("argmax", "x", x, rows * n)?;
    need("argmax", "out", out, rows)?;
    b.dispatch(&ARGMAX, &[], &[u(rows), u(n), 0], &[x, out], [u(rows), 1, 1])
}

/// Greedy decoding without the CPU: `ids[slot] = tokens[0] = argmax(x[0, :n])` and `pos[0] += 1`,
/// so the next step (embedding `tokens[0]` at `pos[0]`) can be queued before this one is read.
pub fn argmax_feed(
    b: &mut Batch,
    x: &wgpu::Buffer,
    n: usize,
    ids: &wgpu::Buffer,
    slot: usize,
    tokens: &wgpu::Buffer,
    pos: &wgpu::Buffer,
) -> Result<()> {
    need("argmax", "x", x, n)?;
    need("argmax", "ids", ids, slot + 1)?;
    need("argmax", "tokens", tokens, 1)?;
    need("argmax", "positions", pos, 1)?;
    b.dispatch(&ARGMAX_FEED, &[], &[1, u(n), u(slot)], &[x, ids, tokens, pos], [1, 1, 1])
}
