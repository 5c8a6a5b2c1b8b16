// What the package's `chat.completions.create` sends to the engine's worker, and what it refuses
// before sending: on a stand-in worker (no GPU, no browser, no wasm). The engine's own refusals,
// and answers from the real engine through the `openai` SDK, are in package.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';

// A stand-in for the module worker: answers `load`, records each chat request and answers it.
const sent = [];
let clone = (v) => structuredClone(v);
globalThis.Worker = class {
  constructor() {
    this.onmessage = null;
  }
  postMessage(msg) {
    // As a real worker's postMessage: the message is copied by the structured clone, which throws
    // DataCloneError on a function.
    const { id, op, args } = clone(msg);
    const reply = (m) => setTimeout(() => this.onmessage?.({ data: { id, ...m } }), 0);
    if (op === 'load') return reply({ type: 'result', value: { adapter: 'stand-in', contextSize: 4096 } });
    if (op === 'chat') {
      sent.push(args.request);
      const usage = { prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 0 } };
      return reply({ type: 'result', value: { text: 'ok', tokens: [1], finish_reason: 'stop', usage, timings: {}, cache: {} } });
    }
  }
  terminate() {}
};

const { createEngine, InvalidRequestError } = await import('../../js/index.js');
const engine = await createEngine({ model: 'https://example.invalid/m.gguf' });
const user = { role: 'user', content: 'What is 2 + 2? Answer as JSON.' };

test("an answer as the openai client's .parse() and .stream() helpers return it can be sent back", async () => {
  // openai 4.x–6.x: `.parse()` sets `message.parsed` from the content; with a strict tool it
  // (and `.stream().finalChatCompletion()`) sets each call's `function.parsed_arguments`.
  const answer = { role: 'assistant', content: '{"sum":4}', refusal: null, parsed: { sum: 4 } };
  const call = { id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":2}', parsed_arguments: { a: 2, b: 2 } } };
  const calling = { role: 'assistant', content: null, refusal: null, parsed: null, tool_calls: [call] };
  sent.length = 0;
  await engine.chat.completions.create({ messages: [user, answer, { role: 'user', content: 'And 3 + 3?' }] });
  await engine.chat.completions.create({ messages: [user, calling, { role: 'tool', tool_call_id: 'call_1', content: '4' }] });
  assert.deepEqual(sent[0].messages[1], { role: 'assistant', content: '{"sum":4}' });
  assert.deepEqual(sent[1].messages[1], {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":2,"b":2}' } }],
  });
  // A `parsed` on any other message is not the helpers' and still reaches the engine (which refuses it).
  await engine.chat.completions.create({ messages: [{ ...user, parsed: 1 }] });
  assert.equal(sent[2].messages[0].parsed, 1);
});

test('logprobs: false asks for nothing and is not sent on; logprobs: true is refused', async () => {
  sent.length = 0;
  await engine.chat.completions.create({ messages: [user], logprobs: false });
  assert.equal('logprobs' in sent[0], false);
  await assert.rejects(engine.chat.completions.create({ messages: [user], logprobs: true }), InvalidRequestError);
  assert.equal(sent.length, 1);
});

test('stream_options: only with stream: true, and only the options hotprefix implements', async () => {
  sent.length = 0;
  const refused = async (params, re) => {
    const e = await engine.chat.completions.create({ messages: [user], ...params }).then(() => null, (e) => e);
    assert.ok(e instanceof InvalidRequestError, `${JSON.stringify(params)} should be refused, got ${e}`);
    assert.match(e.message, re);
  };
  await refused({ stream_options: { include_usage: true } }, /only allowed when stream is true/);
  await refused({ stream: false, stream_options: { include_usage: true } }, /only allowed when stream is true/);
  await refused({ stream: true, stream_options: { include_obfuscation: true } }, /include_obfuscation/);
  await refused({ stream: true, stream_options: { include_usage: true, chunk_size: 4 } }, /stream_options\.chunk_size/);
  await refused({ stream: true, stream_options: { include_usage: 'yes' } }, /include_usage must be a boolean/);
  assert.equal(sent.length, 0);
  const chunks = [];
  for await (const c of await engine.chat.completions.create({ messages: [user], stream: true, stream_options: { include_usage: true, include_obfuscation: false } })) chunks.push(c);
  assert.equal(chunks.at(-1).usage.prompt_tokens, 5);
  assert.equal(sent.length, 1);
});

test('a request the structured clone cannot copy is an InvalidRequestError, and nothing stays pending', async () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', parse() {} } } }];
  const e = await engine.chat.completions.create({ messages: [user], tools }).then(() => null, (e) => e);
  assert.ok(e instanceof InvalidRequestError, `expected InvalidRequestError, got ${e}`);
  assert.match(e.message, /cannot be copied/);
  // The engine still answers the next request.
  const r = await engine.chat.completions.create({ messages: [user] });
  assert.equal(r.choices[0].message.content, 'ok');
});
