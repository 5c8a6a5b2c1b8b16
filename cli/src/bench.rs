//! `hotprefix bench`: kernel figures beside CPU baselines, model prefill/decode tok/s, and the
//! prompt cache (TTFT cold vs warm, prefill efficiency over a scripted chat).

use std::time::Instant;

use hotprefix::api::ChatRequest;
use hotprefix::chat::Message;
use hotprefix::engine::{Engine, EngineOptions};
use hotprefix::gpu::now_ms;
use hotprefix::gpu::Gpu;
use hotprefix::model::{Model, Options};
use hotprefix::ops::Variant;
use hotprefix::quant::Format;
use hotprefix::rng::Rng;
use hotprefix::selftest::{self, time_matmul, time_matmul_on};
use hotprefix::Result;

/// Best of `runs` timings of `f`, in seconds.
fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Plain CPU read bandwidth: sum a 256 MiB f32 array with `threads` threads.
fn cpu_read_gbs(threads: usize) -> f64 {
    let data = vec![1.0f32; 64 << 20];
    let chunk = data.len() / threads;
    let secs = best_of(5, || {
        let total: f32 = std::thread::scope(|s| {
            let hs: Vec<_> = data
                .chunks(chunk)
                .map(|c| {
                    s.spawn(move || {
                        c.chunks_exact(16)
                            .fold([0f32; 16], |mut a, b| {
                                for i in 0..16 {
                                    a[i] += b[i];
                                }
                                a
                            })
                            .iter()
                            .sum::<f32>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(total);
    });
    (data.len() * 4) as f64 / secs / 1e9
}

/// CPU sgemm (matrixmultiply crate, its own threading) GFLOP/s for `[m, k] · [k, n]`.
fn cpu_sgemm_gflops(m: usize, k: usize, n: usize) -> f64 {
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0f32; m * n];
    let secs = best_of(3, || unsafe {
        matrixmultiply::sgemm(m, k, n, 1.0, a.as_ptr(), k as isize, 1, b.as_ptr(), 1, k as isize, 0.0, c.as_mut_ptr(), n as isize, 1);
    });
    std::hint::black_box(&c);
    2.0 * (m * k * n) as f64 / secs / 1e9
}

/// `hotprefix bench kernels`: matmul GFLOP/s at prefill shapes, matrix-vector GB/s per format.
pub async fn kernels(formats: &str) -> Result<()> {
    let formats: Vec<Format> = if formats.is_empty() {
        Format::ALL.to_vec()
    } else {
        formats
            .split(',')
            .map(|n| Format::from_name(n).ok_or_else(|| hotprefix::Error::InvalidArgument(format!("--formats: unknown format {n:?}"))))
            .collect::<Result<_>>()?
    };
    // Every format: the whole table; fewer: those formats on the two large shapes.
    let whole = formats.len() == Format::ALL.len();
    let gpu = Gpu::new().await?;
    println!("adapter: {}", gpu.describe());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bw1 = cpu_read_gbs(1);
    let bwn = cpu_read_gbs(threads);
    println!("cpu read bandwidth (256 MiB, sum): {bw1:.1} GB/s 1 thread, {bwn:.1} GB/s {threads} threads");

    // The fixed prefill shapes only for the whole table (`--formats` picks formats to compare).
    if whole {
        println!("\nprefill matmul, T = 512 (GPU = our kernel; CPU = matrixmultiply sgemm on f32, {threads} threads)");
        println!("{:<8} {:>6} {:>6} {:>10} {:>12} {:>12}", "weights", "K", "N", "ms", "GPU GFLOP/s", "CPU GFLOP/s");
        let t = 512;
        for (format, k, n) in [(Format::Q4_1, 576, 576), (Format::Q4_1, 576, 1536), (Format::Q4_1, 1536, 576), (Format::Q8_0, 576, 49152)] {
            let reps = if n > 10_000 { 2 } else { 10 };
            let (ms, _) = time_matmul(&gpu, format, t, k, n, reps).await?;
            let gflops = 2.0 * (t * k * n) as f64 / (ms * 1e6);
            let cpu = cpu_sgemm_gflops(t, k, n);
            println!("{:<8} {k:>6} {n:>6} {ms:>10.2} {gflops:>12.2} {cpu:>12.2}", format.name());
        }
    }

    let kinds = Variant::available(&gpu);
    println!("\nprefill matmul per format, T = 128, K = 1536, N = 576: GPU GFLOP/s of each variant's tiled kernel");
    println!("{:<8} {}", "weights", kinds.iter().map(|k| format!("{:>10}", format!("{k:?}"))).collect::<String>());
    for &format in &formats {
        let (t, k, n) = (128, 1536, 576);
        let mut line = format!("{:<8}", format.name());
        for &kind in &kinds {
            let (ms, _) = time_matmul_on(&gpu, format, t, k, n, 5, Some(kind)).await?;
            line += &format!(" {:>9.2}", 2.0 * (t * k * n) as f64 / (ms * 1e6));
        }
        println!("{line}");
    }

    println!("\nmatrix-vector, T = 1: effective GB/s = weight bytes / time (vs CPU read {bwn:.1} GB/s)");
    println!("{:<8} {:>6} {:>6} {:>10} {:>10} {:>8} {:>12}", "weights", "K", "N", "MiB", "ms", "GB/s", "% of CPU bw");
    let shapes: [(usize, usize); 4] = [(1536, 16384), (576, 49152), (576, 1536), (1536, 576)];
    for &format in &formats {
        for &(k, n) in &shapes[..if whole { 4 } else { 2 }] {
            // K rounded up to the format's block (576 → 768 for the 256-value formats).
            let k = k.next_multiple_of(format.block());
            let (ms, bytes) = time_matmul(&gpu, format, 1, k, n, 50).await?;
            let gbs = bytes as f64 / (ms * 1e6);
            let mib = bytes as f64 / (1 << 20) as f64;
            println!("{:<8} {k:>6} {n:>6} {mib:>10.1} {ms:>10.3} {gbs:>8.2} {:>11.0}%", format.name(), 100.0 * gbs / bwn);
        }
    }
    // Formats picked: their time a weight byte against Q4_1's, interleaved round by round (the
    // figure the per-byte targets are about; sequential runs drift by more than the differences).
    if !whole {
        let mut set = vec![Format::Q4_1];
        set.extend(formats.iter().copied().filter(|&f| f != Format::Q4_1));
        let rounds = 7;
        for &(k, n) in &shapes[..2] {
            let r = selftest::time_matvecs_interleaved(&gpu, &set, k, n, 20, rounds).await?;
            println!("\nmatrix-vector time a weight byte ÷ Q4_1's, K = {k} (rounded up to the block) × N = {n}, {rounds} interleaved rounds: median [min, max]");
            for (i, f) in set.iter().enumerate().skip(1) {
                let mut ratios: Vec<f64> = r.iter().map(|round| round[i] / round[0]).collect();
                let m = median(&mut ratios);
                println!("{:<8} {m:>6.2} [{:.2}, {:.2}]", f.name(), ratios[0], ratios[ratios.len() - 1]);
            }
        }
    }
    Ok(())
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `hotprefix bench [model]`: prefill tok/s at 128, 512 and 1500 prompt tokens (cold KV) and
/// greedy decode tok/s over 128 tokens after a 128- and a 1500-token prompt, decoded as the engine
/// does (steps queued ahead, `Model::decode_greedy`, 8 per wait), with the dispatches, passes,
/// submissions and CPU–GPU waits each decoded token cost; medians of `runs` runs.
pub async fn model(path: &str, json: bool, runs: usize, kernels: &str) -> Result<()> {
    let file = crate::read_model(path)?;
    let gpu = Gpu::new().await?;
    let mut m = Model::load(&gpu, &file, Options { chunk: 512, context: Some(2048), ..Options::default() }).await?;
    choose_kernels(&mut m, kernels)?;
    let kv = m.kv_cache(&gpu, 2048 / 16, 16).await?;
    // Token ids past the control tokens, drawn from a fixed seed: the same prompt every run.
    let mut rng = Rng(7);
    let vocab = m.config().vocab;
    if vocab <= 17 || m.max_positions() < 1500 + 128 {
        return Err(hotprefix::Error::Model("the model bench needs a vocabulary past the control tokens and 1,628 positions".into()));
    }
    let prompt: Vec<u32> = (0..1500).map(|_| 17 + rng.below(vocab - 17) as u32).collect();
    // One sequence, cleared between runs: no buffers are created per run.
    let mut seq = kv.sequence(1500 + 128);
    // Not counted: pipelines are created on first use (the first run would pay for them).
    m.prefill(&gpu, &kv, &mut seq, &prompt[..128]).await?;
    let first = m.read_argmax(&gpu, 1).await?.first().copied().unwrap_or(0);
    m.decode_greedy(&gpu, &kv, &mut seq, first, 8).await?;
    seq.clear()?;
    let mut prefill = Vec::new();
    for n in [128usize, 512, 1500] {
        let mut rates = Vec::new();
        for _ in 0..runs {
            let t = now_ms();
            m.prefill(&gpu, &kv, &mut seq, &prompt[..n]).await?;
            m.read_argmax(&gpu, 1).await?;
            rates.push(n as f64 / ((now_ms() - t) / 1e3));
            seq.clear()?;
        }
        prefill.push((n, median(&mut rates)));
    }
    const STEPS: usize = 128;
    const AHEAD: usize = 8;
    let mut decode = Vec::new();
    let mut per_token = None;
    for n in [128usize, 1500] {
        let mut rates = Vec::new();
        for _ in 0..runs {
            m.prefill(&gpu, &kv, &mut seq, &prompt[..n]).await?;
            let mut next = m.read_argmax(&gpu, 1).await?[0];
            let (t, c0) = (now_ms(), gpu.counters());
            for _ in 0..STEPS / AHEAD {
                next = *m.decode_greedy(&gpu, &kv, &mut seq, next, AHEAD).await?.last().unwrap_or(&next);
            }
            rates.push(STEPS as f64 / ((now_ms() - t) / 1e3));
            let c = gpu.counters();
            let per = |a: u64, b: u64| (a - b) as f64 / STEPS as f64;
            per_token =
                Some([per(c.dispatches, c0.dispatches), per(c.passes, c0.passes), per(c.submits, c0.submits), per(c.waits, c0.waits)]);
            seq.clear()?;
        }
        decode.push((n, median(&mut rates)));
    }
    let [dispatches, passes, submits, waits] = per_token.unwrap_or_default();
    let (kernels_used, weight_bytes) = (format!("{:?}", m.kernels()), m.weight_bytes());
    drop((seq, kv, m));
    let sampled = sampled_decode(&file, &prompt[..128], runs, kernels).await?;
    if json {
        let out = serde_json::json!({
            "adapter": gpu.describe(),
            "kernels": kernels_used,
            "prefill": prefill.iter().map(|(n, r)| serde_json::json!({"tokens": n, "tok_s": r})).collect::<Vec<_>>(),
            "decode_tok_s": decode[0].1,
            "decode_after": decode.iter().map(|(n, r)| serde_json::json!({"prompt_tokens": n, "tok_s": r})).collect::<Vec<_>>(),
            "dispatches_per_token": dispatches,
            "passes_per_token": passes,
            "submits_per_token": submits,
            "waits_per_token": waits,
            "weight_bytes": weight_bytes,
            "sampled_decode": sampled.iter().map(|s| serde_json::json!({"read": s.0, "tok_s": s.1, "read_bytes_per_token": s.2, "from_top": s.3, "from_row": s.4})).collect::<Vec<_>>(),
        });
        println!("{out}");
    } else {
        println!("adapter: {}", gpu.describe());
        println!("kernel variant: {kernels_used}");
        println!("weights on the GPU: {:.1} MiB", weight_bytes as f64 / (1 << 20) as f64);
        for (n, r) in &prefill {
            println!("prefill {n:>5} tokens: {r:>8.1} tok/s");
        }
        for (n, r) in &decode {
            println!("decode {STEPS} tokens after {n:>5}: {r:>8.1} tok/s");
        }
        println!("per decoded token: {dispatches:.1} dispatches, {passes:.3} passes, {submits:.3} submissions, {waits:.3} waits");
        for (read, r, bytes, top, row) in &sampled {
            println!("sampled decode (T 0.7, top-p 0.95) after 128, reading {read}: {r:>6.1} tok/s, {bytes:.0} bytes read a token ({top} draws from the top, {row} from the row)");
        }
    }
    Ok(())
}

/// Temperature decoding after `prompt` through the engine, reading the GPU's top of the logits
/// and then the whole row: (what was read, tok/s (median), bytes read back a token, draws
/// answered from the top, draws that read the row).
async fn sampled_decode(file: &[u8], prompt: &[u32], runs: usize, kernels: &str) -> Result<Vec<(&'static str, f64, f64, u64, u64)>> {
    let opts = EngineOptions { context: Some(1024), cache: false, ..EngineOptions::default() };
    let mut e = Engine::load(Gpu::new().await?, file, opts).await?;
    choose_kernels(e.model_mut(), kernels)?;
    let sampling = hotprefix::sample::SamplingParams { temperature: 0.7, top_p: 0.95, seed: 1, ..Default::default() };
    let params = hotprefix::engine::GenerateParams { max_tokens: 48, sampling, ..Default::default() };
    let mut out = Vec::new();
    for (read, top) in [("the top", true), ("the row", false)] {
        e.set_top_sampling(top);
        // One run first, not counted: pipelines are created on first use (the first sampled
        // run would otherwise pay for the topk kernel's and the decode kernels' creation).
        e.generate(prompt, &params, |_| {}).await?;
        let (mut rates, mut bytes, mut tokens) = (Vec::new(), 0u64, 0u64);
        let d0 = e.sampling_reads();
        for _ in 0..runs {
            let c0 = e.gpu().counters().read_bytes;
            let g = e.generate(prompt, &params, |_| {}).await?;
            bytes += e.gpu().counters().read_bytes - c0;
            tokens += g.tokens.len() as u64;
            rates.push(g.timings.decode_tok_s);
        }
        let d = e.sampling_reads();
        out.push((read, median(&mut rates), bytes as f64 / tokens.max(1) as f64, d.0 - d0.0, d.1 - d0.1));
    }
    Ok(out)
}

/// `--kernels auto|rows|lanes|coop`.
fn choose_kernels(m: &mut Model, kernels: &str) -> Result<()> {
    match kernels {
        "auto" => {}
        "rows" => m.use_kernels(Variant::Rows),
        "lanes" => m.use_kernels(Variant::Lanes),
        "coop" => m.use_kernels(Variant::Coop),
        other => return Err(hotprefix::Error::InvalidArgument(format!("--kernels {other:?}: expected auto, rows, lanes or coop"))),
    }
    Ok(())
}

/// `hotprefix bench profile`: where the GPU time goes, from timestamp queries around every
/// dispatch (one pass each while profiling): a decode step after 128 and after 1,500 tokens
/// (mean of 8 steps), and the last 500-token chunk of a 1,500-token prefill. Per kernel (file,
/// entry point and override constants): dispatches and milliseconds.
pub async fn profile(path: &str, json: bool, section: &str, kernels: &str) -> Result<()> {
    let (decode, prefill, warm): (&[usize], bool, bool) = match section {
        "all" => (&[128, 1500], true, true),
        "decode" => (&[128, 1500], false, false),
        "decode-short" => (&[128], false, false),
        "prefill" => (&[], true, false),
        "warm" => (&[], false, true),
        other => {
            return Err(hotprefix::Error::InvalidArgument(format!(
                "--section {other:?}: expected decode, decode-short, prefill, warm or all"
            )))
        }
    };
    let file = crate::read_model(path)?;
    let gpu = Gpu::new().await?;
    let mut m = Model::load(&gpu, &file, Options { chunk: 500, context: Some(2048), ..Options::default() }).await?;
    choose_kernels(&mut m, kernels)?;
    let kv = m.kv_cache(&gpu, 2048 / 16, 16).await?;
    let mut rng = Rng(7);
    let vocab = m.config().vocab;
    let prompt: Vec<u32> = (0..1700).map(|_| 17 + rng.below(vocab.saturating_sub(17).max(1)) as u32).collect();
    let mut seq = kv.sequence(1700 + 16);
    let mut sections = Vec::new();
    // Each decode configuration twice, alternating (this machine's speed drifts).
    let fused = [false, true, false, true];
    for &n in decode {
        m.prefill(&gpu, &kv, &mut seq, &prompt[..n]).await?;
        let next = m.read_argmax(&gpu, 1).await?[0];
        for fuse in fused {
            m.fuse_decode(fuse);
            seq.truncate(n)?;
            gpu.start_profile(2048)?;
            let t = now_ms();
            m.decode_greedy(&gpu, &kv, &mut seq, next, 4).await?;
            let wall = (now_ms() - t) / 4.0;
            let how = if fuse { "norms and SwiGLU fused into the projections" } else { "norms and SwiGLU as dispatches" };
            sections.push((format!("decode step after {n} tokens, {how} (per token, mean of 4)"), gpu.finish_profile().await?, 4.0, wall));
        }
        seq.clear()?;
    }
    // One pass over new tokens after others resident, profiled: a prefill chunk, and `bench
    // cache`'s warm request (1,675 positions resident: system + document; 25 new: the question),
    // which is also timed unprofiled (one pass for all dispatches, as requests run), twice.
    let passes = [
        (prefill, 1000, 1500, false, "prefill positions 1000..1500 (one 500-token chunk"),
        (warm, 1675, 1700, true, "warm suffix: positions 1675..1700 after 1,675 resident (one 25-token chunk"),
    ];
    for (on, resident, end, unprofiled, title) in passes {
        if !on {
            continue;
        }
        m.prefill(&gpu, &kv, &mut seq, &prompt[..resident]).await?;
        gpu.start_profile(2048)?;
        let t = now_ms();
        m.forward(&gpu, &kv, &mut seq, &prompt[resident..end], hotprefix::model::Logits::Last).await?;
        gpu.finish().await?;
        let wall = now_ms() - t;
        let timings = gpu.finish_profile().await?;
        let mut title = title.to_string();
        if unprofiled {
            let mut plain = Vec::new();
            for _ in 0..2 {
                seq.truncate(resident)?;
                let t = now_ms();
                m.forward(&gpu, &kv, &mut seq, &prompt[resident..end], hotprefix::model::Logits::Last).await?;
                m.read_argmax(&gpu, 1).await?;
                plain.push(now_ms() - t);
            }
            title += &format!("; unprofiled with the argmax read: {:.0} / {:.0} ms", plain[0], plain[1]);
        }
        sections.push((title + ")", timings, 1.0, wall));
        seq.clear()?;
    }
    let mut out = Vec::new();
    if !json {
        println!("adapter: {}", gpu.describe());
    }
    for (title, timings, per, wall) in sections {
        let mut by: Vec<(String, usize, f64)> = Vec::new();
        for (label, ms) in timings {
            match by.iter_mut().find(|(l, _, _)| *l == label) {
                Some(e) => {
                    e.1 += 1;
                    e.2 += ms;
                }
                None => by.push((label, 1, ms)),
            }
        }
        by.sort_by(|a, b| b.2.total_cmp(&a.2));
        let total: f64 = by.iter().map(|e| e.2).sum::<f64>() / per;
        if json {
            out.push(serde_json::json!({"section": title, "wall_ms": wall, "gpu_ms": total,
                "kernels": by.iter().map(|(l, c, ms)| serde_json::json!({"kernel": l, "dispatches": *c as f64 / per, "ms": ms / per})).collect::<Vec<_>>()}));
            continue;
        }
        println!("\n{title}: GPU {total:.2} ms of {wall:.2} ms wall (profiling: one pass per dispatch)");
        println!("{:>9} {:>7} {:>6}  kernel", "ms", "share", "count");
        for (label, count, ms) in &by {
            println!("{:>9.3} {:>6.1}% {:>6.1}  {label}", ms / per, 100.0 * ms / per / total, *count as f64 / per);
        }
    }
    if json {
        println!("{}", serde_json::json!({"adapter": gpu.describe(), "sections": out}));
    }
    Ok(())
}

/// The public long-document prompt (system + a ~1,650-token document + a question), the same one
/// llama.cpp's reference speed run uses (docs/PEER-SPEED.md).
const PROMPTS: &str = include_str!("../../tests/data/reference/prompts-public.json");
/// The second question of the peer's reuse protocol.
const Q2: &str = "Question: How long and how wide are the chambers of the locks that opened in 2016?";
/// The scripted chat's questions.
const CHAT: [&str; 20] = [
    "Who started the first attempt to build the canal?",
    "Why did that attempt fail?",
    "When did the United States take over the project?",
    "Who was the chief engineer?",
    "How were mosquitoes controlled?",
    "When did the canal open?",
    "How long is the canal?",
    "What is Gatun Lake?",
    "How do the locks lift ships?",
    "Which treaty returned the canal to Panama?",
    "When did Panama take full control?",
    "What was the expansion project?",
    "When did the new locks open?",
    "How big are the new lock chambers?",
    "What is a Neopanamax ship?",
    "How much traffic passes each year?",
    "What problems did droughts cause?",
    "How is water saved in the new locks?",
    "Why is the canal called a wonder?",
    "Summarise the document in one sentence.",
];

/// The long-document prompt's system message, document (up to its question) and question.
fn longdoc() -> Result<(Message, String, String)> {
    let bad = |m: &str| hotprefix::Error::InvalidArgument(format!("prompts-public.json: {m}"));
    let spec: serde_json::Value = serde_json::from_str(PROMPTS).map_err(|e| bad(&e.to_string()))?;
    let p = spec["prompts"]
        .as_array()
        .and_then(|v| v.iter().find(|p| p["id"] == "pub-10-longdoc-qa"))
        .ok_or_else(|| bad("no pub-10-longdoc-qa"))?;
    let msgs: Vec<Message> = serde_json::from_value(p["messages"].clone()).map_err(|e| bad(&e.to_string()))?;
    let [system, user] = msgs.as_slice() else { return Err(bad("expected system + user")) };
    let cut = user.content.rfind("Question:").ok_or_else(|| bad("no question"))?;
    Ok((system.clone(), user.content[..cut].to_string(), user.content[cut..].to_string()))
}

/// `hotprefix bench cache`: (1) TTFT of a long-document question cold and warm (right after
/// another question on the same document), beside the floor (the new suffix's share of the prompt);
/// (2) a 20-turn chat over the pinned document in a small context window (several overflows):
/// prefill efficiency = tokens that had to be computed ÷ tokens prefilled.
pub async fn cache(path: &str, json: bool, runs: usize) -> Result<()> {
    let file = crate::read_model(path)?;
    let (system, doc, q1) = longdoc()?;
    let gpu = Gpu::new().await?;
    let adapter = gpu.describe();
    let mut e =
        Engine::load(gpu, &file, EngineOptions { context: Some(4096), kv_budget_mb: Some(256.0), ..EngineOptions::default() }).await?;
    let req = |q: &str, max_tokens| ChatRequest::new(vec![system.clone(), Message::new("user", format!("{doc}{q}"))], max_tokens);
    // Warm-up: pipelines compiled, weights paged in.
    e.chat(&ChatRequest::new(vec![Message::new("user", "Hi")], 2), |_| {}).await?;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let (mut prompt, mut cached) = (0, 0);
    // Cold: question 2's whole prompt with nothing resident. Warm: question 1 right after it (the
    // document is resident, the new question and the generation prompt are not): the same
    // 1,675-token shared prefix and ~26-token suffix as llama.cpp's reuse measurement.
    for run in 0..runs {
        e.clear_cache();
        let c = e.chat(&req(Q2, 16), |_| {}).await?;
        cold.push(c.timings.ttft_ms);
        let w = e.chat(&req(&q1, 1), |_| {}).await?;
        warm.push(w.timings.ttft_ms);
        (prompt, cached) = (w.usage.prompt_tokens, w.usage.prompt_tokens_details.cached_tokens);
        eprintln!("run {run}: cold {:.0} ms, warm {:.0} ms ({cached} of {prompt} cached)", c.timings.ttft_ms, w.timings.ttft_ms);
    }
    // Each run's warm/cold ÷ floor: on CPU adapters a pass's time moves by a third from run to run,
    // so the median alone hides how far one run can land from it.
    let floor = (prompt - cached) as f64 / prompt as f64;
    let per_run: Vec<f64> = cold.iter().zip(&warm).map(|(c, w)| w / c / floor).collect();
    let (lo, hi) = per_run.iter().fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let (cold_runs, warm_runs) = (cold.clone(), warm.clone());
    let (cold, warm) = (median(&mut cold), median(&mut warm));
    let ratio = warm / cold;

    // The scripted chat: system + pinned document + 20 turns with the model's own replies.
    e.clear_cache();
    let context = 2048;
    drop(e);
    let opts = EngineOptions { context: Some(context), kv_budget_mb: Some(256.0), ..EngineOptions::default() };
    let mut e = Engine::load(Gpu::new().await?, &file, opts).await?;
    let mut msgs = vec![system.clone(), Message::new("user", doc.clone()).pinned(), Message::new("assistant", "I have read the document.")];
    let mut computed: Vec<Vec<u32>> = Vec::new();
    let (mut needed, mut prefilled, mut overflows, mut last_dropped) = (0usize, 0usize, 0usize, 0usize);
    let mut turns = Vec::new();
    for q in CHAT {
        msgs.push(Message::new("user", q));
        let r = e.chat(&ChatRequest::new(msgs.clone(), 32), |_| {}).await?;
        let p = &r.prompt;
        let lcp = computed.iter().map(|c| c.iter().zip(p).take_while(|(a, b)| a == b).count()).max().unwrap_or(0);
        let need = p.len() - lcp.min(p.len() - 1);
        let did = r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens;
        needed += need;
        prefilled += did;
        if r.cache.dropped_messages != last_dropped {
            overflows += 1;
            last_dropped = r.cache.dropped_messages;
        }
        eprintln!(
            "turn {}: {} prompt tokens, {} cached, ttft {:.0} ms",
            turns.len() + 1,
            r.usage.prompt_tokens,
            r.usage.prompt_tokens_details.cached_tokens,
            r.timings.ttft_ms
        );
        turns
            .push(serde_json::json!({"prompt_tokens": r.usage.prompt_tokens, "cached_tokens": r.usage.prompt_tokens_details.cached_tokens,
            "needed": need, "dropped_messages": r.cache.dropped_messages, "ttft_ms": r.timings.ttft_ms}));
        let mut seq = p.clone();
        let fed = if r.finish_reason == "length" { r.tokens.len().saturating_sub(1) } else { r.tokens.len() };
        seq.extend_from_slice(&r.tokens[..fed]);
        computed.push(seq);
        msgs.push(Message::new("assistant", r.text));
    }
    let efficiency = needed as f64 / prefilled.max(1) as f64;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "adapter": adapter,
                "ttft": {"prompt_tokens": prompt, "cached_tokens": cached, "cold_ms": cold, "warm_ms": warm, "warm_over_cold": ratio, "floor": floor, "ratio_to_floor": ratio / floor,
                    "runs": runs, "cold_ms_runs": cold_runs, "warm_ms_runs": warm_runs, "ratio_to_floor_runs": per_run},
                "chat": {"turns": CHAT.len(), "context": context, "overflows": overflows, "needed": needed, "prefilled": prefilled, "prefill_efficiency": efficiency, "per_turn": turns},
            })
        );
    } else {
        println!("adapter: {adapter}");
        println!("TTFT, {prompt}-token prompt, {cached} cached: cold {cold:.0} ms, warm {warm:.0} ms, warm/cold {ratio:.4}");
        println!("  floor (uncached share of the prompt) {floor:.4}: warm/cold = {:.2} x the floor (medians of {runs}; run by run {lo:.2}..{hi:.2})", ratio / floor);
        println!("20-turn chat in a {context}-token context: {overflows} overflows, {needed} tokens had to be computed, {prefilled} were prefilled: efficiency {efficiency:.2}");
        for (i, t) in turns.iter().enumerate() {
            println!("  turn {:>2}: {t}", i + 1);
        }
    }
    Ok(())
}

/// `hotprefix bench structured`: decode speed with an answer held to a JSON Schema (llguidance's
/// mask before each token, no greedy steps queued ahead) against free greedy decode of as many
/// tokens, the mask's time a token, and the grammar compiler's one-off build for the vocabulary.
pub async fn structured(path: &str, json: bool, runs: usize) -> Result<()> {
    let file = crate::read_model(path)?;
    let gpu = Gpu::new().await?;
    let adapter = gpu.describe();
    let mut e =
        Engine::load(gpu, &file, EngineOptions { context: Some(2048), kv_budget_mb: Some(128.0), ..EngineOptions::default() }).await?;
    let t0 = now_ms();
    e.grammars()?;
    let build_ms = now_ms() - t0;
    // A schema whose answer runs long: a list of records of strings, integers and enums.
    let schema = serde_json::json!({"type": "object", "properties": {"rows": {"type": "array", "minItems": 40, "items": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 24}, "year": {"type": "integer", "minimum": 1800, "maximum": 2100},
        "kind": {"enum": ["port", "lock", "bridge", "quay"]}}, "required": ["city", "year", "kind"], "additionalProperties": false}}},
        "required": ["rows"], "additionalProperties": false});
    let n = 128;
    let messages = serde_json::json!([{"role": "user", "content": "List canal places as JSON records."}]);
    let free = serde_json::json!({"messages": messages, "max_tokens": n, "stop": [], "cache_salt": "free"});
    let held = serde_json::json!({"messages": messages, "max_tokens": n, "cache_salt": "held",
        "response_format": {"type": "json_schema", "json_schema": {"name": "rows", "schema": schema}}});
    let (mut free_tok_s, mut held_tok_s, mut mask_ms) = (Vec::new(), Vec::new(), Vec::new());
    // Warm-up: pipelines compiled.
    e.chat(&ChatRequest::new(vec![Message::new("user", "Hi")], 2), |_| {}).await?;
    for _ in 0..runs {
        e.clear_cache();
        let f = e.chat(&ChatRequest::from_json(&free.to_string())?, |_| {}).await?;
        let (t_before, ms_before) = e.mask_stats();
        let h = e.chat(&ChatRequest::from_json(&held.to_string())?, |_| {}).await?;
        let (t_after, ms_after) = e.mask_stats();
        free_tok_s.push(f.timings.decode_tok_s);
        held_tok_s.push(h.timings.decode_tok_s);
        mask_ms.push((ms_after - ms_before) / (t_after - t_before).max(1) as f64);
        eprintln!(
            "free {:.2} tok/s ({} tokens), held {:.2} tok/s ({} tokens, {}), mask {:.3} ms a token",
            f.timings.decode_tok_s,
            f.usage.completion_tokens,
            h.timings.decode_tok_s,
            h.usage.completion_tokens,
            h.finish_reason,
            mask_ms.last().copied().unwrap_or(0.0)
        );
    }
    let (free, held, mask) = (median(&mut free_tok_s), median(&mut held_tok_s), median(&mut mask_ms));
    if json {
        println!(
            "{}",
            serde_json::json!({"adapter": adapter, "vocab": e.model().config().vocab, "grammar_build_ms": build_ms,
                "free_decode_tok_s": free, "constrained_decode_tok_s": held, "ratio": held / free, "mask_ms_per_token": mask})
        );
    } else {
        println!("adapter: {adapter}");
        println!("grammar compiler for {} tokens: {build_ms:.0} ms (once a model)", e.model().config().vocab);
        println!("decode: free {free:.2} tok/s, held to a JSON Schema {held:.2} tok/s ({:.2}x); mask {mask:.3} ms a token", held / free);
    }
    Ok(())
}
