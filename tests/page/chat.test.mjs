// The demo page's chat with the real default model on the browser's (software) WebGPU: load it,
// send a message, get a streamed answer; a second turn reuses the first turn's cached prefix.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { serve, CHROMIUM } from './serve.mjs';

const WWW = fileURLToPath(new URL('../../www/', import.meta.url));
const MODELS = fileURLToPath(new URL('../../models/', import.meta.url));

test('demo page loads the default model and answers a chat message', { timeout: 900_000 }, async () => {
  assert.ok(existsSync(`${MODELS}/SmolLM2-135M-Instruct.Q4_1.gguf`), 'run scripts/fetch-model.sh first');
  const server = await serve(WWW, { '/models/': MODELS });
  const browser = await chromium.launch(CHROMIUM);
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${server.url}?max_tokens=4`);
    await page.click('#load');
    await page.waitForFunction(() => ['ready', 'error'].includes(document.getElementById('chat').dataset.state), null, { timeout: 300_000 });
    assert.match(await page.textContent('#model-status'), /^Loaded on /);

    const ask = async (text) => {
      await page.fill('#message', text);
      await page.click('#send');
      await page.waitForFunction(() => ['answered', 'error'].includes(document.getElementById('chat').dataset.state), null, { timeout: 400_000 });
      const reply = await page.textContent('#reply');
      assert.equal(await page.evaluate(() => document.getElementById('chat').dataset.state), 'answered', reply);
      return { reply, stats: await page.textContent('#stats') };
    };
    const first = await ask('What is the capital of France?');
    assert.ok(first.reply.trim().length > 0, 'an answer was streamed');
    const m1 = first.stats.match(/(\d+) prompt tokens \((\d+) cached\), (\d+) generated/);
    assert.ok(m1, first.stats);
    assert.equal(Number(m1[3]), 4, 'max_tokens=4 generated 4 tokens');
    const second = await ask('And of Italy?');
    const m2 = second.stats.match(/(\d+) prompt tokens \((\d+) cached\)/);
    assert.ok(m2, second.stats);
    assert.ok(Number(m2[2]) >= Number(m1[1]), `second turn reuses the first prompt: ${second.stats}`);
    assert.deepEqual(errors, []);
    await page.screenshot({ path: 'target/demo-chat.png', fullPage: true });
  } finally {
    await browser.close();
    server.close();
  }
});
