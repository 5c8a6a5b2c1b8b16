//! Tiny-model files against llama.cpp in headless Chromium: the float formats (the tiny llama in
//! F32, and llama.cpp's BF16 and F16 conversions of it). As tests/formats_browser.rs.
#![cfg(target_arch = "wasm32")]

mod dual;
#[macro_use]
mod format_check;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

tiny_format_test!(tiny_f32_agrees_with_llama_cpp, "tiny-F32");
tiny_format_test!(tiny_bf16_agrees_with_llama_cpp, "tiny-BF16");
tiny_format_test!(tiny_f16_agrees_with_llama_cpp, "tiny-F16");
