//! The CPU side of loading a model, end to end, on arbitrary bytes: `preflight::check_model_cpu`
//! (header, config, tokenizer, chat template, every tensor's shape and GPU-layout conversion, as
//! `Engine::load` does them), then a short chat rendered with the model's template and tokenized
//! and decoded with its tokenizer (`testmodel::load_and_chat`, which `cargo test` runs on the
//! regression inputs). It must return `Ok` or `Err`, never panic, hang, or allocate more than the
//! input justifies (docs/FUZZING.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hotprefix::testmodel::load_and_chat(data);
});
