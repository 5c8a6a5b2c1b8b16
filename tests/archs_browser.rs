//! Every architecture against llama.cpp in headless Chromium (`wasm-pack test`), on the
//! small-vocabulary tiny models (models/archs/web-*.gguf: each architecture's tiny model with
//! SmolLM2's 49,152-token vocabulary, a third the size of the native ones; scripts/make-archs.sh,
//! tests/data/archs/README.md): qwen2 (Q/K/V biases, NEOX RoPE, untied head), qwen3 (QK-norm,
//! wide heads) and phi3 (fused Q|K|V and gate|up, partial rotary, LongRoPE's short factors) here,
//! llama with Llama-3's RoPE factors and gemma3 (sliding window, post-norms, GeGLU) in
//! tests/archs_browser_2.rs: two binaries, as the files are compiled in.
#![cfg(target_arch = "wasm32")]

mod dual;
#[macro_use]
mod format_check;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

tiny_arch_test!(qwen2_agrees_with_llama_cpp, "web-qwen2");
tiny_arch_test!(qwen3_agrees_with_llama_cpp, "web-qwen3");
tiny_arch_test!(phi3_agrees_with_llama_cpp, "web-phi3");
