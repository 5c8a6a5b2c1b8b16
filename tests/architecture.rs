//! docs/ARCHITECTURE.md's rows agree with the code: every file of `src/` is on a row, and every
//! `crate::…` or `super::…` path a file names (outside comments and its tests) leads to a file on
//! a lower row, its own entry, a sibling on its row in the same folder, or its folder's `mod.rs`
//! (a module and its children use each other). So, modules and their children aside, the graph has
//! no circle, and the diagram is the graph.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;

/// A row's entries: `dir/`, `file.rs`, or `dir/{a,b/,c}` (files a.rs, c.rs and folder b/, one entry).
fn entries(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for tok in line.split_whitespace() {
        if !(tok.ends_with(".rs") || tok.ends_with('/') || tok.ends_with('}')) || tok.starts_with('(') {
            continue;
        }
        match tok.split_once('{') {
            Some((dir, list)) => out.push(
                list.trim_end_matches(".rs")
                    .trim_end_matches('}')
                    .split(',')
                    .map(|p| if p.ends_with('/') { format!("{dir}{p}") } else { format!("{dir}{p}.rs") })
                    .collect(),
            ),
            None => out.push(vec![tok.to_string()]),
        }
    }
    out
}

/// The diagram's rows: for each entry, its row number and index.
fn rows() -> Vec<(usize, Vec<String>)> {
    let doc = std::fs::read_to_string(common::root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let mut out = Vec::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix('L') else { continue };
        let Some((n, list)) = rest.split_once(' ') else { continue };
        let Ok(row) = n.parse::<usize>() else { continue };
        out.extend(entries(list).into_iter().map(|e| (row, e)));
    }
    assert!(out.len() > 10, "no rows found in docs/ARCHITECTURE.md's diagram");
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src/") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of `src/<rel>`: `engine/sample/mod.rs` → `engine/sample`, `ops/topk.rs` → `ops/topk`.
fn module_of(rel: &str) -> String {
    let m = rel.trim_end_matches(".rs");
    m.strip_suffix("/mod").unwrap_or(m).to_string()
}

/// The file that defines what a path names: the longest prefix of `segs` that is a file or a
/// folder of `src/`, then, when the next segment is re-exported there (`pub use child::{Item}`),
/// the file it comes from; lib.rs's re-exports are followed too (`crate::Error` is error.rs).
fn file_of(src: &Path, segs: &[&str]) -> Option<String> {
    file_of_depth(src, segs, 0)
}

fn file_of_depth(src: &Path, segs: &[&str], depth: usize) -> Option<String> {
    let mut segs: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
    // An old flat path lib.rs keeps (`pub use cache::kv;`): where it points.
    if let Some(first) = segs.first() {
        if !src.join(format!("{first}.rs")).is_file() && !src.join(first).is_dir() {
            if let Some(mut to) = reexport(src, "lib.rs", first) {
                to.extend(segs.drain(1..));
                segs = to;
            }
        }
    }
    for n in (1..=segs.len()).rev() {
        let p = segs[..n].join("/");
        let file = if src.join(format!("{p}.rs")).is_file() {
            format!("{p}.rs")
        } else if src.join(&p).join("mod.rs").is_file() {
            format!("{p}/mod.rs")
        } else {
            continue;
        };
        if let (Some(item), true) = (segs.get(n), depth < 8) {
            if let Some(from) = reexport(src, &file, item) {
                let from: Vec<&str> = from.iter().map(String::as_str).collect();
                return file_of_depth(src, &from, depth + 1).or(Some(file));
            }
        }
        return Some(file);
    }
    None
}

/// Where `file` re-exports `item` from (`pub use detect::{Item}`, `pub use crate::ops::Item`,
/// `pub use a::b as item`), as a path from the crate root.
fn reexport(src: &Path, file: &str, item: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(src.join(file)).ok()?;
    let module: Vec<String> = module_of(file).split('/').filter(|m| !m.is_empty() && *m != "lib").map(String::from).collect();
    for line in text.lines() {
        let l = line.trim();
        let Some(body) = l.strip_prefix("pub use ").or_else(|| l.strip_prefix("pub(crate) use ")) else { continue };
        let body = body.trim_end_matches(';');
        let (base, names): (&str, Vec<&str>) = match body.split_once("::{") {
            Some((base, list)) => (base, list.trim_end_matches('}').split(',').map(str::trim).collect()),
            None => match body.rsplit_once("::") {
                Some((base, name)) => (base, vec![name]),
                None => continue,
            },
        };
        for name in names {
            let (orig, alias) = name.split_once(" as ").unwrap_or((name, name));
            if alias.trim() != item {
                continue;
            }
            let mut path: Vec<String> = match base.strip_prefix("crate::") {
                Some(b) => b.split("::").map(String::from).collect(),
                None if base == "crate" => Vec::new(),
                None => module.iter().cloned().chain(base.split("::").map(String::from)).collect(),
            };
            path.push(orig.trim().to_string());
            return Some(path);
        }
    }
    None
}

/// The segments of each path after `crate::` or `super::` in `code` (modules, then the item),
/// with `{a, b::C}` groups expanded (one level): `("crate", ["cache", "prefix", "Divergence"])`.
fn paths(code: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    for root in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(root) {
            let start = at + i;
            at = start + root.len();
            let before = code[..start].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // `super::super::` is read from its first `super::`
            }
            let rest = &code[at..];
            let mut prefix: Vec<String> = Vec::new();
            let mut s = rest;
            if root == "super::" {
                while let Some(r) = s.strip_prefix("super::") {
                    prefix.push("super".into());
                    s = r;
                }
            }
            let mut segs = prefix.clone();
            loop {
                let ident: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if ident.is_empty() {
                    if let Some(group) = s.strip_prefix('{') {
                        let body = &group[..group.find('}').unwrap_or(group.len())];
                        for item in body.split(',') {
                            let mut v = segs.clone();
                            v.extend(
                                item.trim()
                                    .split("::")
                                    .map(|p| p.trim().split(' ').next().unwrap_or("").to_string())
                                    .take_while(|p| !p.is_empty() && p != "self" && p.chars().all(|c| c.is_alphanumeric() || c == '_')),
                            );
                            out.push((if root == "crate::" { "crate" } else { "super" }, v));
                        }
                        segs.clear();
                    }
                    break;
                }
                s = &s[ident.len()..];
                segs.push(ident);
                match s.strip_prefix("::") {
                    Some(r) => s = r,
                    None => break,
                }
            }
            if !segs.is_empty() {
                out.push((if root == "crate::" { "crate" } else { "super" }, segs));
            }
        }
    }
    out
}

/// The code of a file as built outside tests: comment lines and a trailing `#[cfg(test)]` module dropped.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]") {
            match lines.peek().map(|n| n.trim()) {
                // `mod tests;`: its file (tests.rs) is skipped; the rest of this file is code.
                Some(n) if n.starts_with("mod ") && n.ends_with(';') => {
                    lines.next();
                    continue;
                }
                // An inline `mod tests { … }` ends the file's production code.
                Some(n) if n.starts_with("mod ") => break,
                _ => {}
            }
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(l.split(" // ").next().unwrap_or(l));
        out.push('\n');
    }
    out
}

#[test]
fn the_architecture_rows_match_the_module_graph() {
    let src = common::root().join("src");
    let rows = rows();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let rel = |p: &Path| p.strip_prefix(&src).expect("under src/").to_string_lossy().replace('\\', "/");
    // The entry (index into `rows`) of each file: an exact file, or the deepest folder holding it.
    let entry_of = |f: &str| -> Option<usize> {
        let exact = rows.iter().position(|(_, e)| e.iter().any(|p| p == f));
        exact.or_else(|| {
            rows.iter()
                .enumerate()
                .flat_map(|(i, (_, e))| e.iter().filter(|p| p.ends_with('/') && f.starts_with(p.as_str())).map(move |p| (p.len(), i)))
                .max()
                .map(|(_, i)| i)
        })
    };
    let mut problems = Vec::new();
    let mut edges = 0;
    let mut placed: BTreeMap<String, usize> = BTreeMap::new();
    for path in &files {
        let f = rel(path);
        let unlisted_ok = f == "lib.rs" || f == "error.rs" || (f.ends_with("/mod.rs") && entry_of(&f).is_none());
        if f.ends_with("/tests.rs") || unlisted_ok {
            continue;
        }
        let Some(me) = entry_of(&f) else {
            problems.push(format!("{f} is on no row of docs/ARCHITECTURE.md"));
            continue;
        };
        placed.insert(f.clone(), rows[me].0);
        let module = module_of(&f);
        let text = std::fs::read_to_string(path).expect("read a source file");
        for (root, segs) in paths(&production_code(&text)) {
            let mut full: Vec<String> = Vec::new();
            let mut segs = segs.as_slice();
            if root == "super" {
                let mut base: Vec<String> = module.split('/').map(String::from).collect();
                while segs.first().is_some_and(|s| s == "super") {
                    segs = &segs[1..];
                    base.pop();
                }
                base.pop();
                full.extend(base);
            }
            full.extend(segs.iter().cloned());
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            let Some(target) = file_of(&src, &refs) else { continue };
            if target == "error.rs" || target == f {
                continue;
            }
            edges += 1;
            let Some(them) = entry_of(&target) else {
                problems.push(format!("{f} uses {target} (crate::{}), which is on no row", refs.join("::")));
                continue;
            };
            let parent = |p: &str| p.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
            let same_row_sibling = rows[them].0 == rows[me].0 && parent(&target) == parent(&f);
            // A folder's mod.rs and the files in it use each other (the module and its children).
            let folder = |m: &str| m.strip_suffix("/mod.rs").map(|d| format!("{d}/"));
            let parent_and_child = folder(&target).is_some_and(|d| f.starts_with(&d)) || folder(&f).is_some_and(|d| target.starts_with(&d));
            if them != me && rows[them].0 >= rows[me].0 && !same_row_sibling && !parent_and_child {
                problems.push(format!("{f} (L{}) uses {target} (L{}) through {root}::{}", rows[me].0, rows[them].0, segs.join("::")));
            }
        }
    }
    assert!(edges > 50, "found only {edges} references: the path reader is broken");
    assert!(placed.len() > 30, "placed only {} files", placed.len());
    assert!(problems.is_empty(), "docs/ARCHITECTURE.md and the code disagree:\n{}", problems.join("\n"));
}

#[test]
fn the_path_reader_reads_groups_super_and_aliases() {
    let p = paths("use crate::{kv, cache::prefix::Divergence, Error};\nuse super::super::gguf::Gguf;\nx = crate::quant::supported();");
    let got: Vec<(&str, String)> = p.iter().map(|(r, s)| (*r, s.join("::"))).collect();
    assert_eq!(
        got,
        [
            ("crate", "kv".into()),
            ("crate", "cache::prefix::Divergence".into()),
            ("crate", "Error".into()),
            ("crate", "quant::supported".into()),
            ("super", "super::gguf::Gguf".into())
        ]
    );
    let src = common::root().join("src");
    assert_eq!(file_of(&src, &["quant", "supported"]).as_deref(), Some("model/quant.rs"));
    assert_eq!(file_of(&src, &["cache", "prefix", "Divergence"]).as_deref(), Some("cache/prefix/mod.rs"));
    assert_eq!(file_of(&src, &["Error"]).as_deref(), Some("error.rs"));
    // Re-exports are followed to the file that defines the item.
    assert_eq!(file_of(&src, &["lint", "canonical_json"]).as_deref(), Some("lint/detect.rs"));
    assert_eq!(file_of(&src, &["sample", "Top"]).as_deref(), Some("ops/topk.rs"));
    assert_eq!(file_of(&src, &["chat", "Message"]).as_deref(), Some("text/template.rs"));
    assert_eq!(file_of(&src, &["kv", "KvCache"]).as_deref(), Some("cache/kv.rs"));
    assert_eq!(file_of(&src, &["rng", "Rng"]).as_deref(), Some("engine/sample/rng.rs"));
    assert_eq!(production_code("use a;\n// crate::x\n#[cfg(test)]\nmod tests {\nuse crate::y;\n}"), "use a;\n");
    assert_eq!(production_code("#[cfg(test)]\nmod tests;\nuse b;\n"), "use b;\n");
}
