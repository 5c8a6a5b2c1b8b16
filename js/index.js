// hotprefix: small LLMs on WebGPU with a resident, prefix-shared KV cache, behind an
// OpenAI-shaped API. The engine runs in a dedicated module worker by default; the object
// createEngine returns is a thin proxy that posts requests to it.
import { canonicalJSON } from './canonical.js';
import {
  HotprefixError, WebGPUUnavailableError, ModelLoadError, DeviceLostError, ContextOverflowError,
  KvBudgetError, AbortError, InvalidRequestError, EngineCrashedError, NumericsError, fromWire, crashError,
} from './errors.js';

export {
  canonicalJSON, HotprefixError, WebGPUUnavailableError, ModelLoadError, DeviceLostError,
  ContextOverflowError, KvBudgetError, AbortError, InvalidRequestError, EngineCrashedError, NumericsError,
};

export { MODEL_CACHE, SAVED_DIR } from './names.js';
import { OP } from './names.js';

// Request fields hotprefix does not implement: refused rather than silently ignored.
const UNSUPPORTED = ['functions', 'function_call', 'logprobs', 'top_logprobs', 'logit_bias', 'audio', 'modalities'];

// Numeric request fields: checked here, since JSON turns NaN and Infinity into null.
const NUMBERS = ['max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'repetition_penalty', 'frequency_penalty', 'presence_penalty', 'seed'];

const aborted = () => new AbortError('the request was aborted before it started');

// The engine in a dedicated module worker.
class WorkerBackend {
  constructor() {
    this.inWorker = true;
    this.pending = new Map();
    this.next = 1;
    this.dead = null;
    this.worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'hotprefix' });
    this.worker.onmessage = ({ data }) => {
      const p = this.pending.get(data?.id);
      if (!p) return;
      if (data.type === 'result') p.settle(() => p.resolve(data.value));
      else if (data.type === 'error') {
        const err = fromWire(data.error);
        // The engine's instance in the worker is gone: every call fails with its crash, and the
        // worker goes (createEngine makes a new one).
        if (err instanceof EngineCrashedError) this.#die(err);
        else p.settle(() => p.reject(err));
      } else p.onEvent?.(data);
    };
    const fail = (what) => (e) => {
      const detail = e?.message ?? 'no detail (see the console)';
      // A trap the worker could not attribute to a call is still the engine's crash.
      this.#die(/RuntimeError|unreachable|call stack/i.test(detail)
        ? crashError(`the worker ${what}: ${detail}`)
        : new HotprefixError(`the hotprefix worker ${what}: ${detail}`));
      e?.preventDefault?.();
    };
    this.worker.onerror = fail('failed');
    this.worker.onmessageerror = fail('sent a message that could not be read');
  }

  #die(err) {
    this.dead ??= err;
    this.crashed = this.dead instanceof EngineCrashedError;
    if (this.crashed) this.worker.terminate();
    for (const p of [...this.pending.values()]) p.settle(() => p.reject(this.dead));
  }

  call(op, args, { onEvent, signal } = {}) {
    // Unloading a crashed engine has nothing left to free: its worker is gone.
    if (this.dead && this.crashed && op === OP.unload) return Promise.resolve();
    if (this.dead) return Promise.reject(this.dead);
    if (signal?.aborted) return Promise.reject(aborted());
    const id = this.next++;
    return new Promise((resolve, reject) => {
      const onAbort = () => this.worker.postMessage({ id: this.next++, op: OP.abort, args: { target: id } });
      signal?.addEventListener('abort', onAbort, { once: true });
      const settle = (f) => {
        this.pending.delete(id);
        signal?.removeEventListener('abort', onAbort);
        f();
      };
      this.pending.set(id, { resolve, reject, onEvent, settle });
      try {
        this.worker.postMessage({ id, op, args });
      } catch (e) {
        // A request the structured clone cannot copy (a function in a tool's schema, say): the
        // worker never saw it, so it is the caller's error and nothing stays pending.
        const why = e?.name === 'DataCloneError' ? 'it holds a value that cannot be copied to the engine (a function?)' : String(e?.message ?? e);
        settle(() => reject(new InvalidRequestError(`the request cannot be sent: ${why}`)));
      }
    });
  }

  close() {
    this.worker.terminate();
    this.dead = new HotprefixError('the engine was unloaded');
    for (const p of [...this.pending.values()]) p.settle(() => p.reject(this.dead));
  }
}

// The engine in this thread (`worker: false`): host.js's Host, loaded on first use.
class LocalBackend {
  constructor() {
    this.inWorker = false;
    this.host = null;
    this.dead = null;
  }

  async call(op, args, { onEvent, signal } = {}) {
    if (this.dead) throw this.dead;
    if (signal?.aborted) throw aborted();
    this.host ??= new (await import('./host.js')).Host();
    return this.host.call(op, args, { onEvent, signal });
  }

  close() {
    this.dead = new HotprefixError('the engine was unloaded');
  }
}

function randomId() {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return [...b].map((x) => x.toString(36).padStart(2, '0')).join('').slice(0, 24);
}

// The answer as OpenAI's `message`: the text (null when the answer only calls tools) and the calls.
function messageOf(r) {
  const calls = r.tool_calls ?? [];
  const message = { role: 'assistant', content: calls.length && !r.text ? null : r.text, refusal: null };
  if (calls.length) message.tool_calls = calls;
  return message;
}

function usageOf(r) {
  const u = r.usage;
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.prompt_tokens_details.cached_tokens },
  };
}

// A message as the engine reads it: OpenAI's `content` as a string, or as text parts (joined; an
// image or audio part is refused), or null on an assistant message that calls tools; the
// `developer` role is `system`, as OpenAI treats it for models without one.
function engineMessage(m, i) {
  if (!m || typeof m !== 'object' || typeof m.role !== 'string') throw new InvalidRequestError(`messages[${i}] must be {role: string, content: string}`);
  let { content } = m;
  if (Array.isArray(content)) {
    content = content.map((p, j) => {
      if (p?.type === 'text' && typeof p.text === 'string') return p.text;
      throw new InvalidRequestError(`messages[${i}].content[${j}]: only text parts are supported (got ${p?.type ?? typeof p})`);
    }).join('');
  } else if (content == null && m.role === 'assistant' && Array.isArray(m.tool_calls) && m.tool_calls.length) {
    content = null;
  } else if (typeof content !== 'string') {
    throw new InvalidRequestError(`messages[${i}].content must be a string or text parts`);
  }
  if (m.name != null && typeof m.name !== 'string') throw new InvalidRequestError(`messages[${i}].name must be a string`);
  const out = { ...m, role: m.role === 'developer' ? 'system' : m.role, content };
  for (const k of ['name', 'tool_calls', 'tool_call_id', 'refusal', 'audio', 'function_call', 'parsed']) if (out[k] == null) delete out[k];
  // Fields of a result message (the openai client's helpers add them) that carry nothing here.
  if (Array.isArray(out.annotations) && out.annotations.length === 0) delete out.annotations;
  // What the openai client's `.parse()` and `.stream()` helpers derive from an answer they return:
  // `parsed` (the content read as JSON) and each call's `parsed_arguments` (its arguments read as
  // JSON). The content and the arguments say the same and are what the template renders, so a
  // message sent back as the client returned it is read without them.
  if (out.role === 'assistant') {
    delete out.parsed;
    if (Array.isArray(out.tool_calls)) {
      out.tool_calls = out.tool_calls.map((c) => {
        if (!c || typeof c !== 'object' || !c.function || typeof c.function !== 'object' || !('parsed_arguments' in c.function)) return c;
        const { parsed_arguments: _, ...fn } = c.function;
        return { ...c, function: fn };
      });
    }
  }
  return out;
}

// The request the engine reads: OpenAI's fields, nulls meaning "the default".
function engineRequest(params) {
  if (!params || typeof params !== 'object') throw new InvalidRequestError('create() takes a request object');
  const { signal, stream, stream_options: streamOptions, n, ...rest } = params;
  if (!Array.isArray(rest.messages) || rest.messages.length === 0) throw new InvalidRequestError('messages must be a non-empty array');
  rest.messages = rest.messages.map((m, i) => engineMessage(m, i));
  // JSON has no NaN or Infinity (they would reach the engine as null).
  for (const k of NUMBERS) {
    if (rest[k] != null && !(typeof rest[k] === 'number' && Number.isFinite(rest[k]))) {
      throw new InvalidRequestError(`${k} must be a finite number`);
    }
  }
  if (n != null && n !== 1) throw new InvalidRequestError('n must be 1');
  if (stream != null && typeof stream !== 'boolean') throw new InvalidRequestError('stream must be a boolean');
  if (signal != null && !(signal instanceof AbortSignal)) throw new InvalidRequestError('signal must be an AbortSignal');
  for (const k of UNSUPPORTED) {
    if (rest[k] != null && rest[k] !== false) throw new InvalidRequestError(`${k} is not supported by hotprefix`);
    // `false` (`logprobs: false`, say) asks for what hotprefix does anyway: not sent on, since
    // the engine refuses a field it does not implement whatever its value.
    if (rest[k] === false) delete rest[k];
  }
  const includeUsage = streamOptionsOf(streamOptions, stream === true);
  const request = {};
  for (const [k, v] of Object.entries(rest)) if (v != null) request[k] = v;
  return { request, signal, stream: stream === true, includeUsage };
}

// OpenAI's `stream_options`, checked: only with `stream: true` (as OpenAI answers), only the
// options hotprefix implements (`include_usage`; `include_obfuscation` only as false: chunks are
// never padded). Returns whether the usage chunk is wanted.
function streamOptionsOf(o, streaming) {
  if (o == null) return false;
  if (!streaming) throw new InvalidRequestError('stream_options is only allowed when stream is true');
  if (typeof o !== 'object' || Array.isArray(o)) throw new InvalidRequestError('stream_options must be an object');
  for (const [k, v] of Object.entries(o)) {
    if (v == null) continue;
    if (k === 'include_usage') {
      if (typeof v !== 'boolean') throw new InvalidRequestError('stream_options.include_usage must be a boolean');
    } else if (k === 'include_obfuscation') {
      if (v !== false) throw new InvalidRequestError('stream_options.include_obfuscation is not supported by hotprefix (its chunks are never padded)');
    } else {
      throw new InvalidRequestError(`stream_options.${k} is not supported by hotprefix`);
    }
  }
  return o.include_usage === true;
}

/** An engine: a loaded model and its resident prompt cache. Made by createEngine(). */
class Engine {
  #backend;

  constructor(backend, info, model) {
    this.#backend = backend;
    this.model = model;
    this.adapter = info.adapter;
    this.contextSize = info.contextSize;
    this.wasmHeapBytes = info.wasmHeapBytes;
    this.inWorker = backend.inWorker;
    this.chat = { completions: { create: (params) => this.#create(params) } };
    const call = (op, args, o) => this.#backend.call(op, args, o);
    this.cache = {
      /** Computes the messages' prompt and keeps it resident (max_tokens 0). */
      async prewarm(messages, { cache_salt: salt, signal } = {}) {
        const { request } = engineRequest({ messages, cache_salt: salt });
        request.max_tokens = 0;
        const r = await call(OP.chat, { request }, { signal });
        return { prompt_tokens: r.usage.prompt_tokens, cached_tokens: r.usage.prompt_tokens_details.cached_tokens, cache: r.cache };
      },
      /** Pages used/free/total, bytes and the resident prefixes (tokens, pages, last use). */
      stats: () => call(OP.stats),
      /** Forgets every resident prefix. */
      clear: () => call(OP.clear),
      /** Saves every resident prefix (token ids and KV pages) to OPFS: {bytes, prefixes, tokens}. */
      persist: () => call(OP.persist),
      /** Makes the saved prefixes resident again (createEngine's `restoreCache` does this). */
      restore: () => call(OP.restore),
      /** Deletes the saved files. */
      forget: () => call(OP.forget),
      /** What `restoreCache` restored at load: {prefixes, tokens, pages, skipped, bytes},
       * {warning, bytes} when the saved file was refused, or null. */
      restored: info.restored ?? null,
    };
    this.sha256 = info.sha256 ?? null;
  }

  async #create(params) {
    const { request, signal, stream, includeUsage } = engineRequest(params);
    const id = `chatcmpl-${randomId()}`;
    const created = Math.floor(Date.now() / 1000);
    // (No `system_fingerprint`: OpenAI's type has it as an optional string, and there is none.)
    const base = { id, created, model: params.model ?? this.model };
    if (!stream) {
      const r = await this.#backend.call(OP.chat, { request }, { signal });
      return {
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message: messageOf(r), logprobs: null, finish_reason: r.finish_reason }],
        usage: usageOf(r),
        hotprefix: { cache: r.cache, timings: r.timings },
      };
    }
    const chunk = (choices, extra = {}) => ({ ...base, object: 'chat.completion.chunk', choices, ...(includeUsage ? { usage: null } : {}), ...extra });
    const delta = (d, finish = null) => [{ index: 0, delta: d, logprobs: null, finish_reason: finish }];
    return new ChunkStream((push, ac) => {
      push(chunk(delta({ role: 'assistant', content: '' })));
      return this.#backend
        .call(OP.chat, { request }, {
          signal: ac.signal,
          onEvent: (m) => {
            if (m.type === 'text') push(chunk(delta({ content: m.text })));
            // A call's id, type and name come first (arguments ''), then its arguments in pieces.
            else if (m.type === 'tool' && m.name != null) push(chunk(delta({ tool_calls: [{ index: m.index, id: m.callId, type: 'function', function: { name: m.name, arguments: '' } }] })));
            else if (m.type === 'tool') push(chunk(delta({ tool_calls: [{ index: m.index, function: { arguments: m.arguments } }] })));
          },
        })
        .then((r) => {
          const report = { hotprefix: { cache: r.cache, timings: r.timings } };
          if (includeUsage) {
            push(chunk(delta({}, r.finish_reason)));
            push(chunk([], { usage: usageOf(r), ...report }));
          } else {
            push(chunk(delta({}, r.finish_reason), report));
          }
        });
    }, signal);
  }

  /** Loses the GPU device on purpose, to test an app's DeviceLostError handling. */
  _loseDevice() {
    return this.#backend.call(OP.loseDevice);
  }

  /** Test only: makes the engine panic (a Rust panic, as a bug would), to test an app's
   * EngineCrashedError handling. The engine is unusable afterwards. */
  _panicForTest(message = 'test panic') {
    return this.#backend.call(OP.panicForTest, { message: String(message) });
  }

  /** Test only: makes the engine trap without a panic (`'oom'`, `'stack'` or `'unreachable'`), as
   * an allocation failure or a stack overflow would. The engine is unusable afterwards. */
  _trapForTest(kind = 'unreachable') {
    return this.#backend.call(OP.trapForTest, { kind: String(kind) });
  }

  /** Waits for running requests, frees the model's GPU memory and stops the worker. */
  async unload() {
    try {
      await this.#backend.call(OP.unload);
    } finally {
      this.#backend.close();
    }
  }
}

/**
 * An async iterable of ChatCompletionChunk objects. Leaving the loop early (break, return, throw)
 * aborts the request, as does `controller.abort()`.
 */
class ChunkStream {
  #chunks = [];
  #wake = null;
  #done = false;
  #error = null;
  #iterated = false;

  constructor(start, signal) {
    this.controller = new AbortController();
    const onAbort = () => this.controller.abort();
    if (signal?.aborted) this.controller.abort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    const wake = () => { this.#wake?.(); this.#wake = null; };
    const push = (c) => { this.#chunks.push(c); wake(); };
    start(push, this.controller)
      .catch((e) => { this.#error = e; })
      .finally(() => { this.#done = true; signal?.removeEventListener('abort', onAbort); wake(); });
  }

  [Symbol.asyncIterator]() {
    // One consumer, as OpenAI's Stream allows: a second would wait for chunks the first took.
    if (this.#iterated) throw new TypeError('this stream is already being iterated (or was): a stream can be iterated once');
    this.#iterated = true;
    return this.#iterate();
  }

  async *#iterate() {
    try {
      for (;;) {
        // Deltas already on their way when the abort was sent are dropped.
        if (this.controller.signal.aborted) {
          throw this.#error instanceof AbortError ? this.#error : new AbortError('the request was aborted while it was generating');
        }
        if (this.#chunks.length) {
          yield this.#chunks.shift();
        } else if (this.#error) {
          throw this.#error;
        } else if (this.#done) {
          return;
        } else {
          await new Promise((r) => { this.#wake = r; });
        }
      }
    } finally {
      if (!this.#done) this.controller.abort();
    }
  }
}

const isBlob = (v) => typeof Blob !== 'undefined' && v instanceof Blob;

// A model source as the worker gets it: a URL resolved against the page, or the bytes or Blob.
function modelSource(model) {
  if (typeof model === 'string' || model instanceof URL) {
    try {
      return new URL(String(model), globalThis.location?.href).href; // the worker resolves against its own URL
    } catch {
      throw new InvalidRequestError(`model: not a URL: ${model}`);
    }
  }
  if (isBlob(model) || model instanceof ArrayBuffer || ArrayBuffer.isView(model)) return model;
  throw new InvalidRequestError('model must be a URL, a Blob (File), an ArrayBuffer or a Uint8Array');
}

/**
 * What a GGUF model file holds and whether this build runs it, read from its header alone (a few
 * MB: an HTTP Range request for a URL, a slice of a File), without a GPU and without loading it:
 * `{architecture, name, features, parameters, tensors, formats: [{type, ggml_type, tensors,
 * values}], bytes, context, tokenizer, pre_tokenizer, chat_template, runs, refused}`. `runs` is
 * the header's verdict (everything but the tensor values, which the load checks). A file that is
 * not GGUF, or cannot be read, is a ModelLoadError. Options: `worker` (default true: the wasm
 * runs in a short-lived worker).
 */
export async function inspectModel(model, { worker = true } = {}) {
  if (model == null) throw new InvalidRequestError('inspectModel() takes a model: a URL, a Blob (File) or bytes');
  const source = modelSource(model);
  const backend = worker === false ? new LocalBackend() : new WorkerBackend();
  try {
    return await backend.call(OP.inspect, { model: source });
  } finally {
    backend.close();
  }
}

/**
 * Loads a model and returns its engine. Options: `model` (URL, Blob/File, or ArrayBuffer/Uint8Array), `sha256`
 * (hex), `onProgress({phase, loaded, total})`, `worker` (default true), `kvBudgetMB`,
 * `contextSize`, `pageSize` (positions per KV page, default 16), `modelId` (the `model` field of
 * results).
 */
export async function createEngine(options = {}) {
  if (!options || typeof options !== 'object') throw new InvalidRequestError('createEngine() takes an options object');
  const { model, sha256, onProgress, worker = true, kvBudgetMB, contextSize, pageSize, modelId, restoreCache = false } = options;
  if (model == null) throw new InvalidRequestError('options.model is required: a URL, a Blob (File) or the bytes');
  if (onProgress != null && typeof onProgress !== 'function') throw new InvalidRequestError('onProgress must be a function');
  const source = modelSource(model);
  let id = modelId;
  if (typeof source === 'string') id ??= decodeURIComponent(new URL(source).pathname.split('/').pop() || 'model').replace(/\.gguf$/i, '');
  else if (isBlob(source)) id ??= (typeof source.name === 'string' && source.name ? source.name : 'model').replace(/\.gguf$/i, '');
  const backend = worker === false ? new LocalBackend() : new WorkerBackend();
  try {
    const info = await backend.call(OP.load, { model: source, sha256, kvBudgetMB, contextSize, pageSize, restoreCache: restoreCache === true }, {
      onEvent: (m) => m.type === 'progress' && onProgress?.(m.progress),
    });
    return new Engine(backend, info, id ?? 'hotprefix');
  } catch (e) {
    backend.close();
    throw e;
  }
}
