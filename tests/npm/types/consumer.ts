// A TypeScript consumer of the public API: `tsc --noEmit` must accept it (tests/npm/package.test.mjs).
import {
  createEngine, inspectModel, canonicalJSON, MODEL_CACHE, SAVED_DIR, HotprefixError, WebGPUUnavailableError, ModelLoadError,
  DeviceLostError, ContextOverflowError, KvBudgetError, AbortError, InvalidRequestError,
  type ChatCompletion, type ChatCompletionChunk, type CacheStats, type LoadProgress, type Engine, type ModelSummary,
  type FunctionTool, type ToolCall, type ResponseFormat,
} from 'hotprefix';

async function main(): Promise<void> {
  const summary: ModelSummary = await inspectModel(new File([], 'model.gguf'));
  const runs: boolean = summary.runs && summary.formats.every((f) => f.tensors > 0);
  const fromFile = await createEngine({ model: new Blob([]) });
  void [runs, summary.refused, summary.features.join(', '), fromFile.model];
  const phases: LoadProgress['phase'][] = [];
  const engine: Engine = await createEngine({
    model: '/models/model.gguf',
    sha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
    onProgress: (p) => { phases.push(p.phase); const frac: number = p.total ? p.loaded / p.total : 0; void frac; },
    worker: true,
    kvBudgetMB: 64,
    contextSize: 2048,
    restoreCache: true,
  });
  const restored = engine.cache.restored;
  const restoredTokens: number = restored && 'tokens' in restored ? restored.tokens : 0;
  const warning: string | undefined = restored && 'warning' in restored ? restored.warning : undefined;
  const system = { role: 'system' as const, content: 'You answer from the document.' };
  const ac = new AbortController();
  const r: ChatCompletion = await engine.chat.completions.create({
    messages: [system, { role: 'user', content: 'Hi' }], max_tokens: 16, temperature: 0, top_p: 1, top_k: 40,
    seed: 1, stop: ['\n\n'], cache_salt: 'user-1', chat_template_kwargs: { enable_thinking: false }, signal: ac.signal,
  });
  const text: string = r.choices[0].message.content ?? '';
  const cached: number = r.usage.prompt_tokens_details.cached_tokens;
  const reason: 'stop' | 'length' | 'tool_calls' = r.choices[0].finish_reason;
  // Tools and structured output, OpenAI-shaped.
  const tools: FunctionTool[] = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const called = await engine.chat.completions.create({
    messages: [system, { role: 'user', content: [{ type: 'text', text: 'Weather?' }] }], tools, tool_choice: 'required',
  });
  const calls: ToolCall[] = called.choices[0].message.tool_calls ?? [];
  const follow = await engine.chat.completions.create({
    messages: [system, { role: 'assistant', content: null, tool_calls: calls }, { role: 'tool', tool_call_id: calls[0]?.id ?? '', content: '18 C' }],
    tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
  });
  const format: ResponseFormat = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' }, strict: true } };
  const json = await engine.chat.completions.create({ messages: [system], response_format: format });
  void [follow.choices[0].finish_reason, json.choices[0].message.content];
  const at: number | undefined = r.hotprefix.cache.diverged_at?.token;
  const stream = await engine.chat.completions.create({
    messages: [system, { role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    const c: ChatCompletionChunk = chunk;
    const piece: string | undefined = c.choices[0]?.delta?.content;
    const args: string | undefined = c.choices[0]?.delta?.tool_calls?.[0]?.function.arguments;
    void args;
    const warnings = c.hotprefix?.cache.warnings.map((w) => w.code);
    void piece; void warnings; void c.usage?.prompt_tokens_details.cached_tokens;
  }
  stream.controller.abort();
  const warm = await engine.cache.prewarm([system], { cache_salt: 'user-1' });
  const stats: CacheStats = await engine.cache.stats();
  const resident: number[] = stats.prefixes.map((p) => p.tokens);
  const saved: number = (await engine.cache.persist()).bytes + stats.saved_bytes;
  await engine.cache.forget();
  await engine.cache.clear();
  await engine.unload();
  const key: string | undefined = canonicalJSON({ b: 1, a: [true, null] });
  void [text, cached, reason, at, warm.cached_tokens, resident, key, MODEL_CACHE, SAVED_DIR, phases, restoredTokens, warning, saved, engine.sha256];
}

function explain(e: unknown): string {
  if (e instanceof WebGPUUnavailableError) return `no WebGPU (${e.reason})`;
  if (e instanceof ModelLoadError) return `model: ${e.status ?? ''} ${e.message}`;
  if (e instanceof DeviceLostError || e instanceof ContextOverflowError || e instanceof KvBudgetError) return e.name;
  if (e instanceof AbortError || e instanceof InvalidRequestError) return e.message;
  if (e instanceof HotprefixError) return e.kind ?? e.message;
  return String(e);
}

main().catch((e) => console.error(explain(e)));
