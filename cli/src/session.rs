//! `hotprefix session`: chat requests, one JSON object a line, answered in order on one engine so
//! that later requests hit what earlier ones left resident. One JSON result a line, flushed as
//! soon as its request ends; a bad line gets a one-line error object in its place and the session
//! goes on. With `--requests -` each line of standard input is answered before the next is read,
//! so a chat client can drive it turn by turn.

use std::io::{BufRead, BufReader, Write};

use hotprefix::api::{error_json, ChatRequest};
use hotprefix::engine::{Engine, EngineOptions};
use hotprefix::gpu::Gpu;
use hotprefix::{Error, Result};

pub async fn run(model: &str, requests: &str, opts: EngineOptions) -> Result<()> {
    let input: Box<dyn BufRead> = if requests == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(requests).map_err(|e| Error::InvalidArgument(format!("cannot read {requests}: {e}")))?;
        Box::new(BufReader::new(f))
    };
    let file = crate::read_model(model)?;
    let mut engine = Engine::load(Gpu::new().await?, &file, opts).await?;
    drop(file);
    let mut out = std::io::stdout().lock();
    for line in input.lines() {
        let line = line.map_err(|e| Error::InvalidArgument(format!("reading requests: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = match ChatRequest::from_json(&line) {
            Ok(req) => match engine.chat(&req, |_| {}).await {
                Ok(r) => serde_json::to_value(&r).unwrap_or_else(|e| error_json(&Error::InvalidArgument(e.to_string()))),
                Err(e) => error_json(&e),
            },
            Err(e) => error_json(&e),
        };
        writeln!(out, "{answer}").and_then(|_| out.flush()).map_err(|e| Error::InvalidArgument(format!("writing results: {e}")))?;
    }
    Ok(())
}
