// The engine's crash guard. A panic in the wasm engine (a bug) traps the instance, and so does an
// allocation failure or a stack overflow: nothing in it can be used again. Every call into the
// engine is guarded here, so that such a trap fails that call and every later one with
// EngineCrashedError instead of leaving promises pending; and the wasm module is loaded once a
// thread, with the panic hook installed.
import init, { lastPanic, onPanic } from './wasm/hotprefix.js';
import { HotprefixError, fromEngine, crashError } from './errors.js';

// A panic in the wasm engine (a bug) traps the instance (`panic = "abort"`): nothing in it can be
// used again, so every engine in this thread fails from then on with the EngineCrashedError
// below. The engine's panic hook tells us the message before the trap. A trap that bypasses the
// hook (an allocation failure, a stack overflow, `unreachable`) is caught where a call throws it,
// or, inside an async call, where it surfaces: as an uncaught error of this thread.
let crashed = null;
/** The crash error once the engine crashed in this thread, else null. */
export const crashedError = () => crashed;
const guards = new Set(); // the reject functions of the guarded promises still pending
function crash(message, cause) {
  if (!crashed) {
    crashed = crashError(message, cause);
    for (const reject of guards) reject(crashed);
    guards.clear();
  }
  return crashed;
}
// `promise`, rejected with the crash error if the instance crashes first: every call into the
// engine is guarded, because a trap inside an async call leaves its promise pending forever.
export function guarded(promise) {
  if (crashed) return Promise.reject(crashed);
  return new Promise((resolve, reject) => {
    guards.add(reject);
    Promise.resolve(promise).then((v) => { guards.delete(reject); resolve(v); }, (e) => { guards.delete(reject); reject(e); });
  });
}
// A trap of a wasm instance: WebAssembly.RuntimeError (unreachable, out of bounds, an allocation
// failure), or the RangeError of a stack overflow inside wasm code.
export const isTrap = (e) => typeof WebAssembly !== 'undefined'
  && (e instanceof WebAssembly.RuntimeError || (e instanceof RangeError && /call stack/i.test(e.message) && /wasm/.test(e.stack ?? '')));
// The panic's message, when the hook saw one, else the trap's own.
function trapMessage(e) {
  let message = null;
  try {
    message = lastPanic() ?? null;
  } catch {
    // the instance is too broken to say
  }
  return message ?? `${e?.name ?? 'Error'}: ${e?.message ?? e} (a trap without a panic message)`;
}
// The package error for what a call into the engine threw.
export function engineError(e, phase) {
  if (isTrap(e)) return crash(trapMessage(e), e);
  return fromEngine(e, phase);
}
// A trap inside an async call surfaces as an uncaught error of this thread (from the task queue of
// the async call), not from the call: while a call into the engine is pending, it is that call's
// crash. It is reported once, as the EngineCrashedError, not again as an uncaught error.
for (const type of ['error', 'unhandledrejection']) {
  globalThis.addEventListener?.(type, (ev) => {
    const e = ev.error ?? ev.reason;
    if (!isTrap(e)) return;
    if (!crashed && guards.size > 0) crash(trapMessage(e), e);
    if (crashed) ev.preventDefault();
  });
}

let wasm = null; // the wasm module's exports, once instantiated
export function loadWasm(wasmUrl) {
  wasm ??= init(wasmUrl ? { module_or_path: wasmUrl } : undefined).then((exports) => {
    onPanic((message) => crash(message));
    return exports;
  }, (e) => {
    wasm = null;
    throw new HotprefixError(`could not load hotprefix's wasm module: ${e?.message ?? e}`, { cause: e });
  });
  return wasm;
}
