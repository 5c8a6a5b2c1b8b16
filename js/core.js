// One loaded engine, where it runs: in the dedicated worker (worker.js), or in the page with
// `worker: false`. It loads the model into the wasm engine (download.js for the bytes), serves
// requests one at a time from a queue, and saves and restores the cache in OPFS.
import { Engine as WasmEngine, inspectModel } from './wasm/hotprefix.js';
import {
  HotprefixError, WebGPUUnavailableError, DeviceLostError, AbortError, InvalidRequestError,
} from './errors.js';
import { crashedError, engineError, guarded, isTrap, loadWasm } from './crash.js';
import { digest, modelBytes, openCache, readHeader } from './download.js';
import { SAVED_DIR } from './names.js';

function checkOptions(o) {
  if (o.sha256 != null && !/^[0-9a-fA-F]{64}$/.test(o.sha256)) throw new InvalidRequestError('sha256 must be 64 hex digits');
  for (const k of ['kvBudgetMB', 'contextSize']) {
    if (o[k] != null && !(typeof o[k] === 'number' && o[k] > 0 && Number.isFinite(o[k]))) {
      throw new InvalidRequestError(`${k} must be a positive number`);
    }
  }
  if (o.contextSize != null && !Number.isInteger(o.contextSize)) throw new InvalidRequestError('contextSize must be an integer');
  if (o.pageSize != null && !(Number.isInteger(o.pageSize) && o.pageSize >= 1 && o.pageSize <= 1024)) {
    throw new InvalidRequestError('pageSize must be an integer from 1 to 1024');
  }
}

/** One loaded engine and its request queue. */
export class Core {
  #engine;
  #queue = [];
  #pumping = null; // the loop serving the queue, while it runs
  #closed = null;
  #unloading = null;

  constructor(engine, exports, modelKey) {
    this.#engine = engine;
    this.adapter = engine.adapter();
    this.contextSize = engine.contextSize();
    this.exports = exports;
    this.modelKey = modelKey; // the model file's sha256: the saved cache's file name and identity
    this.restored = null;
  }

  /** What the engine reports about itself: adapter, context, and the wasm heap's size in bytes
   * (linear memory only grows: after a load, its peak during the load). */
  info() {
    return {
      adapter: this.adapter, contextSize: this.contextSize, wasmHeapBytes: this.exports.memory.buffer.byteLength,
      sha256: this.modelKey, restored: this.restored,
    };
  }

  /**
   * What a model file holds and whether this build runs it, from its header alone: no GPU, and no
   * more of the file than the header (`inspectModel` in index.js). `opts`: {model, wasmUrl}.
   */
  static async inspect(opts) {
    await loadWasm(opts.wasmUrl);
    if (crashedError()) throw crashedError();
    try {
      return await readHeader(opts.model, (bytes, size) => inspectModel(bytes, size));
    } catch (e) {
      throw e instanceof HotprefixError ? e : engineError(e, 'load');
    }
  }

  /**
   * Downloads (or reads from the cache) and loads a model. `opts`: {model, sha256, kvBudgetMB,
   * contextSize, pageSize, wasmUrl}; `onProgress({phase, loaded, total, cached?})` with phase 'download',
   * 'upload' or 'ready'.
   */
  static async load(opts, onProgress = () => {}) {
    checkOptions(opts);
    if (!globalThis.navigator?.gpu) {
      throw new WebGPUUnavailableError('this browser has no WebGPU (navigator.gpu is missing): use Chrome or Edge 113+, Safari 26+ or Firefox 141+, over https or on localhost', { reason: 'no-webgpu' });
    }
    // Before downloading anything: is there an adapter at all? (The engine requests its own.)
    if (!(await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' }).catch(() => null))) {
      throw new WebGPUUnavailableError('WebGPU is present but offers no adapter (disabled, blocklisted GPU, or no GPU)', { reason: 'no-adapter' });
    }
    const exports = await loadWasm(opts.wasmUrl);
    if (crashedError()) throw crashedError();
    let src = await modelBytes(opts.model, onProgress);
    const what = src.url ?? 'the model buffer';
    let sha;
    try {
      sha = await digest(src.bytes, opts.sha256, src.sha256, what);
    } catch (e) {
      if (!src.cached) throw e;
      // A cached copy that fails the check (the file at this URL was updated): drop it, fetch again.
      await (await openCache())?.delete(src.url);
      src = await modelBytes(opts.model, onProgress, { skipCache: true });
      sha = await digest(src.bytes, opts.sha256, null, what);
    }
    const file = src.bytes;
    src.bytes = null;
    onProgress({ phase: 'upload', loaded: 0, total: file.length });
    let engine;
    try {
      // The engine reads the header, then one tensor at a time, converting and uploading each
      // before it reads the next: the wasm heap never holds the whole file.
      engine = await guarded(WasmEngine.load((offset, length) => file.subarray(offset, offset + length), file.length,
        opts.contextSize ?? undefined, opts.kvBudgetMB ?? undefined, opts.pageSize ?? undefined,
        (loaded, total) => onProgress({ phase: 'upload', loaded, total })));
    } catch (e) {
      const err = engineError(e, 'load');
      // A cached file that no longer loads (it crashes the loader, or this version refuses it)
      // is dropped, so that the next load fetches it again; a missing GPU is not the file's fault.
      if (src.cached && !(err instanceof WebGPUUnavailableError || err instanceof DeviceLostError)) {
        await (await openCache())?.delete(src.url);
      }
      throw err;
    }
    // Only a file that loaded is kept in Cache Storage. Best effort: a full quota must not fail
    // a load that succeeded. Then nothing refers to the file's bytes any more.
    if (src.url && !src.cached && /^https?:/.test(src.url)) {
      try {
        const headers = { 'content-type': 'application/octet-stream', 'content-length': String(file.length) };
        if (sha) headers['x-hotprefix-sha256'] = sha;
        await (await openCache())?.put(src.url, new Response(file, { headers }));
      } catch (e) {
        console.warn(`hotprefix: the model was not stored in Cache Storage: ${e?.message ?? e}`);
      }
    }
    const core = new Core(engine, exports, sha);
    if (opts.restoreCache) core.restored = await core.restore();
    onProgress({ phase: 'ready', loaded: 1, total: 1 });
    return core;
  }

  // Runs `fn` when the requests before it are done. A request aborted while it waits is removed.
  #enqueue(fn, signal) {
    return new Promise((resolve, reject) => {
      if (crashedError() || this.#closed) return reject(crashedError() ?? this.#closed);
      if (signal?.aborted) return reject(new AbortError('the request was aborted before it started'));
      const job = { fn, resolve, reject, signal, started: false };
      job.onAbort = () => {
        if (job.started) return;
        const i = this.#queue.indexOf(job);
        if (i >= 0) this.#queue.splice(i, 1);
        reject(new AbortError('the request was aborted while it was queued'));
      };
      signal?.addEventListener('abort', job.onAbort, { once: true });
      this.#queue.push(job);
      this.#pump();
    });
  }

  #pump() {
    this.#pumping ??= (async () => {
      while (this.#queue.length) {
        const job = this.#queue.shift();
        job.started = true;
        try {
          job.resolve(await guarded(crashedError() ? null : job.fn()));
        } catch (e) {
          job.reject(isTrap(e) ? engineError(e, 'request') : e);
        } finally {
          job.signal?.removeEventListener('abort', job.onAbort);
        }
      }
      this.#pumping = null;
    })();
  }

  /**
   * Runs one chat request (an object in the engine's request shape), calling `onText(piece)` as
   * text arrives. Resolves to the engine's result; rejects with AbortError when aborted.
   */
  chat(request, onText, signal) {
    let text;
    try {
      text = JSON.stringify(request);
    } catch (e) {
      return Promise.reject(new InvalidRequestError(`the request is not JSON-serialisable: ${e.message}`));
    }
    return this.#enqueue(async () => {
      if (signal?.aborted) throw new AbortError('the request was aborted before it started');
      let r;
      try {
        r = await this.#engine.chat(text, (piece) => onText?.(piece), signal ?? undefined);
      } catch (e) {
        throw engineError(e, 'request');
      }
      if (r.finish_reason === 'abort') throw new AbortError('the request was aborted while it was generating');
      return r;
    }, signal);
  }

  stats() {
    return this.#enqueue(async () => ({
      ...this.#engine.cacheStats(),
      saved_bytes: (await this.#savedFile())?.size ?? 0,
      wasm_heap_bytes: this.exports.memory.buffer.byteLength,
    }));
  }

  // The saved cache's file handle in OPFS (created when `create`), or null.
  async #savedHandle(create = false) {
    if (!this.modelKey || !globalThis.navigator?.storage?.getDirectory) return null;
    try {
      const root = await navigator.storage.getDirectory();
      const dir = await root.getDirectoryHandle(SAVED_DIR, { create });
      return await dir.getFileHandle(`${this.modelKey}.kv`, { create });
    } catch (e) {
      if (create) throw new HotprefixError(`cannot write the saved cache: ${e?.message ?? e}`, { cause: e });
      return null;
    }
  }

  async #savedFile() {
    return (await this.#savedHandle())?.getFile() ?? null;
  }

  /**
   * Writes every resident prefix (token ids and KV pages) to OPFS, under the model's sha256.
   * Returns {bytes, prefixes, tokens}.
   */
  persist() {
    return this.#enqueue(async () => {
      if (!this.modelKey) throw new HotprefixError('saving the cache needs the model\'s sha256 (crypto.subtle: https or localhost)');
      const handle = await this.#savedHandle(true);
      // The engine hands the file over a batch of pages at a time (8 MiB at most), each copied
      // out of the wasm heap and written before the next is read: neither heap holds the file.
      let bytes = 0;
      let failed = null; // a write error, kept apart from the engine's own errors
      const save = async (write) => {
        try {
          await this.#engine.saveCache(this.modelKey, async (chunk) => {
            try {
              await write(chunk, bytes);
            } catch (e) {
              failed = e;
              throw e;
            }
            bytes += chunk.length;
          });
        } catch (e) {
          if (failed) throw new HotprefixError(`cannot write the saved cache: ${failed?.message ?? failed}`, { cause: failed });
          throw engineError(e, 'request');
        }
      };
      if (handle.createWritable) {
        let w;
        try {
          w = await handle.createWritable(); // a swap file: the saved one changes only at close()
        } catch (e) {
          throw new HotprefixError(`cannot write the saved cache: ${e?.message ?? e}`, { cause: e });
        }
        try {
          await save((chunk) => w.write(chunk));
          await w.close();
        } catch (e) {
          await w.abort().catch(() => {}); // the previous file stays as it was
          throw e instanceof HotprefixError ? e : new HotprefixError(`cannot write the saved cache: ${e?.message ?? e}`, { cause: e });
        }
      } else { // Safari before 26: only sync access handles, in workers
        const h = await handle.createSyncAccessHandle();
        try {
          h.truncate(0);
          await save((chunk, at) => { h.write(chunk, { at }); });
          h.flush();
        } finally {
          h.close();
        }
      }
      const stats = this.#engine.cacheStats();
      return { bytes, prefixes: stats.prefixes.length, tokens: stats.prefixes.reduce((a, p) => a + p.tokens, 0) };
    });
  }

  /**
   * Makes the saved prefixes resident again. Never throws: a missing file gives null; a file for
   * another model, layout version or shape, or a corrupt one, gives {warning} and is deleted.
   */
  restore() {
    return this.#enqueue(async () => {
      let file = null;
      try {
        file = await this.#savedFile();
        if (!file) return null;
        const r = await this.#engine.restoreCache(new Uint8Array(await file.arrayBuffer()), this.modelKey);
        return { ...r, bytes: file.size };
      } catch (e) {
        if (crashedError() || isTrap(e)) throw engineError(e, 'request');
        const warning = `the saved cache was not used: ${e?.message ?? e}`;
        console.warn(`hotprefix: ${warning}`);
        if (e?.name === 'CacheFileError') await this.#removeSaved(); // refused for good: never read again
        return { warning, bytes: file?.size ?? 0 };
      }
    });
  }

  // Deletes this model's saved file only.
  async #removeSaved() {
    try {
      const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle(SAVED_DIR);
      await dir.removeEntry(`${this.modelKey}.kv`);
    } catch {
      // already gone
    }
  }

  async #forget() {
    try {
      const root = await navigator.storage.getDirectory();
      await root.removeEntry(SAVED_DIR, { recursive: true });
    } catch {
      // nothing saved
    }
  }

  /** Deletes every saved cache file (every model's). */
  forget() {
    return this.#enqueue(() => this.#forget());
  }

  clear() {
    return this.#enqueue(async () => this.#engine.clearCache());
  }

  /** Loses the GPU device on purpose (tests of DeviceLostError). */
  loseDevice() {
    return this.#enqueue(async () => this.#engine.destroyDevice());
  }

  /** Panics inside the engine on purpose (tests of EngineCrashedError). */
  panicForTest(message) {
    return this.#enqueue(() => this.#engine._panicForTest(message));
  }

  /** Traps inside the engine on purpose, without a panic (tests of EngineCrashedError). */
  trapForTest(kind) {
    return this.#enqueue(() => this.#engine._trapForTest(kind));
  }

  /** Waits for the queue, frees every GPU buffer and the engine; later calls reject. After a
   * crash nothing is called in the instance: its memory goes with the worker or the page. */
  unload() {
    this.#unloading ??= (async () => {
      this.#closed = new HotprefixError('the engine was unloaded');
      for (const job of this.#queue.splice(0)) job.reject(crashedError() ?? this.#closed);
      await guarded(this.#pumping).catch(() => {}); // a crash ends the wait
      if (!crashedError()) {
        this.#engine.destroyDevice();
        this.#engine.free();
      }
      this.#engine = null;
    })();
    return this.#unloading;
  }
}
