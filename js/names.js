// Storage names the page and the engine share (a module of its own, so that the page's bundle
// does not pull in the engine to read them).

/** Cache Storage bucket holding downloaded model files, keyed by URL. */
export const MODEL_CACHE = 'hotprefix-models';
/** OPFS directory holding saved caches, one file per model: `<sha256>.kv`. */
export const SAVED_DIR = 'hotprefix-kv';
