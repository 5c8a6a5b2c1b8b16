// hotprefix/ai-sdk: the engine as a language model of Vercel's AI SDK (`ai` 7: the
// `LanguageModelV4` interface of `@ai-sdk/provider` 4), for `generateText`, `streamText` and
// structured output:
//
//   import { generateText } from 'ai';
//   import { hotprefix } from 'hotprefix/ai-sdk';
//   const { text, usage } = await generateText({ model: hotprefix(engine), prompt: 'Hi' });
//
// It is a plain object implementing the interface: the package imports neither `ai` nor
// `@ai-sdk/provider` (their types only, in ai-sdk.d.ts). The cached prompt tokens are the
// usage's `cacheRead` (the caller's `usage.inputTokenDetails.cacheReadTokens`); hotprefix's cache
// report and timings are the provider metadata under `hotprefix`.
import { AbortError, InvalidRequestError } from './errors.js';

// A tool result as the text of a `tool` message.
function resultText(output) {
  switch (output?.type) {
    case 'text':
    case 'error-text':
      return output.value;
    case 'json':
    case 'error-json':
      return JSON.stringify(output.value);
    case 'execution-denied':
      return `Execution denied${output.reason ? `: ${output.reason}` : ''}`;
    case 'content':
      return output.value.map((p) => {
        if (p.type === 'text') return p.text;
        throw new InvalidRequestError(`a tool result with a ${p.type} part: only text is supported`);
      }).join('');
    default:
      throw new InvalidRequestError(`a tool result of type ${output?.type}`);
  }
}

// The AI SDK's prompt as OpenAI-shaped messages.
function messagesOf(prompt) {
  const out = [];
  for (const m of prompt) {
    const text = (parts) => parts.map((p) => {
      if (p.type === 'text') return p.text;
      throw new InvalidRequestError(`a ${m.role} message with a ${p.type} part: only text is supported`);
    }).join('');
    if (m.role === 'system') {
      out.push({ role: 'system', content: m.content });
    } else if (m.role === 'user') {
      out.push({ role: 'user', content: text(m.content) });
    } else if (m.role === 'assistant') {
      const calls = m.content.filter((p) => p.type === 'tool-call').map((p) => ({
        id: p.toolCallId, type: 'function', function: { name: p.toolName, arguments: typeof p.input === 'string' ? p.input : JSON.stringify(p.input) },
      }));
      const content = text(m.content.filter((p) => p.type !== 'tool-call' && p.type !== 'reasoning'));
      out.push(calls.length ? { role: 'assistant', content: content || null, tool_calls: calls } : { role: 'assistant', content });
    } else if (m.role === 'tool') {
      for (const p of m.content) {
        if (p.type === 'tool-result') out.push({ role: 'tool', tool_call_id: p.toolCallId, content: resultText(p.output) });
      }
    } else {
      throw new InvalidRequestError(`a message with role ${m.role}`);
    }
  }
  return out;
}

// The call options as a chat completion request, and the warnings for what is left out.
function requestOf(options) {
  const warnings = [];
  const params = { messages: messagesOf(options.prompt) };
  const set = (k, v) => { if (v != null) params[k] = v; };
  set('max_tokens', options.maxOutputTokens);
  set('temperature', options.temperature);
  set('top_p', options.topP);
  set('top_k', options.topK);
  set('seed', options.seed);
  set('presence_penalty', options.presencePenalty);
  set('frequency_penalty', options.frequencyPenalty);
  if (options.stopSequences?.length) params.stop = options.stopSequences;
  if (options.responseFormat?.type === 'json') {
    params.response_format = options.responseFormat.schema
      ? { type: 'json_schema', json_schema: { name: (options.responseFormat.name ?? 'response').replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64) || 'response', schema: options.responseFormat.schema, strict: true } }
      : { type: 'json_object' };
  }
  const tools = [];
  for (const t of options.tools ?? []) {
    if (t.type === 'function') tools.push({ type: 'function', function: { name: t.name, description: t.description, parameters: t.inputSchema } });
    else warnings.push({ type: 'unsupported', feature: `provider-defined tool ${t.name ?? t.id}` });
  }
  if (tools.length) {
    params.tools = tools;
    const c = options.toolChoice;
    if (c) params.tool_choice = c.type === 'tool' ? { type: 'function', function: { name: c.toolName } } : c.type;
  }
  if (options.reasoning && !['provider-default', 'none'].includes(options.reasoning)) {
    warnings.push({ type: 'unsupported', feature: 'reasoning', details: 'hotprefix runs no reasoning mode' });
  }
  if ((options.tools ?? []).some((t) => t.type === 'function' && t.inputExamples?.length)) {
    warnings.push({ type: 'unsupported', feature: 'tool inputExamples', details: 'the examples are not rendered into the prompt' });
  }
  if (options.includeRawChunks) {
    warnings.push({ type: 'unsupported', feature: 'includeRawChunks', details: 'the stream carries no raw chunks' });
  }
  Object.assign(params, hotprefixOptions(options.providerOptions?.hotprefix));
  return { params, warnings };
}

// `providerOptions.hotprefix`: the engine's own request fields. A key it does not know is refused
// (as the engine refuses a field it does not implement), not ignored.
const PROVIDER_OPTIONS = {
  cacheSalt: ['cache_salt', 'string'],
  repetitionPenalty: ['repetition_penalty', 'number'],
  chatTemplateKwargs: ['chat_template_kwargs', 'object'],
};
function hotprefixOptions(o) {
  if (o == null) return {};
  if (typeof o !== 'object' || Array.isArray(o)) throw new InvalidRequestError('providerOptions.hotprefix must be an object');
  const out = {};
  for (const [k, v] of Object.entries(o)) {
    const known = PROVIDER_OPTIONS[k];
    if (!known) throw new InvalidRequestError(`providerOptions.hotprefix.${k} is not supported (${Object.keys(PROVIDER_OPTIONS).join(', ')} are)`);
    if (v == null) continue;
    if (typeof v !== known[1] || Array.isArray(v)) throw new InvalidRequestError(`providerOptions.hotprefix.${k} must be a${known[1] === 'object' ? 'n' : ''} ${known[1]}`);
    out[known[0]] = v;
  }
  return out;
}

function parses(json) {
  try {
    JSON.parse(json);
    return true;
  } catch {
    return false;
  }
}

const FINISH = { stop: 'stop', length: 'length', tool_calls: 'tool-calls' };
const finishOf = (raw) => ({ unified: FINISH[raw] ?? 'other', raw });

function usageOf(u) {
  const cached = u?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    inputTokens: { total: u?.prompt_tokens, noCache: u ? u.prompt_tokens - cached : undefined, cacheRead: u ? cached : undefined, cacheWrite: undefined },
    outputTokens: { total: u?.completion_tokens, text: u?.completion_tokens, reasoning: undefined },
    raw: u ?? undefined,
  };
}

const metadataOf = (report) => (report ? { hotprefix: { cache: report.cache, timings: report.timings } } : undefined);

/**
 * The engine as an AI SDK language model (`LanguageModelV4`). `modelId` defaults to the engine's
 * `model`. Text, streaming, abort (`abortSignal`), JSON output (`responseFormat`, the SDK's
 * `Output.object`) and function tools, as the engine runs them.
 */
export function hotprefix(engine, { modelId } = {}) {
  if (!engine?.chat?.completions) throw new InvalidRequestError('hotprefix() takes an engine made by createEngine()');
  return {
    specificationVersion: 'v4',
    provider: 'hotprefix',
    modelId: modelId ?? engine.model,
    supportedUrls: {},

    async doGenerate(options) {
      const { params, warnings } = requestOf(options);
      let r;
      try {
        r = await engine.chat.completions.create({ ...params, signal: options.abortSignal });
      } catch (e) {
        throw e instanceof AbortError && options.abortSignal?.reason ? options.abortSignal.reason : e;
      }
      const choice = r.choices[0];
      const content = [];
      if (choice.message.content) content.push({ type: 'text', text: choice.message.content });
      // A call cut short by max_tokens is no call (its input does not parse); the calls before it are.
      for (const c of (choice.message.tool_calls ?? []).filter((c) => choice.finish_reason !== 'length' || parses(c.function.arguments))) {
        content.push({ type: 'tool-call', toolCallId: c.id, toolName: c.function.name, input: c.function.arguments });
      }
      return {
        content,
        finishReason: finishOf(choice.finish_reason),
        usage: usageOf(r.usage),
        providerMetadata: metadataOf(r.hotprefix),
        request: { body: params },
        response: { id: r.id, modelId: r.model, timestamp: new Date(r.created * 1000) },
        warnings,
      };
    },

    async doStream(options) {
      const { params, warnings } = requestOf(options);
      const stream = await engine.chat.completions.create({
        ...params, stream: true, stream_options: { include_usage: true }, signal: options.abortSignal,
      });
      const calls = new Map(); // index -> {id, name, args}
      let textOpen = false;
      let started = false;
      let finish = null;
      let usage = null;
      let report = null;
      const parts = new ReadableStream({
        async start(c) {
          c.enqueue({ type: 'stream-start', warnings });
          try {
            for await (const chunk of stream) {
              if (!started) c.enqueue({ type: 'response-metadata', id: chunk.id, modelId: chunk.model, timestamp: new Date(chunk.created * 1000) });
              started = true;
              const choice = chunk.choices[0];
              const d = choice?.delta;
              if (d?.content) {
                if (!textOpen) c.enqueue({ type: 'text-start', id: 'text-0' });
                textOpen = true;
                c.enqueue({ type: 'text-delta', id: 'text-0', delta: d.content });
              }
              for (const t of d?.tool_calls ?? []) {
                if (t.id) {
                  calls.set(t.index, { id: t.id, name: t.function.name, args: '' });
                  c.enqueue({ type: 'tool-input-start', id: t.id, toolName: t.function.name });
                } else if (calls.has(t.index) && t.function?.arguments) {
                  const call = calls.get(t.index);
                  call.args += t.function.arguments;
                  c.enqueue({ type: 'tool-input-delta', id: call.id, delta: t.function.arguments });
                }
              }
              if (choice?.finish_reason) finish = choice.finish_reason;
              if (chunk.usage) usage = chunk.usage;
              if (chunk.hotprefix) report = chunk.hotprefix;
            }
          } catch (e) {
            if (e instanceof AbortError) {
              c.error(options.abortSignal?.reason ?? e);
            } else {
              c.enqueue({ type: 'error', error: e });
              c.close();
            }
            return;
          }
          if (textOpen) c.enqueue({ type: 'text-end', id: 'text-0' });
          for (const call of calls.values()) {
            c.enqueue({ type: 'tool-input-end', id: call.id });
            // A call cut short by max_tokens is no call (its input does not parse); the calls before it are.
            if (finish !== 'length' || parses(call.args)) c.enqueue({ type: 'tool-call', toolCallId: call.id, toolName: call.name, input: call.args });
          }
          c.enqueue({ type: 'finish', finishReason: finishOf(finish), usage: usageOf(usage), providerMetadata: metadataOf(report) });
          c.close();
        },
        cancel() {
          stream.controller?.abort();
        },
      });
      return { stream: parts, request: { body: params } };
    },
  };
}
