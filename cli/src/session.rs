//! `hotprefix session`: chat requests, one JSON object a line, answered in order on one engine so
//! that later requests hit what earlier ones left resident. One JSON result a line, flushed as
//! soon as its request ends. A line that is not a valid request (not UTF-8, not JSON, a field
//! hotprefix does not implement) gets a one-line error object in its place and the session goes
//! on; blank lines (nothing but whitespace) are skipped and get no answer. After a page-accounting
//! fault the engine rebuilds its cache, and that request's error says so. With `--requests -`
//! each line of standard input is answered before the next is read, so a chat client can drive
//! it turn by turn.

use std::io::{BufRead, BufReader, Write};

use hotprefix::api::{error_json, ChatRequest};
use hotprefix::engine::{Engine, EngineOptions};
use hotprefix::gpu::Gpu;
use hotprefix::{Error, Result};

pub async fn run(model: &str, requests: &str, opts: EngineOptions) -> Result<()> {
    let mut input: Box<dyn BufRead> = if requests == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(requests).map_err(|e| Error::InvalidArgument(format!("cannot read {requests}: {e}")))?;
        Box::new(BufReader::new(f))
    };
    let file = crate::read_model(model)?;
    let mut engine = Engine::load(Gpu::new().await?, &file, opts).await?;
    drop(file);
    let mut out = std::io::stdout().lock();
    let mut raw = Vec::new();
    for number in 1.. {
        raw.clear();
        let n = input.read_until(b'\n', &mut raw).map_err(|e| Error::InvalidArgument(format!("reading requests: {e}")))?;
        if n == 0 {
            break;
        }
        let answer = match std::str::from_utf8(&raw) {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => match ChatRequest::from_json(line) {
                Ok(req) => match engine.chat(&req, |_| {}).await {
                    Ok(r) => serde_json::to_value(&r).unwrap_or_else(|e| error_json(&Error::InvalidArgument(e.to_string()))),
                    Err(e) => error_json(&e),
                },
                Err(e) => error_json(&e),
            },
            Err(e) => error_json(&Error::InvalidArgument(format!("request line {number} is not valid UTF-8 ({e})"))),
        };
        writeln!(out, "{answer}").and_then(|_| out.flush()).map_err(|e| Error::InvalidArgument(format!("writing results: {e}")))?;
    }
    Ok(())
}
