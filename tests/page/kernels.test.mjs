// The kernel-check page (www/kernels.html), as a developer uses it: open it, let it run every
// kernel check on the browser's WebGPU, and read the table it shows.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve, CHROMIUM } from './serve.mjs';

const WWW = fileURLToPath(new URL('../../www/', import.meta.url));
const PKG = fileURLToPath(new URL('../../target/npm/hotprefix/', import.meta.url));

test('the kernel-check page runs every kernel check and shows all passing', { timeout: 300_000 }, async () => {
  const server = await serve(WWW, { '/pkg/': PKG });
  const browser = await chromium.launch(CHROMIUM);
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${server.url}kernels.html`);
    await page.click('#run');
    await page.waitForFunction(() => document.body.dataset.state, null, { timeout: 280_000 });
    const state = await page.evaluate(() => document.body.dataset.state);
    const status = await page.textContent('#status');
    assert.equal(state, 'passed', `page says: ${status}`);
    const rows = await page.$$eval('#results tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
    const kernels = new Set(rows.map((r) => r[0].split(' ')[0]));
    for (const k of ['matmul', 'matvec', 'rmsnorm', 'rope', 'swiglu', 'embed', 'argmax', 'kv_write+attention', 'rope+kv_write+attention', 'kv_copy']) {
      assert.ok(kernels.has(k), `no row for ${k}`);
    }
    for (const f of ['F32', 'F16', 'Q8_0', 'Q4_1']) {
      assert.ok(rows.some((r) => r[0].startsWith(`matmul ${f} `)), `no matmul row for ${f}`);
    }
    assert.ok(rows.every((r) => r[1] === 'pass'), JSON.stringify(rows.filter((r) => r[1] !== 'pass')));
    assert.ok(rows.some((r) => /GFLOP\/s|GB\/s/.test(r[4])), 'no speed figures shown');
    assert.match(status, /checks passed on /);
    assert.deepEqual(errors, []);
    await page.screenshot({ path: 'target/page-test/kernels.png', fullPage: true });
  } finally {
    await browser.close();
    server.close();
  }
});
