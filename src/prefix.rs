//! The prefix index: which token prefixes have their K/V resident, and in which pages.
//!
//! **A radix tree at page granularity**, one tree per `cache_salt`. Each node below a root is one
//! KV page: its `tokens` are the page's tokens (`page_size` of them, or fewer for a partly filled
//! last page, which is always a leaf), and the path from the root spells the prefix. The index
//! holds one reference on each node's page.
//!
//! Why a tree and not vLLM's chained page hashes: the product's promise is to say *where* a prompt
//! stopped matching. Walking a tree gives the longest match at token granularity (inside a page,
//! too) and the resident tokens that follow the divergence point, which the miss diagnosis reports;
//! a hash chain only says "page i missed". Leaf-first LRU eviction (SGLang's policy) also falls out
//! of the tree: a node can go once it has no children and no running sequence holds its page.
//! Lookups cost O(prompt length + children scanned); children per node are few in practice.
//!
//! The index is plain CPU code over [`PagePool`]: it never touches the GPU and tests without one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Error, Result};
use crate::kv::PagePool;

type NodeId = usize;

#[derive(Debug)]
struct Node {
    parent: Option<NodeId>,
    /// The page's tokens (empty for a root).
    tokens: Vec<u32>,
    /// The page (unused for a root).
    page: u32,
    children: Vec<NodeId>,
    last_use: u64,
    /// The tree's salt (roots only; empty below them).
    salt: String,
}

/// What a lookup found resident for a prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// Completely filled pages matching the prompt's first `full_pages.len() × page_size` tokens:
    /// shared by reference.
    pub full_pages: Vec<u32>,
    /// A page whose first `n` positions match the next `n` prompt tokens: copied (copy-on-write),
    /// since the new sequence will write after them.
    pub partial: Option<(u32, usize)>,
    /// Where the prompt stopped matching something resident, when it did.
    pub divergence: Option<Divergence>,
}

impl Match {
    /// Prompt tokens matched.
    pub fn tokens(&self, page_size: usize) -> usize {
        self.full_pages.len() * page_size + self.partial.map_or(0, |(_, n)| n)
    }

    /// Keeps at most `n` matched tokens (a full page cut short becomes the partial page).
    pub fn limit(&mut self, n: usize, page_size: usize) {
        if self.tokens(page_size) <= n {
            return;
        }
        let full = n / page_size;
        let rest = n % page_size;
        self.partial = if rest > 0 {
            match self.full_pages.get(full) {
                Some(&p) => Some((p, rest)),
                None => self.partial.map(|(p, _)| (p, rest)),
            }
        } else {
            None
        };
        self.full_pages.truncate(full);
    }
}

/// The prompt differs from a resident sequence at prompt token `token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the first prompt token that differs.
    pub token: usize,
    /// The resident sequence's tokens from `token` on (up to `RESIDENT_TAIL`, 24).
    pub resident: Vec<u32>,
}

/// Resident tokens a divergence reports.
pub const RESIDENT_TAIL: usize = 24;

/// One resident prefix, as `stats` lists it (a leaf of the tree).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Resident {
    /// The `cache_salt` it is shared under (empty for none).
    pub salt: String,
    /// Its length in tokens.
    pub tokens: usize,
    /// KV pages it spans, pages shared with other prefixes included.
    pub pages: usize,
    /// The index's clock at its last use (larger is more recent).
    pub last_use: u64,
}

/// Resident prefixes per salt, as a radix tree of pages.
#[derive(Debug)]
pub struct PrefixIndex {
    page_size: usize,
    nodes: Vec<Option<Node>>,
    free_ids: Vec<NodeId>,
    roots: HashMap<String, NodeId>,
    tick: u64,
}

fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixIndex {
    pub fn new(page_size: usize) -> PrefixIndex {
        PrefixIndex { page_size, nodes: Vec::new(), free_ids: Vec::new(), roots: HashMap::new(), tick: 0 }
    }

    fn node(&self, id: NodeId) -> &Node {
        self.nodes[id].as_ref().expect("live node id")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[id].as_mut().expect("live node id")
    }

    fn add(&mut self, node: Node) -> NodeId {
        match self.free_ids.pop() {
            Some(id) => {
                self.nodes[id] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// Pages the index holds.
    #[cfg(test)]
    pub fn pages(&self) -> usize {
        self.nodes.iter().flatten().filter(|n| n.parent.is_some()).count()
    }

    /// The longest resident prefix of `prompt` under `salt`, and where the prompt diverged from a
    /// resident sequence if it did. Marks the matched path as used.
    pub fn lookup(&mut self, salt: &str, prompt: &[u32]) -> Match {
        self.tick += 1;
        let tick = self.tick;
        let mut m = Match::default();
        let Some(&root) = self.roots.get(salt) else { return m };
        let ps = self.page_size;
        let mut at = root;
        let mut i = 0;
        loop {
            let chunk = &prompt[i..(i + ps).min(prompt.len())];
            if chunk.is_empty() {
                return m;
            }
            // The child sharing most tokens with this chunk (the most recent one on ties).
            let best = self.node(at).children.iter().map(|&c| (lcp(&self.node(c).tokens, chunk), self.node(c).last_use, c)).max();
            let Some((l, _, child)) = best else { return m };
            let (page, len) = (self.node(child).page, self.node(child).tokens.len());
            if l == ps && len == ps {
                m.full_pages.push(page);
                self.node_mut(child).last_use = tick;
                at = child;
                i += ps;
                continue;
            }
            if l > 0 {
                m.partial = Some((page, l));
                self.node_mut(child).last_use = tick;
            }
            if l < chunk.len().min(len) {
                m.divergence = Some(Divergence { token: i + l, resident: self.resident_from(child, l) });
            }
            return m;
        }
    }

    /// The resident tokens from position `l` of node `id` on, following the most recent children.
    fn resident_from(&self, id: NodeId, l: usize) -> Vec<u32> {
        let mut out: Vec<u32> = self.node(id).tokens[l..].iter().copied().take(RESIDENT_TAIL).collect();
        let mut at = id;
        while out.len() < RESIDENT_TAIL {
            let Some(&next) = self.node(at).children.iter().max_by_key(|&&c| self.node(c).last_use) else { break };
            let room = RESIDENT_TAIL - out.len();
            out.extend(self.node(next).tokens.iter().take(room));
            at = next;
        }
        out
    }

    /// Indexes the first `tokens.len()` positions of a sequence whose pages are `pages` (the
    /// caller's sequence holds them; the index takes its own reference on each page it keeps).
    /// Pages whose tokens are already indexed keep the indexed copy.
    pub fn insert(&mut self, pool: &mut PagePool, salt: &str, tokens: &[u32], pages: &[u32]) -> Result<()> {
        let ps = self.page_size;
        if tokens.len().div_ceil(ps) > pages.len() {
            return Err(Error::InvalidArgument(format!("indexing {} tokens with {} pages of {ps}", tokens.len(), pages.len())));
        }
        self.tick += 1;
        let tick = self.tick;
        let root = match self.roots.get(salt) {
            Some(&r) => r,
            None => {
                let r = self.add(Node { parent: None, tokens: Vec::new(), page: u32::MAX, children: Vec::new(), last_use: tick, salt: salt.to_string() });
                self.roots.insert(salt.to_string(), r);
                r
            }
        };
        let mut at = root;
        for (chunk, &page) in tokens.chunks(ps).zip(pages) {
            let children = self.node(at).children.clone();
            if let Some(&same) = children.iter().find(|&&c| self.node(c).tokens == chunk) {
                self.node_mut(same).last_use = tick;
                at = same;
                continue;
            }
            if chunk.len() < ps {
                // A partial page already covered by a sibling (full or longer partial) adds nothing.
                if let Some(&cover) = children.iter().find(|&&c| self.node(c).tokens.starts_with(chunk)) {
                    self.node_mut(cover).last_use = tick;
                    return Ok(());
                }
            }
            // Shorter partial siblings that this page extends are superseded (partial nodes are leaves).
            for &c in &children {
                let n = self.node(c);
                if n.tokens.len() < ps && chunk.len() > n.tokens.len() && chunk.starts_with(&n.tokens) {
                    self.remove_leaf(pool, c)?;
                }
            }
            pool.retain(page)?;
            let id = self.add(Node { parent: Some(at), tokens: chunk.to_vec(), page, children: Vec::new(), last_use: tick, salt: String::new() });
            self.node_mut(at).children.push(id);
            at = id;
        }
        Ok(())
    }

    /// Removes a leaf node and releases its page; an emptied root goes too.
    fn remove_leaf(&mut self, pool: &mut PagePool, id: NodeId) -> Result<()> {
        let node = self.nodes[id].take().ok_or_else(|| Error::CacheCorrupt(format!("prefix node {id} removed twice")))?;
        if !node.children.is_empty() {
            return Err(Error::CacheCorrupt(format!("prefix node {id} removed with {} children", node.children.len())));
        }
        self.free_ids.push(id);
        if let Some(parent) = node.parent {
            self.node_mut(parent).children.retain(|&c| c != id);
            let p = self.node(parent);
            if p.parent.is_none() && p.children.is_empty() {
                let salt = p.salt.clone();
                self.nodes[parent] = None;
                self.free_ids.push(parent);
                self.roots.remove(&salt);
            }
            pool.release(node.page)?;
        }
        Ok(())
    }

    /// Pages that eviction could free now: those only the index holds.
    pub fn evictable(&self, pool: &PagePool) -> usize {
        self.nodes.iter().flatten().filter(|n| n.parent.is_some() && pool.refs(n.page) == 1).count()
    }

    /// Frees at least `need` pages by evicting least recently used leaves that no running sequence
    /// holds (leaf-first: a parent becomes a candidate once its children are gone). Returns the
    /// pages freed, which is less than `need` only when nothing more can go.
    pub fn evict(&mut self, pool: &mut PagePool, need: usize) -> Result<usize> {
        let evictable = |n: &Node, pool: &PagePool| n.parent.is_some() && n.children.is_empty() && pool.refs(n.page) == 1;
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(id, n)| n.as_ref().filter(|n| evictable(n, pool)).map(|n| Reverse((n.last_use, id))))
            .collect();
        let mut freed = 0;
        while freed < need {
            let Some(Reverse((_, id))) = heap.pop() else { break };
            let parent = self.node(id).parent;
            self.remove_leaf(pool, id)?;
            freed += 1;
            if let Some(p) = parent.and_then(|p| self.nodes[p].as_ref().map(|n| (p, n))) {
                if evictable(p.1, pool) {
                    heap.push(Reverse((p.1.last_use, p.0)));
                }
            }
        }
        Ok(freed)
    }

    /// Drops every indexed prefix, releasing the index's references.
    pub fn clear(&mut self, pool: &mut PagePool) -> Result<()> {
        let mut first_err = Ok(());
        for n in self.nodes.drain(..).flatten() {
            if n.parent.is_some() {
                let r = pool.release(n.page);
                if first_err.is_ok() {
                    first_err = r;
                }
            }
        }
        self.free_ids.clear();
        self.roots.clear();
        first_err
    }

    /// Adds one to `holders[page]` for each page the index holds (for [`PagePool::audit`]).
    pub fn count_holders(&self, holders: &mut [u32]) {
        for n in self.nodes.iter().flatten().filter(|n| n.parent.is_some()) {
            if let Some(h) = holders.get_mut(n.page as usize) {
                *h += 1;
            }
        }
    }

    /// The tree's leaves (one per resident prefix), most recently used first, each with its salt
    /// and its nodes from the root's first child down to the leaf.
    fn leaf_chains(&self) -> Vec<(&Node, &str, Vec<&Node>)> {
        let mut out: Vec<(&Node, &str, Vec<&Node>)> = self
            .nodes
            .iter()
            .flatten()
            .filter(|n| n.parent.is_some() && n.children.is_empty())
            .map(|leaf| {
                let (mut chain, mut salt, mut at) = (Vec::new(), "", Some(leaf));
                while let Some(n) = at {
                    match n.parent {
                        Some(p) => {
                            chain.push(n);
                            at = Some(self.node(p));
                        }
                        None => {
                            salt = n.salt.as_str();
                            at = None;
                        }
                    }
                }
                chain.reverse();
                (leaf, salt, chain)
            })
            .collect();
        out.sort_by_key(|(leaf, _, _)| Reverse(leaf.last_use));
        out
    }

    /// Every resident prefix in full (salt, tokens and pages from the root to a leaf), most
    /// recently used first: what a saved cache holds.
    pub fn paths(&self) -> Vec<(String, Vec<u32>, Vec<u32>)> {
        self.leaf_chains()
            .into_iter()
            .map(|(_, salt, chain)| {
                let tokens = chain.iter().flat_map(|n| n.tokens.iter().copied()).collect();
                (salt.to_string(), tokens, chain.iter().map(|n| n.page).collect())
            })
            .collect()
    }

    /// The resident prefixes (the tree's leaves), most recently used first.
    pub fn residents(&self) -> Vec<Resident> {
        self.leaf_chains()
            .into_iter()
            .map(|(leaf, salt, chain)| Resident {
                salt: salt.to_string(),
                tokens: chain.iter().map(|n| n.tokens.len()).sum(),
                pages: chain.len(),
                last_use: leaf.last_use,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    const PS: usize = 4;

    /// A sequence of `tokens`, as the engine would hold it: freshly allocated pages.
    fn alloc(pool: &mut PagePool, tokens: usize) -> Vec<u32> {
        (0..tokens.div_ceil(PS)).map(|_| pool.alloc().unwrap()).collect()
    }

    fn drop_seq(pool: &mut PagePool, pages: &[u32]) {
        for &p in pages {
            pool.release(p).unwrap();
        }
    }

    fn audit(idx: &PrefixIndex, pool: &PagePool) {
        let mut h = vec![0; pool.total()];
        idx.count_holders(&mut h);
        pool.audit(&h).unwrap();
    }

    #[test]
    fn match_shares_full_pages_and_copies_the_partial_one() {
        let mut pool = PagePool::new(32);
        let mut idx = PrefixIndex::new(PS);
        let a: Vec<u32> = (0..10).collect();
        let pages = alloc(&mut pool, a.len());
        idx.insert(&mut pool, "", &a, &pages).unwrap();
        drop_seq(&mut pool, &pages);
        assert_eq!(pool.used(), 3);
        // Extends a: every resident token matches, the partial last page is copied.
        let b: Vec<u32> = (0..14).collect();
        let m = idx.lookup("", &b);
        assert_eq!((m.full_pages.clone(), m.partial, m.divergence.clone()), (pages[..2].to_vec(), Some((pages[2], 2)), None));
        // Diverges inside page 1: reported with the resident tokens that follow.
        let mut c = a.clone();
        c[6] = 99;
        let m = idx.lookup("", &c);
        assert_eq!(m.tokens(PS), 6);
        assert_eq!(m.partial, Some((pages[1], 2)));
        assert_eq!(m.divergence, Some(Divergence { token: 6, resident: vec![6, 7, 8, 9] }));
        // Another salt sees nothing.
        assert_eq!(idx.lookup("other", &a), Match::default());
        // A prefix of a resident sequence is a hit, not a divergence.
        let m = idx.lookup("", &a[..5]);
        assert_eq!((m.tokens(PS), m.divergence), (5, None));
        audit(&idx, &pool);
    }

    #[test]
    fn limit_turns_a_full_page_into_a_partial_one() {
        let mut m = Match { full_pages: vec![7, 8], partial: None, divergence: None };
        m.limit(7, PS);
        assert_eq!((m.full_pages.clone(), m.partial), (vec![7], Some((8, 3))));
        m.limit(4, PS);
        assert_eq!((m.full_pages, m.partial), (vec![7], None));
    }

    #[test]
    fn eviction_is_leaf_first_lru_and_spares_held_pages() {
        let mut pool = PagePool::new(16);
        let mut idx = PrefixIndex::new(PS);
        let a: Vec<u32> = (0..8).collect();
        let b: Vec<u32> = (0..4).chain(50..54).collect();
        for s in [&a, &b] {
            let p = alloc(&mut pool, 8);
            idx.insert(&mut pool, "", s, &p).unwrap();
            drop_seq(&mut pool, &p);
        }
        assert_eq!(idx.pages(), 3, "the shared first page is indexed once");
        idx.lookup("", &b); // b is now the most recent
        // A running sequence holds a's pages: they cannot go.
        let m = idx.lookup("", &a);
        for &p in &m.full_pages {
            pool.retain(p).unwrap();
        }
        assert_eq!(idx.evictable(&pool), 1);
        assert_eq!(idx.evict(&mut pool, 5).unwrap(), 1, "only b's leaf can go");
        assert_eq!(idx.lookup("", &b).tokens(PS), 4);
        drop_seq(&mut pool, &m.full_pages);
        assert_eq!(idx.evict(&mut pool, 5).unwrap(), 2, "then a's leaf, then the shared parent");
        assert_eq!((pool.used(), idx.pages()), (0, 0));
        audit(&idx, &pool);
    }

    /// Random sequences over a small alphabet (so that they share prefixes): the match is always the
    /// longest common prefix with some inserted sequence, and the page counts balance.
    #[test]
    fn random_inserts_match_the_longest_common_prefix() {
        let mut rng = Rng(42);
        let mut pool = PagePool::new(4096);
        let mut idx = PrefixIndex::new(PS);
        let mut inserted: Vec<(String, Vec<u32>)> = Vec::new();
        for _ in 0..400 {
            let salt = if rng.next_u64().is_multiple_of(4) { "s" } else { "" }.to_string();
            let base = inserted.get((rng.next_u64() as usize) % inserted.len().max(1)).map(|x| x.1.clone()).unwrap_or_default();
            let keep = (rng.next_u64() as usize) % (base.len() + 1);
            let mut q: Vec<u32> = base[..keep].to_vec();
            let extra = 1 + (rng.next_u64() % 13) as usize;
            q.extend((0..extra).map(|_| (rng.next_u64() % 3) as u32));
            let want = inserted.iter().filter(|(s, _)| *s == salt).map(|(_, x)| lcp(x, &q)).max().unwrap_or(0);
            let m = idx.lookup(&salt, &q);
            assert_eq!(m.tokens(PS), want, "match of {q:?}");
            if let Some(d) = &m.divergence {
                assert_eq!(d.token, want);
                assert!(!d.resident.is_empty() && d.resident[0] != q[want]);
            }
            let pages = alloc(&mut pool, q.len());
            idx.insert(&mut pool, &salt, &q, &pages).unwrap();
            drop_seq(&mut pool, &pages);
            inserted.push((salt, q));
            audit(&idx, &pool);
        }
        let used = pool.used();
        assert_eq!(used, idx.pages());
        idx.clear(&mut pool).unwrap();
        assert_eq!(pool.used(), 0, "no leak after clearing");
        audit(&idx, &pool);
    }
}
