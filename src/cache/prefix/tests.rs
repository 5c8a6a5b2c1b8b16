//! The prefix index's tests: unit cases, and the model-based test against a plain reference.

use super::*;
use crate::engine::sample::rng::Rng;

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

/// The plain reference the index is checked against: per salt, the resident page prefixes
/// (each a prefix of an indexed sequence that ends at a page's end, or at a partial last
/// page's end) with their last use. No node ids, no links: nothing to lose or cycle.
#[derive(Clone, Default)]
struct Reference {
    keys: HashMap<(String, Vec<u32>), u64>,
    clock: u64,
}

impl Reference {
    /// Keys of `salt` one page below the prefix `tokens[..s]` (the tree's children there).
    fn children(&self, salt: &str, tokens: &[u32], s: usize) -> Vec<Vec<u32>> {
        self.keys
            .keys()
            .filter(|(k_salt, k)| k_salt == salt && k.len() > s && k.len() <= s + PS && k[..s] == tokens[..s])
            .map(|(_, k)| k.clone())
            .collect()
    }

    fn last_use(&self, salt: &str, k: &[u32]) -> u64 {
        self.keys[&(salt.to_string(), k.to_vec())]
    }

    fn touch(&mut self, salt: &str, k: &[u32]) {
        let clock = self.clock;
        *self.keys.get_mut(&(salt.to_string(), k.to_vec())).expect("a resident key") = clock;
    }

    fn insert(&mut self, salt: &str, tokens: &[u32]) {
        if tokens.is_empty() {
            return;
        }
        self.clock += 1;
        let mut s = 0;
        while s < tokens.len() {
            let e = (s + PS).min(tokens.len());
            let key = &tokens[..e];
            if self.keys.contains_key(&(salt.to_string(), key.to_vec())) {
                self.touch(salt, key);
                s = e;
                continue;
            }
            let siblings = self.children(salt, tokens, s);
            if e - s < PS {
                if let Some(cover) = siblings.iter().filter(|k| k.starts_with(key)).max_by_key(|k| self.last_use(salt, k)) {
                    let cover = cover.clone();
                    self.touch(salt, &cover);
                    return;
                }
            }
            for k in siblings.iter().filter(|k| k.len() - s < PS && k.len() < e && key.starts_with(k)) {
                self.keys.remove(&(salt.to_string(), k.clone()));
            }
            self.keys.insert((salt.to_string(), key.to_vec()), self.clock);
            s = e;
        }
    }

    /// Tokens matched, and whether the prompt diverges from something resident there.
    fn lookup(&mut self, salt: &str, prompt: &[u32]) -> (usize, bool) {
        self.clock += 1;
        let mut f = 0;
        while f + PS <= prompt.len() && self.keys.contains_key(&(salt.to_string(), prompt[..f + PS].to_vec())) {
            self.touch(salt, &prompt[..f + PS]);
            f += PS;
        }
        let chunk = &prompt[f..(f + PS).min(prompt.len())];
        let best = self.children(salt, prompt, f).into_iter().map(|k| (lcp(&k[f..], chunk), self.last_use(salt, &k), k)).max();
        let matched = match best {
            Some((l, _, k)) if l > 0 && !chunk.is_empty() => {
                self.touch(salt, &k);
                f + l
            }
            _ => f,
        };
        let diverges =
            prompt.len() > matched && self.keys.keys().any(|(k_salt, k)| k_salt == salt && k.len() > matched && lcp(k, prompt) == matched);
        (matched, diverges)
    }

    fn is_leaf(&self, salt: &str, k: &[u32]) -> bool {
        !self.keys.keys().any(|(k_salt, o)| k_salt == salt && o.len() > k.len() && o.starts_with(k))
    }

    /// Evicts up to `need` unheld leaves, least recently used first; returns how many.
    fn evict(&mut self, need: usize, held: &[(String, Vec<u32>)]) -> usize {
        let mut freed = 0;
        while freed < need {
            let victim = self
                .keys
                .iter()
                .filter(|((salt, k), _)| self.is_leaf(salt, k) && !held.iter().any(|(hs, hk)| hs == salt && hk == k))
                .min_by_key(|(_, &t)| t)
                .map(|(key, _)| key.clone());
            let Some(victim) = victim else { break };
            self.keys.remove(&victim);
            freed += 1;
        }
        freed
    }

    /// The resident sequences (the leaves), most recently used first.
    fn leaves(&self) -> Vec<(String, Vec<u32>)> {
        let mut out: Vec<(u64, String, Vec<u32>)> =
            self.keys.iter().filter(|((salt, k), _)| self.is_leaf(salt, k)).map(|((s, k), &t)| (t, s.clone(), k.clone())).collect();
        out.sort_by_key(|e| std::cmp::Reverse(e.0));
        out.into_iter().map(|(_, s, k)| (s, k)).collect()
    }
}

fn random(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(3) as u32).collect()
}

/// A running sequence holding the full pages a lookup matched: the pages, and the keys they
/// stand for in the reference (forgotten there once the index is cleared or restored).
struct Held {
    pages: Vec<u32>,
    keys: Vec<(String, Vec<u32>)>,
}

/// What a page holds: the K/V of this salt's tokens up to the page's end.
type Labels = HashMap<u32, (String, Vec<u32>)>;

/// Every check that holds after any operation: the invariants, exact page accounting, the
/// resident prefixes and their pages against the reference.
fn check_against(idx: &PrefixIndex, pool: &PagePool, reference: &Reference, held: &[Held], labels: &Labels, step: &str) {
    if let Err(e) = idx.check(pool) {
        panic!("after {step}: {e}");
    }
    let mut h = vec![0; pool.total()];
    idx.count_holders(&mut h);
    for s in held {
        for &p in &s.pages {
            h[p as usize] += 1;
        }
    }
    pool.audit(&h).unwrap_or_else(|e| panic!("after {step}: {e}"));
    let want = reference.leaves();
    let paths = idx.paths();
    let got: Vec<(String, Vec<u32>)> = paths.iter().map(|(s, t, _)| (s.clone(), t.clone())).collect();
    assert_eq!(got, want, "after {step}: the resident sequences, most recent first");
    for (salt, tokens, pages) in &paths {
        assert_eq!(pages.len(), tokens.len().div_ceil(PS), "after {step}");
        for (i, p) in pages.iter().enumerate() {
            let end = ((i + 1) * PS).min(tokens.len());
            assert_eq!(labels.get(p), Some(&(salt.clone(), tokens[..end].to_vec())), "after {step}: page {p} of {salt:?} {tokens:?}");
        }
    }
    let residents = idx.residents();
    let summary: Vec<(String, usize, usize)> = residents.iter().map(|r| (r.salt.clone(), r.tokens, r.pages)).collect();
    let expect: Vec<(String, usize, usize)> = want.iter().map(|(s, t)| (s.clone(), t.len(), t.len().div_ceil(PS))).collect();
    assert_eq!(summary, expect, "after {step}: residents()");
    let salts: std::collections::HashSet<&String> = reference.keys.keys().map(|(s, _)| s).collect();
    assert_eq!(idx.roots.len(), salts.len(), "after {step}: one root per salt with something resident");
    let unheld = reference.keys.keys().filter(|k| !held.iter().any(|s| s.keys.contains(k))).count();
    assert_eq!(idx.evictable(pool), unheld, "after {step}: evictable pages");
}

/// A lookup, checked against the reference: the longest resident prefix, the divergence, and
/// pages holding exactly the matched tokens' K/V.
fn checked_lookup(idx: &mut PrefixIndex, reference: &mut Reference, labels: &Labels, salt: &str, prompt: &[u32], step: &str) -> Match {
    let m = idx.lookup(salt, prompt);
    let (matched, diverges) = reference.lookup(salt, prompt);
    assert_eq!(m.tokens(PS), matched, "{step}: match of {prompt:?} under {salt:?}");
    for (i, p) in m.full_pages.iter().enumerate() {
        assert_eq!(labels.get(p), Some(&(salt.to_string(), prompt[..(i + 1) * PS].to_vec())), "{step}: full page {i}");
    }
    if let Some((p, n)) = m.partial {
        let upto = m.full_pages.len() * PS + n;
        let (s, t) = &labels[&p];
        assert!(s == salt && t.len() >= upto && t[..upto] == prompt[..upto], "{step}: partial page {p} holds {t:?}");
    }
    assert_eq!(m.divergence.is_some(), diverges, "{step}: divergence of {prompt:?}: {:?}", m.divergence);
    if let Some(d) = &m.divergence {
        assert_eq!(d.token, matched, "{step}");
        assert!(!d.resident.is_empty() && d.resident[0] != prompt[matched], "{step}: {d:?}");
        let spelled = reference.keys.keys().any(|(s, k)| {
            s == salt
                && k.len() >= matched + d.resident.len()
                && k[..matched] == prompt[..matched]
                && k[matched..matched + d.resident.len()] == d.resident[..]
        });
        assert!(spelled, "{step}: the resident tail {:?} is no resident sequence's", d.resident);
    }
    m
}

/// One request as the engine runs it: look up, share the matched full pages (possibly fewer,
/// as a request that must recompute its last token does), fresh pages for the rest, index,
/// end.
#[allow(clippy::too_many_arguments)] // the index, the pool, the reference and one request's inputs
fn request(
    idx: &mut PrefixIndex,
    pool: &mut PagePool,
    reference: &mut Reference,
    labels: &mut Labels,
    salt: &str,
    tokens: &[u32],
    limit: bool,
    step: &str,
) {
    let mut m = checked_lookup(idx, reference, labels, salt, tokens, step);
    if limit && !tokens.is_empty() {
        m.limit(tokens.len() - 1, PS);
    }
    let mut pages = m.full_pages.clone();
    for &p in &pages {
        pool.retain(p).unwrap();
    }
    while pages.len() < tokens.len().div_ceil(PS) {
        let p = pool.alloc().expect("the test pool is large enough");
        let end = ((pages.len() + 1) * PS).min(tokens.len());
        labels.insert(p, (salt.to_string(), tokens[..end].to_vec()));
        pages.push(p);
    }
    idx.insert(pool, salt, tokens, &pages).unwrap_or_else(|e| panic!("{step}: {e}"));
    reference.insert(salt, tokens);
    drop_seq(pool, &pages);
}

/// Random operations on the index and the reference side by side: requests (shorter than a
/// page, exactly a page, extensions, exact repeats, divergences, empty ones under new salts),
/// lookups, running sequences holding pages, evictions, clears, salts, and a save and
/// restore; after each one every check of `check_against`.
#[test]
fn the_index_agrees_with_a_plain_reference_under_random_operations() {
    for seed in 0..150u64 {
        let mut rng = Rng(seed);
        let mut pool = PagePool::new(1 << 14);
        let mut idx = PrefixIndex::new(PS);
        let mut reference = Reference::default();
        let mut held: Vec<Held> = Vec::new();
        let mut labels: Labels = HashMap::new();
        let mut fresh_salts = 0;
        for op in 0..250 {
            let salt = match rng.below(8) {
                0 => {
                    fresh_salts += 1;
                    format!("fresh{fresh_salts}")
                }
                1 | 2 => "a".to_string(),
                3 => "b".to_string(),
                _ => String::new(),
            };
            let leaves = reference.leaves();
            let mine: Vec<&Vec<u32>> = leaves.iter().filter(|(s, _)| *s == salt).map(|(_, t)| t).collect();
            let some_leaf = |rng: &mut Rng| if mine.is_empty() { Vec::new() } else { mine[rng.below(mine.len())].clone() };
            let choice = rng.below(100);
            let step = format!("seed {seed} op {op} ({choice})");
            match choice {
                0..=39 => {
                    let tokens = match rng.below(6) {
                        0 => {
                            let n = 1 + rng.below(PS - 1);
                            random(&mut rng, n)
                        }
                        1 => random(&mut rng, PS),
                        2 => {
                            let mut t = some_leaf(&mut rng);
                            let n = 1 + rng.below(2 * PS);
                            t.extend(random(&mut rng, n));
                            t
                        }
                        3 => {
                            let t = some_leaf(&mut rng);
                            let keep = if t.is_empty() { 0 } else { 1 + rng.below(t.len()) };
                            t[..keep].to_vec()
                        }
                        4 => {
                            let mut t = some_leaf(&mut rng);
                            t.truncate(rng.below(t.len() + 1));
                            let n = 1 + rng.below(3 * PS);
                            t.extend(random(&mut rng, n));
                            t
                        }
                        _ => Vec::new(), // aborted before its prefill
                    };
                    let limit = rng.below(2) == 0;
                    request(&mut idx, &mut pool, &mut reference, &mut labels, &salt, &tokens, limit, &step);
                }
                40..=59 => {
                    let mut q = some_leaf(&mut rng);
                    q.truncate(rng.below(q.len() + 1));
                    let n = rng.below(2 * PS);
                    q.extend(random(&mut rng, n));
                    if !q.is_empty() {
                        checked_lookup(&mut idx, &mut reference, &labels, &salt, &q, &step);
                    }
                }
                60..=69 => {
                    let q = some_leaf(&mut rng);
                    if !q.is_empty() {
                        let m = checked_lookup(&mut idx, &mut reference, &labels, &salt, &q, &step);
                        for &p in &m.full_pages {
                            pool.retain(p).unwrap();
                        }
                        let keys = (1..=m.full_pages.len()).map(|i| (salt.clone(), q[..i * PS].to_vec())).collect();
                        held.push(Held { pages: m.full_pages, keys });
                    }
                }
                70..=77 => {
                    if !held.is_empty() {
                        let s = held.swap_remove(rng.below(held.len()));
                        drop_seq(&mut pool, &s.pages);
                    }
                }
                78..=91 => {
                    let need = 1 + rng.below(6);
                    let keys: Vec<(String, Vec<u32>)> = held.iter().flat_map(|s| s.keys.iter().cloned()).collect();
                    let want = reference.evict(need, &keys);
                    assert_eq!(idx.evict(&mut pool, need).unwrap(), want, "{step}: pages evicted");
                }
                92..=93 => {
                    idx.clear(&mut pool).unwrap();
                    reference = Reference { clock: reference.clock, ..Reference::default() };
                    held.iter_mut().for_each(|s| s.keys.clear());
                }
                _ => {
                    // Save, forget, restore into fresh pages (least recent first, as
                    // Engine::restore_cache does); the same resident sequences come back.
                    let saved = idx.paths();
                    idx.clear(&mut pool).unwrap();
                    reference = Reference { clock: reference.clock, ..Reference::default() };
                    held.iter_mut().for_each(|s| s.keys.clear());
                    let old = labels.clone(); // the freed pages are allocated again below
                    let mut moved: HashMap<u32, u32> = HashMap::new();
                    let mut mine = Vec::new();
                    for (salt, tokens, pages) in saved.iter().rev() {
                        let new: Vec<u32> = pages
                            .iter()
                            .map(|&p| {
                                *moved.entry(p).or_insert_with(|| {
                                    let q = pool.alloc().unwrap();
                                    labels.insert(q, old[&p].clone());
                                    mine.push(q);
                                    q
                                })
                            })
                            .collect();
                        idx.insert(&mut pool, salt, tokens, &new).unwrap();
                        reference.insert(salt, tokens);
                    }
                    drop_seq(&mut pool, &mine);
                    let back: Vec<(String, Vec<u32>)> = idx.paths().into_iter().map(|(s, t, _)| (s, t)).collect();
                    let before: Vec<(String, Vec<u32>)> = saved.into_iter().map(|(s, t, _)| (s, t)).collect();
                    assert_eq!(back, before, "{step}: a restore gives back what was saved, in its order");
                }
            }
            check_against(&idx, &pool, &reference, &held, &labels, &step);
        }
        for s in held.drain(..) {
            drop_seq(&mut pool, &s.pages);
        }
        idx.clear(&mut pool).unwrap();
        assert_eq!(pool.used(), 0, "seed {seed}: no page leaks");
    }
}

/// The sequence from the report: a prompt shorter than a page, then the same prompt grown
/// past a page (its first page supersedes the partial one, the root's only child), then the
/// same again: the third finds it, and the index stays whole.
#[test]
fn a_partial_root_child_superseded_keeps_its_salt() {
    let mut pool = PagePool::new(64);
    let mut idx = PrefixIndex::new(PS);
    let mut reference = Reference::default();
    let mut labels = Labels::new();
    let short: Vec<u32> = (0..3).collect();
    let long: Vec<u32> = (0..7).collect();
    request(&mut idx, &mut pool, &mut reference, &mut labels, "", &short, false, "first");
    check_against(&idx, &pool, &reference, &[], &labels, "first");
    request(&mut idx, &mut pool, &mut reference, &mut labels, "", &long, true, "second");
    check_against(&idx, &pool, &reference, &[], &labels, "second");
    let m = checked_lookup(&mut idx, &mut reference, &labels, "", &long, "third");
    assert_eq!(m.tokens(PS), 7);
    assert_eq!(idx.evict(&mut pool, 10).unwrap(), 2, "both pages can go");
    assert!(idx.roots.is_empty(), "and the emptied root goes with them");
    check_against(&idx, &pool, &Reference::default(), &[], &labels, "evicted");
}

/// A request that ends before anything was computed leaves no root behind, whatever its salt.
#[test]
fn empty_requests_under_new_salts_leave_nothing() {
    let mut pool = PagePool::new(8);
    let mut idx = PrefixIndex::new(PS);
    for i in 0..100 {
        idx.insert(&mut pool, &format!("salt{i}"), &[], &[]).unwrap();
    }
    assert!(idx.roots.is_empty() && idx.nodes.is_empty(), "{} roots", idx.roots.len());
}

/// Several sequences indexed at once (a restore) are all indexed, or, when one fails, none:
/// the index and the pool are as they were.
#[test]
fn insert_all_is_all_or_nothing() {
    let mut pool = PagePool::new(32);
    let mut idx = PrefixIndex::new(PS);
    let a: Vec<u32> = (0..6).collect();
    let pa = alloc(&mut pool, a.len());
    idx.insert(&mut pool, "", &a, &pa).unwrap();
    drop_seq(&mut pool, &pa);
    let (paths, used) = (idx.paths(), pool.used());
    let b: Vec<u32> = (10..19).collect();
    let pb = alloc(&mut pool, b.len());
    let c: Vec<u32> = (20..25).collect();
    let mut pc = alloc(&mut pool, c.len());
    pool.release(pc[1]).unwrap(); // a page nobody holds: indexing it fails
    let err = idx.insert_all(&mut pool, [("", &b[..], &pb[..]), ("s", &c[..], &pc[..])]).unwrap_err();
    assert!(matches!(err, Error::CacheCorrupt(_)), "{err}");
    pool.retain(pc[0]).unwrap_or(()); // (no fault is kept: the pool is as it was)
    pool.release(pc[0]).unwrap();
    pc.remove(1);
    drop_seq(&mut pool, &pb);
    drop_seq(&mut pool, &pc);
    assert_eq!((idx.paths(), pool.used()), (paths, used), "nothing of the failed call stayed");
    pool.check().unwrap();
    idx.check(&pool).unwrap();
    audit(&idx, &pool);
}
