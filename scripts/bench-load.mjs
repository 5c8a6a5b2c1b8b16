// Loads the default model through the npm package (target/npm/hotprefix, from scripts/pack.sh) in
// headless Chromium (SwiftShader WebGPU) and prints the load's figures as JSON: time to download,
// upload and ready; a second load from Cache Storage; the wasm heap after the load; and the
// browser's memory (PSS summed over every Chromium process, sampled every 50 ms) before, at its
// peak during, and after the load. SwiftShader keeps "GPU" buffers in the GPU process's memory,
// so the weights on the GPU are counted too.
// Usage: node scripts/bench-load.mjs [--worker=false] [--kv-budget-mb=N] [--model=PATH]   (installs
// what it needs, and builds the package with scripts/pack.sh if it is not built). PATH is under
// models/ (default: the default model), e.g. --model=formats/smollm2-BF16.gguf from
// scripts/make-formats.sh.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { prepare } from './prepare.mjs';
import { serve, CHROMIUM } from '../tests/page/serve.mjs';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const chromium = await prepare();
const MODEL = process.argv.find((a) => a.startsWith('--model='))?.slice('--model='.length) ?? 'SmolLM2-135M-Instruct.Q4_1.gguf';
const worker = !process.argv.includes('--worker=false');
const kvBudgetMB = Number(process.argv.find((a) => a.startsWith('--kv-budget-mb='))?.split('=')[1]) || undefined;
const mb = (b) => Math.round(b / 1048576);

// PSS in bytes of every running Chromium process, by kind (--type=renderer, gpu-process, …).
function chromiumMemory() {
  const out = { total: 0 };
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmd.startsWith('/usr/lib/chromium/chromium')) continue;
      const pss = Number(/^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0) * 1024;
      const kind = /--type=([\w-]+)/.exec(cmd)?.[1] ?? 'browser';
      out[kind] = (out[kind] ?? 0) + pss;
      out.total += pss;
    } catch { /* the process ended */ }
  }
  return out;
}

const page = `<!doctype html><meta charset="utf-8"><script type="module">
  import * as hotprefix from '/package/index.js';
  window.hotprefix = hotprefix;
  document.title = 'ready';
</script>`;
const server = await serve(join(ROOT, 'target/npm'), { '/package/': join(ROOT, 'target/npm/hotprefix'), '/models/': join(ROOT, 'models') },
  { '/bench.html': (req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page) });
const browser = await chromium.launch(CHROMIUM);
try {
  const p = await browser.newPage();
  await p.goto(`${server.url}bench.html`);
  await p.waitForFunction(() => document.title === 'ready');
  await new Promise((r) => setTimeout(r, 1000));
  const before = chromiumMemory();
  let peak = before;
  const sampler = setInterval(() => { const m = chromiumMemory(); if (m.total > peak.total) peak = m; }, 50);
  const load = () => p.evaluate(async ([url, worker, kvBudgetMB]) => {
    const t0 = performance.now();
    const marks = {};
    const e = await window.hotprefix.createEngine({ model: url, worker, kvBudgetMB, onProgress: (q) => { marks[q.phase] ??= performance.now() - t0; marks.cached ||= q.cached === true; } });
    const ms = performance.now() - t0;
    const info = { ms, marks, wasmHeapBytes: e.wasmHeapBytes, adapter: e.adapter };
    window.engines = [...(window.engines ?? []), e];
    return info;
  }, [`/models/${MODEL}`, worker, kvBudgetMB]);
  const first = await load();
  clearInterval(sampler);
  await new Promise((r) => setTimeout(r, 2000));
  const after = chromiumMemory();
  if (after.total > peak.total) peak = after;
  await p.evaluate(() => Promise.all(window.engines.map((e) => e.unload())));
  const second = await load();
  const file = statSync(join(ROOT, 'models', MODEL)).size;
  const fig = {
    model: MODEL, worker, kv_budget_mb: kvBudgetMB ?? 'default (512)', file_mb: mb(file), adapter: first.adapter,
    first_load: { ms: Math.round(first.ms), download_ms: Math.round(first.marks.upload), cached: first.marks.cached },
    second_load_from_cache_storage: { ms: Math.round(second.ms), cached: second.marks.cached },
    wasm_heap_mb: mb(first.wasmHeapBytes),
    pss_mb: { before: mb(before.total), peak: mb(peak.total), after: mb(after.total), peak_over_before: mb(peak.total - before.total) },
    peak_by_process_mb: Object.fromEntries(Object.entries(peak).filter(([k]) => k !== 'total').map(([k, v]) => [k, mb(v)])),
  };
  console.log(JSON.stringify(fig, null, 2));
} finally {
  await browser.close();
  server.close();
}
