//! The CPU side of loading a model, end to end, on arbitrary bytes: `preflight::check_model_cpu`
//! (header, config, tokenizer, chat template, every tensor's shape and GPU-layout conversion, as
//! `Engine::load` does them), then a short chat rendered with the model's template and tokenized
//! and decoded with its tokenizer. It must return `Ok` or `Err`, never panic, hang, or allocate
//! more than the input justifies (docs/FUZZING.md).
#![no_main]

use hotprefix::chat::Message;
use hotprefix::preflight::check_model_cpu;
use hotprefix::tokenizer::StreamDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = check_model_cpu(data) else { return };
    let tok = &m.tokenizer;
    let messages = [
        Message::new("system", "Answer briefly."),
        Message::new("user", "Hi <|im_start|>there, ünïcode 123!"),
        Message::new("assistant", "Hello."),
        Message::new("user", "And now?"),
    ];
    let mut ids = Vec::new();
    if let Some(t) = &m.template {
        if let Ok(text) = t.render(&messages, true) {
            ids.extend(tok.encode_with_special(&text).unwrap_or_default());
        }
    }
    for msg in &messages {
        ids.extend(tok.encode_text(&msg.content).unwrap_or_default());
    }
    let vocab = tok.vocab_size();
    assert!(vocab <= m.config.vocab, "the load refuses a tokenizer larger than the model");
    for &id in &ids {
        assert!((id as usize) < vocab, "token id {id} from a vocabulary of {vocab}");
    }
    tok.decode(&ids).expect("ids of this vocabulary decode");
    let mut stream = StreamDecoder::new();
    let mut streamed: String = ids.iter().map(|&id| stream.push(tok, id)).collect();
    streamed.push_str(&stream.finish());
    let plain: Vec<u32> = ids.iter().copied().filter(|&id| !tok.is_control(id)).collect();
    assert_eq!(streamed, tok.decode(&plain).expect("ids of this vocabulary decode"), "streamed = decoded, less control tokens");
    let _ = (tok.bos_id(), tok.eos_id(), tok.token_id("<|im_end|>"), tok.is_control(u32::MAX));
});
