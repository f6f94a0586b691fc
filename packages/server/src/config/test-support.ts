/**
 * Paths the config layer's tests share (not part of the layer's surface). They work from `src`
 * (tsx) and from `dist` (the compiled tests).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The project root: the nearest ancestor holding a package.json with "workspaces". */
export function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && 'workspaces' in (JSON.parse(readFileSync(pkg, 'utf8')) as object)) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no workspace package.json above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** The hand-written config fixtures (`src/config/fixtures`). */
export function fixturesDir(): string {
  return join(projectRoot(), 'packages/server/src/config/fixtures');
}
