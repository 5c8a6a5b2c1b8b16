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

/// A loaded model in the page: `await Engine.load(bytes)`, then `await engine.chat(...)`.
#[wasm_bindgen(js_name = Engine)]
pub struct WebEngine {
    engine: crate::engine::Engine,
}

#[wasm_bindgen(js_class = Engine)]
impl WebEngine {
    /// Loads a GGUF model from its bytes onto this browser's WebGPU adapter.
    pub async fn load(bytes: Vec<u8>, kv_tokens: Option<usize>) -> Result<WebEngine, JsValue> {
        let gpu = Gpu::new().await?;
        let opts = crate::model::Options { kv_tokens: kv_tokens.unwrap_or(2048), ..Default::default() };
        let engine = crate::engine::Engine::load(gpu, &bytes, opts).await?;
        Ok(WebEngine { engine })
    }

    /// The adapter the model runs on.
    pub fn adapter(&self) -> String {
        self.engine.gpu.describe()
    }

    /// Generates a reply to OpenAI-style `messages` (a JSON string), calling `onText(piece)` as
    /// text arrives. Returns `{text, finish_reason, usage: {prompt_tokens, completion_tokens,
    /// prompt_tokens_details: {cached_tokens}}, timings: {ttft_ms, prefill_tok_s, decode_tok_s}}`.
    pub async fn chat(&mut self, messages: String, max_tokens: usize, temperature: f32, seed: u64, on_text: js_sys::Function) -> Result<JsValue, JsValue> {
        let messages: Vec<crate::chat::Message> =
            serde_json::from_str(&messages).map_err(|e| crate::Error::InvalidArgument(format!("messages: {e}")))?;
        let prompt = self.engine.encode_chat(&messages)?;
        let sampling = crate::sample::SamplingParams { temperature, seed, ..crate::sample::SamplingParams::default() };
        let params = crate::engine::GenerateParams { max_tokens, sampling, stop: Vec::new() };
        let g = self
            .engine
            .generate(&prompt, &params, |piece| {
                let _ = on_text.call1(&JsValue::NULL, &JsValue::from_str(piece));
            })
            .await?;
        let out = serde_json::json!({
            "text": g.text,
            "finish_reason": match g.finish { crate::engine::Finish::Stop => "stop", crate::engine::Finish::Length => "length" },
            "usage": {
                "prompt_tokens": g.prompt_tokens,
                "completion_tokens": g.tokens.len(),
                "prompt_tokens_details": { "cached_tokens": g.cached_tokens },
            },
            "timings": { "ttft_ms": g.timings.ttft_ms, "prefill_tok_s": g.timings.prefill_tok_s, "decode_tok_s": g.timings.decode_tok_s },
        });
        js_sys::JSON::parse(&out.to_string())
    }
}
