// Demo page: runs hotprefix's kernel checks in this browser and shows the results.
import init, { runKernelChecks, Engine } from './pkg/hotprefix.js';

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

// Chat with the default model, served beside the page (scripts/demo.sh links models/ here).
const MODEL_URL = './models/SmolLM2-135M-Instruct.Q4_1.gguf';
const loadButton = document.getElementById('load');
const sendButton = document.getElementById('send');
const modelStatus = document.getElementById('model-status');
const reply = document.getElementById('reply');
const stats = document.getElementById('stats');
const chatState = (s) => { document.getElementById('chat').dataset.state = s; };
let engine = null;
const history = [{ role: 'system', content: 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' }];

async function fetchWithProgress(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} (run scripts/demo.sh, which fetches the model)`);
  const total = Number(res.headers.get('content-length')) || 0;
  const reader = res.body.getReader();
  const parts = [];
  let got = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    got += value.length;
    modelStatus.textContent = `Downloading… ${(got / 1e6).toFixed(1)}${total ? ` of ${(total / 1e6).toFixed(1)}` : ''} MB`;
  }
  const bytes = new Uint8Array(got);
  let at = 0;
  for (const p of parts) { bytes.set(p, at); at += p.length; }
  return bytes;
}

async function loadModel() {
  loadButton.disabled = true;
  chatState('loading');
  try {
    const bytes = await fetchWithProgress(MODEL_URL);
    modelStatus.textContent = 'Uploading to the GPU…';
    // The engine reads the header, then one tensor at a time; context window 2048, KV pool 64 MiB.
    engine = await Engine.load((offset, length) => bytes.subarray(offset, offset + length), bytes.length, 2048, 64);
    modelStatus.textContent = `Loaded on ${engine.adapter()}`;
    sendButton.disabled = false;
    chatState('ready');
  } catch (e) {
    modelStatus.textContent = `${e.name}: ${e.message}`;
    loadButton.disabled = false;
    chatState('error');
  }
}

async function send() {
  const text = document.getElementById('message').value.trim();
  if (!text || !engine) return;
  sendButton.disabled = true;
  chatState('generating');
  history.push({ role: 'user', content: text });
  reply.textContent = '';
  try {
    const maxTokens = Number(new URLSearchParams(location.search).get('max_tokens') ?? 128);
    const request = { messages: history, max_tokens: maxTokens, temperature: 0 };
    const r = await engine.chat(JSON.stringify(request), (piece) => { reply.textContent += piece; });
    history.push({ role: 'assistant', content: r.text });
    const u = r.usage;
    stats.textContent = `${u.prompt_tokens} prompt tokens (${u.prompt_tokens_details.cached_tokens} cached), ` +
      `${u.completion_tokens} generated · first token ${r.timings.ttft_ms.toFixed(0)} ms · ` +
      `${r.timings.decode_tok_s.toFixed(1)} tok/s · ${r.finish_reason}`;
    const d = r.cache.diverged_at;
    if (d) stats.textContent += ` · prompt diverged from the cache at token ${d.token} (message ${d.message}, ${d.role}, character ${d.char})`;
    for (const w of r.cache.warnings) stats.textContent += ` · ${w.code}: ${w.detail}`;
    chatState('answered');
  } catch (e) {
    history.pop();
    reply.textContent = `${e.name}: ${e.message}`;
    chatState('error');
  }
  sendButton.disabled = false;
}

await init();
button.addEventListener('click', run);
loadButton.addEventListener('click', loadModel);
sendButton.addEventListener('click', send);
