//! Macros for tests that run natively (`cargo test`) and in headless Chromium (`wasm-pack test`).

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
