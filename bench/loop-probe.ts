/**
 * A probe the benchmarks preload into a server they start (`node --import <this file's URL>`):
 * it watches the main thread's event-loop delay (`perf_hooks.monitorEventLoopDelay`) and the
 * garbage collector's pauses (PerformanceObserver `gc` entries), and on SIGUSR2 writes what it saw
 * since the last SIGUSR2 as one line on stderr, `nereid-loop-probe {json}` (`LoopProbeReport`),
 * then starts again from zero. It costs one libuv timer every NEREID_LOOP_PROBE_RESOLUTION_MS
 * (default 2) and one observer callback per collection; it changes nothing else in the server.
 */
import { monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';

/** What the probe reports; times in milliseconds. */
export interface LoopProbeReport {
  delay: { mean: number; p50: number; p99: number; max: number };
  gc: { count: number; totalMs: number; maxMs: number; major: number };
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

process.on('SIGUSR2', () => {
  // The histogram records the delay beyond the timer's own period, in nanoseconds.
  const ms = (ns: number) => (Number.isFinite(ns) ? ns / 1e6 : 0);
  const report: LoopProbeReport = {
    delay: { mean: ms(histogram.mean), p50: ms(histogram.percentile(50)), p99: ms(histogram.percentile(99)), max: ms(histogram.max) },
    gc,
  };
  process.stderr.write(`${LOOP_PROBE_PREFIX}${JSON.stringify(report)}\n`);
  histogram.reset();
  gc = { count: 0, totalMs: 0, maxMs: 0, major: 0 };
});
