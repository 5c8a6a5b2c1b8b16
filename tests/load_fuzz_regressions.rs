//! The CPU side of loading a model (`preflight::check_model_cpu`, then a chat rendered and
//! tokenized with the result, as the `load_cpu` fuzz target drives it) on the fuzz regression
//! inputs: the load path's own corpus in tests/fuzz-regressions-load/ (each file with the result
//! it must give), the GGUF reader's corpus in tests/fuzz-regressions/, the `load_cpu` seed, and
//! hostile models built here. Every input must come back as `Ok` or a typed error, never a panic
//! or a hang. How the corpus was made: docs/FUZZING.md.
#![cfg(not(target_arch = "wasm32"))]

use std::path::Path;
use std::time::{Duration, Instant};

use hotprefix::gguf::Value;
use hotprefix::preflight::check_model_cpu;
use hotprefix::testmodel::{load_and_chat, tiny_gguf, tiny_gguf_with};
use hotprefix::Error;

/// What each file of tests/fuzz-regressions-load/ must give: `Ok(token count)` of the chat, or
/// `Err(part of the message)`.
const EXPECTED: &[(&str, Result<usize, &str>)] = &[];

/// The fuzz target's body (`load_and_chat`) catching panics, with its time.
fn run(bytes: &[u8]) -> (Result<hotprefix::Result<usize>, String>, Duration) {
    let start = Instant::now();
    let r = std::panic::catch_unwind(|| load_and_chat(bytes))
        .map_err(|p| p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default());
    (r, start.elapsed())
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(d) => d.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn every_load_regression_input_gives_its_expected_result() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions-load");
    let mut listed: Vec<String> = EXPECTED.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(files(&dir), listed, "every file in tests/fuzz-regressions-load/ needs a line in EXPECTED, and only those");
    let mut failures = Vec::new();
    for (name, expected) in EXPECTED {
        let (got, took) = run(&std::fs::read(dir.join(name)).unwrap());
        match (expected, &got) {
            (Ok(n), Ok(Ok(m))) if n == m => {}
            (Err(part), Ok(Err(e))) if e.to_string().contains(part) => {}
            _ => failures.push(format!("{name}: expected {expected:?}, got {got:?}")),
        }
        if took > Duration::from_secs(2) {
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_gguf_corpus_and_the_seed_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let gguf = root.join("tests/fuzz-regressions");
    let names = files(&gguf);
    assert!(names.len() >= 25, "{names:?}");
    for name in names {
        let (got, _) = run(&std::fs::read(gguf.join(&name)).unwrap());
        // None of them is a whole model: each is refused with a typed error.
        assert!(matches!(got, Ok(Err(_))), "{name}: {got:?}");
    }
    let (got, _) = run(&std::fs::read(root.join("fuzz/seeds_load_cpu/tiny_model.bin")).unwrap());
    assert!(matches!(got, Ok(Ok(n)) if n > 20), "{got:?}");
    assert_eq!(std::fs::read(root.join("fuzz/seeds_load_cpu/tiny_model.bin")).unwrap(), tiny_gguf(1), "the seed is the tiny model");
}

/// The tiny model with one metadata value replaced.
fn tiny_with(key: &str, value: Value) -> Vec<u8> {
    tiny_gguf_with(1, |m, _| drop(m.insert(key.to_string(), value)))
}

#[test]
fn a_hostile_model_fails_typed_and_fast() {
    let template = |s: &str| tiny_with("tokenizer.chat_template", Value::Str(s.into()));
    let cases = [
        (template("{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}"), "fuel"),
        (template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "recursion limit"),
        (template("{% for a in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}"), "exceeds"),
        (template("{{ raise_exception('no') }}"), "raise_exception: no"),
        (tiny_with("tokenizer.ggml.eos_token_id", Value::U64((1 << 32) | 258)), "not a token id"),
        // Refused as too large natively, as not fitting a 32-bit usize on wasm32.
        (tiny_with("llama.block_count", Value::U64(1 << 40)), "unsupported model"),
        (tiny_with("llama.feed_forward_length", Value::U64((1 << 32) | 160)), "unsupported model"),
    ];
    for (file, part) in cases {
        let (got, took) = run(&file);
        match got {
            Ok(Err(e)) if e.to_string().contains(part) => {}
            other => panic!("expected an error containing {part:?}, got {other:?}"),
        }
        assert!(took < Duration::from_millis(1500), "{part}: {took:?}");
    }
    // Python string methods in a model's template work end to end.
    let file = template("{% for m in messages %}{{ m.role.upper() }}: {{ m.content.strip() }}{% endfor %}");
    assert!(matches!(run(&file).0, Ok(Ok(n)) if n > 10));
    assert!(matches!(check_model_cpu(&file[..file.len() - 1]), Err(Error::Gguf(_))));
}
