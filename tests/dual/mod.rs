//! Shared by the tests that run natively (`cargo test`) and in headless Chromium (`wasm-pack test`): their GPU, and macros.

/// Prints a line: to stdout natively, to the browser console (shown by the runner) in wasm.
#[macro_export]
macro_rules! log {
    ($($t:tt)*) => {{
        #[cfg(target_arch = "wasm32")]
        wasm_bindgen_test::console_log!($($t)*);
        #[cfg(not(target_arch = "wasm32"))]
        println!($($t)*);
    }};
}

/// Defines test `$name` running the async fn `$body`: blocking natively, awaited in the browser.
#[macro_export]
macro_rules! gpu_test {
    ($name:ident, $body:ident) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            pollster::block_on($body());
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            $body().await;
        }
    };
}

/// The GPU every test runs on: whatever adapter wgpu finds (Mesa lavapipe natively, SwiftShader in
/// headless Chromium). A machine without one fails the test loudly, never passes it silently.
#[allow(dead_code)]
pub async fn gpu() -> hotprefix::gpu::Gpu {
    match hotprefix::gpu::Gpu::new().await {
        Ok(g) => g,
        Err(e) => {
            panic!("GPU tests need an adapter (natively Mesa lavapipe: bash scripts/setup.sh; in Chromium: --enable-unsafe-webgpu): {e}")
        }
    }
}
