//! The prompt cache's bars on the tiny random-weight model, run natively (`cargo test --test
//! cache_tiny`) and in headless Chromium's WebGPU (`wasm-pack test --headless --chrome -- --test
//! cache_tiny`), with the same assertions: a cached prefix gives the logits and tokens of a cold
//! run, shared prefixes are reused to the exact token counts, salts never share, and failed or
//! aborted requests leave the cache consistent. (tests/cache.rs has the bars on the default model
//! and the 1,000-request random load, natively.)

use hotprefix::api::ChatRequest;
use hotprefix::chat::Message;
use hotprefix::engine::{AbortSignal, Engine, EngineOptions, Finish, GenerateParams};
use hotprefix::rng::Rng;
use hotprefix::sample::SamplingParams;
use hotprefix::testmodel::tiny_gguf;
use hotprefix::Error;

mod dual;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

async fn tiny(opts: EngineOptions) -> Engine {
    let gpu = dual::gpu().await;
    Engine::load(gpu, &tiny_gguf(1), opts).await.expect("load the tiny model")
}

fn greedy(max_tokens: usize) -> GenerateParams {
    GenerateParams { max_tokens, ..GenerateParams::default() }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The tiny model over pages of 4 and chunks of 16 (many page boundaries, partial pages and chunk
/// edges), and the same engine with the cache off: the cold run a cached one is compared with.
async fn warm_and_cold() -> (Engine, Engine) {
    let opts = EngineOptions { context: Some(256), kv_budget_mb: Some(1.0), page_size: 4, chunk: 16, ..EngineOptions::default() };
    (tiny(opts.clone()).await, tiny(EngineOptions { cache: false, ..opts }).await)
}

gpu_test!(cached_equals_cold_on_many_random_splits, cached_equals_cold);

/// Random prompts split at random points, over pages of 4 (many page boundaries and partial
/// pages): prewarm the head, then run the whole prompt. Exactly the head is cached, and the
/// last logits and the greedy tokens equal a cold run's.
async fn cached_equals_cold() {
    let (mut warm, mut cold) = warm_and_cold().await;
    let mut rng = Rng(5);
    let mut worst = 0f32;
    for _ in 0..60 {
        let n = 2 + rng.below(90);
        let prompt: Vec<u32> = (0..n).map(|_| rng.below(256) as u32).collect();
        let cut = 1 + rng.below(n - 1);
        warm.clear_cache();
        warm.generate(&prompt[..cut], &greedy(0), |_| {}).await.unwrap();
        let w = warm.generate(&prompt, &greedy(1), |_| {}).await.unwrap();
        assert_eq!(w.cached_tokens, cut);
        let c = cold.generate(&prompt, &greedy(1), |_| {}).await.unwrap();
        assert_eq!(c.cached_tokens, 0);
        let d = max_diff(&warm.last_logits().await.unwrap(), &cold.last_logits().await.unwrap());
        assert!(d <= 1e-3, "{n} tokens split at {cut}: logits differ by {d}");
        worst = worst.max(d);
        assert_eq!(w.tokens, c.tokens);
    }
    log!("60 random splits on the tiny model: largest logit difference {worst:e}");
}

gpu_test!(a_follow_up_over_an_answer_equals_a_cold_run_bit_for_bit, follow_up_over_an_answer);

/// A chat's follow-up: the prompt, the answer the engine generated, then new tokens. The answer's
/// positions are reused, and the last logits equal a cold run's bit for bit (the decode kernels
/// sum in another order than prefill: the answer's K/V are computed again by prefill before
/// they are kept).
async fn follow_up_over_an_answer() {
    let (mut warm, mut cold) = warm_and_cold().await;
    let mut rng = Rng(5);
    for _ in 0..8 {
        let n = 2 + rng.below(60);
        let prompt: Vec<u32> = (0..n).map(|_| rng.below(256) as u32).collect();
        warm.clear_cache();
        let answer = warm.generate(&prompt, &greedy(12), |_| {}).await.unwrap();
        let mut follow = prompt.clone();
        follow.extend(&answer.tokens);
        follow.extend([rng.below(256) as u32, rng.below(256) as u32]);
        let w = warm.generate(&follow, &greedy(1), |_| {}).await.unwrap();
        assert!(w.cached_tokens > n, "{n}-token prompt: the answer's positions are reused ({} cached)", w.cached_tokens);
        let c = cold.generate(&follow, &greedy(1), |_| {}).await.unwrap();
        let (wl, cl) = (warm.last_logits().await.unwrap(), cold.last_logits().await.unwrap());
        let same = wl.iter().zip(&cl).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{n}-token prompt + its answer: logits differ by up to {}", max_diff(&wl, &cl));
        assert_eq!(w.tokens, c.tokens);
        warm.audit_cache().unwrap();
    }
}

gpu_test!(a_partial_page_that_is_the_only_room_is_recomputed_not_refused, partial_page_as_the_only_room);

/// A pool of 4 pages of 4 positions, all held by one 13-token prefix (3 full pages and 1 position
/// of the fourth). A 15-token prompt extending it needs 1 page beyond the 3 it shares: the partly
/// matching page is the only one evictable, so it cannot be both copied and the room the copy
/// needs. The request runs, computing that position again, as a cold run would.
async fn partial_page_as_the_only_room() {
    let probe = tiny(EngineOptions { context: Some(16), page_size: 4, kv_budget_mb: Some(1.0), ..EngineOptions::default() }).await;
    let page_mb = 1.0 / probe.cache_stats().pages_total as f64;
    let opts = EngineOptions { context: Some(16), page_size: 4, kv_budget_mb: Some(page_mb * 4.5), chunk: 16, ..EngineOptions::default() };
    let mut e = tiny(opts.clone()).await;
    assert_eq!(e.cache_stats().pages_total, 4);
    let mut cold = tiny(EngineOptions { cache: false, ..opts }).await;
    let prompt: Vec<u32> = (0..15).map(|i| 40 + 7 * i).collect();
    e.generate(&prompt[..13], &greedy(0), |_| {}).await.unwrap();
    let w = e.generate(&prompt, &greedy(1), |_| {}).await.expect("the request fits the pool");
    assert_eq!(w.cached_tokens, 12, "the 3 shared pages; the partly matching position is computed");
    let c = cold.generate(&prompt, &greedy(1), |_| {}).await.unwrap();
    assert_eq!(w.tokens, c.tokens);
    assert_eq!(max_diff(&e.last_logits().await.unwrap(), &cold.last_logits().await.unwrap()), 0.0);
    e.audit_cache().unwrap();
}

fn doc(seed: u64, words: usize) -> String {
    const WORDS: [&str; 16] = [
        "the", "canal", "ship", "lock", "water", "river", "engineer", "treaty", "lake", "dam", "year", "route", "cargo", "harbor", "tide",
        "gate",
    ];
    let mut rng = Rng(seed);
    (0..words).map(|_| WORDS[rng.below(WORDS.len())]).collect::<Vec<_>>().join(" ")
}

gpu_test!(interleaved_documents_keep_their_prefixes_and_salts_never_share, interleaved_documents);

/// Documents A, B, A, B…: from the third request on, each reuses at least its document's tokens,
/// and exactly up to where it diverges; requests with different salts never share.
async fn interleaved_documents() {
    let mut e = tiny(EngineOptions { context: Some(1024), kv_budget_mb: Some(1.0), ..EngineOptions::default() }).await;
    let docs = [doc(1, 60), doc(2, 60)];
    let system = Message::new("system", "Answer from the document.");
    let ask = |d: &str, q: &str| vec![system.clone(), Message::new("user", d.to_string()), Message::new("user", q.to_string())];
    for (i, q) in ["what is it?", "who built it?", "when?", "why?", "how long?", "how wide?"].iter().enumerate() {
        let msgs = ask(&docs[i % 2], q);
        let doc_end = e.encode_messages(&msgs).unwrap().contents[1].end;
        let r = e.chat(&ChatRequest::new(msgs, 3), |_| {}).await.unwrap();
        let cached = r.usage.prompt_tokens_details.cached_tokens;
        if i >= 2 {
            assert!(cached >= doc_end, "request {i}: {cached} cached, the document ends at token {doc_end}");
            let d = r.cache.diverged_at.as_ref().expect("the question differs from the resident one");
            assert_eq!((cached, d.message), (d.token, Some(2)), "request {i}: cached up to the divergence, in the question");
        }
        e.audit_cache().unwrap();
    }
    // The same prompt under another salt computes everything; under the first salt again it hits.
    let msgs = ask(&docs[0], "what is it?");
    let mut req = ChatRequest::new(msgs, 3);
    req.cache_salt = Some("alice".into());
    let a = e.chat(&req, |_| {}).await.unwrap();
    assert_eq!(a.usage.prompt_tokens_details.cached_tokens, 0, "nothing is shared across salts");
    assert!(a.cache.diverged_at.is_none(), "and nothing of another salt is reported");
    req.cache_salt = Some("bob".into());
    let b = e.chat(&req, |_| {}).await.unwrap();
    assert_eq!(b.usage.prompt_tokens_details.cached_tokens, 0, "bob does not see alice's prefix");
    req.cache_salt = Some("alice".into());
    let again = e.chat(&req, |_| {}).await.unwrap();
    assert_eq!(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens - 1);
    assert_eq!(again.tokens, a.tokens);
    e.clear_cache();
    let s = e.cache_stats();
    assert_eq!((s.pages_used, s.prefixes.len()), (0, 0), "clearing returns every page");
}

gpu_test!(failures_leave_the_cache_consistent, failures_leave_the_cache_consistent_body);

/// Failed and aborted requests leave the cache consistent: the next answer equals a cold one.
async fn failures_leave_the_cache_consistent_body() {
    let opts = EngineOptions { context: Some(512), kv_budget_mb: Some(0.05), page_size: 8, ..EngineOptions::default() };
    let mut e = tiny(opts.clone()).await;
    let mut cold = tiny(EngineOptions { cache: false, ..opts }).await;
    let mut rng = Rng(3);
    let prompt: Vec<u32> = (0..100).map(|_| rng.below(256) as u32).collect();
    let want = cold.generate(&prompt, &greedy(6), |_| {}).await.unwrap().tokens;
    e.generate(&prompt[..60], &greedy(0), |_| {}).await.unwrap();
    let used = e.cache_stats().pages_used;
    // More than the whole budget: refused after the lookup took the prefix's pages.
    let err = e.generate(&prompt, &greedy(400), |_| {}).await.unwrap_err();
    assert!(matches!(err, Error::CacheFull { .. }), "{err}");
    assert_eq!(e.cache_stats().pages_used, used, "the refused request holds nothing and evicted nothing");
    e.audit_cache().unwrap();
    // Bad input is refused before anything is touched.
    assert!(matches!(e.generate(&[1, 2, 999], &greedy(2), |_| {}).await, Err(Error::InvalidArgument(_))));
    // Aborted mid-answer.
    let stop = AbortSignal::new();
    let params = GenerateParams { abort: Some(stop.clone()), ..greedy(6) };
    let a = e.generate(&prompt, &params, |_| stop.abort()).await.unwrap();
    assert_eq!(a.finish, Finish::Abort);
    e.audit_cache().unwrap();
    // Aborted before its prefill: nothing computed, reported as an abort (a prewarm too).
    let early = AbortSignal::new();
    early.abort();
    let pre = e.generate(&prompt[..90], &GenerateParams { abort: Some(early.clone()), ..greedy(0) }, |_| {}).await.unwrap();
    assert_eq!((pre.finish, pre.tokens.len()), (Finish::Abort, 0));
    e.audit_cache().unwrap();
    let next = e.generate(&prompt, &greedy(6), |_| {}).await.unwrap();
    assert!(next.cached_tokens > 60);
    assert_eq!(next.tokens, want, "after a refusal and an abort the answer equals a cold one");
}

gpu_test!(an_abort_after_the_last_token_reports_a_complete_answer, abort_after_the_last_token);

/// An abort that lands while the answer's last token (by `max_tokens`) is computed does not turn
/// the complete answer into an aborted one: it ends by length, with the same text.
async fn abort_after_the_last_token() {
    let opts = EngineOptions { context: Some(512), page_size: 8, ..EngineOptions::default() };
    let mut e = tiny(opts.clone()).await;
    let mut rng = Rng(5);
    // A prompt whose one-token answer is a whole character (the tiny vocabulary's tokens are
    // bytes), so that its text is handed out in the decode loop, where the abort below lands.
    let mut found = None;
    for _ in 0..64 {
        let prompt: Vec<u32> = (0..40).map(|_| rng.below(256) as u32).collect();
        let dry = e.generate(&prompt, &greedy(1), |_| {}).await.unwrap();
        if !dry.text.is_empty() && !dry.text.contains('\u{FFFD}') {
            found = Some((prompt, dry));
            break;
        }
    }
    let (prompt, dry) = found.expect("a prompt whose first token is a whole character");
    let stop = AbortSignal::new();
    let params = GenerateParams { abort: Some(stop.clone()), ..greedy(1) };
    let a = e.generate(&prompt, &params, |_| stop.abort()).await.unwrap();
    assert!(stop.is_aborted(), "the text was handed out");
    assert_eq!((a.finish, &a.tokens, &a.text), (Finish::Length, &dry.tokens, &dry.text), "the answer was complete when the abort landed");
}

gpu_test!(a_saved_cache_restores_exactly_and_a_bad_one_changes_nothing, saved_cache);

/// `save_cache` then `restore_cache` into a fresh engine: the same prefixes are resident, the next
/// request reuses them to the exact token and answers as a cold engine does, and the page
/// accounting is exact. Corrupt files, another model's, and another page size are refused with
/// `CacheFile` and leave the cache as it was; a budget too small for everything restores the
/// most recent prefixes.
async fn saved_cache() {
    let opts = EngineOptions { context: Some(512), kv_budget_mb: Some(1.0), page_size: 8, ..EngineOptions::default() };
    let mut a = tiny(opts.clone()).await;
    // Nothing resident: an empty file that restores to nothing.
    let empty = a.save_cache("model-a").await.unwrap();
    let r = a.restore_cache(&empty, "model-a").await.unwrap();
    assert_eq!((r.prefixes, r.pages, a.cache_stats().pages_used), (0, 0, 0), "{r:?}");
    let docs = [doc(7, 50), doc(8, 50)];
    let system = Message::new("system", "Answer from the document.");
    let ask = |d: &str, q: &str| {
        ChatRequest::new(vec![system.clone(), Message::new("user", d.to_string()), Message::new("user", q.to_string())], 4)
    };
    for (d, q) in [(&docs[0], "what?"), (&docs[1], "who?")] {
        a.chat(&ask(d, q), |_| {}).await.unwrap();
    }
    let file = a.save_cache("model-a").await.unwrap();
    let before = a.cache_stats();

    let mut b = tiny(opts.clone()).await;
    let r = b.restore_cache(&file, "model-a").await.unwrap();
    assert_eq!((r.prefixes, r.skipped, r.pages), (2, 0, before.pages_used), "{r:?}");
    let after = b.cache_stats();
    assert_eq!(after.pages_used, before.pages_used);
    let tokens = |s: &hotprefix::engine::CacheStats| s.prefixes.iter().map(|p| p.tokens).collect::<Vec<_>>();
    assert_eq!(tokens(&after), tokens(&before), "the same prefixes, most recent first");
    b.audit_cache().unwrap();

    let mut cold = tiny(EngineOptions { cache: false, ..opts.clone() }).await;
    let req = ask(&docs[0], "when?");
    let doc_end = b.encode_messages(&req.messages).unwrap().contents[1].end;
    let warm = b.chat(&req, |_| {}).await.unwrap();
    let want = a.chat(&req, |_| {}).await.unwrap();
    let c = cold.chat(&req, |_| {}).await.unwrap();
    assert!(
        warm.usage.prompt_tokens_details.cached_tokens >= doc_end,
        "{} cached, document ends at {doc_end}",
        warm.usage.prompt_tokens_details.cached_tokens
    );
    assert_eq!(
        warm.usage.prompt_tokens_details.cached_tokens, want.usage.prompt_tokens_details.cached_tokens,
        "as much as the engine that computed it"
    );
    assert_eq!(warm.tokens, c.tokens, "the restored K/V answer as a cold run does");
    b.audit_cache().unwrap();

    // Refused files change nothing.
    let mut e = tiny(opts.clone()).await;
    let mut flipped = file.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    for (what, bytes, model) in
        [("corrupt", &flipped[..], "model-a"), ("truncated", &file[..file.len() - 9], "model-a"), ("another model", &file[..], "model-b")]
    {
        let err = e.restore_cache(bytes, model).await.unwrap_err();
        assert!(matches!(err, Error::CacheFile(_)), "{what}: {err}");
        assert_eq!(e.cache_stats().pages_used, 0, "{what}: nothing resident");
    }
    let mut other_pages = tiny(EngineOptions { page_size: 4, ..opts.clone() }).await;
    assert!(matches!(other_pages.restore_cache(&file, "model-a").await, Err(Error::CacheFile(_))), "another page size");
    e.audit_cache().unwrap();

    // Room for one document only: the most recent one is restored.
    let page_kib = a.cache_stats().page_bytes as f64 / 1024.0;
    let small = (before.prefixes[0].pages as f64 + 1.5) * page_kib / 1024.0;
    let mut s = tiny(EngineOptions { kv_budget_mb: Some(small), ..opts }).await;
    let r = s.restore_cache(&file, "model-a").await.unwrap();
    assert_eq!((r.prefixes, r.skipped), (1, 1), "{r:?}");
    assert_eq!(s.cache_stats().prefixes[0].tokens, before.prefixes[0].tokens);
    s.audit_cache().unwrap();
}

gpu_test!(greedy_decoding_ahead_answers_as_step_by_step_and_stops_exactly, decoding_ahead);

/// Greedy answers are decoded several steps ahead on the GPU. They must equal step-by-step
/// sampling that picks the top token on the CPU (top-k 1), stop exactly at `max_tokens` and at a
/// stop string that ends mid-run, and leave the cache holding exactly what the answer used.
async fn decoding_ahead() {
    let opts = EngineOptions { context: Some(512), page_size: 4, ..EngineOptions::default() };
    let mut e = tiny(opts.clone()).await;
    let mut cold = tiny(EngineOptions { cache: false, ..opts }).await;
    let mut rng = Rng(11);
    let prompt: Vec<u32> = (0..23).map(|_| rng.below(256) as u32).collect();
    let top1 = GenerateParams { sampling: SamplingParams { temperature: 1.0, top_k: 1, ..SamplingParams::default() }, ..greedy(30) };
    let want = cold.generate(&prompt, &top1, |_| {}).await.unwrap();
    let got = cold.generate(&prompt, &greedy(30), |_| {}).await.unwrap();
    assert_eq!(got.tokens, want.tokens, "decoded ahead vs one step at a time");
    assert_eq!(got.finish, want.finish);
    // max_tokens not a multiple of the steps queued at once.
    let short = cold.generate(&prompt, &greedy(11), |_| {}).await.unwrap();
    assert_eq!(short.tokens[..], want.tokens[..11.min(want.tokens.len())]);
    // A stop string that ends inside a run of queued steps: the answer ends before it, and the
    // cache keeps exactly the prompt and the tokens fed back.
    let text = &got.text;
    let cut = text.char_indices().map(|(i, _)| i).find(|&i| i >= text.len() / 2).unwrap_or(0);
    let stop: String = text[cut..].chars().take(2).collect();
    assert!(!stop.is_empty(), "the tiny model's answer has text: {text:?}");
    let first_at = text.find(&stop).unwrap();
    let before = e.cache_stats().pages_used;
    let s = e.generate(&prompt, &GenerateParams { stop: vec![stop.clone()], ..greedy(30) }, |_| {}).await.unwrap();
    assert_eq!(s.finish, Finish::Stop);
    assert_eq!(s.text, text[..first_at], "stopped before {stop:?}");
    e.audit_cache().unwrap();
    // The next request on the prompt + answer finds all of it that was fed back resident.
    let mut follow = prompt.clone();
    follow.extend_from_slice(&s.tokens);
    follow.push(1);
    let f = e.generate(&follow, &greedy(0), |_| {}).await.unwrap();
    let fed = prompt.len() + s.tokens.len() - 1;
    assert_eq!(f.reused_tokens / 4, fed / 4, "cached {} of the {fed} positions written (pages of 4)", f.reused_tokens);
    assert!(e.cache_stats().pages_used >= before);
    e.audit_cache().unwrap();
}

gpu_test!(sampling_from_the_gpu_top_answers_as_sampling_from_all_logits, sampling_from_the_top);

/// Temperature sampling reads the top of the logits found on the GPU (`topk`) and the whole row
/// only when a draw lands outside it. For the same seed the answers must equal those of reading
/// every row, under each sampler setting. (The tiny model's 320-token row is smaller than the
/// top, so top sampling is off by default here: it is switched on.)
async fn sampling_from_the_top() {
    let opts = EngineOptions { context: Some(512), page_size: 4, cache: false, ..EngineOptions::default() };
    let mut top = tiny(opts.clone()).await;
    top.set_top_sampling(true);
    let mut all = tiny(opts).await;
    all.set_top_sampling(false);
    let mut rng = Rng(17);
    let prompt: Vec<u32> = (0..19).map(|_| rng.below(256) as u32).collect();
    let d = SamplingParams::default;
    let settings = [
        SamplingParams { temperature: 0.6, seed: 1, ..d() },
        SamplingParams { temperature: 1.0, top_k: 20, seed: 2, ..d() },
        SamplingParams { temperature: 0.9, top_p: 0.8, seed: 3, ..d() },
        SamplingParams { temperature: 1.0, repetition_penalty: 1.3, seed: 4, ..d() },
        SamplingParams { temperature: 0.0, repetition_penalty: 1.5, seed: 5, ..d() },
        SamplingParams { temperature: 0.3, top_k: 5, top_p: 0.9, repetition_penalty: 0.9, seed: 6, ..d() },
    ];
    for sampling in settings {
        let params = GenerateParams { sampling: sampling.clone(), ..greedy(24) };
        let (t0, a0) = (top.sampling_reads(), all.sampling_reads());
        let got = top.generate(&prompt, &params, |_| {}).await.unwrap();
        let want = all.generate(&prompt, &params, |_| {}).await.unwrap();
        assert_eq!(got.tokens, want.tokens, "{sampling:?}");
        let (t, a) = (top.sampling_reads(), all.sampling_reads());
        let draws = got.tokens.len() as u64;
        assert_eq!((a.0 - a0.0, a.1 - a0.1), (0, draws), "{sampling:?}: every draw read the row");
        let (from_top, from_row) = (t.0 - t0.0, t.1 - t0.1);
        assert_eq!(from_top + from_row, draws, "{sampling:?}");
        // Top-k within the top, and the greedy pick under a penalty, never need the row.
        if sampling.top_k > 0 || sampling.temperature == 0.0 {
            assert_eq!(from_row, 0, "{sampling:?}");
        }
        assert!(from_top > 0, "{sampling:?}: {from_row} draws all read the row");
    }
}

gpu_test!(a_prompt_shorter_than_a_page_keeps_hitting_and_the_cache_reports, short_prompt_keeps_hitting);

/// The report's three requests (`{"system": "", "user": "hi"}`, `max_tokens` 0, 8, 8) with a
/// prompt shorter than one page: the second request's answer grows it past a page, whose first
/// page supersedes the partial one. The third request still reuses the prompt, and the cache's
/// stats, audit, save and restore all return.
async fn short_prompt_keeps_hitting() {
    let msgs = vec![Message::new("system", ""), Message::new("user", "hi")];
    let n = tiny(EngineOptions::default()).await.encode_chat(&msgs).unwrap().len();
    let page = n + 2;
    let opts = EngineOptions { context: Some(256), kv_budget_mb: Some(1.0), page_size: page, ..EngineOptions::default() };
    let mut e = tiny(opts.clone()).await;
    let first = e.chat(&ChatRequest::new(msgs.clone(), 0), |_| {}).await.unwrap();
    assert_eq!(first.usage.prompt_tokens, n);
    let second = e.chat(&ChatRequest::new(msgs.clone(), 8), |_| {}).await.unwrap();
    assert_eq!(second.usage.prompt_tokens_details.cached_tokens, n - 1, "the second request reuses the prewarmed prompt");
    assert!(
        n + second.tokens.len() > page + 1,
        "the answer ({} tokens) grows the {n}-token prompt past a page of {page}",
        second.tokens.len()
    );
    let third = e.chat(&ChatRequest::new(msgs.clone(), 8), |_| {}).await.unwrap();
    assert_eq!(third.usage.prompt_tokens_details.cached_tokens, n - 1, "the third request reuses the prompt too");
    assert_eq!(third.tokens, second.tokens);
    let stats = e.cache_stats();
    assert_eq!(stats.prefixes.len(), 1, "{:?}", stats.prefixes);
    assert!(stats.prefixes[0].tokens > page, "{:?}", stats.prefixes);
    e.audit_cache().unwrap();
    let file = e.save_cache("tiny").await.unwrap();
    let mut restored = tiny(opts).await;
    let r = restored.restore_cache(&file, "tiny").await.unwrap();
    assert_eq!((r.prefixes, r.tokens), (1, stats.prefixes[0].tokens), "{r:?}");
    let fourth = restored.chat(&ChatRequest::new(msgs, 8), |_| {}).await.unwrap();
    assert_eq!((fourth.usage.prompt_tokens_details.cached_tokens, fourth.tokens), (n - 1, second.tokens));
    restored.audit_cache().unwrap();
}

gpu_test!(a_page_accounting_fault_rebuilds_the_cache_and_a_failed_restore_leaves_nothing, accounting_fault);

/// After a page-accounting fault (a bug, forced here) the request that meets it fails with
/// `CacheCorrupt` saying the cache was rebuilt, and the next request answers as a cold one does.
/// A restore that fails partway makes none of its prefixes resident.
async fn accounting_fault() {
    let opts = EngineOptions { context: Some(256), kv_budget_mb: Some(1.0), page_size: 8, ..EngineOptions::default() };
    let mut e = tiny(opts).await;
    let mut rng = Rng(21);
    let prompt: Vec<u32> = (0..40).map(|_| rng.below(256) as u32).collect();
    let want = e.generate(&prompt, &greedy(4), |_| {}).await.unwrap().tokens;
    let file = e.save_cache("tiny").await.unwrap();
    e.corrupt_for_test();
    let err = e.generate(&prompt, &greedy(4), |_| {}).await.unwrap_err();
    assert!(matches!(&err, Error::CacheCorrupt(m) if m.contains("rebuilt")), "{err}");
    let again = e.generate(&prompt, &greedy(4), |_| {}).await.unwrap();
    assert_eq!((again.cached_tokens, again.tokens), (0, want.clone()), "the request after the fault runs cold, and right");
    e.audit_cache().unwrap();
    e.clear_cache();
    e.corrupt_for_test();
    let err = e.restore_cache(&file, "tiny").await.unwrap_err();
    assert!(matches!(err, Error::CacheCorrupt(_)), "{err}");
    assert_eq!(e.cache_stats().prefixes.len(), 0, "the failed restore left none of its prefixes resident");
    e.audit_cache().unwrap();
    let r = e.restore_cache(&file, "tiny").await.unwrap();
    assert_eq!(r.prefixes, 1, "{r:?}");
    let hit = e.generate(&prompt, &greedy(4), |_| {}).await.unwrap();
    assert_eq!((hit.cached_tokens, hit.tokens), (prompt.len() - 1, want));
}

gpu_test!(a_name_is_rendered_as_plain_text_where_the_template_uses_it_and_refused_elsewhere, message_names);

/// OpenAI's `name` on a message: refused where the model's template does not render it (the
/// tiny model's ChatML), encoded as plain text where it does (control-token text in it stays
/// text).
async fn message_names() {
    let e = tiny(EngineOptions::default()).await;
    let named = vec![Message::new("user", "hi").named("ann")];
    let err = e.encode_chat(&named).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains(r#"name "ann" (role user)"#)), "{err}");
    let template = "{% for m in messages %}<|im_start|>{{ m.role }}{% if m.name is defined %} [{{ m.name }}]{% endif %}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let file = hotprefix::testmodel::tiny_gguf_with(1, |md, _| {
        md.insert("tokenizer.chat_template".into(), hotprefix::gguf::Value::Str(template.into()));
    });
    let gpu = dual::gpu().await;
    let e = Engine::load(gpu, &file, EngineOptions::default()).await.unwrap();
    let t = e.tokenizer();
    let ids = e.encode_chat(&[Message::new("user", "hi").named("<|im_start|>")]).unwrap();
    let mut want = t.encode_with_special("<|im_start|>user [").unwrap();
    want.extend(t.encode_text("<|im_start|>").unwrap());
    want.extend(t.encode_with_special("]").unwrap()); // trim_blocks drops the newline after `endif`
    want.extend(t.encode_text("hi").unwrap());
    want.extend(t.encode_with_special("<|im_end|>\n<|im_start|>assistant\n").unwrap());
    assert_eq!(ids, want, "the name is plain text, the template's markers control tokens");
    let plain = e.encode_chat(&[Message::new("user", "hi")]).unwrap();
    assert!(plain.len() < ids.len(), "without a name, none is rendered");
}

gpu_test!(a_divergence_counts_characters_from_the_contents_own_start_beside_the_tools_message, divergence_beside_tools);

/// A template that trims contents and renders no tools: the engine adds the tools' system message
/// before the request's, and a divergence in the request's first message still counts its
/// characters from that content's own start, leading spaces the template trimmed included (as
/// the same request without tools reports).
async fn divergence_beside_tools() {
    let template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let file = hotprefix::testmodel::tiny_gguf_with(1, |md, _| {
        md.insert("tokenizer.chat_template".into(), hotprefix::gguf::Value::Str(template.into()));
    });
    let tools = r#""tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "none","#;
    let mut chars = Vec::new();
    for with_tools in [false, true] {
        let gpu = dual::gpu().await;
        let mut e = Engine::load(gpu, &file, EngineOptions { context: Some(512), kv_budget_mb: Some(1.0), ..EngineOptions::default() })
            .await
            .unwrap();
        let req = |content: &str| {
            let t = if with_tools { tools } else { "" };
            ChatRequest::from_json(&format!(r#"{{{t} "messages": [{{"role": "user", "content": "{content}"}}], "max_tokens": 1}}"#))
                .unwrap()
        };
        e.chat(&req("   lock gate canal water"), |_| {}).await.unwrap();
        let r = e.chat(&req("   lock gate river water"), |_| {}).await.unwrap();
        let d = r.cache.diverged_at.clone().expect("the second request diverges in its message");
        assert_eq!(d.message, Some(0), "{d:?}");
        chars.push(d.char);
    }
    assert!(chars[0] >= "   lock gate".len(), "the trimmed spaces count: {chars:?}");
    assert_eq!(chars[1], chars[0], "the tools' message changes no offset in the request's own");
}
