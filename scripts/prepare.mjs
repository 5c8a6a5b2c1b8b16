// What the node benchmark scripts need, installed when missing, so that each works on a fresh
// clone: Chromium and the npm packages (scripts/setup.sh, idempotent), the default model
// (scripts/fetch-model.sh), the npm package (scripts/pack.sh, when target/npm/hotprefix is not
// built yet). Returns playwright-core's `chromium`, imported only once it is installed.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

export const ROOT = fileURLToPath(new URL('../', import.meta.url));

export async function prepare({ model = true, pkg = join(ROOT, 'target/npm/hotprefix') } = {}) {
  const run = (...cmd) => execFileSync('bash', cmd, { cwd: ROOT, stdio: ['ignore', 2, 'inherit'] });
  run('scripts/setup.sh');
  if (model) run('scripts/fetch-model.sh');
  if (pkg && !existsSync(join(pkg, 'index.js'))) run('scripts/pack.sh');
  return (await import('playwright-core')).chromium;
}
