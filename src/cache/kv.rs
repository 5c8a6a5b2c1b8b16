//! The paged KV cache.
//!
//! - [`PagePool`] is the page allocator: a reference count per page and a free list, CPU-only.
//!   A page holds `page_size` consecutive positions of one token sequence for every layer at once,
//!   so one page table serves all layers. Reference-count mistakes are errors, never saturated:
//!   releasing a free page or retaining one nobody holds is `Error::CacheCorrupt`, because a page
//!   handed to two sequences silently corrupts another user's answer.
//! - [`KvCache`] is the pool plus the GPU pages of every layer (`ops::KvPages`) and the one GPU
//!   page-table buffer the kernels read (sequences run one at a time, so one table is enough and the
//!   bind-group cache sees one buffer, not one per sequence).
//! - [`Sequence`] is a page table plus a length, and owns that length: `Model::forward` appends,
//!   `truncate` keeps a prefix. It holds one reference on each of its pages and gives them back
//!   when dropped. Pages it shares with others (a cached prefix) are read-only to it: a write into
//!   a page someone else holds is refused.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::KvPages;

/// Reference counts and free list of the KV pages.
#[derive(Clone, Debug)]
pub struct PagePool {
    refs: Vec<u32>,
    free: Vec<u32>,
    /// The first accounting error seen where it could not be returned (in `Drop`).
    fault: Option<String>,
}

impl PagePool {
    /// A pool of `pages` pages, all free.
    pub fn new(pages: usize) -> PagePool {
        PagePool { refs: vec![0; pages], free: (0..pages as u32).rev().collect(), fault: None }
    }

    /// Pages in the pool.
    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Pages nobody holds.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Pages somebody holds (a sequence or the prefix index).
    pub fn used(&self) -> usize {
        self.refs.len() - self.free.len()
    }

    /// Holders of `page` (0 when free or out of range).
    pub fn refs(&self, page: u32) -> u32 {
        self.refs.get(page as usize).copied().unwrap_or(0)
    }

    /// A free page, now held once by the caller.
    pub fn alloc(&mut self) -> Option<u32> {
        let p = self.free.pop()?;
        self.refs[p as usize] = 1;
        Some(p)
    }

    /// One more holder of a page somebody already holds.
    pub fn retain(&mut self, page: u32) -> Result<()> {
        match self.refs.get_mut(page as usize) {
            Some(r) if *r > 0 => {
                *r += 1;
                Ok(())
            }
            _ => Err(self.fail(format!("retain of page {page}, which nobody holds"))),
        }
    }

    /// One holder fewer; the page is free when none is left. Releasing a page nobody holds is an
    /// error (a double release), and the pool remembers it.
    pub fn release(&mut self, page: u32) -> Result<()> {
        match self.refs.get_mut(page as usize) {
            Some(r) if *r > 0 => {
                *r -= 1;
                if *r == 0 {
                    self.free.push(page);
                }
                Ok(())
            }
            _ => Err(self.fail(format!("release of page {page}, which nobody holds (a double release)"))),
        }
    }

    fn fail(&mut self, msg: String) -> Error {
        self.fault.get_or_insert_with(|| msg.clone());
        Error::CacheCorrupt(msg)
    }

    /// `Err(CacheCorrupt)` once any accounting error has happened, including one in a `Drop`.
    pub fn check(&self) -> Result<()> {
        match &self.fault {
            Some(m) => Err(Error::CacheCorrupt(m.clone())),
            None => Ok(()),
        }
    }

    /// Checks that the holders counted by the caller (`expected[p]` per page) are exactly the pool's
    /// counts and that the free list holds each free page once.
    pub fn audit(&self, expected: &[u32]) -> Result<()> {
        self.check()?;
        if expected.len() != self.refs.len() {
            return Err(Error::CacheCorrupt(format!("audit of {} pages in a pool of {}", expected.len(), self.refs.len())));
        }
        if let Some(p) = (0..self.refs.len()).find(|&p| self.refs[p] != expected[p]) {
            return Err(Error::CacheCorrupt(format!("page {p} has {} holders, {} are known", self.refs[p], expected[p])));
        }
        let mut seen = vec![false; self.refs.len()];
        for &p in &self.free {
            let p = p as usize;
            if p >= seen.len() || seen[p] || self.refs[p] != 0 {
                return Err(Error::CacheCorrupt(format!("page {p} is on the free list wrongly or twice")));
            }
            seen[p] = true;
        }
        if self.free.len() != self.refs.iter().filter(|&&r| r == 0).count() {
            return Err(Error::CacheCorrupt("a free page is missing from the free list".into()));
        }
        Ok(())
    }

    /// Forgets every holder: all pages free again (after a fault, or when everything is cleared).
    pub fn reset(&mut self) {
        let n = self.refs.len();
        *self = PagePool::new(n);
    }
}

/// What the cache stores per position of a model: K and V of `kv_heads` heads of `head_dim` in
/// each of `layers` layers (`Config::kv_shape`). A saved cache loads only into the same shape;
/// its file names the fields as before (`n_layer`, `n_kv_head`, `head_dim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvShape {
    /// Layers.
    #[serde(rename = "n_layer")]
    pub layers: usize,
    /// KV heads a layer.
    #[serde(rename = "n_kv_head")]
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
}

impl KvShape {
    /// Bytes of one layer's K (or V) for one page: `kv_heads × page_size × head_dim` f16 values.
    fn layer_page_bytes(self, page_size: usize) -> u64 {
        (self.kv_heads * page_size * self.head_dim * 2) as u64
    }

    /// Bytes of one KV page: K and V of every layer.
    pub fn page_bytes(self, page_size: usize) -> u64 {
        2 * self.layers as u64 * self.layer_page_bytes(page_size)
    }
}

/// The pool, the GPU pages of every layer, and the page table the kernels read.
pub struct KvCache {
    pub(crate) layers: Vec<KvPages>,
    pub(crate) page_size: usize,
    pub(crate) pool: Rc<RefCell<PagePool>>,
    /// `[max_seq_pages]` u32: the page table of the sequence that runs.
    table: wgpu::Buffer,
    /// Bytes of one layer's K (or V) for one page.
    layer_page_bytes: u64,
    max_seq_pages: usize,
    /// (sequence id, version) whose table `table` holds.
    uploaded: Cell<(u64, u64)>,
}

/// Most pages a pool may have so that each layer's K (or V) buffer fits this adapter's limits.
pub fn max_pages(gpu: &Gpu, shape: KvShape, page_size: usize) -> usize {
    let limit = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
    (limit / shape.layer_page_bytes(page_size).max(1)) as usize
}

impl KvCache {
    /// Allocates `pages` pages of `page_size` positions for every layer of `shape`, and a page
    /// table for sequences of up to `max_seq_tokens` positions.
    pub async fn new(gpu: &Gpu, shape: KvShape, pages: usize, page_size: usize, max_seq_tokens: usize) -> Result<KvCache> {
        if pages == 0 || page_size == 0 || max_seq_tokens == 0 {
            return Err(Error::InvalidArgument(format!(
                "KV cache of {pages} pages of {page_size} positions, sequences of {max_seq_tokens}"
            )));
        }
        if u32::try_from(pages).is_err() {
            return Err(Error::InvalidArgument(format!("{pages} KV pages (at most 2^32)")));
        }
        let mut layers = Vec::with_capacity(shape.layers);
        for _ in 0..shape.layers {
            layers.push(KvPages::new(gpu, pages, page_size, shape.kv_heads, shape.head_dim).await?);
        }
        let max_seq_pages = max_seq_tokens.div_ceil(page_size);
        let table = gpu.storage("page table", 4 * max_seq_pages as u64).await?;
        let pool = Rc::new(RefCell::new(PagePool::new(pages)));
        let layer_page_bytes = shape.layer_page_bytes(page_size);
        Ok(KvCache { layers, page_size, pool, table, layer_page_bytes, max_seq_pages, uploaded: Cell::new((0, 0)) })
    }

    /// Pages of the pool nobody holds.
    pub fn free_pages(&self) -> usize {
        self.pool.borrow().free()
    }

    /// Bytes of one layer's K (or V) for one page.
    pub fn layer_page_bytes(&self) -> u64 {
        self.layer_page_bytes
    }

    /// Bytes of one whole page in the saved-cache layout: K and V of every layer.
    pub fn page_bytes(&self) -> u64 {
        2 * self.layers.len() as u64 * self.layer_page_bytes
    }

    /// The K/V of `pages`, page by page (the saved-cache layout, `persist`): for each page in
    /// order, for each layer, its K then its V ([`Self::page_bytes`] a page).
    pub async fn read_pages(&self, gpu: &Gpu, pages: &[u32]) -> Result<Vec<u8>> {
        let lpb = self.layer_page_bytes;
        let ranges: Vec<(u64, u64)> = pages.iter().map(|&p| (u64::from(p) * lpb, lpb)).collect();
        let (lpb, page) = (lpb as usize, self.page_bytes() as usize);
        let mut out = vec![0u8; pages.len() * page];
        for (l, layer) in self.layers.iter().enumerate() {
            for (half, buf) in [&layer.k, &layer.v].into_iter().enumerate() {
                let data = gpu.read_ranges(buf, &ranges).await?;
                for (i, chunk) in data.chunks_exact(lpb).enumerate() {
                    let at = i * page + (2 * l + half) * lpb;
                    out[at..at + lpb].copy_from_slice(chunk);
                }
            }
        }
        Ok(out)
    }

    /// Writes K/V data laid out as [`Self::read_pages`] gives it, page `i` of the data into page
    /// `to[i]` of the pool.
    pub fn write_pages(&self, gpu: &Gpu, data: &[u8], to: &[u32]) -> Result<()> {
        let (lpb, page) = (self.layer_page_bytes as usize, self.page_bytes() as usize);
        if data.len() != page * to.len() {
            return Err(Error::InvalidArgument(format!("{} bytes of KV data for {} pages of {page} bytes", data.len(), to.len())));
        }
        let total = self.pool.borrow().total();
        for (&dst, bytes) in to.iter().zip(data.chunks_exact(page.max(1))) {
            if dst as usize >= total {
                return Err(Error::CacheCorrupt(format!("write into page {dst} of {total}")));
            }
            let off = u64::from(dst) * lpb as u64;
            for (layer, kv) in self.layers.iter().zip(bytes.chunks_exact(2 * lpb)) {
                gpu.write(&layer.k, off, &kv[..lpb]);
                gpu.write(&layer.v, off, &kv[lpb..]);
            }
        }
        Ok(())
    }

    /// Most positions one sequence can hold (its page table's size).
    pub fn max_seq_tokens(&self) -> usize {
        self.max_seq_pages * self.page_size
    }

    /// A new, empty sequence on this cache, able to grow to `max_tokens` positions (at most
    /// [`Self::max_seq_tokens`]).
    pub fn sequence(&self, max_tokens: usize) -> Sequence {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let max_pages = max_tokens.div_ceil(self.page_size).clamp(1, self.max_seq_pages);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        Sequence { pool: self.pool.clone(), pages: Vec::new(), len: 0, max_pages, page_size: self.page_size, id, version: 1 }
    }

    /// The GPU page table, holding `seq`'s pages (uploaded only when they changed).
    pub(crate) fn table_for(&self, gpu: &Gpu, seq: &Sequence) -> &wgpu::Buffer {
        if self.uploaded.get() != (seq.id, seq.version) {
            gpu.write(&self.table, 0, &seq.pages);
            self.uploaded.set((seq.id, seq.version));
        }
        &self.table
    }
}

/// One token sequence: its pages (one reference held on each) and its length in positions.
pub struct Sequence {
    pool: Rc<RefCell<PagePool>>,
    pages: Vec<u32>,
    len: usize,
    max_pages: usize,
    page_size: usize,
    id: u64,
    /// Bumped whenever `pages` changes (the GPU copy of the table is then stale).
    version: u64,
}

impl Sequence {
    /// Positions whose K/V are written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is written (`len() == 0`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions this sequence can hold.
    pub fn max_tokens(&self) -> usize {
        self.max_pages * self.page_size
    }

    /// The page ids, in order (the last may be partly filled, and pages past `len` may be reserved).
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }

    /// Starts an empty sequence from shared, completely filled `pages` (a cached prefix), taking one
    /// reference on each. Its length becomes `pages.len() × page_size`.
    pub fn adopt_prefix(&mut self, pages: &[u32]) -> Result<()> {
        if !self.pages.is_empty() || pages.len() > self.max_pages {
            return Err(Error::InvalidArgument(format!(
                "adopting {} pages into a sequence of {} pages (of {} at most)",
                pages.len(),
                self.pages.len(),
                self.max_pages
            )));
        }
        let mut pool = self.pool.borrow_mut();
        for &p in pages {
            pool.retain(p)?;
            self.pages.push(p);
        }
        self.len = pages.len() * self.page_size;
        self.version += 1;
        Ok(())
    }

    /// Adds a page the caller allocated (and holds once), whose first `tokens` positions are
    /// already written (a copied partial page). The sequence must end on a page boundary.
    pub fn push_written_page(&mut self, page: u32, tokens: usize) -> Result<()> {
        if self.len != self.pages.len() * self.page_size || tokens > self.page_size || self.pages.len() >= self.max_pages {
            return Err(Error::InvalidArgument(format!(
                "a page of {tokens} written positions after {} positions in {} pages",
                self.len,
                self.pages.len()
            )));
        }
        self.pages.push(page);
        self.len += tokens;
        self.version += 1;
        Ok(())
    }

    /// Keeps the first `n` positions (a no-op when `n ≥ len`); pages past them go back to the pool.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.len = self.len.min(n);
        // Pages past the kept positions go back, including any reserved by a forward pass that failed.
        let keep = self.len.div_ceil(self.page_size);
        if self.pages.len() > keep {
            let mut pool = self.pool.borrow_mut();
            let mut first_err = Ok(());
            for p in self.pages.drain(keep..) {
                let r = pool.release(p);
                if first_err.is_ok() {
                    first_err = r;
                }
            }
            self.version += 1;
            first_err?;
        }
        Ok(())
    }

    /// Pages needed to grow by `t` positions that the sequence does not have yet.
    pub fn pages_needed(&self, t: usize) -> usize {
        (self.len + t).div_ceil(self.page_size).saturating_sub(self.pages.len())
    }

    /// Makes room for `t` more positions (allocating pages) and returns the page-table length the
    /// kernels should use. Refuses to write into a page another holder can read. Nothing changes
    /// on error.
    pub(crate) fn reserve(&mut self, t: usize) -> Result<usize> {
        let need = (self.len + t).div_ceil(self.page_size);
        if need > self.max_pages {
            return Err(Error::ContextFull { needed: self.len + t, capacity: self.max_tokens() });
        }
        let mut pool = self.pool.borrow_mut();
        pool.check()?;
        // The page the first new position lands in, if it is already in the table, must be ours alone.
        if let Some(&p) = self.pages.get(self.len / self.page_size) {
            if pool.refs(p) != 1 {
                return Err(Error::CacheCorrupt(format!("a write into page {p}, which {} holders share", pool.refs(p))));
            }
        }
        let missing = need.saturating_sub(self.pages.len());
        if missing > pool.free() {
            return Err(Error::CacheFull { needed_pages: missing, free_pages: pool.free() });
        }
        for _ in 0..missing {
            let p = pool.alloc().ok_or(Error::CacheFull { needed_pages: missing, free_pages: 0 })?;
            self.pages.push(p);
            self.version += 1;
        }
        Ok(self.pages.len())
    }

    /// Records that `t` more positions were written (after a successful forward pass).
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Returns every page to the pool.
    pub fn clear(&mut self) -> Result<()> {
        self.truncate(0)
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        // An error here is recorded in the pool (`PagePool::check`) and reported by the next request.
        let _ = self.truncate(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_release_is_an_error_not_a_second_free_entry() {
        let mut pool = PagePool::new(4);
        let p = pool.alloc().unwrap();
        pool.retain(p).unwrap();
        pool.release(p).unwrap();
        pool.release(p).unwrap();
        assert_eq!(pool.free(), 4);
        assert!(matches!(pool.release(p), Err(Error::CacheCorrupt(_))));
        assert_eq!(pool.free(), 4, "the page is not pushed to the free list twice");
        assert!(matches!(pool.check(), Err(Error::CacheCorrupt(_))), "the pool remembers the fault");
        pool.reset();
        assert!(pool.check().is_ok());
        assert!(matches!(pool.retain(3), Err(Error::CacheCorrupt(_))), "retaining a free page");
    }

    #[test]
    fn audit_catches_mismatched_counts() {
        let mut pool = PagePool::new(3);
        let a = pool.alloc().unwrap();
        let mut expected = vec![0; 3];
        expected[a as usize] = 1;
        pool.audit(&expected).unwrap();
        expected[a as usize] = 2;
        assert!(pool.audit(&expected).is_err());
    }

    fn seq(pool: &Rc<RefCell<PagePool>>, max_pages: usize) -> Sequence {
        Sequence { pool: pool.clone(), pages: Vec::new(), len: 0, max_pages, page_size: 4, id: 1, version: 1 }
    }

    #[test]
    fn a_dropped_sequence_returns_its_pages() {
        let pool = Rc::new(RefCell::new(PagePool::new(8)));
        {
            let mut s = seq(&pool, 8);
            s.reserve(10).unwrap();
            s.advance(10);
            assert_eq!(pool.borrow().used(), 3);
            let mut t = seq(&pool, 8);
            t.adopt_prefix(&s.pages()[..2]).unwrap();
            assert_eq!(t.len(), 8);
            assert_eq!(pool.borrow().used(), 3, "shared, not copied");
            // Growing t allocates a fresh page instead of writing into s's third page.
            t.reserve(1).unwrap();
            assert_eq!(pool.borrow().used(), 4);
        }
        assert_eq!(pool.borrow().used(), 0, "no leak after both sequences drop");
        pool.borrow().check().unwrap();
    }

    #[test]
    fn writing_into_a_shared_partial_page_is_refused() {
        let pool = Rc::new(RefCell::new(PagePool::new(8)));
        let mut s = seq(&pool, 8);
        s.reserve(6).unwrap();
        s.advance(6);
        pool.borrow_mut().retain(s.pages()[1]).unwrap(); // someone else holds the partial page
        assert!(matches!(s.reserve(1), Err(Error::CacheCorrupt(_))));
        pool.borrow_mut().release(s.pages()[1]).unwrap();
        s.reserve(1).unwrap();
    }

    #[test]
    fn reserve_fails_cleanly_when_the_pool_is_empty() {
        let pool = Rc::new(RefCell::new(PagePool::new(2)));
        let mut s = seq(&pool, 8);
        assert!(matches!(s.reserve(9), Err(Error::CacheFull { needed_pages: 3, free_pages: 2 })));
        assert_eq!((s.pages().len(), pool.borrow().used()), (0, 0), "nothing changes on error");
        assert!(matches!(s.reserve(33), Err(Error::ContextFull { .. })));
    }
}
