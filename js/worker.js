// The dedicated module worker that runs the engine for index.js's proxy. Protocol: the page posts
// {id, op, args}; the worker answers {id, type: 'progress' | 'text' | 'result' | 'error', ...}.
// {op: 'abort', args: {target}} aborts request `target`, queued or running.
import { Host } from './host.js';
import { OP } from './names.js';
import { toWire } from './errors.js';

const host = new Host();
const controllers = new Map();
const reply = (m) => self.postMessage(m);

self.onmessage = async ({ data }) => {
  const { id, op, args } = data ?? {};
  if (op === OP.abort) {
    controllers.get(args?.target)?.abort();
    return;
  }
  const ac = new AbortController();
  controllers.set(id, ac);
  try {
    const value = await host.call(op, args, { onEvent: (e) => reply({ id, ...e }), signal: ac.signal });
    reply({ id, type: 'result', value });
  } catch (e) {
    reply({ id, type: 'error', error: toWire(e) });
  } finally {
    controllers.delete(id);
  }
};
