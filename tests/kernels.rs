//! Every kernel against its CPU oracle, natively (`cargo test`, on whatever adapter wgpu finds:
//! lavapipe in CI) and in headless Chromium (`wasm-pack test --headless --chrome`).
//! A machine without an adapter fails these tests loudly: they never pass silently.

use hotprefix::ops::Variant;
use hotprefix::quant::Format;
use hotprefix::selftest::{Check, Fused};

mod dual;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

async fn check_all(checks: &[Check]) {
    let gpu = dual::gpu().await;
    for (i, c) in checks.iter().enumerate() {
        if let Err(e) = c.run(&gpu, 7 + i as u64, 0).await {
            panic!("{} on {}: {e}", c.name(), gpu.describe());
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn adapter_is_found_and_reports_itself() {
    let gpu = pollster::block_on(dual::gpu());
    println!("adapter: {}", gpu.describe());
    assert!(gpu.limits().max_storage_buffer_binding_size >= 128 << 20, "asked for the adapter's own limits");
    gpu.check_alive().expect("fresh device is alive");
}

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen_test::wasm_bindgen_test]
async fn adapter_is_found_and_reports_itself() {
    let gpu = dual::gpu().await;
    wasm_bindgen_test::console_log!("adapter: {}", gpu.describe());
    assert!(gpu.limits().max_storage_buffer_binding_size >= 128 << 20, "asked for the adapter's own limits");
    gpu.check_alive().expect("fresh device is alive");
}

/// Defines one test that runs natively (blocking) and in the browser (async).
macro_rules! gpu_test {
    ($name:ident, native: $native:expr, browser: $browser:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            pollster::block_on(check_all(&$native));
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            check_all(&$browser).await;
        }
    };
}

/// Matmul checks of `format` at `shapes`, K rounded up to the format's block.
fn mm(format: Format, shapes: &[(usize, usize, usize)]) -> Vec<Check> {
    shapes.iter().map(|&(t, k, n)| Check::Matmul { format, t, k: k.next_multiple_of(format.block()), n }).collect()
}

// Odd T and N (not multiples of any workgroup size), T = 1 (matvec), T ≥ 4 (tiled), T ≥ 64 (Coop's
// 4-token tiles), large K; for
// the 256-value formats K rounds up (576 → 768: an odd number of 256-blocks).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const NATIVE_MM: &[(usize, usize, usize)] =
    &[(1, 576, 577), (1, 4096, 67), (3, 64, 129), (4, 96, 5), (13, 576, 203), (37, 1536, 33), (2, 32, 1), (67, 256, 37)];
#[allow(dead_code)] // used by the browser build only
const BROWSER_MM: &[(usize, usize, usize)] = &[(1, 96, 37), (5, 64, 19)];
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const FLOAT_MM: &[(usize, usize, usize)] = &[(1, 100, 33), (9, 36, 17), (1, 2048, 65)];

/// One test a format: matmul (tiled on every variant, matrix-vector at T = 1) and the embedding
/// lookup.
macro_rules! format_test {
    ($name:ident, $format:expr, $native:expr) => {
        gpu_test!($name,
            native: { let mut v = mm($format, $native); v.extend(embeds($format, &[(1, 1000, 576), (33, 4099, 96), (3, 9000, 1024)])); v },
            browser: { let mut v = mm($format, BROWSER_MM); v.extend(embeds($format, &[(4, 50, 64)])); v });
    };
}

fn embeds(format: Format, shapes: &[(usize, usize, usize)]) -> Vec<Check> {
    shapes.iter().map(|&(t, vocab, dim)| Check::Embed { format, t, vocab, dim: dim.next_multiple_of(format.block()) }).collect()
}

format_test!(format_f32, Format::F32, FLOAT_MM);
format_test!(format_f16, Format::F16, FLOAT_MM);
format_test!(format_bf16, Format::BF16, FLOAT_MM);
format_test!(format_q8_0, Format::Q8_0, NATIVE_MM);
format_test!(format_q4_0, Format::Q4_0, NATIVE_MM);
format_test!(format_q4_1, Format::Q4_1, NATIVE_MM);
format_test!(format_q5_0, Format::Q5_0, NATIVE_MM);
format_test!(format_q5_1, Format::Q5_1, NATIVE_MM);
format_test!(format_iq4_nl, Format::IQ4_NL, NATIVE_MM);
format_test!(format_q2_k, Format::Q2_K, NATIVE_MM);
format_test!(format_q3_k, Format::Q3_K, NATIVE_MM);
format_test!(format_q4_k, Format::Q4_K, NATIVE_MM);
format_test!(format_q5_k, Format::Q5_K, NATIVE_MM);
format_test!(format_q6_k, Format::Q6_K, NATIVE_MM);
format_test!(format_iq4_xs, Format::IQ4_XS, NATIVE_MM);

#[test]
#[cfg(not(target_arch = "wasm32"))]
fn every_format_has_its_kernel_test() {
    let src = include_str!("kernels.rs");
    for f in Format::ALL {
        assert!(
            src.contains(&format!("format_test!(format_{}, Format::{},", f.name().to_lowercase(), f.name())),
            "no format_test! for {}",
            f.name()
        );
    }
}

gpu_test!(matmul_accumulate,
    native: [Check::MatmulAcc { format: Format::Q4_1, t: 1, k: 576, n: 577 }, Check::MatmulAcc { format: Format::Q4_1, t: 13, k: 1536, n: 67 },
             Check::MatmulAcc { format: Format::Q8_0, t: 2, k: 64, n: 9 }, Check::MatmulAcc { format: Format::Q4_K, t: 5, k: 512, n: 37 },
             Check::MatmulAcc { format: Format::Q5_K, t: 70, k: 256, n: 19 }],
    browser: [Check::MatmulAcc { format: Format::Q4_1, t: 1, k: 64, n: 33 }, Check::MatmulAcc { format: Format::Q4_1, t: 5, k: 64, n: 33 }]);

// The gated activation fused into the tiled gate|up matmul's store (prefill): both activations,
// block and float formats, odd T, F not a multiple of any workgroup, tiles past the end; an odd F
// refused.
gpu_test!(matmul_glu,
    native: [Check::MatmulGlu { format: Format::Q4_1, t: 25, k: 576, f: 1536, gelu: false },
             Check::MatmulGlu { format: Format::Q4_K, t: 7, k: 512, f: 46, gelu: true },
             Check::MatmulGlu { format: Format::Q5_0, t: 70, k: 640, f: 102, gelu: true },
             Check::MatmulGlu { format: Format::Q6_K, t: 3, k: 256, f: 2, gelu: false },
             Check::MatmulGlu { format: Format::F16, t: 9, k: 100, f: 34, gelu: true },
             Check::MatmulGlu { format: Format::Q4_1, t: 5, k: 64, f: 45, gelu: false }],
    browser: [Check::MatmulGlu { format: Format::Q8_0, t: 5, k: 64, f: 18, gelu: true },
              Check::MatmulGlu { format: Format::F32, t: 3, k: 36, f: 10, gelu: false }]);

/// The decode projections on every matrix-vector kernel (whatever the adapter would pick), every
/// weight format and fused op, odd N, from a later row of x, with and without the residual add.
/// Natively N = 577, 4,099 and 8,195 give `matvec_coop` 8, 16 and 32 rows a workgroup.
fn matvecs(shapes: &[(usize, usize)]) -> Vec<Check> {
    let mut v = Vec::new();
    for kind in [Variant::Rows, Variant::Lanes, Variant::Coop] {
        for (i, format) in Format::ALL.into_iter().enumerate() {
            for (j, op) in [Fused::None, Fused::RmsNorm, Fused::SwiGlu, Fused::GeGlu].into_iter().enumerate() {
                let (k, n) = shapes[(i + j) % shapes.len()];
                let k = k.next_multiple_of(format.block());
                v.push(Check::Matvec { format, k, n, x_row: (i + j) % 3, op, acc: j == 2, kind });
            }
        }
    }
    v
}

gpu_test!(matvec_fused,
    native: matvecs(&[(576, 577), (1536, 67), (64, 1), (2048, 129), (96, 4099), (64, 8195)]),
    browser: matvecs(&[(64, 37), (96, 5)]));

// Weights in parts: two formats in one matrix (a fused projection of a K-quant file), each split by
// rows across bindings (a weight larger than one binding).
gpu_test!(weight_parts,
    native: [Check::Parts { formats: [Format::Q5_0, Format::Q8_0], t: 6, k: 576, n: 500, group_rows: 3 },
             Check::Parts { formats: [Format::Q4_K, Format::Q6_K], t: 1, k: 512, n: 97, group_rows: 1 },
             Check::Parts { formats: [Format::F32, Format::IQ4_XS], t: 9, k: 256, n: 64, group_rows: 1 }],
    browser: [Check::Parts { formats: [Format::Q6_K, Format::Q8_0], t: 5, k: 256, n: 150, group_rows: 1 }]);

gpu_test!(rmsnorm,
    native: [Check::RmsNorm { rows: 1, dim: 576 }, Check::RmsNorm { rows: 67, dim: 1001 }],
    browser: [Check::RmsNorm { rows: 3, dim: 100 }]);

gpu_test!(rope,
    native: [Check::Rope { t: 1, heads: 9, extra_heads: 0, head_dim: 64, max_pos: 8192 },
             Check::Rope { t: 77, heads: 12, extra_heads: 3, head_dim: 64, max_pos: 8192 }],
    browser: [Check::Rope { t: 5, heads: 3, extra_heads: 1, head_dim: 16, max_pos: 300 }]);

// Llama-3's frequency factors over a full and a partial rotation (the unrotated dims untouched).
gpu_test!(rope_scaled,
    native: [Check::RopeScaled { t: 33, heads: 5, head_dim: 64, n_rot: 64 }, Check::RopeScaled { t: 7, heads: 3, head_dim: 96, n_rot: 32 }],
    browser: [Check::RopeScaled { t: 3, heads: 2, head_dim: 16, n_rot: 8 }]);

gpu_test!(bias,
    native: [Check::Bias { t: 1, n: 1152 }, Check::Bias { t: 37, n: 97 }],
    browser: [Check::Bias { t: 3, n: 37 }]);

// The QK-norm: Q's heads at the start of a Q|K|V row, K's after them, odd head counts.
gpu_test!(head_norm,
    native: [Check::HeadNorm { t: 1, heads: 16, skip: 0, head_dim: 64, split: 14 },
             Check::HeadNorm { t: 29, heads: 3, skip: 7, head_dim: 128, split: 3 },
             Check::HeadNorm { t: 5, heads: 5, skip: 0, head_dim: 256, split: 4 },
             Check::HeadNorm { t: 4, heads: 2, skip: 1, head_dim: 32, split: 0 }],
    browser: [Check::HeadNorm { t: 3, heads: 3, skip: 1, head_dim: 16, split: 2 }]);

gpu_test!(swiglu,
    native: [Check::SwiGlu { t: 1, f: 1536 }, Check::SwiGlu { t: 45, f: 97 }],
    browser: [Check::SwiGlu { t: 3, f: 37 }]);

gpu_test!(argmax,
    native: [Check::Argmax { rows: 1, n: 49152 }, Check::Argmax { rows: 5, n: 1001 }, Check::ArgmaxFeed { n: 49152, slot: 5 }],
    browser: [Check::Argmax { rows: 3, n: 1000 }, Check::ArgmaxFeed { n: 1000, slot: 0 }]);

// The sampler's top: the real vocabulary with its window, fewer logits than k, more ties than cap.
gpu_test!(topk,
    native: [Check::TopK { n: 49152, k: 256, cap: 512, window: 64, flat: false }, Check::TopK { n: 100, k: 256, cap: 512, window: 3, flat: false },
             Check::TopK { n: 5000, k: 256, cap: 512, window: 0, flat: true }, Check::TopK { n: 1001, k: 1, cap: 2, window: 1, flat: false }],
    browser: [Check::TopK { n: 3000, k: 64, cap: 128, window: 5, flat: false }, Check::TopK { n: 700, k: 32, cap: 64, window: 0, flat: true }]);

// Decode attention with RoPE and the KV write fused in, on every kernel variant the adapter has:
// first token, page boundaries, GQA 3 (CPU adapters: one invocation or lane cluster per KV head),
// GQA 6 at head dim 128, long contexts split over positions.
gpu_test!(decode_attention,
native: [
    Check::DecodeAttention { past: 0, n_head: 9, n_kv: 3, head_dim: 64, page: 16, pool: 3 },
    Check::DecodeAttention { past: 31, n_head: 9, n_kv: 3, head_dim: 64, page: 16, pool: 5 },
    Check::DecodeAttention { past: 47, n_head: 12, n_kv: 2, head_dim: 128, page: 16, pool: 5 },
    // Gemma-3's heads: 256 wide, 4 query heads on one KV head.
    Check::DecodeAttention { past: 600, n_head: 4, n_kv: 1, head_dim: 256, page: 16, pool: 40 },
    Check::DecodeAttention { past: 1500, n_head: 9, n_kv: 3, head_dim: 64, page: 16, pool: 100 },
    Check::DecodeAttention { past: 333, n_head: 4, n_kv: 4, head_dim: 32, page: 8, pool: 50 },
    // Lanes: 3 quads a lane (head dim 96), 4 heads an item; 2 lanes an item (head dim 8).
    Check::DecodeAttention { past: 77, n_head: 8, n_kv: 2, head_dim: 96, page: 16, pool: 8 },
    Check::DecodeAttention { past: 70, n_head: 3, n_kv: 1, head_dim: 8, page: 8, pool: 11 },
    // Lanes: 5 quads a lane (head dim 160; Gemma's 256 is 8).
    Check::DecodeAttention { past: 45, n_head: 6, n_kv: 2, head_dim: 160, page: 16, pool: 6 },
],
browser: [
    Check::DecodeAttention { past: 9, n_head: 6, n_kv: 2, head_dim: 16, page: 4, pool: 6 },
    Check::DecodeAttention { past: 5, n_head: 2, n_kv: 1, head_dim: 256, page: 4, pool: 3 },
    Check::DecodeAttention { past: 70, n_head: 3, n_kv: 1, head_dim: 8, page: 8, pool: 11 },
]);

// Attention across page boundaries with shuffled pages, GQA ratios 1 and 3, decode (T = 1) and
// prefill that starts after cached tokens.
gpu_test!(attention,
native: [
    Check::Attention { past: 0, t: 1, n_head: 9, n_kv: 3, head_dim: 64, page: 16, pool: 3 },
    Check::Attention { past: 40, t: 1, n_head: 9, n_kv: 3, head_dim: 64, page: 16, pool: 5 },
    Check::Attention { past: 0, t: 37, n_head: 4, n_kv: 4, head_dim: 32, page: 16, pool: 4 },
    Check::Attention { past: 21, t: 19, n_head: 9, n_kv: 3, head_dim: 64, page: 8, pool: 9 },
    Check::Attention { past: 130, t: 3, n_head: 6, n_kv: 2, head_dim: 128, page: 16, pool: 12 },
    Check::Attention { past: 40, t: 9, n_head: 4, n_kv: 1, head_dim: 256, page: 16, pool: 5 },
    // Few queries over a long context: split over positions, then combined.
    Check::Attention { past: 300, t: 2, n_head: 3, n_kv: 1, head_dim: 64, page: 16, pool: 20 },
    // Lanes: 3 quads a lane, 4 heads an item; 2 lanes an item; 4 lanes, 1 quad, GQA 3.
    Check::Attention { past: 270, t: 5, n_head: 8, n_kv: 2, head_dim: 96, page: 16, pool: 20 },
    Check::Attention { past: 0, t: 3, n_head: 2, n_kv: 2, head_dim: 8, page: 2, pool: 3 },
    Check::Attention { past: 5, t: 4, n_head: 6, n_kv: 2, head_dim: 16, page: 4, pool: 6 },
    // Lanes: 7 quads a lane (head dim 224).
    Check::Attention { past: 33, t: 6, n_head: 4, n_kv: 2, head_dim: 224, page: 8, pool: 12 },
],
browser: [
    Check::Attention { past: 5, t: 4, n_head: 6, n_kv: 2, head_dim: 16, page: 4, pool: 6 },
    Check::Attention { past: 0, t: 3, n_head: 2, n_kv: 2, head_dim: 8, page: 2, pool: 3 },
    Check::Attention { past: 70, t: 1, n_head: 3, n_kv: 1, head_dim: 8, page: 8, pool: 9 },
]);
