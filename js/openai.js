// hotprefix/openai: an OpenAI-compatible HTTP API served inside the page, through a `fetch`
// function for the official `openai` package (or any client that takes a fetch):
//
//   new OpenAI({ apiKey: 'local', baseURL: 'https://hotprefix.local/v1', fetch: createFetch(engine), dangerouslyAllowBrowser: true })
//
// Requests under the base URL are answered by the engine, in the page; nothing is sent over the
// network. Every other URL goes to the real fetch. Errors come back as OpenAI's HTTP statuses and
// JSON error bodies, so the SDK raises its own error classes. The package does not import
// `openai`: only the wire format is shared.
import {
  HotprefixError, InvalidRequestError, ContextOverflowError, KvBudgetError, AbortError, EngineCrashedError,
} from './errors.js';

/** The base URL `createFetch` serves by default. */
export const DEFAULT_BASE_URL = 'https://hotprefix.local/v1';

const encoder = new TextEncoder();

const json = (status, body, headers = {}) => new Response(JSON.stringify(body), {
  status,
  headers: { 'content-type': 'application/json', 'x-request-id': `req_hotprefix_${Date.now().toString(36)}`, ...headers },
});

// OpenAI's error body: {error: {message, type, param, code}}.
function errorBody(e) {
  const message = e?.message ?? String(e);
  if (e instanceof ContextOverflowError) return [400, { message, type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' }];
  if (e instanceof InvalidRequestError) return [400, { message, type: 'invalid_request_error', param: null, code: null }];
  if (e instanceof KvBudgetError) return [503, { message, type: 'server_error', param: null, code: 'kv_budget_exceeded' }];
  if (e instanceof EngineCrashedError) return [500, { message, type: 'server_error', param: null, code: 'engine_crashed' }];
  if (e instanceof HotprefixError) return [500, { message, type: 'server_error', param: null, code: e.name }];
  return [500, { message, type: 'server_error', param: null, code: null }];
}

// A failure as the HTTP response OpenAI would send. A retry cannot help any of them (the same
// request fails the same way), so the SDK is told not to retry.
function errorResponse(e) {
  const [status, error] = errorBody(e);
  return json(status, { error }, { 'x-should-retry': 'false' });
}

// A request the adapter refuses before the engine sees it (unknown route, method or model), with
// OpenAI's error body.
const clientError = (status, message, param = null, code = null) => json(
  status,
  { error: { message, type: 'invalid_request_error', param, code } },
  { 'x-should-retry': 'false' },
);

// An aborted request, as fetch reports one.
const aborted = (signal) => (signal?.reason instanceof Error && signal.reason.name === 'AbortError'
  ? signal.reason
  : new DOMException('The operation was aborted.', 'AbortError'));

const sse = (data) => encoder.encode(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);

// A streamed completion as server-sent events ending with `data: [DONE]`. The response is sent
// once the engine has accepted the request (its first event, or its first error: then an HTTP
// error instead), so that a bad request gets its status, as from OpenAI.
async function streamResponse(engine, params, signal) {
  const stream = await engine.chat.completions.create({ ...params, signal });
  const it = stream[Symbol.asyncIterator]();
  const head = [];
  try {
    // The role chunk, then the engine's first event.
    for (let i = 0; i < 2; i++) {
      const { value, done } = await it.next();
      if (done) break;
      head.push(value);
    }
  } catch (e) {
    if (e instanceof AbortError) throw aborted(signal);
    return errorResponse(e);
  }
  const body = new ReadableStream({
    start(c) {
      for (const chunk of head) c.enqueue(sse(chunk));
    },
    async pull(c) {
      try {
        const { value, done } = await it.next();
        if (done) {
          c.enqueue(sse('[DONE]'));
          c.close();
        } else {
          c.enqueue(sse(value));
        }
      } catch (e) {
        if (e instanceof AbortError) {
          c.error(aborted(signal));
        } else {
          // A failure after the response began: an error event, as OpenAI sends one.
          c.enqueue(sse({ error: errorBody(e)[1] }));
          c.close();
        }
      }
    },
    cancel() {
      it.return?.();
    },
  });
  return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } });
}

const modelEntry = (engine) => ({ id: engine.model, object: 'model', created: 0, owned_by: 'hotprefix' });

/**
 * A `fetch` that serves OpenAI's chat API from `engine` for URLs under `baseURL` (default
 * `https://hotprefix.local/v1`) and hands every other request to `options.fetch` (default: the
 * page's fetch):
 * - `POST {base}/chat/completions`: a ChatCompletion as JSON, or with `stream: true` its chunks as
 *   server-sent events ending with `data: [DONE]`; hotprefix's cache report is the `hotprefix`
 *   field of the JSON and of the last chunk;
 * - `GET {base}/models`, `GET {base}/models/{id}`: the loaded model.
 * The request's `signal` aborts the engine's request. Errors are OpenAI's statuses and bodies:
 * 400 (invalid request; a context overflow with code `context_length_exceeded`), 404, 405, 503
 * (KV budget exhausted, code `kv_budget_exceeded`), 500 (an engine crash, `engine_crashed`).
 */
export function createFetch(engine, { baseURL = DEFAULT_BASE_URL, fetch: next } = {}) {
  if (!engine?.chat?.completions) throw new InvalidRequestError('createFetch() takes an engine made by createEngine()');
  const base = new URL(baseURL);
  const basePath = base.pathname.replace(/\/+$/, '');
  const passthrough = next ?? globalThis.fetch?.bind(globalThis);
  return async function hotprefixFetch(input, init = {}) {
    const request = typeof Request !== 'undefined' && input instanceof Request ? input : null;
    const url = new URL(request ? request.url : String(input), globalThis.location?.href);
    const inside = url.origin === base.origin && (url.pathname === basePath || url.pathname.startsWith(`${basePath}/`));
    if (!inside) {
      if (!passthrough) throw new TypeError(`hotprefix fetch: no fetch to send ${url.href} to`);
      return passthrough(input, init);
    }
    const method = (init.method ?? request?.method ?? 'GET').toUpperCase();
    const route = url.pathname.slice(basePath.length).replace(/\/+$/, '');
    const signal = init.signal ?? request?.signal ?? undefined;
    if (signal?.aborted) throw aborted(signal);
    if (route === '/models' || route.startsWith('/models/')) {
      if (method !== 'GET') return clientError(405, `${method} ${route} is not supported`);
      if (route === '/models') return json(200, { object: 'list', data: [modelEntry(engine)] });
      const id = decodeURIComponent(route.slice('/models/'.length));
      if (id !== engine.model) return clientError(404, `The model '${id}' does not exist`, 'model', 'model_not_found');
      return json(200, modelEntry(engine));
    }
    if (route !== '/chat/completions') {
      return clientError(404, `hotprefix serves /chat/completions and /models, not ${route || '/'}`, null, 'unknown_url');
    }
    if (method !== 'POST') return clientError(405, `${method} /chat/completions: POST expected`);
    let params;
    try {
      const text = init.body != null ? await new Response(init.body).text() : await (request?.text() ?? '');
      params = JSON.parse(text);
    } catch (e) {
      return errorResponse(new InvalidRequestError(`the request body is not JSON: ${e.message}`));
    }
    if (!params || typeof params !== 'object' || Array.isArray(params)) return errorResponse(new InvalidRequestError('the request body must be a JSON object'));
    delete params.signal; // not a wire field
    try {
      if (params.stream === true) return await streamResponse(engine, params, signal);
      return json(200, await engine.chat.completions.create({ ...params, signal }));
    } catch (e) {
      if (e instanceof AbortError) throw aborted(signal);
      if (e instanceof DOMException && e.name === 'AbortError') throw e;
      return errorResponse(e);
    }
  };
}
