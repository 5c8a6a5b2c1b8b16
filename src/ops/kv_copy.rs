//! The first positions of one KV page into another: the copy-on-write of a shared page
//! (`shaders/kv_copy.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::ReadWrite, Batch, Kernel};

use super::{u, KvPages};

static KV_COPY: Kernel = kernel!("kv_copy", "main", [ReadWrite, ReadWrite]);

/// Copies the first `n` positions of page `src` to page `dst` in one layer's K and V pages (the
/// copy-on-write of a partly shared page).
pub fn kv_copy(b: &mut Batch, kv: &KvPages, src: usize, dst: usize, n: usize) -> Result<()> {
    if src >= kv.pages || dst >= kv.pages || src == dst || n > kv.page_size {
        return Err(Error::shape(
            "kv_copy",
            format!("{n} positions from page {src} to page {dst} of {} pages of {}", kv.pages, kv.page_size),
        ));
    }
    let params = [u(src), u(dst), u(n), u(kv.n_kv), u(kv.page_size), u(kv.head_dim / 2)];
    b.dispatch(&KV_COPY, &[], &params, &[&kv.k, &kv.v], [u(kv.n_kv * n * kv.head_dim / 2).div_ceil(64), 1, 1])
}
