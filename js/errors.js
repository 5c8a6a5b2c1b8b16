// The package's error classes. Every error hotprefix throws is a HotprefixError subclass with a
// stable `name`, so apps can test `instanceof` or `e.name`. Errors raised in the worker cross to
// the page as plain objects (toWire) and are rebuilt there with their class (fromWire).

/** Base class of every error hotprefix throws. `kind` is the engine's own error name. */
export class HotprefixError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = 'HotprefixError';
    this.kind = options.kind ?? null;
  }
}

/** No usable WebGPU: `reason` is 'no-webgpu' (no navigator.gpu), 'no-adapter', 'device' or 'limits'. */
export class WebGPUUnavailableError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'WebGPUUnavailableError';
    this.reason = options.reason ?? 'no-adapter';
  }
}

/** The model could not be fetched or read: HTTP error (`status`), truncated download, integrity
 * mismatch, or a file that is not a GGUF model hotprefix can run. Nothing is left in the cache. */
export class ModelLoadError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'ModelLoadError';
    this.status = options.status ?? null;
  }
}

/** The GPU device was lost; this engine is unusable, and createEngine() can make a new one. */
export class DeviceLostError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'DeviceLostError';
  }
}

/** The request's prompt plus max_tokens does not fit the context window, even after dropping the
 * oldest unpinned turns. */
export class ContextOverflowError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'ContextOverflowError';
  }
}

/** The KV budget cannot hold the request even after evicting every idle prefix. */
export class KvBudgetError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'KvBudgetError';
  }
}

/** The request was aborted through its AbortSignal (queued: removed; running: stopped). */
export class AbortError extends HotprefixError {
  constructor(message = 'the request was aborted', options = {}) {
    super(message, options);
    this.name = 'AbortError';
  }
}

/** A request or option the engine cannot accept (wrong types, out-of-range values, roles the chat
 * template rejects). */
export class InvalidRequestError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'InvalidRequestError';
  }
}

/** The engine crashed: a bug in hotprefix (a Rust panic; the message says where). Its wasm
 * instance is unusable, and so is every engine in the same thread: every later call fails with this
 * error. In a worker (the default) createEngine() makes a new one; with `worker: false` the page
 * must be reloaded. */
export class EngineCrashedError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'EngineCrashedError';
  }
}

/** The model produced logits no token can be chosen from (all NaN): a fault in the model file's
 * weights or in the GPU, not in the request. That request fails; the engine stays usable. */
export class NumericsError extends HotprefixError {
  constructor(message, options = {}) {
    super(message, options);
    this.name = 'NumericsError';
  }
}

const CLASSES = {
  HotprefixError, WebGPUUnavailableError, ModelLoadError, DeviceLostError, ContextOverflowError,
  KvBudgetError, AbortError, InvalidRequestError, EngineCrashedError, NumericsError,
};

/** The EngineCrashedError for a panic `message` (or, without one, the trap itself). */
export function crashError(message, cause) {
  return new EngineCrashedError(`the engine crashed and cannot be used again (a bug in hotprefix; please report it): ${message}`, { cause });
}

// The engine's (Rust) error names, by what they mean to an app. `phase` is 'load' or 'request'.
const LOAD_ERRORS = new Set(['GgufError', 'ModelError', 'WeightsError', 'TokenizerError', 'TemplateError', 'ShapeError']);
const REQUEST_ERRORS = new Set(['InvalidArgumentError', 'TemplateError', 'TokenizerError']);

/** The package error for an error thrown by the wasm engine. */
export function fromEngine(e, phase) {
  if (e instanceof HotprefixError) return e;
  // A trap of the wasm instance (crash.js adds the panic message when there is one).
  if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) return crashError(e.message, e);
  const kind = typeof e?.name === 'string' ? e.name : null;
  const message = typeof e?.message === 'string' ? e.message : String(e);
  const opts = { kind, cause: e };
  switch (kind) {
    case 'NoAdapterError': return new WebGPUUnavailableError(message, { ...opts, reason: 'no-adapter' });
    case 'RequestDeviceError': return new WebGPUUnavailableError(message, { ...opts, reason: 'device' });
    case 'AdapterLimitsError': return new WebGPUUnavailableError(message, { ...opts, reason: 'limits' });
    case 'DeviceLostError': return new DeviceLostError(message, opts);
    case 'ContextFullError': return new ContextOverflowError(message, opts);
    case 'CacheFullError':
    case 'KvBudgetTooLargeError': return new KvBudgetError(message, opts);
    case 'NumericsError': return new NumericsError(message, opts);
    case 'TooLargeError': // a weight larger than one binding may be
      return new WebGPUUnavailableError(message, { ...opts, reason: 'limits' });
    default:
      if (phase === 'load' && LOAD_ERRORS.has(kind)) return new ModelLoadError(message, opts);
      if (REQUEST_ERRORS.has(kind) || (phase === 'load' && kind === 'InvalidArgumentError')) return new InvalidRequestError(message, opts);
      return new HotprefixError(kind ? `${kind}: ${message}` : message, opts);
  }
}

/** A structured-clone-safe copy of an error, for postMessage. */
export function toWire(e) {
  const err = e instanceof HotprefixError ? e : fromEngine(e, 'request');
  return { name: err.name, message: err.message, kind: err.kind ?? null, reason: err.reason ?? null, status: err.status ?? null };
}

/** The error `toWire` described, with its class. */
export function fromWire(w) {
  const Class = CLASSES[w?.name] ?? HotprefixError;
  return new Class(w?.message ?? 'unknown error', { kind: w?.kind ?? null, reason: w?.reason ?? undefined, status: w?.status ?? undefined });
}
