// Getting the model file's bytes: from Cache Storage when the URL is there, else fetched with
// progress (the buffer grows as the bytes arrive; Content-Length is checked, not trusted), and
// its sha256.
import { HotprefixError, ModelLoadError, InvalidRequestError } from './errors.js';
import { MODEL_CACHE } from './names.js';

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

export async function openCache() {
  try {
    return globalThis.caches ? await caches.open(MODEL_CACHE) : null;
  } catch {
    return null; // opaque origins and some private modes have no Cache Storage
  }
}

// Bytes allocated up front for a download, whatever its Content-Length says: the buffer grows
// (doubling, up to the declared length) as the bytes arrive, so a huge or wrong header costs
// nothing before the bytes are there.
const FIRST_ALLOCATION = 64 << 20;

/** Reads `res`'s body with progress; checks the length against Content-Length. */
async function readBody(res, url, onProgress) {
  const encoded = (res.headers.get('content-encoding') ?? 'identity') !== 'identity';
  const declared = Number(res.headers.get('content-length'));
  const total = !encoded && Number.isSafeInteger(declared) && declared > 0 ? declared : null;
  if (!res.body) throw new ModelLoadError(`${url}: the response has no body`);
  return readStream(res.body, total, url, onProgress);
}

/** Reads a byte stream of `total` bytes (null: unknown) with progress. */
async function readStream(body, total, url, onProgress) {
  const reader = body.getReader();
  let bytes = null;
  let loaded = 0;
  try {
    bytes = new Uint8Array(Math.min(total ?? FIRST_ALLOCATION, FIRST_ALLOCATION));
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (total !== null && loaded + value.length > total) {
        throw new ModelLoadError(`${url}: more bytes than the ${total} its Content-Length declares`);
      }
      if (loaded + value.length > bytes.length) {
        const grown = new Uint8Array(Math.min(total ?? Infinity, Math.max(2 * bytes.length, loaded + value.length)));
        grown.set(bytes.subarray(0, loaded));
        bytes = grown;
      }
      bytes.set(value, loaded);
      loaded += value.length;
      onProgress({ phase: 'download', loaded, total });
    }
  } catch (e) {
    reader.cancel().catch(() => {}); // stop the download
    if (e instanceof HotprefixError) throw e;
    const what = e instanceof RangeError ? 'out of memory' : 'download failed';
    throw new ModelLoadError(`${url}: ${what} after ${loaded}${total ? ` of ${total}` : ''} bytes: ${e?.message ?? e}`, { cause: e });
  }
  if (total !== null && loaded < total) {
    throw new ModelLoadError(`${url}: truncated download: ${loaded} of ${total} bytes`);
  }
  return loaded === bytes.length ? bytes : bytes.slice(0, loaded);
}

/**
 * The model file's bytes and whether they came from Cache Storage. A URL is read from the cache
 * when it is there (no network request), else fetched with progress and checked against its
 * Content-Length.
 */
export async function modelBytes(model, onProgress, { skipCache = false } = {}) {
  if (model instanceof ArrayBuffer) return { bytes: new Uint8Array(model), url: null, cached: false };
  if (ArrayBuffer.isView(model)) return { bytes: new Uint8Array(model.buffer, model.byteOffset, model.byteLength), url: null, cached: false };
  // A File the user picked or dropped: read with progress, never cached (it has no URL).
  if (isBlob(model)) return { bytes: await readStream(model.stream(), model.size, blobName(model), onProgress), url: null, cached: false };
  if (typeof model !== 'string') throw new InvalidRequestError('model must be a URL string, a Blob (File), an ArrayBuffer or a Uint8Array');
  const url = model;
  const cache = skipCache ? null : await openCache();
  const hit = cache ? await cache.match(url) : undefined;
  if (hit) {
    const bytes = new Uint8Array(await hit.arrayBuffer());
    onProgress({ phase: 'download', loaded: bytes.length, total: bytes.length, cached: true });
    return { bytes, url, cached: true, sha256: hit.headers.get('x-hotprefix-sha256') };
  }
  let res;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new ModelLoadError(`${url}: the request failed: ${e?.message ?? e}`, { cause: e });
  }
  if (!res.ok) throw new ModelLoadError(`${url}: HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`, { status: res.status });
  return { bytes: await readBody(res, url, onProgress), url, cached: false };
}

/**
 * The file's sha256 (hex): checked against `sha256` when one is given, and the model's identity
 * for saved caches. A cached file's recorded digest is reused when no check is asked for; without
 * crypto.subtle (an insecure context) it is null, and saved caches are off.
 */
export async function digest(bytes, sha256, recorded, what) {
  if (!sha256 && recorded) return recorded;
  if (!globalThis.crypto?.subtle) {
    if (sha256) throw new ModelLoadError(`${what}: sha256 verification needs a secure context (https or localhost)`);
    return null;
  }
  const got = hex(await crypto.subtle.digest('SHA-256', bytes));
  if (sha256 && got !== sha256.toLowerCase()) {
    throw new ModelLoadError(`${what}: integrity check failed: sha256 ${got}, expected ${sha256.toLowerCase()}`);
  }
  return got;
}

export const isBlob = (v) => typeof Blob !== 'undefined' && v instanceof Blob;
const blobName = (b) => (typeof b.name === 'string' && b.name ? b.name : 'the model file');

// The header of a GGUF file with a large vocabulary runs to several MB (Gemma-3's: ~6 MB); read
// in growing prefixes until it parses.
const FIRST_HEADER_READ = 4 << 20;

/**
 * The first `length` bytes of a model file and its size, without reading the rest: a slice of a
 * Blob or buffer, Cache Storage's copy of a URL, or an HTTP Range request (a server that ignores
 * Range sends the whole file: only the bytes needed are read, then the download is cancelled).
 */
export async function modelPrefix(model, length) {
  if (model instanceof ArrayBuffer || ArrayBuffer.isView(model)) {
    const all = model instanceof ArrayBuffer ? new Uint8Array(model) : new Uint8Array(model.buffer, model.byteOffset, model.byteLength);
    return { bytes: all.subarray(0, length), size: all.length };
  }
  if (isBlob(model)) return { bytes: new Uint8Array(await model.slice(0, length).arrayBuffer()), size: model.size };
  if (typeof model !== 'string') throw new InvalidRequestError('model must be a URL string, a Blob (File), an ArrayBuffer or a Uint8Array');
  const hit = await (await openCache())?.match(model);
  if (hit) {
    const blob = await hit.blob();
    return { bytes: new Uint8Array(await blob.slice(0, length).arrayBuffer()), size: blob.size };
  }
  let res;
  try {
    res = await fetch(model, { headers: { Range: `bytes=0-${length - 1}` } });
  } catch (e) {
    throw new ModelLoadError(`${model}: the request failed: ${e?.message ?? e}`, { cause: e });
  }
  if (!res.ok) throw new ModelLoadError(`${model}: HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`, { status: res.status });
  let size = null;
  if (res.status === 206) {
    size = Number(/\/(\d+)\s*$/.exec(res.headers.get('content-range') ?? '')?.[1]);
  } else if ((res.headers.get('content-encoding') ?? 'identity') === 'identity') {
    size = Number(res.headers.get('content-length'));
  }
  if (!Number.isSafeInteger(size) || size <= 0) {
    res.body?.cancel().catch(() => {});
    throw new ModelLoadError(`${model}: the server does not say how large the file is (no Content-Range or Content-Length)`);
  }
  const want = Math.min(length, size);
  const out = new Uint8Array(want);
  let got = 0;
  const reader = res.body.getReader();
  try {
    while (got < want) {
      const { done, value } = await reader.read();
      if (done) break;
      const take = Math.min(value.length, want - got);
      out.set(value.subarray(0, take), got);
      got += take;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  if (got < want) throw new ModelLoadError(`${model}: the response ended after ${got} of ${want} bytes`);
  return { bytes: out, size };
}

/**
 * Reads the header of `model` in growing prefixes and hands each to `parse(bytes, size)` until it
 * parses (a `GgufError` on a prefix shorter than the file: read more).
 */
export async function readHeader(model, parse) {
  let length = FIRST_HEADER_READ;
  for (;;) {
    const { bytes, size } = await modelPrefix(model, length);
    try {
      return parse(bytes, size);
    } catch (e) {
      const magic = bytes.length >= 4 && bytes[0] === 0x47 && bytes[1] === 0x47 && bytes[2] === 0x55 && bytes[3] === 0x46;
      if (e?.name !== 'GgufError' || !magic || bytes.length >= size) throw e;
      length = Math.min(size, length * 4);
    }
  }
}
