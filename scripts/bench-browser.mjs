// The demo's in-browser benchmark (?bench) with the default model in headless Chromium (SwiftShader
// WebGPU): prints its figures as JSON, and writes the same requests to
// target/bench-requests.jsonl, for the native figures on the same prompts:
//   hotprefix session --requests target/bench-requests.jsonl --context 4096
// Usage: node scripts/bench-browser.mjs   (builds the package with scripts/pack.sh if it is not built;
// rebuild it after a change)
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { prepare } from './prepare.mjs';
import { serve, CHROMIUM } from '../tests/page/serve.mjs';
import { benchRequests } from '../www/bench.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const chromium = await prepare();
mkdirSync(`${ROOT}/target`, { recursive: true });
writeFileSync(`${ROOT}/target/bench-requests.jsonl`, benchRequests(4096).map(({ messages, max_tokens }) => JSON.stringify({ messages, max_tokens })).join('\n') + '\n');

const server = await serve(`${ROOT}/www`, { '/models/': `${ROOT}/models`, '/pkg/': `${ROOT}/target/npm/hotprefix` });
const browser = await chromium.launch(CHROMIUM);
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}?bench&kv_mb=128`);
  await page.waitForFunction(() => document.body.dataset.bench, null, { timeout: 3_600_000, polling: 1000 });
  console.log(JSON.stringify(await page.evaluate(() => window.benchResults), null, 2));
} finally {
  await browser.close();
  server.close();
}
