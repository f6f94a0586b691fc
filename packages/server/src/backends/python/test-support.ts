/**
 * For this folder's tests: they run models with the system Python, which needs numpy. Called from
 * a suite's `before` hook, `requireNumpy` makes the suite fail naming what is missing instead of
 * running tests that cannot work (npm test installs it).
 */
import { spawnSync } from 'node:child_process';

export function requireNumpy(): void {
  const r = spawnSync('/usr/bin/python3', ['-c', 'import numpy'], { encoding: 'utf8' });
  if (r.status !== 0) {
    const why = r.error?.message ?? r.stderr.trim().split('\n').pop();
    throw new Error(`/usr/bin/python3 cannot import numpy (${why}): install python3-numpy (apt-get install -y python3-numpy), or run npm test, which installs it`);
  }
}
