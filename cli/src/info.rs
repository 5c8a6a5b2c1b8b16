//! `hotprefix info MODEL`: what a GGUF file holds (architecture and the features of it the file
//! uses, parameters, the formats of its tensors, context, tokenizer) and whether this build runs it, with the first reason if not. The
//! verdict is the CPU side of a load (`preflight::check_model_cpu`): no GPU is needed.

use std::collections::BTreeMap;

use hotprefix::chat::ChatTemplate;
use hotprefix::engine::Prompter;
use hotprefix::gguf::{self, Gguf};
use hotprefix::preflight::check_model_cpu;
use hotprefix::tokenizer::Tokenizer;
use hotprefix::Result;
use serde_json::json;

pub fn info(path: &str, json_out: bool) -> Result<()> {
    let file = crate::read_model(path)?;
    let g = Gguf::parse(&file)?;
    let text = |k: &str| g.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let arch = text("general.architecture");
    let number = |k: &str| arch.as_ref().and_then(|a| g.get(&format!("{a}.{k}"))).and_then(|v| v.as_u64());
    // Tensors and values by ggml type, in the order of the type ids.
    let mut formats: BTreeMap<u32, (usize, u64)> = BTreeMap::new();
    let mut params = 0u64;
    for t in &g.tensors {
        let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
        params = params.saturating_add(n);
        let e = formats.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(n);
    }
    let name = |id: u32| gguf::ggml_type(id).map_or_else(|| format!("type {id}"), |t| t.name.to_string());
    let verdict = check_model_cpu(&file).map(|_| ()).map_err(|e| e.to_string());
    let features = hotprefix::model::arch::features(&g);
    let template = match ChatTemplate::for_gguf(&g) {
        Ok(Some(t)) => match t.builtin() {
            Some(name) => format!("built-in {name} (the file has none)"),
            None => "the file's own".to_string(),
        },
        Ok(None) => "none (chat requests are refused; raw prompts run)".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    if json_out {
        let formats: Vec<_> = formats
            .iter()
            .map(|(id, (tensors, values))| json!({"type": name(*id), "ggml_type": id, "tensors": tensors, "values": values}))
            .collect();
        let out = json!({
            "architecture": arch,
            "features": features,
            "parameters": params,
            "tensors": g.tensors.len(),
            "formats": formats,
            "bytes": file.len(),
            "context": number("context_length"),
            "tokenizer": text("tokenizer.ggml.model"),
            "pre_tokenizer": text("tokenizer.ggml.pre"),
            "chat_template": template,
            "runs": verdict.is_ok(),
            "refused": verdict.as_ref().err(),
        });
        println!("{out}");
        return Ok(());
    }
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "(none)".into());
    println!("{path}");
    println!("  architecture   {}", or_none(arch.clone()));
    println!("  features       {}", features.join(", "));
    println!("  parameters     {params} in {} tensors, {} bytes", g.tensors.len(), file.len());
    for (id, (tensors, values)) in &formats {
        println!("  {:<14} {tensors} tensors, {values} values", name(*id));
    }
    println!("  context        {}", or_none(number("context_length").map(|c| c.to_string())));
    println!("  tokenizer      {} (pre-tokenizer {})", or_none(text("tokenizer.ggml.model")), or_none(text("tokenizer.ggml.pre")));
    println!("  chat template  {template}");
    match verdict {
        Ok(()) => println!("  runs           yes"),
        Err(e) => println!("  runs           no: {e}"),
    }
    Ok(())
}

/// `hotprefix tokenize`: the ids of `--prompt` (BOS first where the model asks, control-token text
/// as plain text) or of `--messages` rendered through the model's chat template (its markers as
/// control tokens, the contents as plain text), as one JSON array. The CPU side only.
pub fn tokenize(path: &str, prompt: Option<String>, messages: Option<String>) -> Result<()> {
    let file = crate::read_model(path)?;
    let g = Gguf::parse(&file)?;
    let tokenizer = Tokenizer::from_gguf(&g)?;
    let ids = match (prompt, messages) {
        (_, Some(m)) => {
            let template = ChatTemplate::for_gguf(&g)?;
            Prompter { template: template.as_ref(), tokenizer: &tokenizer }.encode(&crate::read_messages(&m)?)?.ids
        }
        (Some(p), None) => tokenizer.encode_prompt(&p)?,
        (None, None) => return Err(hotprefix::Error::InvalidArgument("give --prompt or --messages".into())),
    };
    println!("{}", serde_json::to_string(&ids).unwrap_or_default());
    Ok(())
}
