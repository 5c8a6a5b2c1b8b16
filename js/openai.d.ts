// Types of hotprefix/openai (openai.js): an OpenAI-compatible API served in the page through fetch.
import type { Engine } from './index.js';

/** `https://hotprefix.local/v1`: the base URL createFetch serves by default. */
export declare const DEFAULT_BASE_URL: string;

export interface CreateFetchOptions {
  /** The URLs the engine answers: everything under this base (default DEFAULT_BASE_URL). */
  baseURL?: string | URL;
  /** Where every other request goes (default: the page's fetch). */
  fetch?: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
}

/**
 * A fetch for `new OpenAI({ baseURL, fetch })`: POST {base}/chat/completions (JSON, or server-sent
 * events with `stream: true`), GET {base}/models and {base}/models/{id}, answered by `engine` in
 * the page; other URLs are passed to the real fetch. Errors are OpenAI's statuses and bodies (400,
 * with code `context_length_exceeded` for a context overflow; 503 `kv_budget_exceeded`; 500
 * `engine_crashed`).
 */
export declare function createFetch(
  engine: Engine,
  options?: CreateFetchOptions,
): (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
