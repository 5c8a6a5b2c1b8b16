// The dedicated module worker that runs the engine for index.js's proxy. Protocol: the page posts
// {id, op, args}; the worker answers {id, type: 'progress' | 'text' | 'result' | 'error', ...}.
// {op: 'abort', args: {target}} aborts request `target`, queued or running.
import { Core } from './core.js';
import { toWire, HotprefixError } from './errors.js';

let core = null;
const controllers = new Map();
const reply = (m) => self.postMessage(m);

function loaded() {
  if (!core) throw new HotprefixError('no model is loaded');
  return core;
}

self.onmessage = async ({ data }) => {
  const { id, op, args } = data ?? {};
  if (op === 'abort') {
    controllers.get(args?.target)?.abort();
    return;
  }
  try {
    let value;
    switch (op) {
      case 'load':
        if (core) throw new HotprefixError('a model is already loaded in this worker');
        core = await Core.load(args, (progress) => reply({ id, type: 'progress', progress }));
        value = core.info();
        break;
      case 'chat': {
        const ac = new AbortController();
        controllers.set(id, ac);
        try {
          value = await loaded().chat(args.request, (text) => reply({ id, type: 'text', text }), ac.signal);
        } finally {
          controllers.delete(id);
        }
        break;
      }
      case 'stats': value = await loaded().stats(); break;
      case 'clear': await loaded().clear(); break;
      case 'persist': value = await loaded().persist(); break;
      case 'restore': value = await loaded().restore(); break;
      case 'forget': await loaded().forget(); break;
      case 'loseDevice': await loaded().loseDevice(); break;
      case 'unload': await core?.unload(); core = null; break;
      default: throw new HotprefixError(`unknown operation ${op}`);
    }
    reply({ id, type: 'result', value });
  } catch (e) {
    reply({ id, type: 'error', error: toWire(e) });
  }
};
