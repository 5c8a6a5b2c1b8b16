// The demo: a document, questions about it, and what the KV cache did. Built only on the npm
// package's public API (./pkg is the built package: scripts/demo.sh links it here).
//
// URL parameters: ?model=tiny (the tiny test model, for tests) or ?model=URL (any GGUF file the
// page may fetch, in any supported weight format, e.g. ./models/formats/tiny-Q4_K_M.gguf; the
// model picker under the header chooses another at run time: a URL, or a file opened or dropped),
// ?max_tokens=N (default 200),
// ?kv_mb=N (KV budget, default 128), ?bench (run the benchmark after loading).
import { createEngine, inspectModel, canonicalJSON, WebGPUUnavailableError } from './pkg/index.js';
import { benchRequests } from './bench.js';

const params = new URLSearchParams(location.search);
const MODELS = { default: './models/SmolLM2-135M-Instruct.Q4_1.gguf', tiny: './models/tiny-llama.gguf' };
const MODEL_PARAM = params.get('model') ?? 'default';
const MODEL_URL = MODELS[MODEL_PARAM] ?? (MODEL_PARAM.endsWith('.gguf') ? MODEL_PARAM : MODELS.default);
const MAX_TOKENS = Number(params.get('max_tokens') ?? 200);
const KV_MB = Number(params.get('kv_mb') ?? 128);

const $ = (id) => document.getElementById(id);
const state = (s) => { document.body.dataset.state = s; };
const fmt = (n, d = 0) => Number(n).toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const mb = (b) => `${fmt(b / 1048576, 1)} MB`;

let engine = null;
const BUTTONS = ['send', 'prewarm', 'wrong', 'new-chat', 'forget', 'extract']; // enabled while a model is loaded
let history = [];       // this chat's turns after the system message: append-only
let running = null;     // the AbortController of the request in flight
let lastDiagnosis = null;
let candidate = null;   // the model file the picker checked and this build runs: {source, label}
let checks = 0;         // files checked so far: a summary shows only the latest one's

// The layout the cache rewards: what never changes first (instructions, then the document),
// what changes (the questions) after it.
function systemMessage() {
  return { role: 'system', content: `${$('system').value.trim()}\n\n<document>\n${$('doc').value.trim()}\n</document>` };
}

// ---- loading ---------------------------------------------------------------------------------

function progress({ phase, loaded, total, cached }) {
  const what = { download: cached ? 'Reading the model from this browser\'s cache' : 'Downloading the model', upload: 'Uploading the weights to the GPU', ready: 'Ready' }[phase];
  $('load-status').textContent = total ? `${what}: ${mb(loaded)} of ${mb(total)}` : `${what}: ${mb(loaded)}`;
  $('progress').value = total ? loaded / total : 0;
}

const openModel = (model) => createEngine({ model, onProgress: progress, kvBudgetMB: KV_MB, contextSize: 4096, restoreCache: true });

async function load() {
  state('loading');
  try {
    engine = await openModel(MODEL_URL);
  } catch (e) {
    state(e instanceof WebGPUUnavailableError ? 'no-webgpu' : 'error');
    $('load-status').textContent = e instanceof WebGPUUnavailableError
      ? `This browser cannot run the model: no WebGPU (${e.reason}). ${e.message}`
      : `Could not load the model: ${e.name}: ${e.message}`;
    return;
  }
  loaded();
  await showCache();
  const asked = checks;
  inspectModel(MODEL_URL).then((s) => { if (checks === asked) showSummary(s, engine.model, false); }).catch(() => {});
  if (params.has('bench')) await bench();
}

// After a load: the status line (and what the saved cache gave back), the buttons.
function loaded() {
  const r = engine.cache.restored;
  let note = '';
  if (r?.warning) note = ` The saved cache was not used: ${r.warning.replace(/^the saved cache was not used: /, '')}`;
  else if (r) note = ` Restored ${fmt(r.prefixes)} cached prefix${r.prefixes === 1 ? '' : 'es'} (${fmt(r.tokens)} tokens, ${mb(r.bytes)}) saved before the last reload.`;
  $('load-status').textContent = `Loaded ${engine.model} on ${engine.adapter}.${note}`;
  $('load-status').dataset.restored = r ? (r.warning ? 'warning' : 'yes') : 'none';
  $('model-name').textContent = engine.model;
  for (const id of BUTTONS) $(id).disabled = false;
  state('ready');
}

// ---- the model picker: another GGUF file, checked from its header before it loads --------------

const plural = (n, w) => `${fmt(n)} ${w}${n === 1 ? '' : 's'}`;

// The file's summary (inspectModel's) under the picker; `candidate`: offer to load it.
function showSummary(s, label, offer = true) {
  const el = $('model-summary');
  el.replaceChildren();
  el.dataset.runs = s.runs ? 'yes' : 'no';
  const verdict = Object.assign(document.createElement('p'), { className: 'verdict' });
  verdict.textContent = s.runs ? `${label}: this build runs it.` : `${label}: this build does not run it. ${s.refused}`;
  const dl = document.createElement('dl');
  const row = (k, v) => { if (v == null || v === '') return; dl.append(Object.assign(document.createElement('dt'), { textContent: k }), Object.assign(document.createElement('dd'), { textContent: v })); };
  row('name', s.name);
  row('architecture', s.architecture);
  row('parameters', `${fmt(s.parameters / 1e6, 1)} M in ${plural(s.tensors, 'tensor')}`);
  row('weights', s.formats.map((f) => `${f.type} × ${f.tensors}`).join(', '));
  row('size', mb(s.bytes));
  row('context', s.context == null ? null : `${fmt(s.context)} positions`);
  row('tokenizer', s.tokenizer == null ? null : `${s.tokenizer}${s.pre_tokenizer ? ` (${s.pre_tokenizer})` : ''}`);
  row('chat template', s.chat_template);
  row('features', s.features.join(', '));
  el.append(verdict, dl);
  el.dataset.architecture = s.architecture ?? '';
  $('model-load').hidden = !(offer && s.runs);
}

async function check(source, label) {
  const mine = ++checks;
  candidate = null;
  $('model-load').hidden = true;
  const el = $('model-summary');
  delete el.dataset.runs;
  el.textContent = `Reading the header of ${label}…`;
  try {
    const s = await inspectModel(source);
    if (mine !== checks) return;
    showSummary(s, label);
    if (s.runs) candidate = { source, label };
  } catch (e) {
    if (mine !== checks) return;
    el.dataset.runs = 'no';
    el.textContent = '';
    el.append(Object.assign(document.createElement('p'), { className: 'verdict', textContent: `${label}: ${e.name}: ${e.message}` }));
  }
}

// Loads the checked model; the current one keeps answering until the new one is ready, and stays
// if the new one fails to load.
async function switchModel() {
  if (!candidate || running) return;
  const { source, label } = candidate;
  $('model-load').hidden = true;
  for (const id of BUTTONS) $(id).disabled = true;
  state('loading');
  try {
    const next = await openModel(source);
    const old = engine;
    engine = next;
    await old?.unload().catch(() => {});
    newChat();
    lastDiagnosis = null;
    $('diagnosis').textContent = 'No miss yet.';
    candidate = null;
    loaded();
  } catch (e) {
    const el = $('model-summary');
    el.dataset.runs = 'no';
    el.append(Object.assign(document.createElement('p'), { className: 'verdict', textContent: `Could not load ${label}: ${e.name}: ${e.message}` }));
    if (engine) {
      $('load-status').textContent = `Still on ${engine.model}: ${label} did not load.`;
      for (const id of BUTTONS) $(id).disabled = false;
      state('ready');
    } else {
      state('error');
    }
  }
  await showCache();
}

function pickFile(f) {
  if (!f) return;
  if (!/\.gguf$/i.test(f.name)) {
    $('model-summary').dataset.runs = 'no';
    $('model-summary').textContent = `${f.name}: not a .gguf file`;
    return;
  }
  check(f, f.name);
}

// ---- chat ------------------------------------------------------------------------------------

function bubble(role, text = '') {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  $('log').append(div);
  $('log').scrollTop = $('log').scrollHeight;
  return div;
}

function meta(div, r) {
  const u = r.usage;
  const t = r.hotprefix.timings;
  const m = document.createElement('span');
  m.className = 'meta';
  m.dataset.prompt = u.prompt_tokens;
  m.dataset.cached = u.prompt_tokens_details.cached_tokens;
  m.dataset.ttft = t.ttft_ms.toFixed(1);
  m.innerHTML = `${fmt(u.prompt_tokens)} prompt tokens · <b>${fmt(u.prompt_tokens_details.cached_tokens)} cached</b> · `
    + `first token ${fmt(t.ttft_ms)} ms · ${fmt(t.decode_tok_s, 1)} tok/s · ${u.completion_tokens} generated`;
  div.append(m);
}

// Sends `messages` (streamed into a new bubble); returns the usage chunk, or null when stopped.
// `extra`: more request fields (response_format).
async function complete(messages, { maxTokens = MAX_TOKENS, label, extra = {} } = {}) {
  const div = bubble('assistant');
  if (label) div.dataset.label = label;
  running = new AbortController();
  $('stop').disabled = false;
  state('generating');
  let text = '';
  let last = null;
  let finish = null; // the usage chunk comes last, with no choices: the finish reason is the chunk before
  try {
    const stream = await engine.chat.completions.create({
      messages, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, signal: running.signal, ...extra,
    });
    for await (const chunk of stream) {
      const piece = chunk.choices[0]?.delta?.content;
      if (piece) { text += piece; div.textContent = text; $('log').scrollTop = $('log').scrollHeight; }
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) last = chunk;
    }
    meta(div, last);
    showDiagnosis(last, messages);
    return { text, result: last, finish };
  } catch (e) {
    if (e.name === 'AbortError') {
      div.append(Object.assign(document.createElement('span'), { className: 'meta', textContent: 'stopped' }));
      return null;
    }
    div.classList.add('error');
    div.textContent = `${e.name}: ${e.message}`;
    throw e;
  } finally {
    running = null;
    $('stop').disabled = true;
    await showCache();
  }
}

async function send(ev) {
  ev?.preventDefault();
  const q = $('message').value.trim();
  if (!q || !engine || running) return;
  $('message').value = '';
  bubble('user', q);
  const messages = [systemMessage(), ...history, { role: 'user', content: q }];
  const done = await complete(messages).catch(() => null);
  if (done) {
    history.push({ role: 'user', content: q }, { role: 'assistant', content: done.text });
    await persist();
  }
  state('ready');
}

async function persist() {
  try {
    await engine.cache.persist();
  } catch (e) {
    $('saved').textContent = `Saving the cache failed: ${e.message}`;
  }
  await showCache();
}

// ---- the cache panel -------------------------------------------------------------------------

async function showCache() {
  if (!engine) return;
  const s = await engine.cache.stats();
  $('budget').textContent = `KV budget: ${mb(s.bytes_used)} of ${mb(s.bytes_total)} in use (${fmt(s.pages_used)} of ${fmt(s.pages_total)} pages of ${s.page_size} tokens)`
    + (s.evicted_pages ? `; ${fmt(s.evicted_pages)} pages evicted so far (least recently used first)` : '');
  const body = $('prefixes').tBodies[0];
  body.replaceChildren();
  for (const [i, p] of s.prefixes.entries()) {
    const row = body.insertRow();
    row.insertCell().textContent = i === 0 ? 'most recent' : `#${i + 1}${p.salt ? ` (salt ${p.salt})` : ''}`;
    for (const v of [p.tokens, p.pages, p.last_use]) Object.assign(row.insertCell(), { className: 'num', textContent: fmt(v) });
  }
  if (!s.prefixes.length) body.insertRow().insertCell().textContent = 'Nothing resident yet.';
  $('saved').textContent = s.saved_bytes
    ? `Saved in this browser (OPFS): ${mb(s.saved_bytes)}; a reload restores it.`
    : 'Nothing saved in this browser yet.';
}

const TITLES = {
  dynamic_before_static: 'Dynamic content before static content.',
  history_rewritten: 'Earlier turns were rewritten.',
  json_serialization_changed: 'The same JSON was serialised differently (use canonicalJSON()).',
};

function showDiagnosis(chunk, messages) {
  const c = chunk.hotprefix.cache;
  const d = c.diverged_at;
  if (!d && !c.warnings.length) return;
  const el = $('diagnosis');
  el.replaceChildren();
  if (d) {
    const p = document.createElement('p');
    const where = d.message == null ? 'in the chat template\'s framing' : `in message ${d.message} (${d.role}), ${fmt(d.char)} characters into it`;
    p.innerHTML = `<span class="where">The prompt stopped matching the cache at token ${fmt(d.token)}, ${where}.</span> `
      + `The cache had <code></code>; this request has <code></code>. `
      + `Tokens 0–${fmt(d.token - 1)} were reused; the ${fmt(chunk.usage.prompt_tokens - d.token)} after were computed again.`;
    const [was, now] = p.querySelectorAll('code');
    was.textContent = d.resident;
    now.textContent = d.new;
    el.append(p);
    el.dataset.role = d.role ?? '';
    el.dataset.message = d.message ?? '';
  }
  if (c.warnings.length) {
    const ul = document.createElement('ul');
    for (const w of c.warnings) {
      const li = document.createElement('li');
      li.dataset.code = w.code;
      li.append(Object.assign(document.createElement('b'), { textContent: `${TITLES[w.code] ?? w.code} ` }), w.detail);
      ul.append(li);
    }
    el.append(ul);
  }
  lastDiagnosis = { diverged_at: d, warnings: c.warnings, messages: messages.length };
}

// ---- actions ---------------------------------------------------------------------------------

async function prewarm() {
  $('prewarm').disabled = true;
  state('generating');
  try {
    const r = await engine.cache.prewarm([systemMessage()]);
    $('doc-stats').textContent = `Prewarmed: ${fmt(r.prompt_tokens)} tokens (${fmt(r.cached_tokens)} were already cached).`;
    await persist();
  } catch (e) {
    $('doc-stats').textContent = `${e.name}: ${e.message}`;
  } finally {
    $('prewarm').disabled = false;
    state('ready');
    await showCache();
  }
}

// The classic mistake: the user's name and the time first, the document after. Two users, one
// minute apart: the second request misses from the name on, and the panel says so.
async function wrongLayout() {
  const q = 'Summarise the document in one sentence.';
  for (const [name, time] of [['Ada', '09:14'], ['Grace', '09:15']]) {
    const system = { role: 'system', content: `You are talking to ${name}. The time is ${time}.\n${systemMessage().content}` };
    bubble('user', `[wrong layout, as ${name} at ${time}] ${q}`);
    const done = await complete([system, { role: 'user', content: q }], { maxTokens: Math.min(MAX_TOKENS, 24), label: 'wrong-layout' }).catch(() => null);
    if (!done) break;
  }
  state('ready');
}

// "Extract as JSON": the document's facts, held to the schema while they are generated. The
// system prompt and document stay first (cached); the request and schema come last.
const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 80 },
    length_km: { type: 'number', minimum: 0 },
    locks: { type: 'integer', minimum: 0 },
    opening_hours: { type: 'string', pattern: '^[0-2][0-9]:[0-5][0-9]-[0-2][0-9]:[0-5][0-9]$' },
    fees: { type: 'array', maxItems: 4, items: { type: 'object', properties: { who: { type: 'string', maxLength: 40 }, euros: { type: 'number' } }, required: ['who', 'euros'], additionalProperties: false } },
  },
  required: ['name', 'length_km', 'locks', 'opening_hours', 'fees'],
  additionalProperties: false,
};

async function extract() {
  if (!engine || running) return;
  let schema;
  try {
    schema = JSON.parse($('schema').value);
  } catch (e) {
    bubble('assistant', `The schema is not JSON: ${e.message}`).classList.add('error');
    return;
  }
  const q = 'Extract the facts of the document as JSON.';
  bubble('user', `[as JSON] ${q}`);
  const response_format = { type: 'json_schema', json_schema: { name: 'facts', strict: true, schema } };
  const done = await complete([systemMessage(), { role: 'user', content: q }], { maxTokens: Math.max(MAX_TOKENS, 160), label: 'json', extra: { response_format } }).catch(() => null);
  if (done) {
    const last = $('log').lastElementChild;
    try {
      last.firstChild.textContent = JSON.stringify(JSON.parse(done.text), null, 2);
      last.dataset.json = 'valid';
    } catch {
      last.dataset.json = done.finish === 'length' ? 'cut' : 'invalid';
    }
  }
  state('ready');
}

function newChat() {
  history = [];
  $('log').replaceChildren();
}

function dropFile(ev) {
  ev.preventDefault();
  $('doc').classList.remove('drop');
  const f = ev.dataTransfer?.files?.[0];
  if (!f) return;
  if (!/\.(txt|md|markdown)$/i.test(f.name) && !f.type.startsWith('text/')) {
    $('doc-stats').textContent = `${f.name}: only .txt and .md files`;
    return;
  }
  f.text().then((t) => { $('doc').value = t; contextChanged(); });
}

function contextChanged() {
  newChat(); // a new document starts a new conversation; its prefix is computed once
  $('doc-stats').textContent = `${fmt($('doc').value.length)} characters`;
}

// ---- benchmark (?bench) ----------------------------------------------------------------------

async function bench() {
  $('bench').hidden = false;
  const rows = $('bench-table').tBodies[0];
  const add = (k, v) => { const r = rows.insertRow(); r.insertCell().textContent = k; Object.assign(r.insertCell(), { className: 'num', textContent: v }); };
  const ask = (messages, max_tokens) => engine.chat.completions.create({ messages, max_tokens });
  const figures = { adapter: engine.adapter, model: engine.model };
  try {
    await engine.cache.clear();
    const [cold, warm, decode] = benchRequests(engine.contextSize);
    // Prefill: the document cold, one token out; then another question on the same document.
    const p = await ask(cold.messages, cold.max_tokens);
    figures.prefill_tokens = p.usage.prompt_tokens;
    figures.prefill_tok_s = p.usage.prompt_tokens / (p.hotprefix.timings.prefill_ms / 1000);
    figures.ttft_cold_ms = p.hotprefix.timings.ttft_ms;
    const w = await ask(warm.messages, warm.max_tokens);
    figures.ttft_warm_ms = w.hotprefix.timings.ttft_ms;
    figures.warm_cached_tokens = w.usage.prompt_tokens_details.cached_tokens;
    // Decode after a short prompt.
    const d = await ask(decode.messages, decode.max_tokens);
    figures.decode_tok_s = d.hotprefix.timings.decode_tok_s;
    figures.decode_tokens = d.usage.completion_tokens;
    add('prefill', `${fmt(figures.prefill_tok_s, 1)} tok/s (${fmt(figures.prefill_tokens)} tokens)`);
    add('decode', `${fmt(figures.decode_tok_s, 1)} tok/s (${figures.decode_tokens} tokens)`);
    add('time to first token, cold', `${fmt(figures.ttft_cold_ms)} ms`);
    add('time to first token, warm (document cached)', `${fmt(figures.ttft_warm_ms)} ms (${fmt(figures.warm_cached_tokens)} tokens cached)`);
    add('warm ÷ cold', fmt(figures.ttft_warm_ms / figures.ttft_cold_ms, 3));
    add('adapter', engine.adapter);
  } catch (e) {
    figures.error = `${e.name}: ${e.message}`;
    add('error', figures.error);
  }
  window.benchResults = figures;
  document.body.dataset.bench = figures.error ? 'error' : 'done';
  await showCache();
}

// ---- start -----------------------------------------------------------------------------------

$('ask').addEventListener('submit', send);
$('model-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const url = $('model-url').value.trim();
  if (url) check(new URL(url, location.href).href, url);
});
$('model-file').addEventListener('change', (e) => pickFile(e.target.files?.[0]));
$('model-load').addEventListener('click', switchModel);
$('model').addEventListener('dragover', (e) => { e.preventDefault(); $('model').classList.add('drop'); });
$('model').addEventListener('dragleave', () => $('model').classList.remove('drop'));
$('model').addEventListener('drop', (e) => { e.preventDefault(); $('model').classList.remove('drop'); pickFile(e.dataTransfer?.files?.[0]); });
$('message').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) send(e); });
$('stop').addEventListener('click', () => running?.abort());
$('extract').addEventListener('click', extract);
$('prewarm').addEventListener('click', prewarm);
$('wrong').addEventListener('click', wrongLayout);
$('new-chat').addEventListener('click', newChat);
$('forget').addEventListener('click', async () => { await engine.cache.forget(); await showCache(); });
$('system').addEventListener('change', contextChanged);
$('doc').addEventListener('change', contextChanged);
$('doc').addEventListener('dragover', (e) => { e.preventDefault(); $('doc').classList.add('drop'); });
$('doc').addEventListener('dragleave', () => $('doc').classList.remove('drop'));
$('doc').addEventListener('drop', dropFile);

$('system').value = 'You are a helpful assistant. Answer questions using only the document below. Be brief.';
$('schema').value = JSON.stringify(SCHEMA, null, 2);
$('doc').value = await fetch('./sample.md').then((r) => (r.ok ? r.text() : '')).catch(() => '');
contextChanged();
window.canonicalJSON = canonicalJSON; // for the console: the cache-stable way to serialise tool schemas
window.demo = { get engine() { return engine; }, get lastDiagnosis() { return lastDiagnosis; } }; // for the console and tests
if ('serviceWorker' in navigator) navigator.serviceWorker.register('./sw.js').catch(() => {});
await load();
