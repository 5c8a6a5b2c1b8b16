//! The browser entry points (wasm-bindgen). Errors cross as JS `Error`s named by `Error::name()`.

use wasm_bindgen::prelude::*;

use crate::gpu::Gpu;
use crate::selftest::Check;

/// Runs every kernel check of the small suite on this browser's WebGPU adapter and returns
/// `{adapter, results: [{name, ok, max_err, ms, rate, unit, error}]}`.
#[wasm_bindgen(js_name = runKernelChecks)]
pub async fn run_kernel_checks(reps: usize) -> Result<JsValue, JsValue> {
    let gpu = Gpu::new().await?;
    let results = js_sys::Array::new();
    for (i, check) in Check::small_suite().iter().enumerate() {
        let o = js_sys::Object::new();
        let set = |k: &str, v: JsValue| js_sys::Reflect::set(&o, &k.into(), &v).map(|_| ());
        set("name", check.name().into())?;
        match check.run(&gpu, 1000 + i as u64, reps).await {
            Ok(r) => {
                set("ok", true.into())?;
                set("max_err", r.max_err.into())?;
                if let Some(ms) = r.ms {
                    set("ms", ms.into())?;
                }
                if let Some((rate, unit)) = r.rate {
                    set("rate", rate.into())?;
                    set("unit", unit.into())?;
                }
            }
            Err(e) => {
                set("ok", false.into())?;
                set("error", format!("{}: {e}", e.name()).into())?;
            }
        }
        results.push(&o);
    }
    let out = js_sys::Object::new();
    js_sys::Reflect::set(&out, &"adapter".into(), &gpu.describe().into())?;
    js_sys::Reflect::set(&out, &"results".into(), &results)?;
    Ok(out.into())
}
