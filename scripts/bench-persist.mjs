// What `engine.cache.persist()` costs with a large resident cache: loads the KV-heavy tiny model
// (scripts/make-tiny-model.sh …/tiny-kv-heavy.gguf kv-heavy: 32 layers of one 128-wide head,
// 16 KiB of K/V a position, little compute) through the npm package in headless Chromium
// (SwiftShader WebGPU), fills a KV budget with distinct prompts, then persists it to OPFS and
// prints, as JSON: the bytes saved, the persist time, and the wasm heap before and after (linear
// memory only grows, so its growth is the persist's peak).
// Usage: node scripts/bench-persist.mjs [--kv-budget-mb=512] [--package=DIR]
//   --package: another build of the package (default target/npm/hotprefix, built by pack.sh when
//   missing), e.g. an older one to compare with.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { prepare, ROOT } from './prepare.mjs';

const arg = (name) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
const kvBudgetMB = Number(arg('kv-budget-mb') ?? 512);
const pkg = resolve(arg('package') ?? join(ROOT, 'target/npm/hotprefix'));
const MODEL = join(ROOT, 'models/tiny-kv-heavy.gguf');
const chromium = await prepare({ model: false, pkg });
if (!existsSync(MODEL)) execFileSync('bash', ['scripts/make-tiny-model.sh', MODEL, 'kv-heavy'], { cwd: ROOT, stdio: ['ignore', 2, 'inherit'] });
const { serve, CHROMIUM } = await import('../tests/page/serve.mjs');

const page = `<!doctype html><meta charset="utf-8"><script type="module">
  import * as hotprefix from '/package/index.js';
  window.hotprefix = hotprefix;
  document.title = 'ready';
</script>`;
const server = await serve(join(ROOT, 'target'), { '/package/': pkg, '/models/': join(ROOT, 'models') },
  { '/bench.html': (req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page) });
const browser = await chromium.launch(CHROMIUM);
try {
  const p = await browser.newPage();
  await p.goto(`${server.url}bench.html`);
  await p.waitForFunction(() => document.title === 'ready');
  const fig = await p.evaluate(async (kvBudgetMB) => {
    const mib = (b) => Math.round((b / 1048576) * 10) / 10;
    const e = await window.hotprefix.createEngine({ model: '/models/tiny-kv-heavy.gguf', kvBudgetMB });
    await e.cache.forget();
    const t0 = performance.now();
    // Distinct prompts of ~1,000 tokens (the tiny vocabulary: about one token a character)
    // until the pool is full.
    const words = ['lock', 'ship', 'canal', 'water', 'gate', 'river', 'lake', 'dam', 'tide', 'cargo'];
    let stats = await e.cache.stats();
    let need = 1;
    for (let d = 0; stats.pages_free >= need; d++) {
      const text = Array.from({ length: 170 }, (_, i) => words[(i * 7 + d * 3 + (i >> (d % 5))) % words.length]).join(' ');
      const r = await e.chat.completions.create({ messages: [{ role: 'user', content: `${d}: ${text}` }], max_tokens: 0 });
      stats = await e.cache.stats();
      // Stop before a request would evict: the pool then holds every prompt computed.
      need = Math.max(need, Math.ceil(r.usage.prompt_tokens / stats.page_size) + 1);
    }
    const fillMs = performance.now() - t0;
    const heapBefore = stats.wasm_heap_bytes ?? null;
    const t1 = performance.now();
    const persisted = await e.cache.persist();
    const persistMs = performance.now() - t1;
    const after = await e.cache.stats();
    await e.cache.forget();
    await e.unload();
    return {
      adapter: e.adapter, kv_budget_mb: kvBudgetMB, pages_used: stats.pages_used, pages_total: stats.pages_total,
      resident_mib: mib(stats.bytes_used), prefixes: stats.prefixes.length, fill_s: Math.round(fillMs / 100) / 10,
      saved_mib: mib(persisted.bytes), persist_s: Math.round(persistMs / 100) / 10,
      wasm_heap_mib: { before_persist: heapBefore && mib(heapBefore), after_persist: after.wasm_heap_bytes && mib(after.wasm_heap_bytes) },
    };
  }, kvBudgetMB);
  fig.package = pkg;
  console.log(JSON.stringify(fig, null, 2));
} finally {
  await browser.close();
  server.close();
}
