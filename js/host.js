// The engine's operations by name (names.js's OP), for both hosts: the worker (worker.js) and the
// page itself (`worker: false`).
import { HotprefixError } from './errors.js';
import { Core } from './core.js';
import { OP } from './names.js';

// What each operation does on a loaded engine. `ctx`: {onEvent, signal}.
const ON_CORE = {
  // A piece of the answer: text, or a tool call's start ({index, id, name}) or arguments ({index, arguments}).
  // (The call's id travels as `callId`: a worker message's own `id` names its request.)
  [OP.chat]: (core, args, { onEvent, signal }) => core.chat(args.request, (piece) => onEvent?.(typeof piece === 'string'
    ? { type: 'text', text: piece }
    : { type: 'tool', index: piece.index, callId: piece.id, name: piece.name, arguments: piece.arguments }), signal),
  [OP.stats]: (core) => core.stats(),
  [OP.clear]: (core) => core.clear(),
  [OP.persist]: (core) => core.persist(),
  [OP.restore]: (core) => core.restore(),
  [OP.forget]: (core) => core.forget(),
  [OP.loseDevice]: (core) => core.loseDevice(),
  [OP.panicForTest]: (core, args) => core.panicForTest(args?.message),
  [OP.trapForTest]: (core, args) => core.trapForTest(args?.kind),
};

/**
 * The engine's operations by name. `onEvent({type: 'progress', progress} | {type: 'text', text} | {type: 'tool', index, callId?, name?, arguments?})`.
 */
export class Host {
  core = null;

  async call(op, args, { onEvent, signal } = {}) {
    if (op === OP.load) {
      if (this.core) throw new HotprefixError('a model is already loaded here');
      this.core = await Core.load(args, (progress) => onEvent?.({ type: 'progress', progress }));
      return this.core.info();
    }
    // Needs no loaded model: the file's header, read and described.
    if (op === OP.inspect) return Core.inspect(args);
    if (op === OP.unload) {
      const core = this.core;
      this.core = null;
      return core?.unload();
    }
    // As before the split: without a model, every other operation is refused for that first.
    if (!this.core) throw new HotprefixError('no model is loaded');
    const run = Object.hasOwn(ON_CORE, op) ? ON_CORE[op] : null;
    if (!run) throw new HotprefixError(`unknown operation ${op}`);
    return run(this.core, args, { onEvent, signal });
  }
}
