/**
 * A probe the benchmarks preload into a server they start (`node --import <this file's URL>`):
 * it watches the main thread's event-loop delay (`perf_hooks.monitorEventLoopDelay`), the
 * garbage collector's pauses (PerformanceObserver `gc` entries) and what each young-generation
 * collection had to keep (`v8.GCProfiler`: the new space after it plus what it promoted to the
 * old space, the work a scavenge's pause grows with), and on SIGUSR2 writes what it saw
 * since the last SIGUSR2 as one line on stderr, `nereid-loop-probe {json}` (`LoopProbeReport`),
 * then starts again from zero. It costs one libuv timer every NEREID_LOOP_PROBE_RESOLUTION_MS
 * (default 2) and one observer callback per collection; it changes nothing else in the server.
 */
import { monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { GCProfiler } from 'node:v8';

/** What the probe reports; times in milliseconds. */
export interface LoopProbeReport {
  delay: { mean: number; p50: number; p99: number; max: number };
  /** `survivedKB`: the mean kilobytes a scavenge kept (copied within the new space or promoted); 0 when none ran. */
  gc: { count: number; totalMs: number; maxMs: number; major: number; survivedKB?: number };
}

interface SpaceStats {
  spaceName: string;
  spaceUsedSize: number;
}
interface GcStatistics {
  gcType: string;
  beforeGC: { heapSpaceStatistics: SpaceStats[] };
  afterGC: { heapSpaceStatistics: SpaceStats[] };
}

const used = (spaces: SpaceStats[], name: string) => spaces.find((x) => x.spaceName === name)?.spaceUsedSize ?? 0;

/** The mean bytes each scavenge of `statistics` kept: the new space after it, and the old space's growth (0: no scavenge). */
function survivedPerScavenge(statistics: GcStatistics[]): number {
  let total = 0;
  let n = 0;
  for (const s of statistics) {
    if (s.gcType !== 'Scavenge') continue;
    const before = s.beforeGC.heapSpaceStatistics;
    const after = s.afterGC.heapSpaceStatistics;
    total += used(after, 'new_space') + Math.max(0, used(after, 'old_space') - used(before, 'old_space'));
    n++;
  }
  return n === 0 ? 0 : total / n;
}

export const LOOP_PROBE_PREFIX = 'nereid-loop-probe ';

const resolution = Math.max(1, Number(process.env.NEREID_LOOP_PROBE_RESOLUTION_MS ?? 2) || 2);
const histogram = monitorEventLoopDelay({ resolution });
histogram.enable();
let gc = { count: 0, totalMs: 0, maxMs: 0, major: 0 };
// kind 1 is a scavenge (young generation); the others (mark-compact, incremental marking, weak
// callbacks) involve the old generation.
const observer = new PerformanceObserver((list) => {
  for (const e of list.getEntries() as (PerformanceEntry & { detail?: { kind?: number } })[]) {
    gc.count++;
    gc.totalMs += e.duration;
    gc.maxMs = Math.max(gc.maxMs, e.duration);
    if (e.detail?.kind !== 1) gc.major++;
  }
});
observer.observe({ entryTypes: ['gc'] });
let profiler = new GCProfiler();
profiler.start();

process.on('SIGUSR2', () => {
  // The histogram records the delay beyond the timer's own period, in nanoseconds.
  const ms = (ns: number) => (Number.isFinite(ns) ? ns / 1e6 : 0);
  const statistics = (profiler.stop() as { statistics?: GcStatistics[] } | undefined)?.statistics ?? [];
  profiler = new GCProfiler();
  profiler.start();
  const survived = survivedPerScavenge(statistics);
  const report: LoopProbeReport = {
    delay: { mean: ms(histogram.mean), p50: ms(histogram.percentile(50)), p99: ms(histogram.percentile(99)), max: ms(histogram.max) },
    gc: { ...gc, survivedKB: survived / 1024 },
  };
  process.stderr.write(`${LOOP_PROBE_PREFIX}${JSON.stringify(report)}\n`);
  histogram.reset();
  gc = { count: 0, totalMs: 0, maxMs: 0, major: 0 };
});
