// hotprefix/openai's refusals before the engine sees a request, on a stand-in engine (no GPU, no
// browser: the adapter's own routing). Answers through the packed package and the real engine,
// with the `openai` SDK, are in package.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createFetch, DEFAULT_BASE_URL } from '../../js/openai.js';

function standIn() {
  const seen = [];
  return {
    seen,
    model: 'stand-in',
    chat: {
      completions: {
        async create(params) {
          seen.push(params);
          return { id: 'chatcmpl-1', object: 'chat.completion', model: 'stand-in', created: 1, choices: [] };
        },
      },
    },
  };
}

async function refusal(res, status, param, code) {
  assert.equal(res.status, status);
  assert.equal(res.headers.get('x-should-retry'), 'false');
  const { error } = await res.json();
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.param, param);
  assert.equal(error.code, code);
  assert.ok(error.message.length > 0);
  return error;
}

test('unknown routes, methods and models get OpenAI error bodies; the engine is not called', async () => {
  const engine = standIn();
  const f = createFetch(engine);
  await refusal(await f(`${DEFAULT_BASE_URL}/embeddings`, { method: 'POST', body: '{}' }), 404, null, 'unknown_url');
  await refusal(await f(`${DEFAULT_BASE_URL}/chat/completions`), 405, null, null);
  await refusal(await f(`${DEFAULT_BASE_URL}/models`, { method: 'DELETE' }), 405, null, null);
  const e = await refusal(await f(`${DEFAULT_BASE_URL}/models/gpt-4o`), 404, 'model', 'model_not_found');
  assert.match(e.message, /gpt-4o/);
  await refusal(await f(`${DEFAULT_BASE_URL}/chat/completions`, { method: 'POST', body: '{not json' }), 400, null, null);
  await refusal(await f(`${DEFAULT_BASE_URL}/chat/completions`, { method: 'POST', body: '[1]' }), 400, null, null);
  assert.equal(engine.seen.length, 0);
});

test('the model is listed, and a completion reaches the engine', async () => {
  const engine = standIn();
  const f = createFetch(engine);
  const list = await (await f(`${DEFAULT_BASE_URL}/models`)).json();
  assert.deepEqual(list.data.map((m) => m.id), ['stand-in']);
  assert.equal((await f(`${DEFAULT_BASE_URL}/models/stand-in`)).status, 200);
  const res = await f(`${DEFAULT_BASE_URL}/chat/completions`, { method: 'POST', body: JSON.stringify({ model: 'stand-in', messages: [] }) });
  assert.equal(res.status, 200);
  assert.equal(engine.seen.length, 1);
});

test('other URLs go to the fetch it was given', async () => {
  const urls = [];
  const f = createFetch(standIn(), { fetch: async (input) => { urls.push(String(input)); return new Response('ok'); } });
  assert.equal(await (await f('https://example.com/v1/models')).text(), 'ok');
  assert.deepEqual(urls, ['https://example.com/v1/models']);
});
