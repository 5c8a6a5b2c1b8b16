// Every public item is documented, the unstable kernel layer included.
#![warn(missing_docs)]
//! hotprefix: small LLMs on WebGPU with the attention KV cache kept resident on the GPU.
//!
//! The parts (docs/ARCHITECTURE.md draws the arrows between them):
//! - [`engine::Engine`] loads a GGUF model, renders its own chat template, tokenizes, and answers
//!   [`api::ChatRequest`]s over the resident prompt cache: every request's K/V stays on the GPU,
//!   indexed by a radix tree of pages, and later requests reuse the longest resident prefix by
//!   sharing pages; the oldest turns are dropped on overflow, and [`lint`] and the miss diagnosis
//!   explain misses. [`sample`] chooses each token.
//! - [`model`]: the config, the weights (loaded a tensor at a time), and each architecture's
//!   forward pass over shared blocks; [`gguf`] the validated reader, [`quant`] the weight formats,
//!   [`preflight`] the CPU side of a load (the fuzzed part).
//! - [`text`]: the [`tokenizer`], the chat template ([`chat`]) and the prompt made of them.
//! - [`cache`]: the paged KV pool and sequences ([`kv`]), the prefix index, saved caches, head
//!   truncation.
//! - [`gpu::Gpu`]: adapter, device and queue (browser WebGPU on wasm32, Vulkan/Metal/DX12/GL
//!   natively); GPU errors and device loss become [`Error`]s; pipelines and bind groups cached.
//! - [`check`]: the kernels' CPU oracles ([`oracle`]) and self-checks ([`selftest`]), run natively,
//!   in the browser and on the demo page.
//!
//! **Unstable** (documented, public, no semver promise): the kernel layer — [`ops`] (one function
//! per `shaders/<op>.wgsl`), [`oracle`], the generator [`rng`], and the GPU's raw buffers and
//! batches ([`gpu::Batch`], `Gpu::storage`, `Gpu::upload`, `Gpu::read_f32`, …) — for callers that
//! drive kernels themselves, benchmarks and this crate's tests.
//!
//! The `test-support` feature adds test scaffolding only: the tiny random-weight model
//! (`testmodel`) and hooks that force faults (`Engine::corrupt_for_test`,
//! `Gpu::set_binding_limit`).
//!
//! The browser side is `web` (wasm-bindgen entry points) under the npm package in `js/`.

pub mod api;
pub mod cache;
pub mod check;
pub mod engine;
pub mod error;
pub mod gpu;
pub mod lint;
pub mod model;
pub mod ops;
pub mod text;
#[cfg(target_arch = "wasm32")]
pub mod web;

// The public paths of the flat tree before it was cut into parts, kept stable for callers (code
// inside the crate uses the folder paths).
pub use cache::kv;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub use check::testmodel;
pub use check::{oracle, selftest};
pub use engine::sample;
pub use engine::sample::rng;
pub use model::{gguf, preflight, quant};
pub use text::template as chat;
pub use text::tokenizer;

pub use error::{Error, Result};
/// The wgpu version hotprefix is built on, for callers that inject or inspect GPU objects.
pub use wgpu;
