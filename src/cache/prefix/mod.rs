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

use crate::cache::kv::PagePool;
use crate::error::{Error, Result};

type NodeId = usize;

#[derive(Clone, Debug)]
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
#[derive(Clone, Debug)]
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
    /// Pages whose tokens are already indexed keep the indexed copy. Nothing is indexed for an
    /// empty sequence (a request aborted before its prefill): no root is made for it.
    pub fn insert(&mut self, pool: &mut PagePool, salt: &str, tokens: &[u32], pages: &[u32]) -> Result<()> {
        self.insert_path(pool, salt, tokens, pages)?;
        self.debug_check(pool)
    }

    fn insert_path(&mut self, pool: &mut PagePool, salt: &str, tokens: &[u32], pages: &[u32]) -> Result<()> {
        let ps = self.page_size;
        if tokens.len().div_ceil(ps) > pages.len() {
            return Err(Error::InvalidArgument(format!("indexing {} tokens with {} pages of {ps}", tokens.len(), pages.len())));
        }
        if tokens.is_empty() {
            return Ok(());
        }
        self.tick += 1;
        let tick = self.tick;
        let root = match self.roots.get(salt) {
            Some(&r) => r,
            None => {
                let r = self.add(Node {
                    parent: None,
                    tokens: Vec::new(),
                    page: u32::MAX,
                    children: Vec::new(),
                    last_use: tick,
                    salt: salt.to_string(),
                });
                self.roots.insert(salt.to_string(), r);
                r
            }
        };
        // The root stays while the insert runs, even when a superseded partial page was its only
        // child: `remove_leaf` never removes a root, and every path below adds at least one node
        // under it (or finds one there), so it is never left empty.
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
                // The most recently used one, as a lookup would pick it.
                let cover =
                    children.iter().copied().filter(|&c| self.node(c).tokens.starts_with(chunk)).max_by_key(|&c| self.node(c).last_use);
                if let Some(cover) = cover {
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
            let id = self.add(Node {
                parent: Some(at),
                tokens: chunk.to_vec(),
                page,
                children: Vec::new(),
                last_use: tick,
                salt: String::new(),
            });
            self.node_mut(at).children.push(id);
            at = id;
        }
        Ok(())
    }

    /// [`Self::insert`] of several sequences `(salt, tokens, pages)`, in order, all or nothing: on
    /// an error the index and the pool are as they were before the call.
    pub fn insert_all<'a>(&mut self, pool: &mut PagePool, paths: impl IntoIterator<Item = (&'a str, &'a [u32], &'a [u32])>) -> Result<()> {
        let before = (self.clone(), pool.clone());
        for (salt, tokens, pages) in paths {
            if let Err(e) = self.insert(pool, salt, tokens, pages) {
                (*self, *pool) = before;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes a leaf node below a root and releases its page. Its parent stays, even a root left
    /// without children: the caller decides ([`Self::prune_root`]).
    fn remove_leaf(&mut self, pool: &mut PagePool, id: NodeId) -> Result<()> {
        match self.nodes.get(id) {
            Some(Some(n)) if n.parent.is_some() && n.children.is_empty() => {}
            Some(Some(n)) => {
                return Err(Error::CacheCorrupt(format!(
                    "prefix node {id} removed as a leaf with {} children (root: {})",
                    n.children.len(),
                    n.parent.is_none()
                )))
            }
            _ => return Err(Error::CacheCorrupt(format!("prefix node {id} removed twice"))),
        }
        let node = self.nodes[id].take().ok_or_else(|| Error::CacheCorrupt(format!("prefix node {id} removed twice")))?;
        self.free_ids.push(id);
        if let Some(parent) = node.parent {
            self.node_mut(parent).children.retain(|&c| c != id);
        }
        pool.release(node.page)
    }

    /// Removes root `id` if nothing is left below it, so that salts seen once do not grow the
    /// index without bound.
    fn prune_root(&mut self, id: NodeId) {
        let Some(Some(n)) = self.nodes.get(id) else { return };
        if n.parent.is_none() && n.children.is_empty() {
            let salt = n.salt.clone();
            self.nodes[id] = None;
            self.free_ids.push(id);
            self.roots.remove(&salt);
        }
    }

    /// Pages that eviction could free now: those only the index holds.
    pub fn evictable(&self, pool: &PagePool) -> usize {
        self.nodes.iter().flatten().filter(|n| n.parent.is_some() && pool.refs(n.page) == 1).count()
    }

    /// Frees at least `need` pages by evicting least recently used leaves that no running sequence
    /// holds (leaf-first: a parent becomes a candidate once its children are gone). Returns the
    /// pages freed, which is less than `need` only when nothing more can go.
    pub fn evict(&mut self, pool: &mut PagePool, need: usize) -> Result<usize> {
        let freed = self.evict_leaves(pool, need)?;
        self.debug_check(pool)?;
        Ok(freed)
    }

    fn evict_leaves(&mut self, pool: &mut PagePool, need: usize) -> Result<usize> {
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
            if let Some(p) = parent {
                let n = self.node(p);
                if n.parent.is_none() {
                    self.prune_root(p);
                } else if evictable(n, pool) {
                    heap.push(Reverse((n.last_use, p)));
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

    /// Checks the index's invariants, `Err(CacheCorrupt)` naming the first one broken:
    /// - every root in `roots` is live, a root, and under its own salt; no root is empty;
    /// - every live node is reachable from exactly one root, once (so there is no cycle), and
    ///   parent and child links agree;
    /// - a node below a root holds 1..=`page_size` tokens, a partial one is a leaf, and no
    ///   sibling's tokens equal another's or are a partial prefix of another's;
    /// - the free ids are exactly the empty slots;
    /// - each page is held by one node, and the pool counts at least one holder for it (exact
    ///   counts, when no sequence runs, are [`PagePool::audit`]'s, with [`Self::count_holders`]).
    ///
    /// O(nodes): debug builds run it after every operation that changes the index.
    pub fn check(&self, pool: &PagePool) -> Result<()> {
        let bad = |m: String| Err(Error::CacheCorrupt(format!("prefix index: {m}")));
        let ps = self.page_size;
        let mut seen = vec![false; self.nodes.len()];
        let mut pages = std::collections::HashSet::new();
        for (salt, &root) in &self.roots {
            let Some(Some(r)) = self.nodes.get(root) else { return bad(format!("root {root} of salt {salt:?} is not live")) };
            if r.parent.is_some() || r.salt != *salt {
                return bad(format!("root {root} of salt {salt:?} has a parent or another salt ({:?})", r.salt));
            }
            if r.children.is_empty() {
                return bad(format!("root {root} of salt {salt:?} is empty"));
            }
            let mut stack = vec![root];
            while let Some(id) = stack.pop() {
                if std::mem::replace(&mut seen[id], true) {
                    return bad(format!("node {id} is reached twice (a cycle, or a child of two parents)"));
                }
                let n = self.node(id);
                if id != root {
                    if n.tokens.is_empty() || n.tokens.len() > ps {
                        return bad(format!("node {id} holds {} tokens (pages of {ps})", n.tokens.len()));
                    }
                    if n.tokens.len() < ps && !n.children.is_empty() {
                        return bad(format!("partial node {id} has children"));
                    }
                    if !pages.insert(n.page) {
                        return bad(format!("page {} is held by two nodes", n.page));
                    }
                    if pool.refs(n.page) == 0 {
                        return bad(format!("node {id}'s page {} is free in the pool", n.page));
                    }
                }
                for (i, &c) in n.children.iter().enumerate() {
                    let Some(Some(child)) = self.nodes.get(c) else { return bad(format!("child {c} of node {id} is not live")) };
                    if child.parent != Some(id) {
                        return bad(format!("child {c} of node {id} names {:?} as its parent", child.parent));
                    }
                    for &o in &n.children[i + 1..] {
                        let Some(Some(other)) = self.nodes.get(o) else { continue };
                        let (a, b) = (&child.tokens, &other.tokens);
                        if a == b || (a.len() < ps && b.starts_with(a)) || (b.len() < ps && a.starts_with(b)) {
                            return bad(format!("siblings {c} and {o} of node {id} overlap"));
                        }
                    }
                    stack.push(c);
                }
            }
        }
        if let Some(id) = (0..self.nodes.len()).find(|&i| self.nodes[i].is_some() && !seen[i]) {
            return bad(format!("node {id} is live but reachable from no root"));
        }
        let mut free = self.free_ids.clone();
        free.sort_unstable();
        let empty: Vec<NodeId> = (0..self.nodes.len()).filter(|&i| self.nodes[i].is_none()).collect();
        if free != empty {
            return bad(format!("free ids {free:?} are not the empty slots {empty:?}"));
        }
        Ok(())
    }

    /// [`Self::check`] in debug builds, after each operation that changes the index.
    fn debug_check(&self, pool: &PagePool) -> Result<()> {
        if cfg!(debug_assertions) {
            self.check(pool)
        } else {
            Ok(())
        }
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
mod tests;
