//! `hotprefix`: the native command line — run, score, bench. Output shapes are a contract
//! (README "CLI"); errors are one line on stderr and a non-zero exit, never a backtrace.

mod bench;
mod info;
mod session;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hotprefix::chat::Message;
use hotprefix::engine::{Engine, EngineOptions, GenerateParams};
use hotprefix::gpu::Gpu;
use hotprefix::model::{Model, Options};
use hotprefix::sample::SamplingParams;
use hotprefix::{Error, Result};

const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Parser)]
#[command(name = "hotprefix", version, about = "Small LLMs on WebGPU with a resident prompt cache")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a raw prompt or a chat (OpenAI-style messages).
    Run {
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: String,
        /// Raw prompt text (control tokens in it stay plain text; BOS first where the model asks).
        #[arg(long, conflicts_with = "messages", required_unless_present = "messages")]
        prompt: Option<String>,
        /// A JSON file with `[{"role": "system"|"user"|"assistant", "content": "..."}]`.
        #[arg(long)]
        messages: Option<String>,
        #[arg(long, default_value_t = 256)]
        max_tokens: usize,
        /// 0 = greedy.
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        #[arg(long, default_value_t = 1.0)]
        top_p: f32,
        #[arg(long, default_value_t = 1.0)]
        repetition_penalty: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Stop before this string (repeatable).
        #[arg(long)]
        stop: Vec<String>,
        /// Print one JSON object instead of streaming text.
        #[arg(long)]
        json: bool,
        /// With --messages: OpenAI's `response_format`, as JSON text or a .json file, e.g.
        /// '{"type": "json_schema", "json_schema": {"name": "x", "schema": {...}}}'.
        #[arg(long, requires = "messages")]
        response_format: Option<String>,
        /// With --messages: OpenAI's `tools` (a JSON array, as text or a .json file).
        #[arg(long, requires = "messages")]
        tools: Option<String>,
        /// With --tools: none, auto, required, or the name of the function to call.
        #[arg(long, requires = "tools")]
        tool_choice: Option<String>,
    },
    /// Teacher-force token ids and print the top-K logits after each, plus a greedy continuation.
    Score {
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: String,
        /// Comma-separated token ids.
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
        #[arg(long, default_value_t = 5)]
        top: usize,
        #[arg(long, default_value_t = 0)]
        greedy: usize,
    },
    /// Runs chat requests (JSON lines) in order on one engine, printing one JSON result per line.
    Session {
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: String,
        /// A JSON-lines file of requests, or `-` for standard input (each answered before the next is read).
        #[arg(long)]
        requests: String,
        /// Run every request cold (no prefix kept between requests), for comparison.
        #[arg(long)]
        no_cache: bool,
        /// KV pool size in MiB (default: 512, or what the adapter's limits allow).
        #[arg(long)]
        kv_budget_mb: Option<f64>,
        /// Context window: positions one request may use (default: the model's trained context).
        #[arg(long)]
        context: Option<usize>,
    },
    /// What a GGUF file holds (architecture, parameters, tensor formats, context, tokenizer) and
    /// whether this build runs it (the first reason if not). Needs no GPU.
    Info {
        #[arg(default_value = DEFAULT_MODEL)]
        model: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The token ids of a raw prompt (control-token text stays plain text) or of chat messages
    /// rendered through the model's template, as one JSON array. Needs no GPU.
    Tokenize {
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: String,
        /// Raw prompt text.
        #[arg(long, conflicts_with = "messages", required_unless_present = "messages")]
        prompt: Option<String>,
        /// A JSON file with `[{"role": …, "content": …}]`, rendered with the generation prompt.
        #[arg(long)]
        messages: Option<String>,
    },
    /// Benchmarks: the model (prefill and decode tok/s), `kernels`, or `cache` (TTFT cold vs warm,
    /// and prefill efficiency over a scripted chat).
    Bench {
        /// `model` (default), `kernels`, `cache`, `profile` (GPU time per kernel, timestamp queries)
        /// or `structured` (decode held to a JSON Schema vs free, the mask's time a token).
        #[arg(default_value = "model")]
        what: String,
        #[arg(long, default_value = DEFAULT_MODEL)]
        model: String,
        #[arg(long)]
        json: bool,
        /// Runs per figure (the median is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Kernel variants (matrix-vector, attention): `auto` (the adapter's choice), `rows`, `lanes` or `coop`.
        #[arg(long, default_value = "auto")]
        kernels: String,
        /// `bench profile`: `decode`, `decode-short` (after 128 tokens only), `prefill`, `warm` (25 new tokens after 1,675 resident: `bench cache`'s warm request) or `all`.
        #[arg(long, default_value = "all")]
        section: String,
        /// `bench kernels`: the weight formats to time (comma-separated names; default all).
        #[arg(long, default_value = "")]
        formats: String,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("bad arguments").trim_start_matches("error: ");
            eprintln!("hotprefix: {first} (see hotprefix --help)");
            return ExitCode::from(2);
        }
    };
    let result = pollster::block_on(async {
        match cli.cmd {
            Cmd::Run {
                model,
                prompt,
                messages,
                max_tokens,
                temperature,
                top_k,
                top_p,
                repetition_penalty,
                seed,
                stop,
                json,
                response_format,
                tools,
                tool_choice,
            } => match messages {
                Some(m) => {
                    let mut req = serde_json::json!({
                        "messages": read_messages(&m)?, "max_tokens": max_tokens, "temperature": temperature,
                        "top_k": top_k, "top_p": top_p, "repetition_penalty": repetition_penalty, "seed": seed, "stop": stop,
                    });
                    if let Some(f) = response_format {
                        req["response_format"] = json_arg("--response-format", &f)?;
                    }
                    if let Some(t) = tools {
                        req["tools"] = json_arg("--tools", &t)?;
                    }
                    if let Some(c) = tool_choice {
                        req["tool_choice"] = match c.as_str() {
                            "none" | "auto" | "required" => serde_json::Value::String(c),
                            name => serde_json::json!({"type": "function", "function": {"name": name}}),
                        };
                    }
                    chat(&model, &req.to_string(), json).await
                }
                None => {
                    let sampling = SamplingParams { temperature, top_k, top_p, repetition_penalty, seed, ..SamplingParams::default() };
                    let params = GenerateParams { max_tokens, sampling, stop, ..GenerateParams::default() };
                    run(&model, prompt, params, json).await
                }
            },
            Cmd::Score { model, tokens, top, greedy } => score(&model, &tokens, top, greedy).await,
            Cmd::Session { model, requests, no_cache, kv_budget_mb, context } => {
                let opts = EngineOptions { context, kv_budget_mb, cache: !no_cache, ..EngineOptions::default() };
                session::run(&model, &requests, opts).await
            }
            Cmd::Info { model, json } => info::info(&model, json),
            Cmd::Tokenize { model, prompt, messages } => info::tokenize(&model, prompt, messages),
            Cmd::Bench { what, model, json, runs, kernels, section, formats } => match what.as_str() {
                "model" => bench::model(&model, json, runs.max(1), &kernels).await,
                "kernels" => bench::kernels(&formats).await,
                "profile" => bench::profile(&model, json, &section, &kernels).await,
                "cache" => bench::cache(&model, json, runs.max(1)).await,
                "structured" => bench::structured(&model, json, runs.max(1)).await,
                other => Err(Error::InvalidArgument(format!("bench {other:?}: expected model, kernels, cache, profile or structured"))),
            },
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotprefix: {}", e.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn read_model(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        let hint = if path == DEFAULT_MODEL { " (run scripts/fetch-model.sh to download the default model)" } else { "" };
        Error::InvalidArgument(format!("cannot read model {path}: {e}{hint}"))
    })
}

/// A JSON file of `[{role, content}]` messages.
pub(crate) fn read_messages(path: &str) -> Result<Vec<Message>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidArgument(format!("cannot read {path}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| Error::InvalidArgument(format!("{path}: not a list of {{role, content}} messages: {e}")))
}

/// A JSON argument: the text itself when it starts like JSON, else a file holding it.
fn json_arg(flag: &str, v: &str) -> Result<serde_json::Value> {
    let text = match v.trim_start().starts_with(['{', '[']) {
        true => v.to_string(),
        false => std::fs::read_to_string(v).map_err(|e| Error::InvalidArgument(format!("{flag}: cannot read {v}: {e}")))?,
    };
    serde_json::from_str(&text).map_err(|e| Error::InvalidArgument(format!("{flag}: not JSON: {e}")))
}

/// `run --messages`: one chat request (the model's template, `response_format`, tools), its
/// text streamed; tool calls printed after it, one JSON line each; or, with `--json`, the result
/// as `hotprefix session` prints it.
async fn chat(model: &str, request: &str, json: bool) -> Result<()> {
    let req = hotprefix::api::ChatRequest::from_json(request)?;
    let file = read_model(model)?;
    let gpu = Gpu::new().await?;
    let mut engine =
        Engine::load(gpu, &file, EngineOptions { context: Some(4096), kv_budget_mb: Some(128.0), ..EngineOptions::default() }).await?;
    let mut stdout = std::io::stdout();
    let r = engine
        .chat_deltas(&req, None, |d| {
            if let (false, hotprefix::api::Delta::Text(t)) = (json, d) {
                let _ = stdout.write_all(t.as_bytes());
                let _ = stdout.flush();
            }
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| Error::InvalidArgument(e.to_string()))?);
    } else {
        println!();
        for c in &r.tool_calls {
            println!("{}", serde_json::to_string(c).map_err(|e| Error::InvalidArgument(e.to_string()))?);
        }
    }
    Ok(())
}

async fn run(model: &str, prompt: Option<String>, params: GenerateParams, json: bool) -> Result<()> {
    let file = read_model(model)?;
    let gpu = Gpu::new().await?;
    let mut engine =
        Engine::load(gpu, &file, EngineOptions { context: Some(4096), kv_budget_mb: Some(128.0), ..EngineOptions::default() }).await?;
    let ids = match &prompt {
        Some(p) => engine.tokenizer().encode_prompt(p)?,
        None => return Err(Error::InvalidArgument("give --prompt or --messages".into())),
    };
    let mut stdout = std::io::stdout();
    let g = engine
        .generate(&ids, &params, |piece| {
            if !json {
                let _ = stdout.write_all(piece.as_bytes());
                let _ = stdout.flush();
            }
        })
        .await?;
    if json {
        let out = serde_json::json!({
            "text": g.text,
            "tokens": g.tokens,
            "finish_reason": g.finish.as_str(),
            "usage": {
                "prompt_tokens": g.prompt_tokens,
                "completion_tokens": g.tokens.len(),
                "prompt_tokens_details": { "cached_tokens": g.cached_tokens },
            },
            "timings": g.timings,
        });
        println!("{out}");
    } else {
        println!();
    }
    Ok(())
}

async fn score(model: &str, tokens: &[u32], top: usize, greedy: usize) -> Result<()> {
    let total = tokens
        .len()
        .checked_add(greedy)
        .filter(|&n| n <= 1 << 20)
        .ok_or_else(|| Error::InvalidArgument(format!("{} tokens + {greedy} greedy steps is more than any context", tokens.len())))?;
    let file = read_model(model)?;
    let gpu = Gpu::new().await?;
    let opts = Options { chunk: 64, context: None, all_logits: true };
    let m = Model::load(&gpu, &file, opts).await?;
    if total > m.max_positions() {
        return Err(Error::ContextFull { needed: total, capacity: m.max_positions() });
    }
    let kv = m.kv_cache(&gpu, total.div_ceil(16), 16).await?;
    let mut seq = kv.sequence(total);
    let mut positions = Vec::with_capacity(tokens.len());
    let mut last = 0u32;
    m.score(&gpu, &kv, &mut seq, tokens, |_, row| {
        let mut idx: Vec<u32> = (0..row.len() as u32).collect();
        let k = top.min(row.len());
        if k > 0 {
            let cmp = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
            idx.select_nth_unstable_by(k - 1, cmp);
            idx.truncate(k);
            idx.sort_by(cmp);
        } else {
            idx.clear();
        }
        last = hotprefix::oracle::argmax(row, 1, row.len())[0];
        positions.push(idx.iter().map(|&i| serde_json::json!([i, row[i as usize]])).collect::<Vec<_>>());
    })
    .await?;
    let mut out_greedy = Vec::with_capacity(greedy);
    let mut next = last;
    for i in 0..greedy {
        out_greedy.push(next);
        if i + 1 < greedy {
            m.decode_step(&gpu, &kv, &mut seq, next).await?;
            next = m.read_argmax(&gpu, 1).await?[0];
        }
    }
    println!("{}", serde_json::json!({ "positions": positions, "greedy": out_greedy }));
    Ok(())
}
