//! Every weight format against llama.cpp on whole models, natively: llama.cpp's own
//! quantizations of the default model (scripts/make-formats.sh: Q4_K_M, Q5_K_M, Q6_K, Q3_K_S,
//! Q2_K, Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, BF16) and random-weight tiny llama models whose
//! every matrix has 256-value rows (scripts/make-tiny-formats.py), each scored on the prompts of
//! its llama.cpp reference in tests/data/formats/ that bounds.json names (three for the default
//! model's files, nine for the tiny ones), against bounds derived from llama.cpp against itself on
//! those prompts (tests/data/formats/bounds.json, by scripts/format-bounds.py; README beside the
//! data).
//!
//! Each file: its tensor types are the histogram recorded when it was made; it loads with GPU
//! weight bytes within 2% of its GGUF tensor bytes; teacher-forced over prompt + llama.cpp's
//! greedy continuation, top-1 agreement, top-1 flips at llama.cpp gaps, mean |Δlogit| on
//! llama.cpp's top-5, KL at the last prompt position and greedy agreement stay within its bounds.
#![cfg(not(target_arch = "wasm32"))]

mod common;
mod data_set;
mod dual;
mod score;

#[test]
fn llama_cpp_quantizations_of_the_default_model_agree_with_llama_cpp() {
    data_set::check_set("formats", "smollm2");
}

#[test]
fn tiny_models_with_256_value_rows_agree_with_llama_cpp() {
    data_set::check_set("formats", "tiny");
}
