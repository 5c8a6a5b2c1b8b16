//! Rows of a Q8_0 embedding table (`shaders/embed.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};
use crate::model::quant::Format;

use super::{groups_1d, need, u, Weight};

static EMBED: Kernel = kernel!("embed", "main", [Read, Read, ReadWrite]);

/// `y[i, :] = table[tokens[i], :]` from a Q8_0 table. Token ids are checked by the caller
/// (the shader clamps to the last row rather than read out of bounds).
pub fn embed(b: &mut Batch, tokens: &wgpu::Buffer, table: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    if table.format != Format::Q8_0 {
        return Err(Error::shape("embed", format!("table is {}, the kernel reads Q8_0", table.format.name())));
    }
    need("embed", "tokens", tokens, t)?;
    need("embed", "y", y, t * table.k)?;
    let params = [u(t), u(table.k), u(table.n), u(table.format.gpu_row_words(table.k))];
    b.dispatch(&EMBED, &[], &params, &[tokens, &table.buf, y], groups_1d(b.gpu(), t * table.k))
}
