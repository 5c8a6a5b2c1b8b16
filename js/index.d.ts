// Types of hotprefix's public API (index.js).

/** Progress of createEngine(): the download (or cache read), the upload to the GPU, then ready. */
export interface LoadProgress {
  phase: 'download' | 'upload' | 'ready';
  /** Bytes done (download: bytes received; upload: bytes of weights on the GPU). */
  loaded: number;
  /** Bytes in all, or null when the server does not say. */
  total: number | null;
  /** True when the model file came from Cache Storage (no network request). */
  cached?: boolean;
}

/** Where a model file comes from. */
export type ModelSource = string | URL | Blob | ArrayBuffer | Uint8Array;

/** What `inspectModel` reads from a model file's header. */
export interface ModelSummary {
  /** `general.architecture` (`llama`, `qwen2`, `qwen3`, `gemma3`, `phi3`, …). */
  architecture: string | null;
  /** `general.name`. */
  name: string | null;
  /** What the file's architecture uses beyond a plain llama block, in words. */
  features: string[];
  parameters: number;
  tensors: number;
  /** Tensors and values by ggml type (`Q4_K`, `Q8_0`, `F32`, …). */
  formats: Array<{ type: string; ggml_type: number; tensors: number; values: number }>;
  /** The file's size. */
  bytes: number;
  /** The trained context. */
  context: number | null;
  /** `gpt2` (byte-level BPE) or `llama` (SentencePiece). */
  tokenizer: string | null;
  pre_tokenizer: string | null;
  /** Which chat template chat requests use: the file's own, a built-in one, or none. */
  chat_template: string;
  /** Whether this build runs the file (from the header; the load checks the tensor values too). */
  runs: boolean;
  /** If not, the first reason. */
  refused: string | null;
}

export interface CreateEngineOptions {
  /** The GGUF model: a URL (fetched once, then kept in Cache Storage), a File or Blob (a file
   * the user picked or dropped; read into memory, not cached) or its bytes. */
  model: ModelSource;
  /** Expected SHA-256 of the file, 64 hex digits; a mismatch is a ModelLoadError. */
  sha256?: string;
  onProgress?: (p: LoadProgress) => void;
  /** Run the engine in a dedicated Web Worker (default true). */
  worker?: boolean;
  /** KV pool shared by every resident prefix, in MiB (default 512, or what the adapter allows). */
  kvBudgetMB?: number;
  /** Positions one request may use, prompt and completion (default: the model's context). */
  contextSize?: number;
  /** Positions per KV page (default 16, 1 to 1024): the granularity of sharing and eviction. */
  pageSize?: number;
  /** The `model` field of results (default: the file name without .gguf). */
  modelId?: string;
  /** Make the prefixes saved by `engine.cache.persist()` resident again at load (default false). */
  restoreCache?: boolean;
}

/** A text part of a message's content (the parts are joined; image and audio parts are refused). */
export interface ChatContentPartText {
  type: 'text';
  text: string;
}

/** One call of a function, in an assistant message or a result. */
export interface ToolCall {
  /** `call_…`: a `tool` message answers it by this id. */
  id: string;
  type: 'function';
  function: { name: string; /** A JSON object, as text. */ arguments: string };
}

/** Any other content part (image, audio, file): typed so that OpenAI's params type-check, refused
 * at run time with InvalidRequestError. */
export interface ChatContentPartOther {
  type: string;
}

export interface ChatMessage {
  /** `developer` is read as `system`; `tool` answers a call (`tool_call_id`). */
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool' | (string & {});
  /** Text, text parts, or null (or absent) on an assistant message that only calls tools. */
  content?: string | ReadonlyArray<ChatContentPartText | ChatContentPartOther> | null;
  /** The author's name, for chat templates that render it (refused where the template does not). */
  name?: string;
  /** Never dropped by head truncation (system messages never are). */
  pinned?: boolean;
  /** An assistant message's calls. */
  tool_calls?: ReadonlyArray<ToolCall | { id: string; type: string }>;
  /** OpenAI's; null only. */
  refusal?: string | null;
  /** A `tool` message: the call it answers. */
  tool_call_id?: string;
}

/** A function the model may call. Its `parameters` (a JSON Schema object; keywords the grammar
 * would not enforce are refused) constrain the arguments it writes. */
export interface FunctionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null };
}

/** What the answer must be: text, any JSON object, or JSON valid against a schema. */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; description?: string; schema?: Record<string, unknown>; strict?: boolean | null } };

export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

/** OpenAI's other tool and tool-choice kinds (custom tools, allowed-tools choices): they type-check
 * and are refused at run time with InvalidRequestError. */
export interface OtherTool {
  type: string;
}

export interface ChatCompletionCreateParams {
  messages: ReadonlyArray<ChatMessage>;
  /** Tokens to generate at most (default 256). */
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  /** Default 0: greedy, reproducible. */
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  repetition_penalty?: number | null;
  /** OpenAI's: lowers a token's logit by this times its count in the completion so far; [-2, 2]. */
  frequency_penalty?: number | null;
  /** OpenAI's: lowers the logit of every token already in the completion by this; [-2, 2]. */
  presence_penalty?: number | null;
  seed?: number | null;
  /** At most 16 strings of 1 to 256 characters. */
  stop?: string | ReadonlyArray<string> | null;
  /** Prefixes are shared only between requests with the same salt. */
  cache_salt?: string | null;
  /** Constrain the answer to JSON (json_object) or to a JSON Schema (json_schema). */
  response_format?: ResponseFormat | OtherTool | null;
  /** Functions the model may call; rendered in this order, each schema canonically (cache-stable). */
  tools?: ReadonlyArray<FunctionTool | OtherTool> | null;
  /** Default `auto` with tools. */
  tool_choice?: ToolChoice | OtherTool | null;
  /** Several calls in one answer (default true). */
  parallel_tool_calls?: boolean | null;
  /** More variables for the model's chat template (as vLLM's and llama.cpp's): Qwen3's
   * `{ enable_thinking: false }`, Llama-3.x's `{ date_string: '26 Jul 2024' }` (a fixed date keeps
   * the system prompt's cache across days). `messages`, `tools`, `add_generation_prompt`,
   * `bos_token`, `eos_token` and `strftime_now` are refused. */
  chat_template_kwargs?: Record<string, unknown> | null;
  /** 1 only (more is refused). */
  n?: number | null;
  model?: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean; include_obfuscation?: boolean } | null;
  /** Aborts the request: a queued one is removed, a running one stops at the next token. */
  signal?: AbortSignal;
}

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** Where the prompt stopped matching what was resident. */
export interface DivergedAt {
  /** First differing token. */
  token: number;
  /** Index in `messages` of the message holding it (null: in the template's framing). */
  message: number | null;
  role: string | null;
  /** Characters into that message's content, from its own start (whitespace a template trimmed there counts). */
  char: number;
  /** Text that was resident from there, and the request's text from there. */
  resident: string;
  new: string;
}

/** The prompt-layout rule a warning is about (checked against the engine's by a test). */
export type WarningCode = 'dynamic_before_static' | 'history_rewritten' | 'json_serialization_changed' | 'tools_changed';

export interface CacheWarning {
  code: WarningCode;
  message: number | null;
  detail: string;
}

export interface CacheReport {
  reused_tokens: number;
  /** Oldest turns dropped to fit the context window (head truncation). */
  dropped_messages: number;
  diverged_at?: DivergedAt;
  warnings: CacheWarning[];
}

export interface Timings {
  ttft_ms: number;
  prefill_ms: number;
  decode_tok_s: number;
}

export interface HotprefixReport {
  cache: CacheReport;
  timings: Timings;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    /** `content` is null when the answer only calls tools. */
    message: { role: 'assistant'; content: string | null; refusal: null; tool_calls?: ToolCall[] };
    logprobs: null;
    finish_reason: FinishReason;
  }>;
  usage: CompletionUsage;
  hotprefix: HotprefixReport;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    /** A call's `id`, `type` and `function.name` come in its first delta, its arguments in pieces after. */
    delta: {
      role?: 'assistant';
      content?: string;
      tool_calls?: Array<{ index: number; id?: string; type?: 'function'; function: { name?: string; arguments: string } }>;
    };
    logprobs: null;
    finish_reason: FinishReason | null;
  }>;
  /** With stream_options.include_usage: null, except on the last chunk (whose choices are empty). */
  usage?: CompletionUsage | null;
  /** On the last chunk. */
  hotprefix?: HotprefixReport;
}

/** The chunks of a streamed completion; leaving the loop early aborts the request. It can be
 * iterated once: a second iteration throws a TypeError. */
export interface ChatCompletionStream extends AsyncIterable<ChatCompletionChunk> {
  controller: AbortController;
}

export interface ResidentPrefix {
  salt: string;
  tokens: number;
  pages: number;
  last_use: number;
}

export interface CacheStats {
  pages_total: number;
  pages_used: number;
  pages_free: number;
  page_size: number;
  page_bytes: number;
  bytes_total: number;
  bytes_used: number;
  evicted_pages: number;
  prefixes: ResidentPrefix[];
  /** Size of this model's saved cache in OPFS, 0 when none. */
  saved_bytes: number;
  /** The engine's wasm heap, in bytes (it never shrinks: its peak so far). */
  wasm_heap_bytes: number;
}

/** What `restoreCache` did at load. */
export type RestoredCache =
  | { prefixes: number; tokens: number; pages: number; skipped: number; bytes: number }
  | { warning: string; bytes: number };

export interface PersistResult {
  /** Size on disk. */
  bytes: number;
  prefixes: number;
  tokens: number;
}

export interface PrewarmResult {
  prompt_tokens: number;
  cached_tokens: number;
  cache: CacheReport;
}

export interface Engine {
  /** The `model` field of results. */
  readonly model: string;
  /** The GPU adapter, in words. */
  readonly adapter: string;
  readonly contextSize: number;
  /** Whether the engine runs in a Web Worker. */
  readonly inWorker: boolean;
  /** The wasm heap's size after the load, in bytes (it never shrinks: its peak during the load). */
  readonly wasmHeapBytes: number;
  readonly chat: {
    completions: {
      create(params: ChatCompletionCreateParams & { stream: true }): Promise<ChatCompletionStream>;
      create(params: ChatCompletionCreateParams & { stream?: false | null }): Promise<ChatCompletion>;
      create(params: ChatCompletionCreateParams): Promise<ChatCompletion | ChatCompletionStream>;
    };
  };
  readonly cache: {
    /** Computes the prompt of `messages` and keeps it resident, generating nothing. */
    prewarm(messages: ChatMessage[], options?: { cache_salt?: string; signal?: AbortSignal }): Promise<PrewarmResult>;
    stats(): Promise<CacheStats>;
    clear(): Promise<void>;
    /** Saves every resident prefix (token ids, KV pages) to OPFS under the model's sha256. */
    persist(): Promise<PersistResult>;
    /** Makes the saved prefixes resident again; null when nothing is saved. */
    restore(): Promise<RestoredCache | null>;
    /** Deletes the saved files. */
    forget(): Promise<void>;
    /** What `restoreCache` restored at load, or null. */
    readonly restored: RestoredCache | null;
  };
  /** The model file's sha256 (null in an insecure context). */
  readonly sha256: string | null;
  /** Waits for running requests, frees the GPU memory and stops the worker. */
  unload(): Promise<void>;
}

export function createEngine(options: CreateEngineOptions): Promise<Engine>;

/** What a model file holds and whether this build runs it, from its header alone (an HTTP Range
 * request for a URL, a slice of a File): no GPU, no download of the weights. A file that is not
 * GGUF or cannot be read rejects with ModelLoadError. */
export function inspectModel(model: ModelSource, options?: { worker?: boolean }): Promise<ModelSummary>;

/** Keys sorted by code point at every depth, no whitespace: equal values give equal text. */
export function canonicalJSON(value: unknown): string | undefined;

/** Cache Storage bucket holding downloaded model files, keyed by URL. */
export const MODEL_CACHE: string;
/** OPFS directory holding saved caches (`<sha256>.kv`). */
export const SAVED_DIR: string;

export class HotprefixError extends Error {
  /** The engine's own error name (e.g. 'GgufError'), when it came from the engine. */
  kind: string | null;
  constructor(message: string, options?: { kind?: string | null; cause?: unknown });
}
export class WebGPUUnavailableError extends HotprefixError {
  name: 'WebGPUUnavailableError';
  reason: 'no-webgpu' | 'no-adapter' | 'device' | 'limits';
}
export class ModelLoadError extends HotprefixError {
  name: 'ModelLoadError';
  /** The HTTP status, when the server answered with an error. */
  status: number | null;
}
export class DeviceLostError extends HotprefixError { name: 'DeviceLostError'; }
export class ContextOverflowError extends HotprefixError { name: 'ContextOverflowError'; }
export class KvBudgetError extends HotprefixError { name: 'KvBudgetError'; }
export class AbortError extends HotprefixError { name: 'AbortError'; }
export class InvalidRequestError extends HotprefixError { name: 'InvalidRequestError'; }
/** A bug in hotprefix crashed the engine (a Rust panic, whose message the error's message
 * includes); this engine, and every one in the same thread, is unusable. */
export class EngineCrashedError extends HotprefixError { name: 'EngineCrashedError'; }
/** The model produced logits no token can be chosen from (all NaN): a fault in the model file or
 * the GPU. The request fails; the engine stays usable. */
export class NumericsError extends HotprefixError { name: 'NumericsError'; }
