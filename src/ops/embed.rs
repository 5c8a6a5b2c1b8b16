//! Rows of an embedding table in any weight format (`shaders/embed.wgsl`, decoding with
//! `quant.wgsl`): one dispatch a part of the table.

use crate::error::Result;
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u, Weight};

static EMBED: Kernel = Kernel {
    name: "embed",
    source: concat!(include_str!("../../shaders/quant.wgsl"), include_str!("../../shaders/embed.wgsl")),
    entry: "main",
    bindings: &[Read, Read, ReadWrite],
};

/// `y[i, :] = table[tokens[i], :] · scale`. Token ids are checked by the caller (a row past the
/// table is written by no part).
pub fn embed(b: &mut Batch, tokens: &wgpu::Buffer, table: &Weight, y: &wgpu::Buffer, t: usize, scale: f32) -> Result<()> {
    need("embed", "tokens", tokens, t)?;
    need("embed", "y", y, t * table.k)?;
    for part in &table.parts {
        let consts = super::matmul::format_consts(part.format);
        let params = [u(t), u(table.k), u(part.n), u(part.format.gpu_row_words(table.k)), u(part.row0), scale.to_bits()];
        b.dispatch(&EMBED, &consts, &params, &[tokens, &part.buf, y], groups_1d(b.gpu(), t * table.k / 4))?;
    }
    Ok(())
}
