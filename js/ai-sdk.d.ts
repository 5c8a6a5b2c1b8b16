// Types of hotprefix/ai-sdk (ai-sdk.js): the engine as an AI SDK language model. The interface
// comes from `@ai-sdk/provider` (a peer dependency of this entry point only; `ai` 7 brings it).
import type { JSONObject, LanguageModelV4 } from '@ai-sdk/provider';
import type { Engine } from './index.js';

/**
 * The engine as a `LanguageModelV4` for `generateText`, `streamText`, `Output.object` and tools.
 * Usage reports the cached prompt tokens as `inputTokens.cacheRead` (the caller's
 * `usage.inputTokenDetails.cacheReadTokens`); provider metadata `hotprefix` holds the cache report
 * (`cache`: reused tokens, `diverged_at`, `warnings`) and the timings. Call options
 * `providerOptions.hotprefix` ({@link HotprefixProviderOptions}) set the engine's own fields.
 */
export declare function hotprefix(engine: Engine, options?: { modelId?: string }): LanguageModelV4;

/** `providerOptions.hotprefix` of a call: any other key is refused with `InvalidRequestError`. */
export interface HotprefixProviderOptions {
  /** The engine's `cache_salt`: prefixes are shared only between requests with the same salt. */
  cacheSalt?: string;
  /** llama.cpp's repetition penalty over the last 64 tokens (1: off). */
  repetitionPenalty?: number;
  /** The engine's `chat_template_kwargs`: more variables for the chat template (Qwen3's
   * `{ enable_thinking: false }`). */
  chatTemplateKwargs?: JSONObject;
}
