// hotprefix's types against the real `openai` and `ai` packages' (tsc --strict, tests/npm/package.test.mjs):
// OpenAI-typed params go in, results and chunks are OpenAI's types, the fetch adapter is the
// client's `fetch`, and the AI SDK provider is an AI SDK language model.
import { createEngine, type Engine } from 'hotprefix';
import { createFetch, DEFAULT_BASE_URL } from 'hotprefix/openai';
import { hotprefix, type HotprefixProviderOptions } from 'hotprefix/ai-sdk';
import OpenAI from 'openai';
import type {
  ChatCompletion as OpenAIChatCompletion,
  ChatCompletionChunk as OpenAIChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { generateText, streamText, type LanguageModel } from 'ai';

async function main(): Promise<void> {
  const engine: Engine = await createEngine({ model: '/models/model.gguf' });
  // OpenAI's params, as an app built for OpenAI has them, go in unchanged.
  const messages: ChatCompletionMessageParam[] = [
    { role: 'developer', content: 'Be brief.' },
    { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '42' },
  ];
  const plain: ChatCompletionCreateParamsNonStreaming = { model: 'local', messages, max_tokens: 8, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] };
  const streaming: ChatCompletionCreateParamsStreaming = { model: 'local', messages, stream: true, stream_options: { include_usage: true } };
  // The results are OpenAI's types (hotprefix's fields are additions).
  const r: OpenAIChatCompletion = await engine.chat.completions.create(plain);
  const stream = await engine.chat.completions.create(streaming);
  for await (const chunk of stream) {
    const c: OpenAIChatCompletionChunk = chunk;
    void c;
  }
  // The fetch adapter is the client's fetch.
  const client = new OpenAI({ apiKey: 'local', baseURL: DEFAULT_BASE_URL, fetch: createFetch(engine), dangerouslyAllowBrowser: true });
  const viaClient: OpenAIChatCompletion = await client.chat.completions.create(plain);
  // The provider is an AI SDK model.
  const model: LanguageModel = hotprefix(engine);
  const hp: HotprefixProviderOptions = { cacheSalt: 'tenant-1', repetitionPenalty: 1.1, chatTemplateKwargs: { enable_thinking: false } };
  const { text, usage } = await generateText({ model, prompt: 'Hi', providerOptions: { hotprefix: { ...hp } } });
  const cached: number | undefined = usage.inputTokenDetails.cacheReadTokens;
  const s = streamText({ model: hotprefix(engine, { modelId: 'local' }), prompt: 'Hi' });
  for await (const piece of s.textStream) void piece;
  void [r.choices[0].message.content, viaClient.usage?.prompt_tokens_details?.cached_tokens, text, cached];
}

void main;
