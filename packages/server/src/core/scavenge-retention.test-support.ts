/**
 * For tests of structures meant not to chain requests together for V8's young-generation
 * collector (abort-watch.ts, id-map.ts): runs a loop of requests in a child process of its own,
 * forces one full collection while requests are in flight (it moves whatever is live to the old
 * generation, as one slow request or any full collection does in a server), then measures what
 * each scavenge of the rest of the loop kept.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

export interface ScavengeRetention {
  scavenges: number;
  /** The mean kilobytes a scavenge kept: the new space after it, plus what it promoted. */
  keptKB: number;
}

/**
 * `imports`: ES import lines; `setup`: statements run first; `request`: the body of one request,
 * run `requests` times after the forced collection (and 1000 times before it).
 */
export function scavengeRetention(options: { imports?: string; setup: string; request: string; requests: number }): ScavengeRetention {
  const script = `
    import { GCProfiler } from 'node:v8';
    ${options.imports ?? ''}
    ${options.setup}
    let n = 0;
    const request = () => { ${options.request} };
    for (let i = 0; i < 1000; i++) request();
    globalThis.gc();
    const profiler = new GCProfiler();
    profiler.start();
    for (let i = 0; i < ${options.requests}; i++) request();
    const used = (s, name) => s.heapSpaceStatistics.find((x) => x.spaceName === name)?.spaceUsedSize ?? 0;
    let scavenges = 0, kept = 0;
    for (const s of profiler.stop().statistics) {
      if (s.gcType !== 'Scavenge') continue;
      scavenges++;
      kept += used(s.afterGC, 'new_space') + Math.max(0, used(s.afterGC, 'old_space') - used(s.beforeGC, 'old_space'));
    }
    console.log(JSON.stringify({ scavenges, keptKB: kept / scavenges / 1024 }));
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '--max-semi-space-size=16', '--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const result = JSON.parse(r.stdout) as ScavengeRetention;
  assert.ok(result.scavenges >= 5, `too few scavenges to tell: ${JSON.stringify(result)}`);
  return result;
}
