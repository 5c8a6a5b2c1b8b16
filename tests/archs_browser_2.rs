//! Llama with Llama-3's RoPE frequency factors and gemma3 (sliding window, post-norms, GeGLU,
//! √width embedding) against llama.cpp in headless Chromium, as tests/archs_browser.rs does qwen2
//! and qwen3.
#![cfg(target_arch = "wasm32")]

mod dual;
#[macro_use]
mod format_check;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

tiny_arch_test!(llama3_agrees_with_llama_cpp, "web-llama3");
tiny_arch_test!(gemma3_agrees_with_llama_cpp, "web-gemma3");
