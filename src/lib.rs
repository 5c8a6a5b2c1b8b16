// Every public item of the API is documented; what `test-support` adds is internals.
#![cfg_attr(not(feature = "test-support"), warn(missing_docs))]
//! hotprefix: small LLMs on WebGPU with the attention KV cache kept resident on the GPU.
//!
//! - [`engine::Engine`] loads a GGUF llama-family model (the default is SmolLM2-135M-Instruct),
//!   renders its own chat template, tokenizes, and answers [`api::ChatRequest`]s over the
//!   resident prompt cache: every request's K/V stays on the GPU, indexed by a radix tree of
//!   pages, and later requests reuse the longest resident prefix by sharing pages; the oldest
//!   turns are dropped on overflow, and [`lint`] and the miss diagnosis explain misses;
//! - [`model`] is the forward pass over the paged KV cache ([`kv`]: page pool and sequences),
//!   [`gguf`] the validated reader, [`tokenizer`], [`chat`] and [`sample`] the CPU-side pieces;
//! - [`gpu::Gpu`] owns adapter, device and queue (browser WebGPU on wasm32, Vulkan/Metal/DX12/GL
//!   natively), turns GPU errors and device loss into [`Error`]s and caches pipelines and bind
//!   groups;
//! - `ops` (internal) has one function per kernel (`shaders/<op>.wgsl`): matmul/matvec over F32,
//!   F16, Q8_0 and Q4_1 weights, RMSNorm, RoPE, SwiGLU, Q8_0 embedding lookup, argmax, the
//!   sampler's top-k, and paged KV write + causal grouped-query attention; `oracle` (internal)
//!   and [`quant`] are the plain CPU references every kernel is tested against;
//! - [`selftest`] runs those comparisons, natively, in the browser and on the demo page;
//! - [`preflight`] runs everything the load does on the CPU (the fuzzed part of loading).
//!
//! The browser side is `web` (wasm-bindgen entry points) under the npm package in `js/`.
//!
//! With the `test-support` feature (off by default; no semver promise) the kernels (`ops`), the
//! CPU oracles (`oracle`), the seeded generator (`rng`), the tiny test model (`testmodel`) and
//! the GPU's buffers and batches become public, for this crate's tests, benchmarks and fuzzing.

/// Modules that are not the library's API: the kernels, their CPU oracles, the generator behind
/// the seeded fixtures and the tiny test model. Public, and hidden from the docs, only with the
/// `test-support` feature (this crate's tests and benchmarks, the CLI, the fuzz targets).
macro_rules! internal {
    ($($m:ident),*) => {$(
        #[cfg(feature = "test-support")]
        #[doc(hidden)]
        pub mod $m;
        #[cfg(not(feature = "test-support"))]
        pub(crate) mod $m;
    )*};
}

pub mod api;
pub mod cache;
pub mod check;
pub mod engine;
pub mod error;
pub mod gpu;
pub mod lint;
pub mod model;
pub mod text;
#[cfg(target_arch = "wasm32")]
pub mod web;
internal!(ops);

// The paths of the flat tree before it was cut into parts, kept stable.
pub use cache::kv;
pub(crate) use cache::{persist, prefix};
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub use check::testmodel;
#[cfg(feature = "test-support")]
pub use check::oracle;
#[cfg(not(feature = "test-support"))]
pub(crate) use check::oracle;
pub use check::selftest;
pub use engine::sample;
#[cfg(feature = "test-support")]
pub use engine::sample::rng;
#[cfg(not(feature = "test-support"))]
pub(crate) use engine::sample::rng;
pub(crate) use lint::rules as diagnose;
pub use model::{gguf, preflight, quant};
pub use text::template as chat;
pub use text::tokenizer;

pub use error::{Error, Result};
/// The wgpu version hotprefix is built on, for callers that inject or inspect GPU objects.
pub use wgpu;
