//! The paged KV cache. Every layer has a pool of pages (`ops::KvPages`); a page holds
//! `page_size` consecutive tokens of one sequence for every layer at once, so one page table serves
//! all layers. A sequence is a page table plus a length, and the cache — not the caller — owns
//! that length: `Model::forward` appends, `Sequence::truncate` keeps a prefix.
//!
//! Pages are reference-counted so that later work (the prompt cache) can share a prefix's pages
//! between sequences without copying.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::KvPages;

/// All layers' KV pages and the page allocator.
pub struct KvCache {
    pub layers: Vec<KvPages>,
    pub page_size: usize,
    refs: Vec<u32>,
    free: Vec<u32>,
}

impl KvCache {
    /// Allocates `pages` pages of `page_size` tokens for each of `n_layer` layers.
    pub async fn new(gpu: &Gpu, n_layer: usize, pages: usize, page_size: usize, n_kv: usize, head_dim: usize) -> Result<KvCache> {
        let mut layers = Vec::with_capacity(n_layer);
        for _ in 0..n_layer {
            layers.push(KvPages::new(gpu, pages, page_size, n_kv, head_dim).await?);
        }
        Ok(KvCache { layers, page_size, refs: vec![0; pages], free: (0..pages as u32).rev().collect() })
    }

    /// Tokens the whole pool can hold.
    pub fn capacity(&self) -> usize {
        self.refs.len() * self.page_size
    }

    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    fn alloc(&mut self) -> Option<u32> {
        let p = self.free.pop()?;
        self.refs[p as usize] = 1;
        Some(p)
    }

    fn release(&mut self, page: u32) {
        let r = &mut self.refs[page as usize];
        *r = r.saturating_sub(1);
        if *r == 0 {
            self.free.push(page);
        }
    }
}

/// One sequence: its page table (on the CPU and mirrored on the GPU) and its length in tokens.
pub struct Sequence {
    pages: Vec<u32>,
    len: usize,
    /// `[max_pages]` u32 page ids, what the kernels read.
    pub table: wgpu::Buffer,
    max_pages: usize,
    dirty: bool,
}

impl Sequence {
    /// An empty sequence that can grow to `max_tokens`.
    pub async fn new(gpu: &Gpu, cache: &KvCache, max_tokens: usize) -> Result<Sequence> {
        let max_pages = max_tokens.div_ceil(cache.page_size).max(1);
        let table = gpu.storage("page table", 4 * max_pages as u64).await?;
        Ok(Sequence { pages: Vec::new(), len: 0, table, max_pages, dirty: false })
    }

    /// Tokens whose K/V are cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most tokens this sequence can hold.
    pub fn max_tokens(&self, cache: &KvCache) -> usize {
        self.max_pages * cache.page_size
    }

    /// Keeps the first `n` tokens (a no-op when `n ≥ len`), returning pages no longer needed.
    pub fn truncate(&mut self, cache: &mut KvCache, n: usize) {
        self.len = self.len.min(n);
        // Pages past the kept tokens go back, including any reserved by a forward pass that failed.
        let keep = self.len.div_ceil(cache.page_size);
        if self.pages.len() > keep {
            for p in self.pages.drain(keep..) {
                cache.release(p);
            }
            self.dirty = true;
        }
    }

    /// Makes room for `t` more tokens (allocating pages) and returns the page-table length the
    /// kernels should use. Nothing changes on error.
    pub(crate) fn reserve(&mut self, gpu: &Gpu, cache: &mut KvCache, t: usize) -> Result<usize> {
        let need = (self.len + t).div_ceil(cache.page_size);
        if need > self.max_pages {
            return Err(Error::ContextFull { needed: self.len + t, capacity: self.max_tokens(cache) });
        }
        if need - self.pages.len().min(need) > cache.free_pages() {
            return Err(Error::ContextFull { needed: self.len + t, capacity: self.len + cache.free_pages() * cache.page_size });
        }
        while self.pages.len() < need {
            let p = cache.alloc().ok_or(Error::ContextFull { needed: self.len + t, capacity: cache.capacity() })?;
            self.pages.push(p);
            self.dirty = true;
        }
        if self.dirty {
            gpu.write(&self.table, 0, &self.pages);
            self.dirty = false;
        }
        Ok(self.pages.len())
    }

    /// Records that `t` more tokens were written (after a successful forward pass).
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Returns every page to the cache.
    pub fn clear(&mut self, cache: &mut KvCache) {
        self.truncate(cache, 0);
    }
}
