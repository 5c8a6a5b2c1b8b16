// The demo (www/index.html, on the npm package's public API), as a person uses it, in headless
// Chromium's software WebGPU, with the real default model and a short document (~100 tokens:
// SwiftShader prefills the default model at a few tens of tokens a second): load it, paste the
// document, ask two questions, try the wrong layout, reload (the saved cache is restored), corrupt the saved
// file and reload (a warning, and a correct cold answer), go offline and reload (it still works);
// the benchmark mode; and the page without WebGPU.
// Screenshots go to target/page-test/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve, CHROMIUM, corruptSavedCache } from './serve.mjs';

const WWW = fileURLToPath(new URL('../../www/', import.meta.url));
const PKG = fileURLToPath(new URL('../../target/npm/hotprefix/', import.meta.url));
const MODELS = fileURLToPath(new URL('../../models/', import.meta.url));
const OUT = fileURLToPath(new URL('../../target/page-test/', import.meta.url));
const MODEL = process.env.DEMO_MODEL ?? 'default';
const URL_PARAMS = `?model=${MODEL}&max_tokens=6&kv_mb=64`;

let server, browser, page;
const errors = [];

before(async () => {
  assert.ok(existsSync(`${PKG}/index.js`), 'run scripts/pack.sh first');
  server = await serve(WWW, { '/models/': MODELS, '/pkg/': PKG });
  browser = await chromium.launch(CHROMIUM);
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (e) => errors.push(String(e)));
});

after(async () => {
  await browser?.close();
  server?.close();
});

const ready = () => page.waitForFunction(() => ['ready', 'error', 'no-webgpu'].includes(document.body.dataset.state), null, { timeout: 600_000 });

// Types a question into page `p`, sends it, waits for the answer; returns the numbers under the reply.
async function askOn(p, q, timeout = 600_000) {
  const before = await p.$$eval('.msg.assistant .meta', (m) => m.length);
  await p.fill('#message', q);
  await p.click('#send');
  await p.waitForFunction((n) => document.querySelectorAll('.msg.assistant .meta').length > n && document.body.dataset.state === 'ready', before, { timeout });
  return p.$eval('.msg.assistant:last-of-type .meta', (m) => ({ ...m.dataset, text: m.parentElement.firstChild.textContent }));
}
const ask = (q) => askOn(page, q);

// A short document, so that the real model's prefills on SwiftShader keep the test to minutes.
const DOC = 'The Harbour Canal runs 38 kilometres from Port Wren to Lake Avel. Seven locks lift ships 26 metres. '
  + 'It is open from 06:00 to 22:00 every day except 25 December. Pleasure craft pay a flat 60 euros; '
  + 'commercial ships pay 1.80 euros per gross tonne.';

const diagnosis = () => page.$eval('#diagnosis', (d) => ({ role: d.dataset.role, message: d.dataset.message, text: d.textContent, codes: [...d.querySelectorAll('li')].map((l) => l.dataset.code) }));

test('the demo, as a person uses it: a document, two questions, the cache panel, the wrong layout', { timeout: 1_200_000 }, async () => {
  await page.goto(`${server.url}${URL_PARAMS}`);
  await ready();
  assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready', await page.textContent('#load-status'));
  await page.evaluate(() => window.demo.engine.cache.forget());
  assert.match(await page.textContent('#load-status'), /^Loaded /);
  await page.fill('#doc', DOC);
  await page.dispatchEvent('#doc', 'change');

  const first = await ask('How long is the canal?');
  const second = await ask('What does a pleasure craft pay?');
  console.log(`first: ${JSON.stringify(first)}\nsecond: ${JSON.stringify(second)}`);
  assert.ok(first.text.length > 0, 'an answer was streamed');
  // The second prompt extends the first (history is append-only): all of it was resident.
  assert.ok(Number(second.cached) >= Number(first.prompt) - 2, `the system prompt, document and first turn were reused: ${JSON.stringify(second)}, first ${JSON.stringify(first)}`);
  assert.ok(Number(second.ttft) < Number(first.ttft), `the second first-token time is lower: ${second.ttft} vs ${first.ttft} ms`);

  const rows = await page.$$eval('#prefixes tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  assert.ok(rows.length >= 1 && Number(rows[0][1].replace(/,/g, '')) >= Number(second.cached), `the cache panel lists the prefix: ${JSON.stringify(rows)}`);
  assert.match(await page.textContent('#saved'), /Saved in this browser/);
  await page.screenshot({ path: `${OUT}/demo.png`, fullPage: true });

  await page.click('#wrong');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-label="wrong-layout"] .meta').length === 2 && document.body.dataset.state === 'ready', null, { timeout: 600_000 });
  const w = await diagnosis();
  assert.equal(w.role, 'system', `the wrong layout misses inside the system message: ${w.text}`);
  assert.match(w.text, /Ada/);
  assert.match(w.text, /Grace/);
  assert.ok(w.codes.includes('dynamic_before_static'), JSON.stringify(w.codes));
  await page.screenshot({ path: `${OUT}/demo-wrong-layout.png`, fullPage: true });
  assert.deepEqual(errors, []);
});

test('after a reload the document is still warm; a corrupt saved cache is refused with a warning', { timeout: 1_200_000 }, async () => {
  const q = 'When is the canal open?';
  await page.reload();
  await ready();
  await page.fill('#doc', DOC); // the page starts with its sample document; the saved cache holds this one
  await page.dispatchEvent('#doc', 'change');
  assert.equal(await page.$eval('#load-status', (e) => e.dataset.restored), 'yes', await page.textContent('#load-status'));
  const warm = await ask(q);
  const d = await diagnosis();
  assert.equal(d.role, 'user', `after the reload, the question hit the document: ${d.text}`);
  assert.ok(Number(warm.cached) > 0);

  // Corrupt the saved file: one byte in the middle of the KV data.
  await corruptSavedCache(page, await page.evaluate(() => window.demo.engine.sha256));
  await page.reload();
  await ready();
  await page.fill('#doc', DOC);
  await page.dispatchEvent('#doc', 'change');
  assert.equal(await page.$eval('#load-status', (e) => e.dataset.restored), 'warning');
  assert.match(await page.textContent('#load-status'), /saved cache was not used: .*checksum/);
  const cold = await ask(q);
  assert.equal(Number(cold.cached), 0, 'nothing of the corrupt file was used');
  assert.equal(cold.text, warm.text, 'and the cold answer equals the warm one');

  // Offline: the page comes from its service worker, the model from Cache Storage.
  await page.context().setOffline(true);
  try {
    await page.reload();
    await ready();
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'ready', await page.textContent('#load-status'));
    await page.fill('#doc', DOC);
    await page.dispatchEvent('#doc', 'change');
    const offline = await ask(q);
    assert.equal(offline.text, warm.text, 'offline, the same answer');
    assert.ok(Number(offline.cached) > 0, 'and the saved cache restored');
  } finally {
    await page.context().setOffline(false);
  }
  assert.deepEqual(errors, []);
});

test('the benchmark mode measures and exposes its figures', { timeout: 1_200_000 }, async () => {
  const p = await browser.newPage();
  try {
    await p.goto(`${server.url}?model=tiny&bench`);
    await p.waitForFunction(() => document.body.dataset.bench, null, { timeout: 600_000 });
    const f = await p.evaluate(() => window.benchResults);
    assert.equal(await p.evaluate(() => document.body.dataset.bench), 'done', JSON.stringify(f));
    for (const k of ['prefill_tok_s', 'decode_tok_s', 'ttft_cold_ms', 'ttft_warm_ms']) assert.ok(f[k] > 0, `${k}: ${JSON.stringify(f)}`);
    assert.ok(f.prefill_tokens > 300, `a document filling much of the tiny model's context: ${f.prefill_tokens} tokens`);
    assert.ok(f.warm_cached_tokens >= 0.9 * f.prefill_tokens, `the second question reuses the document: ${JSON.stringify(f)}`);
    assert.ok(f.ttft_warm_ms < f.ttft_cold_ms, JSON.stringify(f));
  } finally {
    await p.close();
  }
});

test('a K-quant file answers in the demo, and its second question hits the cache', { timeout: 1_200_000 }, async () => {
  // llama.cpp's Q4_K_M quantization of a tiny llama with 256-value rows (scripts/make-formats.sh):
  // Q4_K and Q6_K weights in every role, the embedding and tied head included.
  const p = await browser.newPage();
  const pageErrors = [];
  p.on('pageerror', (e) => pageErrors.push(String(e)));
  try {
    await p.goto(`${server.url}?model=./models/formats/tiny-Q4_K_M.gguf&max_tokens=4&kv_mb=16`);
    await p.waitForFunction(() => ['ready', 'error', 'no-webgpu'].includes(document.body.dataset.state), null, { timeout: 600_000 });
    assert.equal(await p.evaluate(() => document.body.dataset.state), 'ready', await p.textContent('#load-status'));
    await p.evaluate(() => window.demo.engine.cache.forget());
    await p.fill('#doc', DOC);
    await p.dispatchEvent('#doc', 'change');
    const first = await askOn(p, 'How long is the canal?');
    const second = await askOn(p, 'What does a pleasure craft pay?');
    console.log(`K-quant: first ${JSON.stringify(first)}\nsecond ${JSON.stringify(second)}`);
    assert.ok(Number(first.prompt) > 50 && Number(first.cached) === 0, `a cold answer over the document: ${JSON.stringify(first)}`);
    assert.ok(Number(second.cached) >= Number(first.prompt) - 2, `the document and first turn were reused: ${JSON.stringify(second)}`);
    assert.deepEqual(pageErrors, []);
  } finally {
    await p.close();
  }
});

test('the model picker: a file this build does not run is explained and the page keeps answering; Gemma-3-270m, checked from its header, loads in its place and answers', { timeout: 1_500_000 }, async () => {
  const p = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const pageErrors = [];
  p.on('pageerror', (e) => pageErrors.push(String(e)));
  try {
    await p.goto(`${server.url}?model=tiny&max_tokens=3&kv_mb=16`);
    await p.waitForFunction(() => ['ready', 'error', 'no-webgpu'].includes(document.body.dataset.state), null, { timeout: 600_000 });
    assert.equal(await p.evaluate(() => document.body.dataset.state), 'ready', await p.textContent('#load-status'));
    await p.fill('#doc', DOC); // the tiny model's context is 1,024 positions
    await p.dispatchEvent('#doc', 'change');
    await p.click('#model summary');
    // The tiny model with its architecture renamed: a good GGUF of an architecture this build lacks.
    const tiny = readFileSync(`${MODELS}/tiny-llama.gguf`);
    const key = tiny.indexOf(Buffer.from('general.architecture'));
    const renamed = Buffer.from(tiny);
    renamed[key + 'general.architecture'.length + 12 + 4] = 'x'.charCodeAt(0); // "llama" -> "llamx"
    await p.setInputFiles('#model-file', { name: 'renamed.gguf', mimeType: 'application/octet-stream', buffer: renamed });
    await p.waitForFunction(() => document.getElementById('model-summary').dataset.runs && /renamed\.gguf/.test(document.getElementById('model-summary').textContent), null, { timeout: 60_000 });
    assert.equal(await p.$eval('#model-summary', (e) => e.dataset.runs), 'no');
    assert.match(await p.textContent('#model-summary'), /does not run it\. .*architecture "llamx"/);
    assert.equal(await p.$eval('#model-load', (b) => b.hidden), true, 'no load offered');
    assert.equal(await p.textContent('#model-name'), 'tiny-llama');
    const still = await askOn(p, 'Is the page still working?');
    assert.ok(Number(still.prompt) > 0, 'the loaded model still answers');
    // "Extract as JSON": the answer is held to the schema shown (response_format: json_schema).
    const n = await p.$$eval('.msg.assistant .meta', (m) => m.length);
    await p.click('#extract');
    await p.waitForFunction((k) => document.querySelectorAll('.msg.assistant .meta').length > k && document.body.dataset.state === 'ready', n, { timeout: 600_000 });
    const extracted = await p.$eval('.msg.assistant:last-of-type', (m) => ({ json: m.dataset.json, text: m.firstChild.textContent }));
    console.log(`extract as JSON: ${JSON.stringify(extracted)}`);
    assert.ok(['valid', 'cut'].includes(extracted.json), JSON.stringify(extracted));
    if (extracted.json === 'valid') {
      const facts = JSON.parse(extracted.text);
      assert.deepEqual(Object.keys(facts), ['name', 'length_km', 'locks', 'opening_hours', 'fees']);
      assert.match(facts.opening_hours, /^[0-2][0-9]:[0-5][0-9]-[0-2][0-9]:[0-5][0-9]$/);
    }

    // Gemma-3-270m by URL: its header is read (architecture, formats, the built-in template), then it loads.
    await p.fill('#model-url', './models/gemma-3-270m-q4_k_m.gguf');
    await p.click('#model-check');
    await p.waitForFunction(() => document.getElementById('model-summary').dataset.runs && /gemma-3-270m/.test(document.getElementById('model-summary').textContent), null, { timeout: 120_000 });
    assert.equal(await p.$eval('#model-summary', (e) => e.dataset.runs), 'yes', await p.textContent('#model-summary'));
    const summary = await p.textContent('#model-summary');
    assert.match(summary, /gemma3/);
    assert.match(summary, /Q4_K × 27/);
    assert.match(summary, /built-in gemma/);
    await p.screenshot({ path: `${OUT}/demo-model-picker.png`, fullPage: true });
    await p.click('#model-load');
    await p.waitForFunction(() => document.getElementById('model-name').textContent === 'gemma-3-270m-q4_k_m' && document.body.dataset.state === 'ready', null, { timeout: 900_000 });
    assert.equal(await p.$$eval('.msg', (m) => m.length), 0, 'a new model starts a new chat');
    await p.fill('#system', 'Answer in a few words.');
    await p.fill('#doc', 'The Harbour Canal is 38 kilometres long.');
    await p.dispatchEvent('#doc', 'change');
    const a = await askOn(p, 'How long is the canal?', 900_000);
    console.log(`gemma in the demo: ${JSON.stringify(a)}`);
    assert.ok(Number(a.prompt) > 20 && a.text.length > 0, JSON.stringify(a));
    await p.screenshot({ path: `${OUT}/demo-gemma.png`, fullPage: true });
    assert.deepEqual(pageErrors, []);
  } finally {
    await p.close();
  }
});

test('without WebGPU the page says why, with no uncaught error', { timeout: 120_000 }, async () => {
  const plain = await chromium.launch({ ...CHROMIUM, args: CHROMIUM.args.filter((a) => a !== '--enable-unsafe-webgpu') });
  try {
    const p = await plain.newPage();
    const pageErrors = [];
    p.on('pageerror', (e) => pageErrors.push(String(e)));
    await p.goto(`${server.url}${URL_PARAMS}`);
    await p.waitForFunction(() => ['ready', 'error', 'no-webgpu'].includes(document.body.dataset.state), null, { timeout: 60_000 });
    assert.equal(await p.evaluate(() => document.body.dataset.state), 'no-webgpu');
    assert.match(await p.textContent('#load-status'), /no WebGPU \(no-adapter\)/);
    await p.screenshot({ path: `${OUT}/demo-no-webgpu.png` });
    assert.deepEqual(pageErrors, []);
  } finally {
    await plain.close();
  }
});
