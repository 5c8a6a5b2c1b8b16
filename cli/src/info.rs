//! `hotprefix info MODEL`: what a GGUF file holds (architecture and the features of it the file
//! uses, parameters, the formats of its tensors, context, tokenizer) and whether this build runs it, with the first reason if not. The
//! verdict is the CPU side of a load (`preflight::check_model_cpu`): no GPU is needed.

use hotprefix::chat::ChatTemplate;
use hotprefix::engine::Prompter;
use hotprefix::gguf::Gguf;
use hotprefix::model::inspect::Summary;
use hotprefix::preflight::check_model_cpu;
use hotprefix::tokenizer::Tokenizer;
use hotprefix::Result;

pub fn info(path: &str, json_out: bool) -> Result<()> {
    let file = crate::read_model(path)?;
    let g = Gguf::parse(&file)?;
    let s = Summary::of(&g, file.len() as u64, check_model_cpu(&file).map(|_| ()));
    if json_out {
        println!("{}", serde_json::to_string(&s).map_err(|e| hotprefix::Error::InvalidArgument(e.to_string()))?);
        return Ok(());
    }
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "(none)".into());
    println!("{path}");
    println!("  architecture   {}", or_none(s.architecture.clone()));
    println!("  name           {}", or_none(s.name.clone()));
    println!("  features       {}", s.features.join(", "));
    println!("  parameters     {} in {} tensors, {} bytes", s.parameters, s.tensors, s.bytes);
    for f in &s.formats {
        println!("  {:<14} {} tensors, {} values", f.name, f.tensors, f.values);
    }
    println!("  context        {}", or_none(s.context.map(|c| c.to_string())));
    println!("  tokenizer      {} (pre-tokenizer {})", or_none(s.tokenizer), or_none(s.pre_tokenizer));
    println!("  chat template  {}", s.chat_template);
    match s.refused {
        None => println!("  runs           yes"),
        Some(e) => println!("  runs           no: {e}"),
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
            Prompter { template: template.as_ref(), tokenizer: &tokenizer, tools: None, vars: None }.encode(&crate::read_messages(&m)?)?.ids
        }
        (Some(p), None) => tokenizer.encode_prompt(&p)?,
        (None, None) => return Err(hotprefix::Error::InvalidArgument("give --prompt or --messages".into())),
    };
    println!("{}", serde_json::to_string(&ids).unwrap_or_default());
    Ok(())
}
