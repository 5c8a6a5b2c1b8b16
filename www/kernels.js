// Kernel checks page: runs hotprefix's kernel checks in this browser and shows the results.
// (A developer page: it imports the package's wasm module directly, not its public API.)
import init, { runKernelChecks } from './pkg/wasm/hotprefix.js';

const status = document.getElementById('status');
const table = document.getElementById('results');
const body = table.querySelector('tbody');
const button = document.getElementById('run');

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
}

async function run() {
  button.disabled = true;
  body.replaceChildren();
  table.hidden = true;
  if (!navigator.gpu) {
    status.textContent = 'This browser has no WebGPU (navigator.gpu is missing).';
    document.body.dataset.state = 'error';
    button.disabled = false;
    return;
  }
  status.textContent = 'Running kernel checks…';
  try {
    const { adapter, results } = await runKernelChecks(3);
    let passed = 0;
    for (const r of results) {
      const row = body.insertRow();
      cell(row, r.name);
      cell(row, r.ok ? 'pass' : `FAIL: ${r.error}`, r.ok ? 'pass' : 'fail');
      cell(row, r.ok ? r.max_err.toExponential(2) : '', 'num');
      cell(row, r.ms !== undefined ? r.ms.toFixed(3) : '', 'num');
      cell(row, r.rate !== undefined ? `${r.rate.toFixed(3)} ${r.unit}` : '', 'num');
      if (r.ok) passed++;
    }
    table.hidden = false;
    status.textContent = `${passed} of ${results.length} checks passed on ${adapter}`;
    document.body.dataset.state = passed === results.length ? 'passed' : 'failed';
  } catch (e) {
    status.textContent = `${e.name}: ${e.message}`;
    document.body.dataset.state = 'error';
  }
  button.disabled = false;
}

await init();
button.addEventListener('click', run);
