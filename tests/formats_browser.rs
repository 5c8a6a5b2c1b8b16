//! Tiny-model files against llama.cpp in headless Chromium (`wasm-pack test`), the K-quant
//! presets: llama.cpp's Q2_K, Q3_K_M and Q4_K_M quantizations of the tiny 256-wide llama
//! (tests/data/formats/README.md; Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights in every role, the
//! embedding and tied head included). tests/formats_browser_32.rs and _floats.rs hold the other
//! formats (every format then runs in a whole model in the browser): one test binary each, as the files are compiled in (~40–90 MB a binary). The files
//! are made by scripts/make-formats.sh (scripts/test.sh runs it before the browser tests).
#![cfg(target_arch = "wasm32")]

mod dual;
#[macro_use]
mod format_check;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

tiny_format_test!(tiny_q4_k_m_agrees_with_llama_cpp, "tiny-Q4_K_M");
tiny_format_test!(tiny_q2_k_agrees_with_llama_cpp, "tiny-Q2_K");
tiny_format_test!(tiny_q3_k_m_agrees_with_llama_cpp, "tiny-Q3_K_M");
