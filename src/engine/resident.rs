//! The resident cache behind one engine: the KV pages on the GPU ([`KvCache`]), the index of the
//! prefixes they hold ([`PrefixIndex`]), and everything done to them between and around
//! requests — lookup, eviction, copy-on-write of a partly matching page, keeping a finished
//! request's K/V, stats and the page audit, saving and restoring.
//!
//! Every request's K/V stays resident after it ends, indexed by its tokens. A new request looks up
//! the longest resident prefix of its prompt, shares the completely filled pages of that prefix by
//! reference, copies the shared part of a partly matching page into a page of its own (one small
//! kernel: a sequence never writes into a page another holder can read), and computes only the
//! rest. When the KV budget runs out, unreferenced prefixes are evicted leaf-first, least recently
//! used; pages a running request holds never are.

use std::collections::HashMap;

use crate::cache::kv::{KvCache, Sequence};
use crate::cache::persist;
use crate::cache::prefix::{Match, PrefixIndex, Resident};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops;

/// Most bytes of KV pages a save (`Engine::save_cache_to`) reads back and hands over at once.
pub const SAVE_BATCH_BYTES: u64 = 8 << 20;

/// The KV cache's state, for `stats`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheStats {
    /// Pages in the KV pool (the KV budget).
    pub pages_total: usize,
    /// Pages held (between requests, by the resident prefixes).
    pub pages_used: usize,
    /// Pages nobody holds.
    pub pages_free: usize,
    /// Positions per page.
    pub page_size: usize,
    /// Bytes of one page: K and V of every layer.
    pub page_bytes: u64,
    /// Bytes of the whole pool (`pages_total × page_bytes`).
    pub bytes_total: u64,
    /// Bytes of the pages held (`pages_used × page_bytes`).
    pub bytes_used: u64,
    /// Pages evicted since the engine was loaded.
    pub evicted_pages: u64,
    /// Resident prefixes (salt, tokens, pages, last use), most recent first.
    pub prefixes: Vec<Resident>,
}

/// What a restore made resident.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Restored {
    /// Prefixes made resident.
    pub prefixes: usize,
    /// Their tokens, summed over the prefixes.
    pub tokens: usize,
    /// Pages filled from the file (a page several prefixes share counts once).
    pub pages: usize,
    /// Prefixes left out: longer than the context window, or no room in the KV budget.
    pub skipped: usize,
}

/// The KV pages, their index, and the eviction count.
pub(crate) struct ResidentCache {
    pub(crate) kv: KvCache,
    index: PrefixIndex,
    /// Keep prefixes resident between requests (`EngineOptions::cache`).
    enabled: bool,
    /// Pages evicted since the engine was loaded.
    evicted: u64,
}

impl ResidentCache {
    pub(crate) fn new(kv: KvCache, enabled: bool) -> ResidentCache {
        let index = PrefixIndex::new(kv.page_size);
        ResidentCache { kv, index, enabled, evicted: 0 }
    }

    /// Positions per page.
    pub(crate) fn page_size(&self) -> usize {
        self.kv.page_size
    }

    /// `Err(CacheCorrupt)` once any page-accounting error has happened.
    pub(crate) fn check(&self) -> Result<()> {
        self.kv.pool.borrow().check()
    }

    /// The longest resident prefix of `prompt` under `salt` (nothing when the cache is off).
    pub(crate) fn lookup(&mut self, salt: &str, prompt: &[u32]) -> Match {
        if self.enabled {
            self.index.lookup(salt, prompt)
        } else {
            Match::default()
        }
    }

    /// Pages a request could have: free, or held by the index alone (evictable).
    pub(crate) fn room(&self) -> usize {
        let pool = self.kv.pool.borrow();
        pool.free() + self.index.evictable(&pool)
    }

    /// Keeps what a finished request computed resident: the first `tokens.len()` positions of
    /// `seq` (when the cache is on).
    pub(crate) fn keep(&mut self, salt: &str, tokens: &[u32], seq: &Sequence) -> Result<()> {
        if self.enabled {
            let pool = &mut self.kv.pool.borrow_mut();
            self.index.insert(pool, salt, tokens, seq.pages())?;
        }
        Ok(())
    }

    /// Makes `pages` pages free, evicting unreferenced prefixes least recently used first.
    pub(crate) fn ensure_free(&mut self, pages: usize) -> Result<()> {
        let pool = &mut self.kv.pool.borrow_mut();
        let free = pool.free();
        if free >= pages {
            return Ok(());
        }
        let freed = self.index.evict(pool, pages - free)?;
        self.evicted += freed as u64;
        if free + freed < pages {
            return Err(Error::CacheFull { needed_pages: pages, free_pages: free + freed });
        }
        Ok(())
    }

    /// Copy-on-write of a partly matching page: the first `n` positions of `src` into a fresh
    /// page of `seq`, every layer. `src` is held while the copy is recorded, so eviction cannot
    /// take it.
    pub(crate) async fn copy_partial(&mut self, gpu: &Gpu, seq: &mut Sequence, src: u32, n: usize) -> Result<()> {
        self.kv.pool.borrow_mut().retain(src)?;
        let res = self.copy_partial_held(gpu, seq, src, n).await;
        let released = self.kv.pool.borrow_mut().release(src);
        res.and(released)
    }

    async fn copy_partial_held(&mut self, gpu: &Gpu, seq: &mut Sequence, src: u32, n: usize) -> Result<()> {
        self.ensure_free(1)?;
        let dst = self.kv.pool.borrow_mut().alloc().ok_or(Error::CacheFull { needed_pages: 1, free_pages: 0 })?;
        if let Err(e) = seq.push_written_page(dst, n) {
            self.kv.pool.borrow_mut().release(dst)?;
            return Err(e);
        }
        // From here the page is the sequence's: an error drops it with the sequence.
        let mut b = gpu.batch()?;
        for layer in &self.kv.layers {
            ops::kv_copy(&mut b, layer, src as usize, dst as usize, n)?;
        }
        b.submit().await
    }

    /// The pages and the resident prefixes.
    pub(crate) fn stats(&self) -> CacheStats {
        let pool = self.kv.pool.borrow();
        let page_bytes = self.kv.page_bytes();
        CacheStats {
            pages_total: pool.total(),
            pages_used: pool.used(),
            pages_free: pool.free(),
            page_size: self.kv.page_size,
            page_bytes,
            bytes_total: pool.total() as u64 * page_bytes,
            bytes_used: pool.used() as u64 * page_bytes,
            evicted_pages: self.evicted,
            prefixes: self.index.residents(),
        }
    }

    /// Checks the page accounting: every page's holder count equals the index's references (no
    /// request runs between calls, so the index is the only holder), and the free list is exact.
    pub(crate) fn audit(&self) -> Result<()> {
        let pool = self.kv.pool.borrow();
        let mut holders = vec![0; pool.total()];
        self.index.count_holders(&mut holders);
        pool.audit(&holders)
    }

    /// Every resident prefix and its pages as a saved-cache file of `shape`, handed to `write` in
    /// order, a chunk at a time: the header, then the pages in batches of at most
    /// [`SAVE_BATCH_BYTES`], then the checksum. Pages shared by several prefixes are saved once.
    /// Returns the file's length.
    pub(crate) async fn save_to<F, W>(&self, gpu: &Gpu, shape: persist::Shape, mut write: W) -> Result<u64>
    where
        W: FnMut(Vec<u8>) -> F,
        F: std::future::Future<Output = Result<()>>,
    {
        let mut slot: HashMap<u32, u32> = HashMap::new();
        let mut order: Vec<u32> = Vec::new();
        let prefixes: Vec<persist::SavedPrefix> = self
            .index
            .paths()
            .into_iter()
            .map(|(salt, tokens, pages)| {
                let pages = pages
                    .iter()
                    .map(|&p| {
                        *slot.entry(p).or_insert_with(|| {
                            order.push(p);
                            order.len() as u32 - 1
                        })
                    })
                    .collect();
                persist::SavedPrefix { salt, tokens, pages }
            })
            .collect();
        let header = persist::Header { version: persist::LAYOUT_VERSION, shape, pages: order.len() as u32, prefixes };
        let head = persist::head(&header)?;
        let mut crc = crc32fast::Hasher::new();
        let mut len = head.len() as u64;
        crc.update(&head);
        write(head).await?;
        let batch = (SAVE_BATCH_BYTES / self.kv.page_bytes().max(1)).max(1) as usize;
        for pages in order.chunks(batch) {
            let data = self.kv.read_pages(gpu, pages).await?;
            crc.update(&data);
            len += data.len() as u64;
            write(data).await?;
        }
        write(crc.finalize().to_le_bytes().to_vec()).await?;
        Ok(len + 4)
    }

    /// Makes the prefixes of a saved-cache file resident again, most recently used first, as many
    /// as free and evictable pages hold and none longer than `max_tokens`. A file of another
    /// `shape` or layout version, or a corrupt one, is refused with [`Error::CacheFile`] and
    /// nothing changes. All or nothing: a restore that fails later (the GPU, the page accounting)
    /// makes none of the file's prefixes resident; only the idle prefixes it evicted to make room
    /// for them stay evicted.
    pub(crate) async fn restore(
        &mut self,
        gpu: &Gpu,
        file: &[u8],
        shape: &persist::Shape,
        vocab: usize,
        max_tokens: usize,
    ) -> Result<Restored> {
        self.check()?;
        let (header, data) = persist::decode(file, shape, self.kv.page_bytes(), vocab)?;
        let mut held = Vec::new();
        let r = self.restore_held(gpu, &header, data, max_tokens, &mut held).await;
        // The index holds its own references; ours go back on every path.
        let pool = &mut self.kv.pool.borrow_mut();
        let mut released = Ok(());
        for page in held {
            released = released.and(pool.release(page));
        }
        let out = r?;
        released?;
        pool.check()?;
        Ok(out)
    }

    /// The body of [`Self::restore`]: every page it allocates goes into `held`.
    async fn restore_held(
        &mut self,
        gpu: &Gpu,
        header: &persist::Header,
        data: &[u8],
        max_tokens: usize,
        held: &mut Vec<u32>,
    ) -> Result<Restored> {
        let page_bytes = self.kv.page_bytes() as usize;
        // The file's pages that the restored prefixes need, and the pool page each goes into.
        let mut to: Vec<Option<u32>> = vec![None; header.pages as usize];
        let mut keep = Vec::new();
        let mut out = Restored::default();
        for p in &header.prefixes {
            let new = p.pages.iter().filter(|&&i| to[i as usize].is_none()).count();
            if p.tokens.len() > max_tokens || self.ensure_free(new).is_err() {
                out.skipped += 1;
                continue;
            }
            let pool = &mut self.kv.pool.borrow_mut();
            for &i in &p.pages {
                if to[i as usize].is_none() {
                    let page = pool.alloc().ok_or(Error::CacheFull { needed_pages: new, free_pages: 0 })?;
                    held.push(page);
                    to[i as usize] = Some(page);
                }
            }
            keep.push(p);
        }
        for (i, dst) in to.iter().enumerate() {
            if let Some(dst) = dst {
                self.kv.write_pages(gpu, &data[i * page_bytes..][..page_bytes], &[*dst])?;
            }
        }
        gpu.finish().await?;
        // Least recent first, so that the index's use order ends as the file's; all of them or,
        // on an error, none.
        let paths: Vec<(&str, &[u32], Vec<u32>)> =
            keep.iter().rev().map(|p| (p.salt.as_str(), &p.tokens[..], p.pages.iter().filter_map(|&i| to[i as usize]).collect())).collect();
        let pool = &mut self.kv.pool.borrow_mut();
        self.index.insert_all(pool, paths.iter().map(|(s, t, p)| (*s, *t, &p[..])))?;
        out.prefixes = keep.len();
        out.tokens = keep.iter().map(|p| p.tokens.len()).sum();
        out.pages = held.len();
        Ok(out)
    }

    /// Forgets every resident prefix. After an accounting error this is the way back: the pool
    /// is rebuilt from scratch.
    pub(crate) fn clear(&mut self) {
        let pool = &mut self.kv.pool.borrow_mut();
        if self.index.clear(pool).is_err() || pool.check().is_err() || pool.used() != 0 {
            pool.reset();
        }
    }

    /// **Test only**: records a page-accounting fault, as a bug would.
    #[cfg(feature = "test-support")]
    pub(crate) fn corrupt_for_test(&mut self) {
        let pool = &mut self.kv.pool.borrow_mut();
        let free = (0..pool.total() as u32).find(|&p| pool.refs(p) == 0).unwrap_or(u32::MAX);
        let _ = pool.release(free);
    }
}
