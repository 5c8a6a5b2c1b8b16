// hotprefix/ai-sdk's mapping of an answer to AI SDK parts, on a stand-in engine (no GPU, no
// browser: the adapter's own logic). The packed package against the real engine is in
// package.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hotprefix } from '../../js/ai-sdk.js';

// Two parallel calls, the second cut short by max_tokens: the first is whole and is a call.
const CALLS = [
  { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
  { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Lo' } },
];

function standIn() {
  return {
    chat: {
      completions: {
        async create(params) {
          const base = { id: 'chatcmpl-1', model: 'stand-in', created: 1 };
          if (!params.stream) {
            return { ...base, choices: [{ index: 0, finish_reason: 'length', message: { role: 'assistant', content: null, tool_calls: CALLS } }],
              usage: { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 } };
          }
          const chunks = [];
          CALLS.forEach((c, index) => {
            chunks.push({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] }, finish_reason: null }] });
            chunks.push({ ...base, choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: c.function.arguments } }] }, finish_reason: null }] });
          });
          chunks.push({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'length' }] });
          chunks.push({ ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 } });
          return (async function* () { yield* chunks; })();
        },
      },
    },
  };
}

const OPTIONS = {
  prompt: [{ role: 'user', content: [{ type: 'text', text: 'Weather in Paris and London?' }] }],
  tools: [{ type: 'function', name: 'get_weather', inputSchema: { type: 'object', properties: { city: { type: 'string' } } } }],
};

test('a length cut drops only the call it cut: the whole calls before it are calls (generate and stream)', async () => {
  const model = hotprefix(standIn());
  const r = await model.doGenerate(OPTIONS);
  const calls = r.content.filter((p) => p.type === 'tool-call');
  assert.deepEqual(calls.map((c) => [c.toolCallId, c.input]), [['call_a', '{"city": "Paris"}']]);
  assert.equal(r.finishReason.unified, 'length');

  const { stream } = await model.doStream(OPTIONS);
  const parts = [];
  for await (const p of stream) parts.push(p);
  const streamed = parts.filter((p) => p.type === 'tool-call');
  assert.deepEqual(streamed.map((c) => [c.toolCallId, c.input]), [['call_a', '{"city": "Paris"}']]);
  assert.equal(parts.filter((p) => p.type === 'tool-input-end').length, 2, 'both inputs end');
});

test("providerOptions.hotprefix sets the engine's own fields, refuses other keys, and what is left out is a warning", async () => {
  const seen = [];
  const engine = { chat: { completions: { async create(params) {
    seen.push(params);
    return { id: 'chatcmpl-1', model: 'stand-in', created: 1, choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'ok' } }],
      usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } };
  } } } };
  const model = hotprefix(engine);
  const prompt = OPTIONS.prompt;
  await model.doGenerate({ prompt, providerOptions: { hotprefix: { cacheSalt: 'tenant-1', repetitionPenalty: 1.1, chatTemplateKwargs: { enable_thinking: false } } } });
  assert.equal(seen[0].cache_salt, 'tenant-1');
  assert.equal(seen[0].repetition_penalty, 1.1);
  assert.deepEqual(seen[0].chat_template_kwargs, { enable_thinking: false });
  // Other providers' options are theirs; an unknown key of hotprefix's is refused, as is a wrong type.
  await model.doGenerate({ prompt, providerOptions: { openai: { user: 'x' } } });
  assert.equal('user' in seen[1], false);
  await assert.rejects(model.doGenerate({ prompt, providerOptions: { hotprefix: { cache_salt: 'x' } } }), /providerOptions\.hotprefix\.cache_salt is not supported/);
  await assert.rejects(model.doGenerate({ prompt, providerOptions: { hotprefix: { cacheSalt: 7 } } }), /must be a string/);
  await assert.rejects(model.doGenerate({ prompt, providerOptions: { hotprefix: { chatTemplateKwargs: [1] } } }), /must be an object/);
  assert.equal(seen.length, 2);
  const tools = [{ ...OPTIONS.tools[0], inputExamples: [{ input: { city: 'Paris' } }] }];
  const r = await model.doGenerate({ prompt, tools, includeRawChunks: true });
  assert.deepEqual(r.warnings.map((w) => w.feature).sort(), ['includeRawChunks', 'tool inputExamples']);
});
