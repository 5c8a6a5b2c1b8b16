//! The browser entry points (wasm-bindgen). Errors cross as JS `Error`s named by `Error::name()`.
//!
//! A panic is a bug in hotprefix. The browser build aborts on panic (`panic = "abort"`), so the
//! instance traps with an opaque `RuntimeError: unreachable` and nothing in it can be trusted
//! afterwards. The panic hook installed here first logs the message with `console.error`, keeps it
//! for [`last_panic`] and tells the listener registered with [`on_panic`] (the package's crash.js),
//! which then fails that call and every later one with an `EngineCrashedError` carrying the message.

use wasm_bindgen::prelude::*;

use std::borrow::Cow;
use std::cell::RefCell;

use crate::check::selftest::Check;
use crate::gpu::Gpu;
use crate::model::gguf::{Gguf, TensorInfo};
use crate::model::TensorBytes;

thread_local! {
    /// The message of the panic that crashed this instance.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Called with the message when a panic happens (set by `onPanic`).
    static PANIC_LISTENER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

/// Installs the panic hook, once per instance.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            // "panicked at src/….rs:line:col:\nmessage"
            let message = info.to_string();
            web_sys::console::error_1(&format!("hotprefix crashed (a bug in hotprefix): {message}").into());
            let _ = LAST_PANIC.try_with(|p| p.try_borrow_mut().map(|mut p| *p = Some(message.clone())));
            // Borrowed only for the clone: a listener that calls back in finds it free.
            let listener = PANIC_LISTENER.try_with(|l| l.try_borrow().ok().and_then(|l| l.clone())).ok().flatten();
            if let Some(f) = listener {
                let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&message));
            }
        }));
    });
}

/// The message of the panic that crashed this wasm instance (`"panicked at file:line:col:\n…"`),
/// or `undefined` when none has. After a panic the instance has trapped and must not be used.
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.try_with(|p| p.try_borrow().ok().and_then(|p| p.clone())).ok().flatten()
}

/// Installs the panic hook and registers `listener(message)`, called synchronously when a panic
/// happens, before the instance traps (also when the panic is inside an async call, whose promise
/// then never settles). The listener must not call into this instance.
#[wasm_bindgen(js_name = onPanic)]
pub fn on_panic(listener: js_sys::Function) {
    install_panic_hook();
    let _ = PANIC_LISTENER.try_with(|l| l.try_borrow_mut().map(|mut l| *l = Some(listener)));
}

/// Runs every kernel check of the small suite on this browser's WebGPU adapter and returns
/// `{adapter, results: [{name, ok, max_err, ms, rate, unit, error}]}`.
#[wasm_bindgen(js_name = runKernelChecks)]
pub async fn run_kernel_checks(reps: usize) -> Result<JsValue, JsValue> {
    install_panic_hook();
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

/// A loaded model in the page, driven by the npm package's `core.js` (the JS API is there):
/// `await Engine.load(bytes, context, kvBudgetMB, onProgress)`, then
/// `await engine.chat(requestJson, onText, signal)`.
#[wasm_bindgen(js_name = Engine)]
pub struct WebEngine {
    engine: crate::engine::Engine,
}

/// A model file that stays in JS: `read(offset, length)` returns a `Uint8Array` of its bytes.
struct JsFile {
    read: js_sys::Function,
    len: u64,
}

impl JsFile {
    fn read(&self, offset: u64, len: u64) -> crate::Result<Vec<u8>> {
        let bad = |detail: String| crate::Error::Gguf(format!("reading {len} bytes at offset {offset}: {detail}"));
        let v = self.read.call2(&JsValue::NULL, &(offset as f64).into(), &(len as f64).into()).map_err(|e| bad(format!("{e:?}")))?;
        let a: js_sys::Uint8Array = v.dyn_into().map_err(|_| bad("not a Uint8Array".into()))?;
        if u64::from(a.length()) != len {
            return Err(bad(format!("got {} bytes", a.length())));
        }
        Ok(a.to_vec())
    }

    /// The parsed header, read in growing prefixes (4 MiB, then ×4) until it parses. A file that
    /// does not start as a GGUF is refused from its first bytes, not read whole.
    fn header(&self) -> crate::Result<Gguf> {
        let mut n = self.len.min(4 << 20);
        loop {
            let prefix = self.read(0, n)?;
            match Gguf::parse_header(&prefix, self.len) {
                Err(_) if n < self.len && prefix.starts_with(b"GGUF") => n = self.len.min(n * 4),
                r => return r,
            }
        }
    }
}

impl TensorBytes for JsFile {
    fn tensor_bytes(&self, _g: &Gguf, t: &TensorInfo) -> crate::Result<Cow<'_, [u8]>> {
        self.read(t.offset, t.bytes).map(Cow::Owned)
    }
}

fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    let text = serde_json::to_string(v).map_err(|e| crate::Error::InvalidArgument(e.to_string()))?;
    js_sys::JSON::parse(&text)
}

#[wasm_bindgen(js_class = Engine)]
impl WebEngine {
    /// Loads a GGUF model of `file_len` bytes onto this browser's WebGPU adapter, with a context
    /// window of `context` positions (default: the model's) and a KV pool of `kv_budget_mb` MiB
    /// (default: 512 or what the adapter allows), in pages of `page_size` positions (default 16).
    /// `read(offset, length)` returns a `Uint8Array` of
    /// the file's bytes: the header is read first, then one tensor at a time, each converted and
    /// uploaded before the next is read, so the wasm heap never holds the whole file.
    /// `on_progress(uploaded, total)` follows the weights' upload in bytes.
    pub async fn load(
        read: js_sys::Function,
        file_len: f64,
        context: Option<usize>,
        kv_budget_mb: Option<f64>,
        page_size: Option<usize>,
        on_progress: Option<js_sys::Function>,
    ) -> Result<WebEngine, JsValue> {
        install_panic_hook();
        if !((0.0..=9.0e15).contains(&file_len) && file_len.fract() == 0.0) {
            return Err(crate::Error::InvalidArgument(format!("file length {file_len}")).into());
        }
        let file = JsFile { read, len: file_len as u64 };
        let g = file.header()?;
        let gpu = Gpu::new().await?;
        let defaults = crate::engine::EngineOptions::default();
        let opts = crate::engine::EngineOptions { context, kv_budget_mb, page_size: page_size.unwrap_or(defaults.page_size), ..defaults };
        let mut progress = |done: u64, total: u64| {
            if let Some(f) = &on_progress {
                let _ = f.call2(&JsValue::NULL, &(done as f64).into(), &(total as f64).into());
            }
        };
        let engine = crate::engine::Engine::load_from(gpu, &g, &file, opts, &mut progress).await?;
        Ok(WebEngine { engine })
    }

    /// The adapter the model runs on.
    pub fn adapter(&self) -> String {
        self.engine.gpu.describe()
    }

    /// Positions one request may use, prompt and completion.
    #[wasm_bindgen(js_name = contextSize)]
    pub fn context_size(&self) -> usize {
        self.engine.context_size()
    }

    /// Answers a chat request (a JSON string: `{messages, max_tokens, temperature, top_p, top_k,
    /// seed, stop, cache_salt, response_format, tools, tool_choice, parallel_tool_calls}`), calling
    /// `onText(piece)` as the answer arrives: a string of text, or, for a tool call,
    /// `{index, id, name}` when it begins and `{index, arguments}` for each piece of its
    /// arguments; `signal` (a DOM `AbortSignal`) stops it at the next token, with
    /// `finish_reason: "abort"`. Returns `{text, tool_calls?, tokens, finish_reason, usage:
    /// {prompt_tokens, completion_tokens, prompt_tokens_details: {cached_tokens}}, timings:
    /// {ttft_ms, prefill_ms, decode_tok_s}, cache: {reused_tokens, dropped_messages, diverged_at?,
    /// warnings}}`, as `hotprefix session` prints it.
    pub async fn chat(
        &mut self,
        request: String,
        on_text: js_sys::Function,
        signal: Option<web_sys::AbortSignal>,
    ) -> Result<JsValue, JsValue> {
        let req = crate::api::ChatRequest::from_json(&request)?;
        let abort = crate::engine::AbortSignal::new();
        let listener = signal.as_ref().map(|s| {
            let a = abort.clone();
            let cb = Closure::<dyn FnMut()>::new(move || a.abort());
            let _ = s.add_event_listener_with_callback("abort", cb.as_ref().unchecked_ref());
            cb
        });
        if signal.as_ref().is_some_and(|s| s.aborted()) {
            abort.abort();
        }
        let r = self
            .engine
            .chat_deltas(&req, Some(abort), |delta| {
                let piece = match delta {
                    crate::api::Delta::Text(t) => JsValue::from_str(&t),
                    crate::api::Delta::Call { index, id, name } => {
                        to_js(&serde_json::json!({"index": index, "id": id, "name": name})).unwrap_or(JsValue::NULL)
                    }
                    crate::api::Delta::Arguments { index, text } => {
                        to_js(&serde_json::json!({"index": index, "arguments": text})).unwrap_or(JsValue::NULL)
                    }
                };
                let _ = on_text.call1(&JsValue::NULL, &piece);
            })
            .await;
        if let (Some(s), Some(cb)) = (&signal, &listener) {
            let _ = s.remove_event_listener_with_callback("abort", cb.as_ref().unchecked_ref());
        }
        to_js(&r?)
    }

    /// Pages used/free/total, bytes, and the resident prefixes (tokens, pages, last use).
    #[wasm_bindgen(js_name = cacheStats)]
    pub fn cache_stats(&self) -> Result<JsValue, JsValue> {
        to_js(&self.engine.cache_stats())
    }

    /// Forgets every resident prefix.
    #[wasm_bindgen(js_name = clearCache)]
    pub fn clear_cache(&mut self) {
        self.engine.clear_cache();
    }

    /// The resident prefixes (salt, token ids) and their KV pages as a saved-cache file, for the
    /// model named `model` (the package passes the file's sha256), handed to `write(chunk)` a
    /// piece at a time (each a new `Uint8Array` of at most 8 MiB of pages; a returned promise is
    /// awaited before the next piece is read). Returns the file's length in bytes.
    #[wasm_bindgen(js_name = saveCache)]
    pub async fn save_cache(&self, model: String, write: js_sys::Function) -> Result<f64, JsValue> {
        let fail = |e: JsValue| crate::Error::Io(format!("writing the saved cache: {}", js_sys::Error::from(e).message()));
        let n = self
            .engine
            .save_cache_to(&model, |chunk| {
                let called = write.call1(&JsValue::NULL, &js_sys::Uint8Array::from(&chunk[..]));
                async move {
                    let promise = js_sys::Promise::resolve(&called.map_err(fail)?);
                    wasm_bindgen_futures::JsFuture::from(promise).await.map_err(fail)?;
                    Ok(())
                }
            })
            .await?;
        Ok(n as f64)
    }

    /// Makes a saved-cache file's prefixes resident again; returns `{prefixes, tokens, pages,
    /// skipped}`. A file for another model, shape or layout version, or a corrupt one, fails with
    /// `CacheFileError` and changes nothing.
    #[wasm_bindgen(js_name = restoreCache)]
    pub async fn restore_cache(&mut self, file: Vec<u8>, model: String) -> Result<JsValue, JsValue> {
        to_js(&self.engine.restore_cache(&file, &model).await?)
    }

    /// **Test only**: panics with `message` after yielding to the event loop once (as a panic in
    /// the middle of a request would), so that the package's crash reporting can be tested
    /// (`engine._panicForTest()`). This engine, and every other one in this wasm instance, is
    /// unusable afterwards.
    #[wasm_bindgen(js_name = _panicForTest)]
    pub async fn panic_for_test(&self, message: String) -> Result<(), JsValue> {
        wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&JsValue::NULL)).await?;
        panic!("{message}")
    }

    /// **Test only**: traps after yielding to the event loop once, without going through the
    /// panic hook, as an allocation failure (`"oom"`), a stack overflow (`"stack"`) or an
    /// `unreachable` (`"unreachable"`) would, so that the package's crash reporting can be tested
    /// for traps too (`engine._trapForTest(kind)`). Unusable afterwards, like `_panicForTest`.
    #[wasm_bindgen(js_name = _trapForTest)]
    pub async fn trap_for_test(&self, kind: String) -> Result<(), JsValue> {
        wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&JsValue::NULL)).await?;
        match kind.as_str() {
            "unreachable" => core::arch::wasm32::unreachable(),
            "oom" => match std::alloc::Layout::from_size_align(usize::MAX / 2, 1) {
                Ok(layout) => std::alloc::handle_alloc_error(layout),
                Err(_) => core::arch::wasm32::unreachable(),
            },
            "stack" => {
                #[inline(never)]
                fn deep(n: u32) -> u32 {
                    if n == 0 {
                        0
                    } else {
                        std::hint::black_box(deep(n - 1)).wrapping_add(1)
                    }
                }
                let _ = deep(std::hint::black_box(u32::MAX));
                Ok(())
            }
            _ => Err(crate::Error::InvalidArgument(format!("trap kind {kind:?}: oom, stack or unreachable")).into()),
        }
    }

    /// Destroys the GPU device: its memory is freed now, and later calls fail with
    /// `DeviceLostError` (`unload`, and tests of device loss).
    #[wasm_bindgen(js_name = destroyDevice)]
    pub fn destroy_device(&self) {
        self.engine.gpu.destroy();
    }
}

/// Canonical JSON (sorted keys, no spaces) of a JSON text, so that equal tool schemas give equal
/// tokens.
#[wasm_bindgen(js_name = canonicalJSON)]
pub fn canonical_json(text: &str) -> Result<String, JsValue> {
    Ok(crate::lint::canonicalize_json_text(text).map_err(crate::Error::InvalidArgument)?)
}

/// What the GGUF file of `file_len` bytes whose first bytes are `header` holds and whether this
/// build runs it, from its header alone (no GPU, no tensor data): `hotprefix info --json`'s object
/// (`{architecture, name, features, parameters, tensors, formats, bytes, context, tokenizer,
/// pre_tokenizer, chat_template, runs, refused}`), with `runs` from the header's share of a load
/// (`preflight::check_header`). A `header` that ends before the header does fails with
/// `GgufError`: read more and call again.
#[wasm_bindgen(js_name = inspectModel)]
pub fn inspect_model(header: &[u8], file_len: f64) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !(file_len.is_finite() && file_len >= 0.0 && file_len <= 2f64.powi(53)) {
        return Err(crate::Error::InvalidArgument(format!("file length {file_len}")).into());
    }
    let g = Gguf::parse_header(header, file_len as u64)?;
    let verdict = crate::preflight::check_header(&g).map(|_| ());
    to_js(&crate::model::inspect::Summary::of(&g, file_len as u64, verdict))
}
