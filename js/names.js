// Names the page and the engine share: storage names and operation names (a module of its own, so that the page's bundle
// does not pull in the engine to read them).

/** Cache Storage bucket holding downloaded model files, keyed by URL. */
export const MODEL_CACHE = 'hotprefix-models';
/** OPFS directory holding saved caches, one file per model: `<sha256>.kv`. */
export const SAVED_DIR = 'hotprefix-kv';

/** The engine's operations, by name: what the page posts to the worker (index.js, worker.js)
 * and what Host dispatches on (host.js). One table, so that no side spells one differently. */
export const OP = Object.freeze({
  load: 'load',
  inspect: 'inspect',
  unload: 'unload',
  chat: 'chat',
  stats: 'stats',
  clear: 'clear',
  persist: 'persist',
  restore: 'restore',
  forget: 'forget',
  abort: 'abort',
  loseDevice: 'loseDevice',
  panicForTest: 'panicForTest',
  trapForTest: 'trapForTest',
});
