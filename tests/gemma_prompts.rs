//! Gemma-3-270m's prompts as llama.cpp makes them (the file has no chat template): every public
//! prompt of its reference (tests/data/archs/gemma3-270m-Q4_K_M-llamacpp.json) — the raw ones
//! through its SentencePiece tokenizer with BOS first, the chats through llama.cpp's built-in
//! `gemma` template (the system message folded into the first user turn) — gives llama.cpp's ids.
#![cfg(not(target_arch = "wasm32"))]

use hotprefix::chat::{ChatTemplate, Message};
use hotprefix::engine::Prompter;
use hotprefix::gguf::Gguf;
use hotprefix::tokenizer::Tokenizer;
use serde_json::Value;

mod common;

#[test]
fn gemma3_prompts_and_builtin_template_give_llama_cpp_ids() {
    let file = common::arch_file("gemma3-270m-Q4_K_M.gguf");
    let g = Gguf::parse(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&g).unwrap();
    let template = ChatTemplate::for_gguf(&g).unwrap().expect("a built-in template for gemma3");
    assert_eq!(template.builtin(), Some("gemma"));
    let read = |p: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(common::root().join(p)).unwrap()).unwrap() };
    let reference = read("tests/data/archs/gemma3-270m-Q4_K_M-llamacpp.json");
    let spec = read("tests/data/reference/prompts-public.json");
    let mut checked = 0;
    for r in reference["prompts"].as_array().unwrap() {
        let want: Vec<u32> = r["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let p = spec["prompts"].as_array().unwrap().iter().find(|p| p["id"] == r["id"]).expect("the prompt");
        let got = if p["kind"] == "chat" {
            let messages: Vec<Message> = p["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
                .collect();
            Prompter { template: Some(&template), tokenizer: &tokenizer, tools: None, vars: None }.encode(&messages).unwrap().ids
        } else {
            tokenizer.encode_prompt(p["text"].as_str().unwrap()).unwrap()
        };
        assert_eq!(got, want, "{}", r["id"]);
        checked += 1;
    }
    assert!(checked >= 3, "{checked} prompts");
}
