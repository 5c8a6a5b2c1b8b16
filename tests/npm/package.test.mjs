// The npm package as an app meets it: the packed tarball (scripts/pack.sh) installed into a
// minimal Vite app, `vite build`, `dist/` served on loopback and driven in headless Chromium
// (SwiftShader WebGPU) on the tiny test model (scripts/make-tiny-model.sh): loading with progress,
// the worker, streaming, the prompt cache, abort, the errors, and Cache Storage. Also: `tsc
// --noEmit` on a TypeScript consumer, and the package from a plain <script type="module"> page.
// HOTPREFIX_TGZ names a tarball already packed (scripts/test.sh packs once for every test).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import Ajv from 'ajv';
import { serve, CHROMIUM, corruptSavedCache } from '../page/serve.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const HERE = fileURLToPath(new URL('./', import.meta.url));
const TINY = join(ROOT, 'models/tiny-llama.gguf');
const KV_HEAVY = join(ROOT, 'models/tiny-kv-heavy.gguf');
const sh = (cmd, args, opts = {}) => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...opts });

let work, tgz, server, browser, page, tinyBytes;
const errors = [];

before(async () => {
  tgz = process.env.HOTPREFIX_TGZ || sh('bash', [join(ROOT, 'scripts/pack.sh')]).trim().split('\n').pop();
  assert.ok(existsSync(tgz), `no tarball at ${tgz}`);
  if (!existsSync(TINY)) sh('bash', [join(ROOT, 'scripts/make-tiny-model.sh'), TINY]);
  if (!existsSync(KV_HEAVY)) sh('bash', [join(ROOT, 'scripts/make-tiny-model.sh'), KV_HEAVY, 'kv-heavy']);
  tinyBytes = readFileSync(TINY);
  work = mkdtempSync(join(tmpdir(), 'hotprefix-app-'));
  cpSync(join(HERE, 'app'), work, { recursive: true });
  writeFileSync(join(work, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  // The package and the clients it serves, at the versions the root package.json pins: from npm's
  // cache where the root install put them, else from the registry. (`--offline` failed on a fresh
  // machine: npm ci had cached @ai-sdk/provider's tarball, but this install asks for its metadata.)
  const pinned = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).devDependencies;
  const clients = ['openai', 'ai', 'zod', '@ai-sdk/provider', '@types/json-schema', '@types/node'].map((p) => `${p}@${pinned[p]}`);
  sh('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tgz, ...clients], { cwd: work });
  sh('node', [join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', '--logLevel', 'warn'], { cwd: work });
  const bad = {
    // A GGUF cut in half, served whole: the download is complete, the file is not.
    '/bad/truncated.gguf': (req, res) => {
      const half = tinyBytes.subarray(0, tinyBytes.length >> 1);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': half.length }).end(half);
    },
    // The whole length declared, half sent, then the connection dropped.
    '/bad/short-download.gguf': (req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': tinyBytes.length });
      res.write(tinyBytes.subarray(0, tinyBytes.length >> 1), () => setTimeout(() => res.destroy(), 50));
    },
    '/bad/not-a-model.gguf': (req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><p>Not found, but with a 200</p>'),
    // A Content-Length of 9 PB: no buffer of that size may be allocated before the bytes come.
    '/bad/huge-length.gguf': (req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': '9000000000000000' });
      res.write(tinyBytes.subarray(0, 4096), () => setTimeout(() => res.destroy(), 50));
    },
  };
  server = await serve(join(work, 'dist'), { '/models/': join(ROOT, 'models'), '/package/': join(work, 'node_modules/hotprefix') }, bad);
  browser = await chromium.launch(CHROMIUM);
  page = await browser.newPage();
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(server.url);
  await page.waitForFunction(() => document.getElementById('status').textContent === 'ready');
});

after(async () => {
  await browser?.close();
  server?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the tarball holds the ESM entry, the worker, the wasm and the types', () => {
  const files = sh('tar', ['-tzf', tgz]).split('\n').filter(Boolean).map((f) => f.replace(/^package\//, ''));
  // Every module of js/ (the package imports them all), the types and the wasm.
  const modules = readdirSync(join(ROOT, 'js')).filter((f) => f.endsWith('.js'));
  const types = readdirSync(join(ROOT, 'js')).filter((f) => f.endsWith('.d.ts'));
  for (const f of ['package.json', ...modules, ...types, 'wasm/hotprefix.js', 'wasm/hotprefix_bg.wasm']) {
    assert.ok(files.includes(f), `${f} is missing from ${files.join(', ')}`);
  }
  const assets = readdirSync(join(work, 'dist/assets'));
  assert.ok(assets.some((f) => f.endsWith('.wasm')), `vite emitted the wasm: ${assets}`);
  assert.ok(assets.some((f) => /worker/.test(f)), `vite emitted the worker: ${assets}`);
});

test('tsc --noEmit accepts a TypeScript consumer of the public API', () => {
  const dir = join(work, 'types');
  cpSync(join(HERE, 'types'), dir, { recursive: true });
  cpSync(join(work, 'node_modules'), join(dir, 'node_modules'), { recursive: true });
  sh('node', [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')], { stdio: 'inherit' });
});

test('a K-quant file (Q4_K and Q6_K weights in every role) loads and answers through the package', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    const engine = await window.hotprefix.createEngine({ model: '/models/formats/tiny-Q4_K_M.gguf', kvBudgetMB: 8 });
    try {
      const ask = () => engine.chat.completions.create({ messages: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'What is a canal lock?' }], max_tokens: 6 });
      const first = await ask();
      const again = await ask();
      return { first, again, model: first.model };
    } finally {
      await engine.unload();
      await (await caches.open(window.hotprefix.MODEL_CACHE)).delete('/models/formats/tiny-Q4_K_M.gguf'); // the later tests count entries
    }
  });
  assert.equal(r.first.object, 'chat.completion');
  assert.equal(r.model, 'tiny-Q4_K_M');
  assert.ok(r.first.usage.completion_tokens > 0 && r.first.usage.prompt_tokens > 10, JSON.stringify(r.first.usage));
  assert.equal(r.again.choices[0].message.content, r.first.choices[0].message.content, 'greedy: the same answer');
  assert.ok(r.again.usage.prompt_tokens_details.cached_tokens >= r.first.usage.prompt_tokens - 1, JSON.stringify(r.again.usage));
});

// The tiny model with its architecture renamed (`general.architecture` = "llamx", the same length):
// a well-formed GGUF this build does not run.
function renamedArchitecture(bytes) {
  const key = Buffer.from('general.architecture');
  const at = bytes.indexOf(key);
  assert.ok(at > 0, 'general.architecture in the tiny model');
  const out = Buffer.from(bytes);
  // key, then the value's type (u32 8: string) and length (u64 5), then "llama".
  const value = at + key.length + 4 + 8;
  assert.equal(out.subarray(value, value + 5).toString(), 'llama');
  out[value + 4] = 'x'.charCodeAt(0);
  return out;
}

test('inspectModel reads a file\'s header only, says whether it runs and why not; a File loads and answers', { timeout: 300_000 }, async () => {
  const gemma = '/models/gemma-3-270m-q4_k_m.gguf';
  assert.ok(existsSync(join(ROOT, 'models/gemma-3-270m-q4_k_m.gguf')), 'run scripts/fetch-gemma.sh');
  server.sent.delete(gemma);
  const r = await page.evaluate(async ({ gemma, tiny, renamed }) => {
    const { inspectModel, createEngine } = window.hotprefix;
    const settle = (p) => p.then((v) => ({ v }), (e) => ({ e: { name: e.name, message: e.message } }));
    const big = await inspectModel(gemma);
    const url = await inspectModel('/models/tiny-llama.gguf');
    const bad = await inspectModel(new File([new Uint8Array(renamed)], 'renamed.gguf'));
    const badLoad = await settle(createEngine({ model: new File([new Uint8Array(renamed)], 'renamed.gguf'), kvBudgetMB: 8 }));
    const notModel = await settle(inspectModel('/bad/not-a-model.gguf'));
    const engine = await createEngine({ model: new File([new Uint8Array(tiny)], 'tiny-from-disk.gguf'), kvBudgetMB: 8 });
    try {
      const a = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 4 });
      return { big, url, bad, badLoad, notModel, model: a.model, tokens: a.usage.completion_tokens };
    } finally {
      await engine.unload();
    }
  }, { gemma, tiny: [...tinyBytes], renamed: [...renamedArchitecture(tinyBytes)] });
  // Gemma-3-270m: a 253 MB file, of which only the header (~6 MB, two reads) crossed the wire.
  assert.equal(r.big.architecture, 'gemma3');
  assert.equal(r.big.runs, true, r.big.refused);
  assert.equal(r.big.tokenizer, 'llama');
  assert.match(r.big.chat_template, /built-in gemma/);
  assert.deepEqual(r.big.formats.map((f) => f.type), ['F32', 'Q5_0', 'Q8_0', 'Q4_K', 'Q6_K']);
  assert.ok(r.big.bytes > 250_000_000, `${r.big.bytes}`);
  const sent = server.sent.get(gemma) ?? 0;
  assert.ok(sent > 0 && sent <= 20 << 20, `${sent} bytes of the model were sent for its header`);
  assert.equal(r.url.architecture, 'llama');
  assert.equal(r.url.runs, true);
  assert.equal(r.bad.runs, false);
  assert.match(r.bad.refused, /architecture "llamx"/);
  assert.equal(r.badLoad.e?.name, 'ModelLoadError', JSON.stringify(r.badLoad));
  assert.equal(r.notModel.e?.name, 'ModelLoadError', JSON.stringify(r.notModel));
  assert.equal(r.model, 'tiny-from-disk');
  assert.ok(r.tokens > 0);
});

test('Gemma-3-270m (SentencePiece, sliding window, a 262,144-row head split over bindings) answers through the package', { timeout: 900_000 }, async () => {
  const r = await page.evaluate(async () => {
    const engine = await window.hotprefix.createEngine({ model: '/models/gemma-3-270m-q4_k_m.gguf', kvBudgetMB: 16, contextSize: 256 });
    try {
      const ask = () => engine.chat.completions.create({ messages: [{ role: 'user', content: 'The capital of France is' }], max_tokens: 3 });
      const first = await ask();
      const again = await ask();
      return { first, again };
    } finally {
      await engine.unload();
      await (await caches.open(window.hotprefix.MODEL_CACHE)).delete('/models/gemma-3-270m-q4_k_m.gguf'); // the later tests count entries
    }
  });
  console.log(`gemma3-270m: ${JSON.stringify(r.first.choices[0].message.content)}, ${JSON.stringify(r.first.usage)}, ${JSON.stringify(r.first.hotprefix.timings)}`);
  assert.equal(r.first.model, 'gemma-3-270m-q4_k_m');
  assert.equal(r.first.usage.completion_tokens, 3);
  assert.ok(r.first.choices[0].message.content.length > 0);
  assert.equal(r.again.choices[0].message.content, r.first.choices[0].message.content, 'greedy: the same answer');
  assert.equal(r.again.usage.prompt_tokens_details.cached_tokens, r.first.usage.prompt_tokens - 1);
});

const WEATHER_TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city now.', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 }, unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone.', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 20 } }, required: ['zone'], additionalProperties: false } } },
];

test('structured output and tool calls in the worker: answers validate, calls stream as OpenAI streams them, bad requests are InvalidRequestError', { timeout: 600_000 }, async () => {
  const schemas = [
    { type: 'object', properties: { name: { type: 'string', maxLength: 16 }, age: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['name', 'age'], additionalProperties: false },
    { type: 'object', properties: { colour: { enum: ['red', 'green', 'blue'] }, tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 3 } }, required: ['colour', 'tags'], additionalProperties: false },
    { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' }, ok: { type: 'boolean' }, at: { type: 'object', properties: { x: { type: 'integer', minimum: -9, maximum: 9 } }, required: ['x'], additionalProperties: false } }, required: ['code', 'ok', 'at'], additionalProperties: false },
  ];
  const r = await page.evaluate(async ({ schemas, tools }) => {
    const engine = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf', kvBudgetMB: 8 });
    const settle = (p) => p.then((v) => ({ v }), (e) => ({ e: { name: e.name, message: e.message } }));
    try {
      const messages = [{ role: 'system', content: 'Answer as JSON.' }, { role: 'user', content: 'Describe the canal.' }];
      const answers = [];
      for (const schema of schemas) {
        for (const [temperature, seed] of [[0, 0], [1, 3]]) {
          const a = await engine.chat.completions.create({ messages, max_tokens: 96, temperature, seed, response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } });
          answers.push({ schema, text: a.choices[0].message.content, finish: a.choices[0].finish_reason });
        }
      }
      const ask = [{ role: 'system', content: 'You help with the weather.' }, { role: 'user', content: 'Weather in Paris?' }];
      // (The tiny model's vocabulary is mostly single bytes: a call takes ~60 tokens and more.)
      const required = await engine.chat.completions.create({ messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200 });
      const named = await engine.chat.completions.create({ messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 200 });
      const none = await engine.chat.completions.create({ messages: ask, tools, tool_choice: 'none', max_tokens: 4 });
      const chunks = [];
      const stream = await engine.chat.completions.create({ messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, stream: true });
      for await (const c of stream) chunks.push(c);
      const call = required.choices[0].message.tool_calls[0];
      const follow = await engine.chat.completions.create({
        messages: [...ask, { role: 'assistant', content: null, tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 18}' }],
        tools, max_tokens: 4,
      });
      const bad = {
        keyword: await settle(engine.chat.completions.create({ messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', dependentRequired: {} } } } })),
        orphan: await settle(engine.chat.completions.create({ messages: [...ask, { role: 'tool', tool_call_id: 'call_nope', content: '1' }], tools })),
        absent: await settle(engine.chat.completions.create({ messages: ask, tools, tool_choice: { type: 'function', function: { name: 'nope' } } })),
        image: await settle(engine.chat.completions.create({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })),
      };
      const parts = await engine.chat.completions.create({ messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: ' there' }] }], max_tokens: 2 });
      return { answers, required, named, none, chunks, follow, bad, parts: parts.choices[0].finish_reason };
    } finally {
      await engine.unload();
    }
  }, { schemas, tools: WEATHER_TOOLS });
  const ajv = new Ajv({ allErrors: true });
  let complete = 0;
  for (const a of r.answers) {
    if (a.finish === 'length') continue;
    assert.equal(a.finish, 'stop');
    const v = JSON.parse(a.text);
    assert.ok(ajv.validate(a.schema, v), `${a.text}: ${ajv.errorsText()}`);
    complete += 1;
  }
  assert.ok(complete >= 3, `${complete} of ${r.answers.length} answers ended within max_tokens`);
  const validCall = (c) => {
    const tool = WEATHER_TOOLS.find((t) => t.function.name === c.function.name);
    assert.ok(tool, c.function.name);
    assert.ok(ajv.validate(tool.function.parameters, JSON.parse(c.function.arguments)), `${c.function.arguments}: ${ajv.errorsText()}`);
    assert.match(c.id, /^call_/);
    assert.equal(c.type, 'function');
  };
  assert.equal(r.required.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.required.choices[0].message.tool_calls.length, 1);
  validCall(r.required.choices[0].message.tool_calls[0]);
  assert.equal(r.named.choices[0].message.tool_calls[0].function.name, 'get_time');
  validCall(r.named.choices[0].message.tool_calls[0]);
  assert.equal(r.none.choices[0].message.tool_calls, undefined);
  assert.equal(typeof r.none.choices[0].message.content, 'string');
  // The stream: the call's id, type and name first, then its arguments in pieces; they add up.
  const deltas = r.chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? []);
  assert.ok(deltas.length >= 2, JSON.stringify(deltas));
  assert.equal(deltas[0].function.name, 'get_weather');
  assert.match(deltas[0].id, /^call_/);
  const streamed = { id: deltas[0].id, type: 'function', function: { name: 'get_weather', arguments: deltas.map((d) => d.function.arguments).join('') } };
  validCall(streamed);
  assert.equal(r.chunks.at(-1).choices[0].finish_reason, 'tool_calls');
  // The follow-up with the call and its result reuses the first request's prompt and the call.
  assert.ok(r.follow.usage.prompt_tokens_details.cached_tokens > r.required.usage.prompt_tokens, JSON.stringify({ follow: r.follow.usage, first: r.required.usage }));
  for (const [k, e] of Object.entries(r.bad)) assert.equal(e.e?.name, 'InvalidRequestError', `${k}: ${JSON.stringify(e)}`);
  assert.match(r.bad.keyword.e.message, /dependentRequired/);
  assert.ok(['stop', 'length'].includes(r.parts));
});

test('the official openai client through createFetch: create, stream, the stream helper, abort, cached tokens, models, errors', { timeout: 600_000 }, async () => {
  server.hits.clear();
  const r = await page.evaluate(async () => {
    const { createEngine } = window.hotprefix;
    const { createFetch, OpenAI, APIUserAbortError, BadRequestError, InternalServerError } = window.clients;
    const engine = await createEngine({ model: '/models/tiny-llama.gguf', kvBudgetMB: 8 });
    const small = await createEngine({ model: '/models/tiny-llama.gguf', kvBudgetMB: 0.02, contextSize: 1024 });
    const client = new OpenAI({ apiKey: 'local', baseURL: 'https://hotprefix.local/v1', fetch: createFetch(engine), dangerouslyAllowBrowser: true });
    const tight = new OpenAI({ apiKey: 'local', baseURL: 'https://hotprefix.local/v1', fetch: createFetch(small), dangerouslyAllowBrowser: true });
    const err = async (p) => p.then(() => null, (e) => ({ cls: e instanceof BadRequestError ? 'BadRequestError' : e instanceof InternalServerError ? 'InternalServerError' : e instanceof APIUserAbortError ? 'APIUserAbortError' : e.constructor.name, status: e.status ?? null, code: e.code ?? null }));
    try {
      const system = { role: 'system', content: `Answer from this document.\n\n${'The Harbour Canal runs 38 kilometres from Port Wren to Lake Avel. '.repeat(6)}` };
      const ask = (q) => ({ model: 'tiny', messages: [system, { role: 'user', content: q }], max_tokens: 6 });
      const plain = await client.chat.completions.create(ask('How long is it?'));
      const chunks = [];
      for await (const c of await client.chat.completions.create({ ...ask('Where does it end?'), stream: true, stream_options: { include_usage: true } })) chunks.push(c);
      const events = [];
      const helper = client.chat.completions.stream(ask('What lifts ships?'));
      helper.on('content', (d) => events.push(['content', d]));
      helper.on('chunk', () => events.push(['chunk']));
      const final = await helper.finalChatCompletion();
      // Abort: a long request stopped by the caller's signal.
      const ac = new AbortController();
      const running = client.chat.completions.create({ ...ask('Tell me everything.'), max_tokens: 120 }, { signal: ac.signal });
      setTimeout(() => ac.abort(), 300);
      const abort = await err(running);
      const after = await client.chat.completions.create(ask('Is it open at night?'));
      const models = [];
      for await (const m of client.models.list()) models.push(m.id);
      const bad = await err(client.chat.completions.create({ ...ask('x'), temperature: -1 }));
      const overflow = await err(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'word '.repeat(3000) }], max_tokens: 4 }));
      const budget = await err(tight.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'canal '.repeat(300) }], max_tokens: 4 }));
      const streamedBad = await err(client.chat.completions.create({ ...ask('x'), stream: true, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', if: {} } } } }));
      // Every other URL goes to the real fetch.
      const passed = await createFetch(engine)('/models/tiny-llama.gguf', { method: 'HEAD' });
      return { plain, chunks, events, final, abort, after, models, bad, overflow, budget, streamedBad, passed: passed.status };
    } finally {
      await engine.unload();
      await small.unload();
    }
  });
  assert.equal(r.plain.object, 'chat.completion');
  assert.equal(r.plain.model, 'tiny', 'the request\'s model is echoed');
  assert.ok(r.plain.usage.completion_tokens > 0);
  assert.ok(r.plain.hotprefix?.cache, 'the cache report rides along');
  assert.equal(r.chunks.at(-1).choices.length, 0);
  assert.ok(r.chunks.at(-1).usage.prompt_tokens_details.cached_tokens > 40, `the second request reused the system prompt: ${JSON.stringify(r.chunks.at(-1).usage)}`);
  assert.ok(r.chunks.at(-1).hotprefix.cache, 'the last chunk carries the cache report');
  assert.ok(r.events.some((e) => e[0] === 'chunk'));
  assert.equal(r.final.object, 'chat.completion');
  assert.ok(['stop', 'length'].includes(r.final.choices[0].finish_reason));
  assert.equal(r.abort.cls, 'APIUserAbortError', JSON.stringify(r.abort));
  assert.ok(r.after.usage.completion_tokens > 0, 'the engine answers after an abort');
  assert.deepEqual(r.models, ['tiny-llama']);
  assert.deepEqual(r.bad, { cls: 'BadRequestError', status: 400, code: null });
  assert.deepEqual(r.overflow, { cls: 'BadRequestError', status: 400, code: 'context_length_exceeded' });
  assert.deepEqual(r.budget, { cls: 'InternalServerError', status: 503, code: 'kv_budget_exceeded' });
  assert.deepEqual(r.streamedBad, { cls: 'BadRequestError', status: 400, code: null }, 'a streamed bad request gets its status');
  assert.equal(r.passed, 200);
  assert.ok(![...server.hits.keys()].some((p) => p.includes('chat/completions')), 'nothing went over the network');
});

test('the AI SDK through hotprefix/ai-sdk: generateText, streamText, cached tokens in usage, abort, JSON output, tools', { timeout: 600_000 }, async () => {
  const r = await page.evaluate(async () => {
    const { createEngine } = window.hotprefix;
    const { aiModel, generateText, streamText, Output, jsonSchema, tool } = window.clients;
    const engine = await createEngine({ model: '/models/tiny-llama.gguf', kvBudgetMB: 8 });
    try {
      const model = aiModel(engine);
      const instructions = `Answer from this document.\n\n${'The Harbour Canal runs 38 kilometres from Port Wren to Lake Avel. '.repeat(6)}`;
      const first = await generateText({ model, instructions, prompt: 'How long is it?', maxOutputTokens: 6 });
      const second = await generateText({ model, instructions, prompt: 'Where does it end?', maxOutputTokens: 6 });
      const s = streamText({ model, instructions, prompt: 'What lifts ships?', maxOutputTokens: 6 });
      const pieces = [];
      for await (const p of s.textStream) pieces.push(p);
      const streamed = { usage: await s.usage, meta: await s.providerMetadata, finish: await s.finishReason };
      const ac = new AbortController();
      const long = streamText({ model, instructions, prompt: 'Tell me everything.', maxOutputTokens: 120, abortSignal: ac.signal });
      let aborted = 'no';
      let got = 0;
      try {
        for await (const p of long.textStream) {
          got += p.length;
          ac.abort();
        }
        aborted = 'ended';
      } catch (e) {
        aborted = e.name;
      }
      const schema = { type: 'object', properties: { length_km: { type: 'integer', minimum: 0, maximum: 999 }, open: { type: 'boolean' } }, required: ['length_km', 'open'], additionalProperties: false };
      const json = await generateText({ model, instructions, prompt: 'The facts as JSON.', maxOutputTokens: 40, output: Output.object({ schema: jsonSchema(schema) }) });
      // (A short system prompt: the tools' description and a call fill much of the tiny model's context.)
      const called = await generateText({
        model, instructions: 'You help with the weather.', prompt: 'Weather in Paris?', maxOutputTokens: 200, toolChoice: 'required',
        tools: { get_weather: tool({ description: 'The weather now', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false }) }) },
      });
      return {
        first: { text: first.text, usage: first.usage }, second: { usage: second.usage, meta: second.providerMetadata },
        pieces, streamed, aborted, got, output: json.output, toolCalls: called.toolCalls, finish: called.finishReason,
      };
    } finally {
      await engine.unload();
    }
  });
  assert.ok(r.first.usage.outputTokens > 0 && r.first.usage.inputTokens > 40, JSON.stringify(r.first.usage));
  assert.ok(r.second.usage.inputTokenDetails.cacheReadTokens > 40, `cached tokens in the AI SDK's cache-read field: ${JSON.stringify(r.second.usage)}`);
  assert.ok(r.second.meta.hotprefix.cache, 'the cache report in the provider metadata');
  assert.ok(r.pieces.length > 0);
  assert.ok(r.streamed.usage.inputTokenDetails.cacheReadTokens > 40, JSON.stringify(r.streamed.usage));
  assert.ok(r.streamed.meta.hotprefix.timings);
  assert.notEqual(r.aborted, 'no', 'the stream stopped');
  assert.equal(typeof r.output.length_km, 'number');
  assert.equal(typeof r.output.open, 'boolean');
  assert.equal(r.finish, 'tool-calls');
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  assert.equal(typeof r.toolCalls[0].input.city, 'string');
});

test('loads with progress, answers plain and streamed requests in a worker, and reuses the shared prefix', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    const { createEngine } = window.hotprefix;
    const progress = [];
    const engine = await createEngine({ model: '/models/tiny-llama.gguf', onProgress: (p) => progress.push(p), kvBudgetMB: 8 });
    window.engine = engine;
    const system = { role: 'system', content: `You answer questions about this document.\n\n${'The quick brown fox jumps over the lazy dog. '.repeat(10)}` };
    const ask = (q, extra = {}) => ({ messages: [system, { role: 'user', content: q }], max_tokens: 8, ...extra });
    const plain = await engine.chat.completions.create(ask('Tell me what the fox does.'));
    const chunks = [];
    const stream = await engine.chat.completions.create(ask('Who is lazy?', { stream: true, stream_options: { include_usage: true } }));
    for await (const c of stream) chunks.push(c);
    const again = await engine.chat.completions.create(ask('Who is lazy?'));
    const warm = await engine.cache.prewarm([system]);
    const stats = await engine.cache.stats();
    const wasmOnMainThread = performance.getEntriesByType('resource').some((r) => r.name.endsWith('.wasm'));
    return { progress, plain, chunks, again, warm, stats, inWorker: engine.inWorker, adapter: engine.adapter, wasmOnMainThread };
  });
  assert.equal(r.inWorker, true);
  assert.equal(r.wasmOnMainThread, false, 'the page itself never fetched the wasm: the worker runs the engine');
  const phases = [...new Set(r.progress.map((p) => p.phase))];
  assert.deepEqual(phases, ['download', 'upload', 'ready'], JSON.stringify(r.progress));
  const dl = r.progress.filter((p) => p.phase === 'download');
  assert.equal(dl.at(-1).loaded, tinyBytes.length);
  assert.equal(dl.at(-1).total, tinyBytes.length);
  const up = r.progress.filter((p) => p.phase === 'upload');
  assert.ok(up.length >= 3 && up.at(-1).loaded === up.at(-1).total, JSON.stringify(up));

  // A ChatCompletion, as OpenAI's client returns it.
  const p = r.plain;
  assert.equal(p.object, 'chat.completion');
  assert.match(p.id, /^chatcmpl-/);
  assert.equal(p.model, 'tiny-llama');
  assert.equal(p.choices.length, 1);
  assert.equal(p.choices[0].message.role, 'assistant');
  assert.equal(typeof p.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(p.choices[0].finish_reason));
  assert.equal(p.usage.total_tokens, p.usage.prompt_tokens + p.usage.completion_tokens);
  assert.equal(p.usage.prompt_tokens_details.cached_tokens, 0, 'the first request is cold');

  // Chunks: a role delta, content deltas, a finish chunk, then usage with hotprefix's report.
  const c = r.chunks;
  assert.ok(c.every((x) => x.object === 'chat.completion.chunk' && x.id === c[0].id));
  assert.equal(c[0].choices[0].delta.role, 'assistant');
  const last = c.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage && last.hotprefix.cache, JSON.stringify(last));
  assert.ok(c.at(-2).choices[0].finish_reason);
  const streamed = c.map((x) => x.choices[0]?.delta?.content ?? '').join('');
  assert.equal(streamed, r.again.choices[0].message.content, 'streamed text equals the same request unstreamed');
  assert.equal(last.usage.completion_tokens, r.again.usage.completion_tokens);

  // The second question shares the system prompt and document with the first: they are reused.
  const u = last.usage;
  const prefix = r.warm.prompt_tokens - 16; // the system message, less at most the generation prompt
  assert.ok(u.prompt_tokens_details.cached_tokens >= prefix, `cached ${u.prompt_tokens_details.cached_tokens} of ${u.prompt_tokens}, system prefix ≥ ${prefix}`);
  const d = last.hotprefix.cache.diverged_at;
  assert.ok(d && d.message === 1 && d.char === 0, `diverged where the question starts: ${JSON.stringify(d)}`);
  assert.equal(r.again.usage.prompt_tokens_details.cached_tokens, r.again.usage.prompt_tokens - 1, 'an exact repeat recomputes only its last token');
  assert.ok(r.stats.pages_used > 0 && r.stats.prefixes.length >= 1, JSON.stringify(r.stats));
});

test('the main thread keeps running during a prefill in the worker', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    await engine.cache.clear();
    const ticks = [];
    const timer = setInterval(() => ticks.push(performance.now()), 20);
    const t0 = performance.now();
    const doc = Array.from({ length: 60 }, (_, i) => `line ${i}: ${(i * 7919) % 1000}`).join('\n');
    const res = await engine.chat.completions.create({ messages: [{ role: 'user', content: doc }], max_tokens: 1 });
    const t1 = performance.now();
    clearInterval(timer);
    const inside = ticks.filter((t) => t >= t0 && t <= t1);
    let gap = 0;
    for (let i = 1; i < inside.length; i++) gap = Math.max(gap, inside[i] - inside[i - 1]);
    return { ms: t1 - t0, ticks: inside.length, gap, prompt: res.usage.prompt_tokens };
  });
  assert.ok(r.prompt > 500, `a long prompt: ${r.prompt} tokens`);
  assert.ok(r.ticks >= Math.floor(r.ms / 20 / 4), `the timer fired ${r.ticks} times in ${r.ms.toFixed(0)} ms`);
  assert.ok(r.gap < 400, `the longest pause of the main thread was ${r.gap.toFixed(0)} ms (prefill ${r.ms.toFixed(0)} ms)`);
});

test('abort: a queued request is removed, a running one stops, and the same request again equals a cold answer', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    const { AbortError } = window.hotprefix;
    const req = { messages: [{ role: 'system', content: 'Count.' }, { role: 'user', content: 'One two three four five six seven' }], max_tokens: 24 };
    await engine.cache.clear();
    const cold = await engine.chat.completions.create(req);
    await engine.cache.clear();
    const baseline = (await engine.cache.stats()).pages_used;
    // Abort mid-stream.
    const ac = new AbortController();
    let pieces = 0;
    let streamError = null;
    try {
      for await (const c of await engine.chat.completions.create({ ...req, stream: true, signal: ac.signal })) {
        if (c.choices[0]?.delta?.content) { pieces++; ac.abort(); }
      }
    } catch (e) {
      streamError = { name: e.name, isAbort: e instanceof AbortError };
    }
    // Queued requests: three at once, the middle one aborted while it waits.
    const q = new AbortController();
    const a = engine.chat.completions.create({ ...req, max_tokens: 4 });
    const b = engine.chat.completions.create({ ...req, max_tokens: 4, signal: q.signal });
    const c = engine.chat.completions.create({ ...req, max_tokens: 4 });
    q.abort();
    const settled = await Promise.allSettled([a, b, c]);
    const after = await engine.chat.completions.create(req);
    return {
      cold: cold.choices[0].message.content, after: after.choices[0].message.content,
      afterCached: after.usage.prompt_tokens_details.cached_tokens, afterPrompt: after.usage.prompt_tokens,
      pieces, streamError, baseline,
      settled: settled.map((s) => (s.status === 'fulfilled' ? 'ok' : s.reason.name)),
    };
  });
  assert.equal(r.baseline, 0, 'clear() returns every page');
  assert.deepEqual(r.streamError, { name: 'AbortError', isAbort: true });
  assert.equal(r.pieces, 1, 'no delta after the abort');
  assert.deepEqual(r.settled, ['ok', 'AbortError', 'ok']);
  assert.equal(r.after, r.cold, 'after an abort, the same request answers as it did cold');
  assert.ok(r.afterCached > 0, 'and it reused what the aborted request left resident');
});

test('a prompt shorter than a KV page keeps hitting, and stats() and persist() return', { timeout: 300_000 }, async () => {
  // The report's three requests: the prompt fits in one page, the second answer grows it past
  // the page, whose full first page supersedes the partial one in the prefix index.
  const r = await page.evaluate(async () => {
    const e = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf', kvBudgetMB: 4, pageSize: 28 });
    await e.cache.forget();
    const req = (max_tokens) => ({ messages: [{ role: 'system', content: '' }, { role: 'user', content: 'hi' }], max_tokens });
    const a = await e.chat.completions.create(req(0));
    const b = await e.chat.completions.create(req(8));
    const c = await e.chat.completions.create(req(8));
    const stats = await e.cache.stats();
    const persisted = await e.cache.persist();
    await e.cache.forget();
    await e.unload();
    const usage = (x) => ({ prompt: x.usage.prompt_tokens, completion: x.usage.completion_tokens, cached: x.usage.prompt_tokens_details.cached_tokens });
    return { a: usage(a), b: usage(b), c: usage(c), pageSize: stats.page_size, prefixes: stats.prefixes, persisted, text: [b.choices[0].message.content, c.choices[0].message.content] };
  });
  assert.equal(r.pageSize, 28);
  const n = r.a.prompt;
  assert.ok(n < 28, `the prompt (${n} tokens) is shorter than a page of 28`);
  assert.ok(n + r.b.completion - 1 > 28, `the second request leaves more than a page resident: ${JSON.stringify(r.b)}`);
  assert.equal(r.b.cached, n - 1, JSON.stringify(r.b));
  assert.equal(r.c.cached, n - 1, `the third request reuses the prompt: ${JSON.stringify(r.c)}`);
  assert.equal(r.text[1], r.text[0]);
  assert.equal(r.prefixes.length, 1, JSON.stringify(r.prefixes));
  assert.ok(r.persisted.bytes > 0 && r.persisted.prefixes === 1, JSON.stringify(r.persisted));
});

test('a stream can be iterated once: a second iteration is a TypeError, and the first still ends', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    const e = window.engine;
    const stream = await e.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me about foxes.' }], max_tokens: 6, stream: true });
    const chunks = [];
    const first = (async () => { for await (const c of stream) chunks.push(c); })();
    let second = null;
    try {
      for await (const c of stream) chunks.push(c);
      second = 'iterated';
    } catch (ex) {
      second = { isTypeError: ex instanceof TypeError, message: ex.message };
    }
    await first;
    return { second, chunks: chunks.length, finish: chunks.at(-1)?.choices[0]?.finish_reason };
  });
  assert.equal(r.second.isTypeError, true, JSON.stringify(r.second));
  assert.ok(r.chunks >= 3 && r.finish, `the first iteration got the whole answer: ${JSON.stringify(r)}`);
});

test('persist() streams the cache to OPFS: the wasm heap grows by at most a batch, not by the cache', { timeout: 600_000 }, async () => {
  const r = await page.evaluate(async () => {
    // 16 KiB of K/V a position: 2,000 positions fill 32 MiB.
    const e = await window.hotprefix.createEngine({ model: '/models/tiny-kv-heavy.gguf', kvBudgetMB: 40 });
    await e.cache.forget();
    const words = ['lock', 'ship', 'canal', 'water', 'gate', 'river', 'lake', 'dam'];
    for (let d = 0; d < 8; d++) {
      const text = Array.from({ length: 60 }, (_, i) => words[(i * 7 + d * 3 + (i >> d)) % words.length]).join(' ');
      await e.chat.completions.create({ messages: [{ role: 'user', content: `${d}: ${text}` }], max_tokens: 0 });
    }
    const before = await e.cache.stats();
    const persisted = await e.cache.persist();
    const after = await e.cache.stats();
    await e.cache.forget();
    await e.unload();
    await (await caches.open(window.hotprefix.MODEL_CACHE)).delete('/models/tiny-kv-heavy.gguf'); // the later tests count entries
    return { used: before.bytes_used, heapBefore: before.wasm_heap_bytes, heapAfter: after.wasm_heap_bytes, persisted };
  });
  const mib = (b) => (b / 1048576).toFixed(1);
  console.log(`persist: ${mib(r.persisted.bytes)} MiB saved, ${mib(r.used)} MiB of pages; wasm heap ${mib(r.heapBefore)} -> ${mib(r.heapAfter)} MiB`);
  assert.ok(r.used >= 30 * 1048576, `the cache holds ${mib(r.used)} MiB`);
  assert.ok(r.persisted.bytes >= r.used, JSON.stringify(r.persisted));
  assert.ok(r.heapAfter - r.heapBefore <= 16 * 1048576, `the wasm heap grew by ${mib(r.heapAfter - r.heapBefore)} MiB saving ${mib(r.persisted.bytes)} MiB`);
});

test('a trap without a panic (out of memory, stack overflow, unreachable) is EngineCrashedError for every pending and later call; the worker goes', { timeout: 300_000 }, async () => {
  const script = async ({ worker, kind }) => {
    const { createEngine, EngineCrashedError } = window.hotprefix;
    const caught = async (p) => {
      try {
        await p;
        return { settled: 'resolved' };
      } catch (e) {
        return { crashed: e instanceof EngineCrashedError, name: e.name, message: e.message };
      }
    };
    const terminate = Worker.prototype.terminate;
    let terminated = 0;
    Worker.prototype.terminate = function () { terminated++; return terminate.call(this); };
    try {
      const engine = await createEngine({ model: '/models/tiny-llama.gguf', worker });
      // The trap is inside an async call; a request queued behind it is pending too.
      const trap = engine._trapForTest(kind);
      const queued = engine.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      const first = await caught(trap);
      const pending = await caught(queued);
      const later = await caught(engine.cache.stats());
      const before = terminated;
      const unload = await caught(engine.unload());
      return { first, pending, later, unload, terminatedByCrash: before };
    } finally {
      Worker.prototype.terminate = terminate;
    }
  };
  const check = (r, what) => {
    for (const k of ['first', 'pending', 'later']) {
      assert.equal(r[k].crashed, true, `${what} ${k}: ${JSON.stringify(r[k])}`);
    }
    assert.equal(r.unload.settled, 'resolved', `${what}: unload settles`);
  };
  for (const kind of ['oom', 'stack', 'unreachable']) {
    const r = await page.evaluate(script, { worker: true, kind });
    check(r, `worker ${kind}`);
    assert.equal(r.terminatedByCrash, 1, `worker ${kind}: the crashed engine's worker is terminated`);
  }
  const tokens = await page.evaluate(async () => {
    const fresh = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf' });
    const a = await fresh.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    await fresh.unload();
    return a.usage.completion_tokens;
  });
  assert.equal(tokens, 2, 'a new engine answers');
  assert.deepEqual(errors, [], 'no uncaught errors on the page');
  // In the page itself (worker: false), a page of its own: the instance is the page's.
  for (const kind of ['oom', 'unreachable']) {
    const p2 = await browser.newPage();
    const p2errors = [];
    p2.on('pageerror', (e) => p2errors.push(String(e)));
    try {
      await p2.goto(server.url);
      await p2.waitForFunction(() => document.getElementById('status').textContent === 'ready');
      const q = await p2.evaluate(script, { worker: false, kind });
      check(q, `page ${kind}`);
      assert.deepEqual(p2errors, [], `page ${kind}: the trap is reported once, as the error`);
    } finally {
      await p2.close();
    }
  }
});

test('bad request fields are InvalidRequestError; canonicalJSON sorts keys', { timeout: 120_000 }, async () => {
  const r = await page.evaluate(async () => {
    const { InvalidRequestError, canonicalJSON } = window.hotprefix;
    const bad = [
      {},
      { messages: [] },
      { messages: [{ role: 'user' }] },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: -1 },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 1.5 },
      { messages: [{ role: 'user', content: 'x' }], temperature: 'hot' },
      { messages: [{ role: 'user', content: 'x' }], top_p: 2 },
      { messages: [{ role: 'user', content: 'x' }], n: 2 },
      { messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] },
      { messages: [{ role: 'user', content: 'x' }], temperature: NaN },
      { messages: [{ role: 'user', content: 'x' }], top_p: Infinity },
      { messages: [{ role: 'user', content: 'x' }], frequency_penalty: 3 },
      { messages: [{ role: 'user', content: 'x' }], stop: Array.from({ length: 17 }, (_, i) => `s${i}`) },
      { messages: [{ role: 'user', content: 'x' }], stop: 'x'.repeat(257) },
      // A field the engine does not implement, refused by the engine itself.
      { messages: [{ role: 'user', content: 'x' }], user: 'someone' },
      // The tiny model's ChatML template does not render names: refused, not dropped.
      { messages: [{ role: 'user', content: 'x', name: 'ann' }] },
    ];
    const out = [];
    for (const req of bad) {
      try {
        await engine.chat.completions.create(req);
        out.push('accepted');
      } catch (e) {
        out.push(e instanceof InvalidRequestError ? 'InvalidRequestError' : `${e.name}: ${e.message}`);
      }
    }
    let nanMessage = null;
    try {
      await engine.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], temperature: NaN });
    } catch (e) {
      nanMessage = e.message;
    }
    const ok = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'still fine' }], max_tokens: 2 });
    const penalized = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'still fine' }], max_tokens: 4, frequency_penalty: 1.5, presence_penalty: -0.5 });
    return { out, nanMessage, ok: ok.usage.completion_tokens, penalized: penalized.usage.completion_tokens, canon: canonicalJSON({ b: [1, { d: 2, c: 'é' }], a: null, 10: true, 2: false, u: undefined }) };
  });
  assert.deepEqual(r.out, Array(r.out.length).fill('InvalidRequestError'));
  assert.equal(r.ok, 2, 'the engine still answers after bad requests');
  assert.equal(r.nanMessage, 'temperature must be a finite number');
  assert.equal(r.penalized, 4, 'frequency and presence penalties are applied, not refused');
  assert.equal(r.canon, '{"10":true,"2":false,"a":null,"b":[1,{"c":"é","d":2}]}');
});

test('a second load reads the model from Cache Storage, with no network request', { timeout: 300_000 }, async () => {
  const before = server.hits.get('/models/tiny-llama.gguf');
  const r = await page.evaluate(async () => {
    const { createEngine, MODEL_CACHE } = window.hotprefix;
    const keys = (await (await caches.open(MODEL_CACHE)).keys()).map((k) => new URL(k.url).pathname);
    const progress = [];
    const e2 = await createEngine({ model: '/models/tiny-llama.gguf', worker: false, onProgress: (p) => progress.push(p) });
    const a = await e2.chat.completions.create({ messages: [{ role: 'user', content: 'hello' }], max_tokens: 3 });
    await e2.unload();
    let afterUnload = null;
    try { await e2.cache.stats(); } catch (e) { afterUnload = e.name; }
    const wasmOnMainThread = performance.getEntriesByType('resource').some((r) => r.name.endsWith('.wasm'));
    return { keys, cached: progress[0]?.cached === true, tokens: a.usage.completion_tokens, inWorker: e2.inWorker, afterUnload, wasmOnMainThread };
  });
  assert.deepEqual(r.keys, ['/models/tiny-llama.gguf']);
  assert.equal(server.hits.get('/models/tiny-llama.gguf'), before, 'no second download');
  assert.ok(r.cached);
  assert.equal(r.inWorker, false, 'worker: false runs in the page');
  assert.equal(r.wasmOnMainThread, true, 'and the page fetched the wasm itself');
  assert.equal(r.tokens, 3);
  assert.equal(r.afterUnload, 'HotprefixError');
});

test('load errors are ModelLoadError and leave no Cache Storage entry', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async (sha) => {
    const { createEngine, ModelLoadError, MODEL_CACHE } = window.hotprefix;
    const cases = {
      missing: { model: '/models/no-such-model.gguf' },
      truncated: { model: '/bad/truncated.gguf' },
      shortDownload: { model: '/bad/short-download.gguf' },
      notGguf: { model: '/bad/not-a-model.gguf' },
      wrongSha: { model: '/models/tiny-llama.gguf?v=2', sha256: 'ab'.repeat(32) },
      rightSha: { model: '/models/tiny-llama.gguf?v=3', sha256: sha },
      hugeLength: { model: '/bad/huge-length.gguf' },
      // A good file whose load fails (no room for one KV page): it is not kept either.
      noRoom: { model: '/models/tiny-llama.gguf?v=4', kvBudgetMB: 1e-6 },
      // More KV budget than the adapter can bind: KvBudgetError (its own engine error kind).
      tooBig: { model: '/models/tiny-llama.gguf?v=5', kvBudgetMB: 1e7 },
    };
    const out = {};
    for (const [name, opts] of Object.entries(cases)) {
      try {
        const e = await createEngine(opts);
        await e.unload();
        out[name] = 'loaded';
      } catch (e) {
        out[name] = { isModelLoadError: e instanceof ModelLoadError, name: e.name, status: e.status, message: e.message };
      }
    }
    const keys = (await (await caches.open(MODEL_CACHE)).keys()).map((k) => { const u = new URL(k.url); return u.pathname + u.search; });
    return { out, keys };
  }, execFileSync('sha256sum', [TINY], { encoding: 'utf8' }).split(' ')[0]);
  for (const name of ['missing', 'truncated', 'shortDownload', 'notGguf', 'wrongSha', 'hugeLength']) {
    assert.equal(r.out[name].isModelLoadError, true, `${name}: ${JSON.stringify(r.out[name])}`);
  }
  assert.equal(r.out.noRoom.name, 'InvalidRequestError', JSON.stringify(r.out.noRoom));
  assert.equal(r.out.tooBig.name, 'KvBudgetError', JSON.stringify(r.out.tooBig));
  assert.equal(r.out.missing.status, 404);
  assert.match(r.out.shortDownload.message, /truncated|failed/);
  assert.match(r.out.wrongSha.message, /integrity/);
  assert.match(r.out.notGguf.message, /GGUF/i);
  assert.equal(r.out.rightSha, 'loaded');
  assert.deepEqual(r.keys.sort(), ['/models/tiny-llama.gguf', '/models/tiny-llama.gguf?v=3']);
});

test('a lost device is DeviceLostError, and a new engine can be created', { timeout: 300_000 }, async () => {
  const r = await page.evaluate(async () => {
    const { createEngine, DeviceLostError } = window.hotprefix;
    await engine._loseDevice();
    let lost = null;
    try {
      await engine.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    } catch (e) {
      lost = { isDeviceLost: e instanceof DeviceLostError, message: e.message };
    }
    await engine.unload();
    const fresh = await createEngine({ model: '/models/tiny-llama.gguf' });
    const a = await fresh.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    await fresh.unload();
    return { lost, tokens: a.usage.completion_tokens };
  });
  assert.equal(r.lost?.isDeviceLost, true, JSON.stringify(r.lost));
  assert.equal(r.tokens, 2);
  assert.deepEqual(errors, [], 'no uncaught errors on the page');
});

test('a panic in the engine is EngineCrashedError with its message, and every later call fails with it', { timeout: 300_000 }, async () => {
  // In the page: `caught(promise)` says how it settled.
  const script = async ({ worker, message }) => {
    const { createEngine, EngineCrashedError } = window.hotprefix;
    const caught = async (p) => {
      try {
        await p;
        return { settled: 'resolved' };
      } catch (e) {
        return { crashed: e instanceof EngineCrashedError, name: e.name, message: e.message };
      }
    };
    const engine = await createEngine({ model: '/models/tiny-llama.gguf', worker });
    // The panic is inside an async call: without the hook its promise would never settle.
    const first = await caught(engine._panicForTest(message));
    const chat = await caught(engine.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }));
    const stats = await caught(engine.cache.stats());
    const unload = await caught(engine.unload());
    return { first, chat, stats, unload };
  };
  const check = (r, message) => {
    for (const k of ['first', 'chat', 'stats']) {
      assert.equal(r[k].crashed, true, `${k}: ${JSON.stringify(r[k])}`);
      assert.equal(r[k].name, 'EngineCrashedError');
      assert.ok(r[k].message.includes(message) && r[k].message.includes('src/web.rs'), `${k}: ${r[k].message}`);
      assert.ok(!/unreachable/.test(r[k].message), `${k}: the panic, not the trap: ${r[k].message}`);
    }
    assert.equal(r.unload.settled, 'resolved', 'unload still works');
  };

  // In the worker (the default): the error crosses the worker boundary with its class; a new
  // engine is a new worker, with a fresh instance.
  const r = await page.evaluate(script, { worker: true, message: 'test panic in the worker' });
  check(r, 'test panic in the worker');
  const tokens = await page.evaluate(async () => {
    const fresh = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf' });
    const a = await fresh.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    await fresh.unload();
    return a.usage.completion_tokens;
  });
  assert.equal(tokens, 2, 'a new engine answers');
  assert.deepEqual(errors, [], 'no uncaught errors on the page');

  // With worker: false the crashed instance is the page's own: a page of its own for this, where
  // even a new engine is refused.
  const p2 = await browser.newPage();
  const p2errors = [];
  p2.on('pageerror', (e) => p2errors.push(String(e)));
  try {
    await p2.goto(server.url);
    await p2.waitForFunction(() => document.getElementById('status').textContent === 'ready');
    const q = await p2.evaluate(script, { worker: false, message: 'test panic in the page' });
    check(q, 'test panic in the page');
    const again = await p2.evaluate(async () => {
      try {
        await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf', worker: false });
        return 'loaded';
      } catch (e) {
        return e.name;
      }
    });
    assert.equal(again, 'EngineCrashedError');
    assert.deepEqual(p2errors, [], 'the trap is not reported again as an uncaught error');
  } finally {
    await p2.close();
  }
});

test('without WebGPU: WebGPUUnavailableError with the reason, from the worker and in the page', { timeout: 120_000 }, async () => {
  const plain = await chromium.launch({ ...CHROMIUM, args: CHROMIUM.args.filter((a) => a !== '--enable-unsafe-webgpu') });
  try {
    const p = await plain.newPage();
    const pageErrors = [];
    p.on('pageerror', (e) => pageErrors.push(String(e)));
    await p.addInitScript(() => { if (location.search === '?nogpu') delete Navigator.prototype.gpu; });
    const attempt = async (url, worker) => {
      await p.goto(url);
      await p.waitForFunction(() => document.getElementById('status').textContent === 'ready');
      return p.evaluate(async (worker) => {
        try {
          await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf', worker });
          return 'loaded';
        } catch (e) {
          return { isUnavailable: e instanceof window.hotprefix.WebGPUUnavailableError, reason: e.reason, message: e.message };
        }
      }, worker);
    };
    const downloads = server.hits.get('/models/tiny-llama.gguf');
    const noAdapter = await attempt(server.url, true);
    const noApi = await attempt(`${server.url}?nogpu`, false);
    assert.equal(server.hits.get('/models/tiny-llama.gguf'), downloads, 'nothing is downloaded without WebGPU');
    assert.equal(noAdapter.isUnavailable, true, JSON.stringify(noAdapter));
    assert.equal(noAdapter.reason, 'no-adapter');
    assert.equal(noApi.isUnavailable, true, JSON.stringify(noApi));
    assert.equal(noApi.reason, 'no-webgpu');
    assert.deepEqual(pageErrors, []);
  } finally {
    await plain.close();
  }
});

test('a plain <script type="module"> page uses the unpacked package', { timeout: 300_000 }, async () => {
  const p = await browser.newPage();
  try {
    await p.goto(`${server.url}plain.html`);
    await p.waitForFunction(() => document.getElementById('status').textContent === 'ready');
    const r = await p.evaluate(async () => {
      const e = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf' });
      const a = await e.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      await e.unload();
      return { tokens: a.usage.completion_tokens, inWorker: e.inWorker };
    });
    assert.deepEqual(r, { tokens: 2, inWorker: true });
  } finally {
    await p.close();
  }
});

test('a saved cache survives a page reload; a corrupt one is refused with a warning and answers stay correct', { timeout: 300_000 }, async () => {
  const p = await browser.newPage();
  const pageErrors = [];
  p.on('pageerror', (e) => pageErrors.push(String(e)));
  const open = async (reload) => {
    if (reload) await p.reload(); else await p.goto(server.url);
    await p.waitForFunction(() => document.getElementById('status').textContent === 'ready');
  };
  const setup = () => {
    const system = { role: 'system', content: `Answer from the document.\n\n${'Canal locks lift ships between lakes. '.repeat(12)}` };
    window.ask = (q) => ({ messages: [system, { role: 'user', content: q }], max_tokens: 6 });
    window.prewarmed = () => window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf', restoreCache: true });
  };
  try {
    await p.addInitScript(setup);
    await open(false);
    const saved = await p.evaluate(async () => {
      const e = await window.hotprefix.createEngine({ model: '/models/tiny-llama.gguf' });
      await e.cache.forget();
      const first = await e.chat.completions.create(ask('How do ships climb?'));
      const persisted = await e.cache.persist();
      const stats = await e.cache.stats();
      const cold = await (async () => { await e.cache.clear(); return e.chat.completions.create(ask('Where do the ships go?')); })();
      await e.unload();
      return { persisted, saved_bytes: stats.saved_bytes, prompt: first.usage.prompt_tokens, cold: cold.choices[0].message.content, sha: e.sha256 };
    });
    assert.ok(saved.persisted.bytes > 0 && saved.persisted.bytes === saved.saved_bytes, JSON.stringify(saved));
    assert.equal(saved.persisted.prefixes, 1);

    await open(true);
    const warm = await p.evaluate(async () => {
      const e = await prewarmed();
      const a = await e.chat.completions.create(ask('Where do the ships go?'));
      await e.unload();
      return { restored: e.cache.restored, cached: a.usage.prompt_tokens_details.cached_tokens, text: a.choices[0].message.content, diverged: a.hotprefix.cache.diverged_at };
    });
    assert.equal(warm.restored.prefixes, 1, JSON.stringify(warm.restored));
    assert.ok(warm.diverged?.message === 1 && warm.diverged.char === 0, `after the reload, the request hit up to its question: ${JSON.stringify(warm.diverged)}`);
    assert.equal(warm.cached, warm.diverged.token);
    assert.equal(warm.text, saved.cold, 'the restored K/V answer as a cold run does');

    // Corrupt the saved file: one byte in the middle of the KV data.
    await corruptSavedCache(p, saved.sha);
    await open(true);
    const refused = await p.evaluate(async () => {
      const e = await prewarmed();
      const a = await e.chat.completions.create(ask('Where do the ships go?'));
      const stats = await e.cache.stats();
      await e.unload();
      return { restored: e.cache.restored, cached: a.usage.prompt_tokens_details.cached_tokens, text: a.choices[0].message.content, saved_bytes: stats.saved_bytes };
    });
    assert.match(refused.restored?.warning ?? '', /checksum/, JSON.stringify(refused.restored));
    assert.equal(refused.cached, 0, 'nothing of the corrupt file was used');
    assert.equal(refused.text, saved.cold, 'and the answer is the cold one');
    assert.equal(refused.saved_bytes, 0, 'the refused file is deleted');
    assert.deepEqual(pageErrors, []);
  } finally {
    await p.close();
  }
});
