// A minimal static file server for page tests (loopback only, random free port).
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';

const TYPES = { '.gguf': 'application/octet-stream', '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

// `mounts` maps URL prefixes (e.g. '/models/') to other folders; `routes` maps exact paths to
// handlers `(req, res) => …`. `hits` counts the requests for each path, `sent` the body bytes.
// A `Range: bytes=a-b` request gets a 206 with that part of a file (as static hosts answer).
export async function serve(root, mounts = {}, routes = {}) {
  const hits = new Map();
  const sent = new Map();
  const server = createServer(async (req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '');
    hits.set(path, (hits.get(path) ?? 0) + 1);
    if (routes[path]) return routes[path](req, res);
    const mount = Object.keys(mounts).find((m) => path.startsWith(m));
    const file = mount ? join(mounts[mount], path.slice(mount.length))
      : join(root, path.endsWith('/') ? path + 'index.html' : path);
    let body;
    try {
      body = await readFile(file);
    } catch {
      res.writeHead(404).end('not found');
      return;
    }
    const type = TYPES[extname(file)] ?? 'application/octet-stream';
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    if (range && Number(range[1]) < body.length) {
      const start = Number(range[1]);
      const end = Math.min(range[2] ? Number(range[2]) : body.length - 1, body.length - 1);
      const part = body.subarray(start, end + 1);
      sent.set(path, (sent.get(path) ?? 0) + part.length);
      res.writeHead(206, { 'content-type': type, 'content-length': part.length, 'content-range': `bytes ${start}-${end}/${body.length}`, 'accept-ranges': 'bytes' });
      res.end(part);
      return;
    }
    sent.set(path, (sent.get(path) ?? 0) + body.length);
    res.writeHead(200, { 'content-type': type, 'content-length': body.length });
    res.end(body);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { url: `http://127.0.0.1:${server.address().port}/`, hits, sent, close: () => { server.closeAllConnections(); server.close(); } };
}

// Debian's chromium with software WebGPU (SwiftShader); never a downloaded browser.
export const CHROMIUM = {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-angle=swiftshader',
    '--disable-gpu-sandbox', '--disable-dev-shm-usage', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
};

// Flips one byte in the middle of the KV data of the saved cache (OPFS `hotprefix-kv/<sha256>.kv`)
// of the model with this sha256, in `page`'s origin.
export function corruptSavedCache(page, sha256) {
  return page.evaluate(async (sha) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('hotprefix-kv');
    const h = await dir.getFileHandle(`${sha}.kv`);
    const bytes = new Uint8Array(await (await h.getFile()).arrayBuffer());
    bytes[bytes.length >> 1] ^= 0x40;
    const w = await h.createWritable();
    await w.write(bytes);
    await w.close();
  }, sha256);
}
