/**
 * The measurement-window algorithm (perf-and-analyzer.md §1.2): back-to-back windows, statistics
 * snapshots at each window's edges, the stability rule over the last three windows, nearest-rank
 * percentiles, and the merge of the stable windows into one result.
 */
import { performance } from 'node:perf_hooks';
import type { LoadState } from './load.js';
import type { MetricsSample } from './metrics.js';
import type { ServerStats, Duration } from './transport.js';

/** What one window (or a merge of windows) measured. Latencies in microseconds. */
export interface Window {
  durationMs: number;
  /** Successful requests completed in the window. */
  completed: number;
  errors: number;
  responses: number;
  /** Requests sent in the window. */
  sent: number;
  delayed: number;
  latenciesUs: number[];
  /** Client send and receive time summed over the successful requests (µs). */
  sendUs: number;
  recvUs: number;
  /** Server counters over the window (end minus start); undefined without the statistics extension. */
  server?: ServerStats;
  /** Share of the window the event loop was busy (0–1): the client's own overhead. */
  clientBusy: number;
  /** Sequences whose last request completed in the window (sequence models). */
  sequences: number;
  /** `--collect-metrics`: the scrapes that arrived in the window. */
  metrics?: MetricsSample[];
}

export interface MeasureSettings {
  mode: 'time_windows' | 'count_windows';
  intervalMs: number;
  requestCount: number;
  stabilityPercentage: number;
  maxTrials: number;
  percentile?: number;
  async: boolean;
  batchSize: number;
  /** `--collect-metrics`: hands out the scrapes of each window. */
  metrics?: { between(start: number, end: number): MetricsSample[] };
}

export interface LevelResult {
  stable: boolean;
  /** The merged stable windows (or the last three tried when not stable). */
  merged: Window;
  windows: Window[];
  /** Async mode: throughput stabilized, latency did not (accepted with a warning, §1.2.6). */
  latencyUnstable: boolean;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function diff(a: Duration, b: Duration): Duration {
  return { count: b.count - a.count, ns: b.ns - a.ns };
}

/** `b − a`, composing models included (a composing model missing from `a` counts from zero). */
export function diffStats(a: ServerStats, b: ServerStats): ServerStats {
  let composing: Record<string, ServerStats> | undefined;
  if (b.composing !== undefined) {
    composing = {};
    for (const [name, later] of Object.entries(b.composing)) {
      const earlier = a.composing?.[name];
      composing[name] = earlier === undefined ? later : diffStats(earlier, later);
    }
  }
  return {
    composing,
    versions: b.versions,
    inferenceCount: b.inferenceCount - a.inferenceCount,
    executionCount: b.executionCount - a.executionCount,
    success: diff(a.success, b.success),
    fail: diff(a.fail, b.fail),
    queue: diff(a.queue, b.queue),
    computeInput: diff(a.computeInput, b.computeInput),
    computeInfer: diff(a.computeInfer, b.computeInfer),
    computeOutput: diff(a.computeOutput, b.computeOutput),
    cacheHit: diff(a.cacheHit, b.cacheHit),
    cacheMiss: diff(a.cacheMiss, b.cacheMiss),
  };
}

function addStats(a: ServerStats, b: ServerStats): ServerStats {
  const neg = (d: Duration): Duration => ({ count: -d.count, ns: -d.ns });
  const negate = (x: ServerStats): ServerStats => ({
    inferenceCount: -x.inferenceCount,
    executionCount: -x.executionCount,
    success: neg(x.success),
    fail: neg(x.fail),
    queue: neg(x.queue),
    computeInput: neg(x.computeInput),
    computeInfer: neg(x.computeInfer),
    computeOutput: neg(x.computeOutput),
    cacheHit: neg(x.cacheHit),
    cacheMiss: neg(x.cacheMiss),
    composing: x.composing === undefined ? undefined : Object.fromEntries(Object.entries(x.composing).map(([n, c]) => [n, negate(c)])),
  });
  return diffStats(negate(b), a);
}

/** Nearest rank on sorted values: index round(p/100 × (n−1)) (§1.2.5). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.round((p / 100) * (sorted.length - 1))];
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}

export function stddev(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const m = mean(values);
  return Math.sqrt(values.reduce((a, v) => a + (v - m) * (v - m), 0) / values.length);
}

export function throughput(w: Window, batchSize: number): number {
  return w.durationMs > 0 ? (w.completed * batchSize * 1000) / w.durationMs : 0;
}

/** The latency the run stabilizes on and summarizes by: the average, or the `--percentile` value. */
export function stabilizingLatency(w: Window, p: number | undefined): number {
  if (p === undefined) return mean(w.latenciesUs);
  return percentile([...w.latenciesUs].sort((a, b) => a - b), p);
}

export function mergeWindows(windows: readonly Window[]): Window {
  let server: ServerStats | undefined = windows[0]?.server;
  for (const w of windows.slice(1)) server = server && w.server ? addStats(server, w.server) : undefined;
  const duration = windows.reduce((a, w) => a + w.durationMs, 0);
  return {
    durationMs: duration,
    completed: windows.reduce((a, w) => a + w.completed, 0),
    errors: windows.reduce((a, w) => a + w.errors, 0),
    responses: windows.reduce((a, w) => a + w.responses, 0),
    sent: windows.reduce((a, w) => a + w.sent, 0),
    delayed: windows.reduce((a, w) => a + w.delayed, 0),
    latenciesUs: windows.flatMap((w) => w.latenciesUs),
    sendUs: windows.reduce((a, w) => a + w.sendUs, 0),
    recvUs: windows.reduce((a, w) => a + w.recvUs, 0),
    server,
    clientBusy: duration > 0 ? windows.reduce((a, w) => a + w.clientBusy * w.durationMs, 0) / duration : 0,
    sequences: windows.reduce((a, w) => a + w.sequences, 0),
    metrics: windows.some((w) => w.metrics !== undefined) ? windows.flatMap((w) => w.metrics ?? []) : undefined,
  };
}

/** The stability rule over the last three windows (§1.2.6). */
export function stability(windows: readonly Window[], s: MeasureSettings): { throughput: boolean; latency: boolean } {
  if (windows.length < 3) return { throughput: false, latency: false };
  const last = windows.slice(-3);
  const band = 1 + s.stabilityPercentage / 100;
  const within = (values: number[]) => Math.min(...values) > 0 && Math.max(...values) / Math.min(...values) <= band;
  return {
    throughput: within(last.map((w) => throughput(w, s.batchSize))),
    latency: within(last.map((w) => stabilizingLatency(w, s.percentile))),
  };
}

/**
 * Measures one window against a running load: snapshots statistics, waits (about 1.2 × the
 * interval for time windows; 1 s steps until enough requests for count windows), snapshots again,
 * and takes the requests that completed in between.
 */
export async function measureWindow(
  load: LoadState,
  settings: MeasureSettings,
  statistics: () => Promise<ServerStats | undefined>,
): Promise<Window> {
  const before = await statistics();
  // Records of a local load arrive in completion order; a worker load's arrive in batches, so its
  // windows are cut by time over everything, after a flush.
  const remote = load.flush !== undefined;
  const startIndex = remote ? 0 : load.records.length;
  const sentBefore = load.sent;
  const delayedBefore = load.delayed;
  const elu = performance.eventLoopUtilization();
  const start = performance.now();
  if (settings.mode === 'time_windows') {
    await sleep(settings.intervalMs * 1.2);
  } else {
    await sleep(1000);
    for (;;) {
      await load.flush?.();
      const now = performance.now();
      if (load.records.slice(startIndex).filter((r) => r.end >= start && r.end < now).length >= settings.requestCount) break;
      await sleep(1000);
    }
  }
  const end = performance.now();
  const endIndex = load.records.length;
  await load.flush?.();
  const after = await statistics();
  const records = load.records.slice(startIndex, remote ? load.records.length : endIndex).filter((r) => r.end >= start && r.end < end);
  const ok = records.filter((r) => r.ok);
  return {
    durationMs: end - start,
    completed: ok.length,
    errors: records.length - ok.length,
    responses: ok.reduce((a, r) => a + r.responses, 0),
    sent: load.sent - sentBefore,
    delayed: load.delayed - delayedBefore,
    latenciesUs: ok.map((r) => (r.end - r.start) * 1000),
    sendUs: ok.reduce((a, r) => a + r.sendMs * 1000, 0),
    recvUs: ok.reduce((a, r) => a + r.recvMs * 1000, 0),
    server: before && after ? diffStats(before, after) : undefined,
    clientBusy: load.busy?.() ?? performance.eventLoopUtilization(elu).utilization,
    sequences: ok.filter((r) => r.sequenceEnd === true).length,
    metrics: settings.metrics?.between(start, end),
  };
}

/**
 * Windows until the last three are stable or `maxTrials` windows were measured. `onWindow` sees
 * each window (progress line, `-v` pass lines); `abort` ends early (every request failing).
 */
export async function measureLevel(
  load: LoadState,
  settings: MeasureSettings,
  statistics: () => Promise<ServerStats | undefined>,
  onWindow: (w: Window, index: number) => void,
): Promise<LevelResult> {
  const windows: Window[] = [];
  for (let trial = 0; trial < settings.maxTrials; trial++) {
    const w = await measureWindow(load, settings, statistics);
    windows.push(w);
    onWindow(w, trial);
    if (w.completed === 0 && w.errors > 0) break;
    const st = stability(windows, settings);
    if (st.throughput && st.latency) return { stable: true, merged: mergeWindows(windows.slice(-3)), windows, latencyUnstable: false };
    if (st.throughput && settings.async) return { stable: true, merged: mergeWindows(windows.slice(-3)), windows, latencyUnstable: true };
  }
  return { stable: false, merged: mergeWindows(windows.slice(-3)), windows, latencyUnstable: false };
}
