//! Tiny-model files against llama.cpp in headless Chromium: the 32-value block formats and IQ4_XS
//! (llama.cpp's Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL and IQ4_XS quantizations of the tiny llama; each
//! also holds a Q6_K tensor). As tests/formats_browser.rs.
#![cfg(target_arch = "wasm32")]

mod dual;
#[macro_use]
mod format_check;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

tiny_format_test!(tiny_q4_0_agrees_with_llama_cpp, "tiny-Q4_0");
tiny_format_test!(tiny_q5_0_agrees_with_llama_cpp, "tiny-Q5_0");
tiny_format_test!(tiny_q5_1_agrees_with_llama_cpp, "tiny-Q5_1");
tiny_format_test!(tiny_q8_0_agrees_with_llama_cpp, "tiny-Q8_0");
tiny_format_test!(tiny_iq4_nl_agrees_with_llama_cpp, "tiny-IQ4_NL");
tiny_format_test!(tiny_iq4_xs_agrees_with_llama_cpp, "tiny-IQ4_XS");
