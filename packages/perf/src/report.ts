/**
 * What `nereid perf` prints and writes (perf-and-analyzer.md §1.5, §1.6): per-level summaries
 * computed from the merged stable windows, perf_analyzer's console blocks, its CSV columns, and
 * (beyond perf_analyzer) one JSON object.
 */
import { mean, percentile, stddev, throughput, type Window } from './measure.js';
import { summarizeMetrics, type MetricsSummary } from './metrics.js';
import type { ServerStats } from './transport.js';

export type LoadMode = 'concurrency' | 'request_rate' | 'custom_intervals';

/** The server-side breakdown of one level, average microseconds per request. */
export interface ServerBreakdown {
  inferenceCount: number;
  executionCount: number;
  successCount: number;
  avgRequestUs: number;
  overheadUs: number;
  queueUs: number;
  computeInputUs: number;
  computeInferUs: number;
  computeOutputUs: number;
  /**
   * An ensemble's composing models (statistics extension), each with its own breakdown, in step
   * order; nested ensembles have their own. For the ensemble itself, queue and compute are then
   * the sums over its composing models, as perf_analyzer reports them.
   */
  composing?: ComposingBreakdown[];
}

export interface ComposingBreakdown extends ServerBreakdown {
  model: string;
  /** The versions the statistics came from (comma-separated when several served). */
  version: string;
}

export interface LevelSummary {
  mode: LoadMode;
  /** Concurrency, or requests per second. */
  value: number;
  stable: boolean;
  latencyUnstable: boolean;
  requestCount: number;
  errorCount: number;
  sentCount: number;
  throughput: number;
  responseThroughput: number;
  sendRate: number;
  delayedShare: number;
  avgLatencyUs: number;
  stdLatencyUs: number;
  /** Percentile → latency (µs): 50, 90, 95, 99 and `--percentile`. */
  percentiles: Record<string, number>;
  /** The latency the run stabilized on (average or `--percentile`), µs. */
  stabilizingLatencyUs: number;
  /**
   * Client time outside the response wait, averaged over successful requests: building the
   * request, and reading and decoding the response (`InferTiming` of @nereid/client; 0 for
   * streams and in process). The response wait is the rest of the latency (docs/perf.md).
   */
  clientSendUs: number;
  clientRecvUs: number;
  responseWaitUs: number;
  server?: ServerBreakdown;
  /** Share of the measured time the client's event loop was busy (0–1). */
  clientBusy: number;
  /** Sequence models: sequences completed in the merged windows, and per second. */
  sequenceCount?: number;
  sequenceThroughput?: number;
  /** `--collect-metrics`: the scrapes of the merged windows, aggregated. */
  metrics?: MetricsSummary;
}

/** p50, p90, p95, p99 and `--percentile`, ascending, without repeats. */
function percentileList(p: number | undefined): number[] {
  return [...new Set([50, 90, 95, 99, ...(p === undefined ? [] : [p])])].sort((a, b) => a - b);
}

const us = (ns: number, count: number): number => (count > 0 ? ns / count / 1000 : 0);

/** Average microseconds per request from one model's differenced statistics (composing models recursively). */
function breakdown(s: ServerStats): ServerBreakdown {
  const total = us(s.success.ns, s.success.count);
  const composing = s.composing === undefined ? undefined : Object.entries(s.composing).map(([model, c]) => ({ model, version: c.versions ?? '', ...breakdown(c) }));
  let queue: number;
  let input = 0;
  let infer = 0;
  let output = 0;
  if (composing === undefined) {
    queue = us(s.queue.ns, s.queue.count);
    input = us(s.computeInput.ns, s.computeInput.count);
    infer = us(s.computeInfer.ns, s.computeInfer.count);
    output = us(s.computeOutput.ns, s.computeOutput.count);
  } else {
    // perf_analyzer's ensemble totals: the composing models' queue and compute times added up.
    queue = composing.reduce((a, c) => a + c.queueUs, 0);
    infer = composing.reduce((a, c) => a + c.computeInputUs + c.computeInferUs + c.computeOutputUs, 0);
  }
  return {
    inferenceCount: s.inferenceCount,
    executionCount: s.executionCount,
    successCount: s.success.count,
    avgRequestUs: total,
    overheadUs: Math.max(0, total - queue - input - infer - output),
    queueUs: queue,
    computeInputUs: input,
    computeInferUs: infer,
    computeOutputUs: output,
    composing,
  };
}

export function summarize(mode: LoadMode, value: number, w: Window, batchSize: number, p: number | undefined, stable: boolean, latencyUnstable: boolean, sequenceModel = false): LevelSummary {
  const sorted = [...w.latenciesUs].sort((a, b) => a - b);
  const percentiles: Record<string, number> = {};
  for (const q of percentileList(p)) percentiles[String(q)] = percentile(sorted, q);
  const avg = mean(sorted);
  const server = w.server ? breakdown(w.server) : undefined;
  const seconds = w.durationMs / 1000;
  return {
    mode,
    value,
    stable,
    latencyUnstable,
    requestCount: w.completed,
    errorCount: w.errors,
    sentCount: w.sent,
    throughput: throughput(w, batchSize),
    responseThroughput: seconds > 0 ? w.responses / seconds : 0,
    sendRate: seconds > 0 ? w.sent / seconds : 0,
    delayedShare: w.sent > 0 ? w.delayed / w.sent : 0,
    avgLatencyUs: avg,
    stdLatencyUs: stddev(sorted),
    percentiles,
    stabilizingLatencyUs: p === undefined ? avg : percentiles[String(p)],
    clientSendUs: w.completed > 0 ? w.sendUs / w.completed : 0,
    clientRecvUs: w.completed > 0 ? w.recvUs / w.completed : 0,
    responseWaitUs: Math.max(0, avg - (w.completed > 0 ? (w.sendUs + w.recvUs) / w.completed : 0)),
    server,
    clientBusy: w.clientBusy,
    sequenceCount: sequenceModel ? w.sequences : undefined,
    sequenceThroughput: sequenceModel ? (seconds > 0 ? w.sequences / seconds : 0) : undefined,
    metrics: w.metrics !== undefined ? summarizeMetrics(w.metrics) : undefined,
  };
}

/** perf_analyzer prints rates with six significant digits and times as whole microseconds. */
export const rate = (x: number): string => String(Number(x.toPrecision(6)));
export const usec = (x: number): string => String(Math.trunc(x));

export interface HeaderSettings {
  batchSize: number;
  serviceKind: string;
  mode: 'time_windows' | 'count_windows';
  intervalMs: number;
  requestCount: number;
  measurementRequestCount: number;
  warmupRequestCount: number;
  percentile?: number;
  latencyThresholdMs: number;
  loadMode: LoadMode;
  distribution: 'constant' | 'poisson';
  binarySearch: boolean;
  async: boolean;
  decoupled: boolean;
}

export function headerText(h: HeaderSettings): string {
  const lines = ['*** Measurement Settings ***', `  Batch size: ${h.batchSize}`, `  Service Kind: ${h.serviceKind}`];
  if (h.warmupRequestCount > 0) lines.push(`  Sending ${h.warmupRequestCount} warm-up requests`);
  if (h.requestCount > 0) {
    lines.push(`  Sending a total of ${h.requestCount} benchmark requests`);
  } else {
    lines.push(`  Using "${h.mode}" mode for stabilization`);
    lines.push(h.mode === 'time_windows' ? `  Measurement window: ${h.intervalMs} msec` : `  Minimum number of samples in each window: ${h.measurementRequestCount}`);
  }
  lines.push(h.percentile === undefined ? '  Stabilizing using average latency' : `  Stabilizing using p${h.percentile} latency`);
  if (h.latencyThresholdMs > 0) lines.push(`  Latency limit: ${h.latencyThresholdMs} msec`);
  if (h.loadMode === 'request_rate') lines.push(h.distribution === 'poisson' ? '  Using poisson distribution on request generation' : '  Using uniform distribution on request generation');
  if (h.binarySearch) lines.push('  Using Binary Search algorithm');
  lines.push(h.async ? '  Using asynchronous calls for inference' : '  Using synchronous calls for inference');
  if (h.decoupled) lines.push('  Detected decoupled model, using the first response for measuring latency');
  return lines.join('\n') + '\n';
}

function levelTitle(s: LevelSummary): string {
  if (s.mode === 'concurrency') return `Request concurrency: ${s.value}`;
  if (s.mode === 'request_rate') return `Request Rate: ${rate(s.value)} inference requests per seconds`;
  return 'Request Rate: custom intervals';
}

export function levelText(s: LevelSummary, transportLabel: string, decoupled: boolean, verbose: boolean, p: number | undefined): string {
  const lines = [levelTitle(s), '  Client: ', `    Request count: ${s.requestCount}`];
  if (s.errorCount > 0) lines.push(`    Error count: ${s.errorCount}`);
  if (s.mode !== 'concurrency') {
    lines.push(`    Avg send request rate: ${rate(s.sendRate)} infer/sec`);
    if (s.delayedShare > 0.01) {
      lines.push(
        `[WARNING] ${(s.delayedShare * 100).toFixed(2)}% of the requests were delayed (sent more than 1 ms after their scheduled time); the load generator could not hold the requested rate`,
      );
    }
  }
  if (s.sequenceCount !== undefined) lines.push(`    Sequence count: ${s.sequenceCount} (${rate(s.sequenceThroughput ?? 0)} seq/sec)`);
  lines.push(`    Throughput: ${rate(s.throughput)} infer/sec`);
  if (decoupled) lines.push(`    Response Throughput: ${rate(s.responseThroughput)} infer/sec`);
  const pKeys = percentileList(p).map(String);
  if (p === undefined) lines.push(`    Avg latency: ${usec(s.avgLatencyUs)} usec (standard deviation ${usec(s.stdLatencyUs)} usec)`);
  for (const k of pKeys) lines.push(`    p${k} latency: ${usec(s.percentiles[k])} usec`);
  if (transportLabel === 'HTTP') {
    lines.push(`    Avg HTTP time: ${usec(s.avgLatencyUs)} usec (send/recv ${usec(s.clientSendUs + s.clientRecvUs)} usec + response wait ${usec(s.responseWaitUs)} usec)`);
  } else if (transportLabel === 'gRPC') {
    lines.push(`    Avg gRPC time: ${usec(s.avgLatencyUs)} usec ((un)marshal request/response ${usec(s.clientSendUs + s.clientRecvUs)} usec + response wait ${usec(s.responseWaitUs)} usec)`);
  }
  if (verbose) lines.push(`    Avg client overhead: ${(s.clientBusy * 100).toFixed(2)}%`);
  if (s.server) lines.push('  Server: ', ...serverLines(s.server, 1));
  if (s.metrics) lines.push(...metricsLines(s.metrics));
  // In process the server shares the event loop, so its busy share says nothing about the client.
  if (s.clientBusy > 0.5 && transportLabel !== 'in-process') {
    lines.push('[WARNING] nereid perf is not able to keep up with the desired load. The results may not be accurate.');
  }
  return lines.join('\n') + '\n';
}

/** perf_analyzer's server block; an ensemble's composing models follow it, indented by level. */
function serverLines(v: ServerBreakdown, level: number): string[] {
  const ident = ' '.repeat(2 * level);
  const parts =
    v.composing === undefined
      ? `overhead ${usec(v.overheadUs)} usec + queue ${usec(v.queueUs)} usec + compute input ${usec(v.computeInputUs)} usec + compute infer ${usec(v.computeInferUs)} usec + compute output ${usec(v.computeOutputUs)} usec`
      : `overhead ${usec(v.overheadUs)} usec + queue ${usec(v.queueUs)} usec + compute ${usec(v.computeInputUs + v.computeInferUs + v.computeOutputUs)} usec`;
  const lines = [
    `${ident}  Inference count: ${v.inferenceCount}`,
    `${ident}  Execution count: ${v.executionCount}`,
    `${ident}  Successful request count: ${v.successCount}`,
    `${ident}  Avg request latency: ${usec(v.avgRequestUs)} usec (${parts})`,
    '',
  ];
  if (v.composing !== undefined) {
    lines.push(`${ident}Composing models: `);
    for (const c of v.composing) lines.push(`${ident}${c.model}, version: ${c.version}`, ...serverLines(c, level + 1));
  }
  return lines;
}

/**
 * perf_analyzer's "Server Prometheus Metrics" block (per GPU), then what a CPU server reports
 * (beyond perf_analyzer: CPU utilization and memory, the model's pending requests).
 */
function metricsLines(m: MetricsSummary): string[] {
  const perGpu = (values: Record<string, number>, unit: (v: number) => string) => Object.entries(values).map(([uuid, v]) => `      ${uuid} : ${unit(v)}`);
  const lines = [
    '  Server Prometheus Metrics: ',
    '    Avg GPU Utilization:',
    ...perGpu(m.gpuUtilization, (v) => `${Number((v * 100).toPrecision(6))}%`),
    '    Avg GPU Power Usage:',
    ...perGpu(m.gpuPowerUsage, (v) => `${Number(v.toPrecision(6))} watts`),
    '    Max GPU Memory Usage:',
    ...perGpu(m.gpuMemoryUsed, (v) => `${Math.trunc(v)} bytes`),
    '    Total GPU Memory:',
    ...perGpu(m.gpuMemoryTotal, (v) => `${Math.trunc(v)} bytes`),
  ];
  if (m.cpuUtilization !== undefined) lines.push(`    Avg CPU Utilization: ${Number((m.cpuUtilization * 100).toPrecision(4))}%`);
  if (m.cpuMemoryUsed !== undefined) lines.push(`    Max CPU Memory Usage: ${Math.trunc(m.cpuMemoryUsed)} bytes`);
  if (m.avgPendingRequests !== undefined) lines.push(`    Avg pending requests: ${Number(m.avgPendingRequests.toPrecision(4))} (max ${m.maxPendingRequests})`);
  lines.push(`    Samples: ${m.samples}`);
  return lines;
}

export function finalText(levels: readonly LevelSummary[], p: number | undefined): string {
  const lines = [p === undefined ? 'Inferences/Second vs. Client Average Batch Latency' : `Inferences/Second vs. Client p${p} Batch Latency`];
  for (const s of levels) {
    const what = s.mode === 'concurrency' ? `Concurrency: ${s.value}` : `Request Rate: ${s.mode === 'request_rate' ? rate(s.value) : 'custom'}`;
    lines.push(`${what}, throughput: ${rate(s.throughput)} infer/sec, latency ${usec(s.stabilizingLatencyUs)} usec`);
  }
  return lines.join('\n') + '\n';
}

/** The CSV of §1.6: rows by ascending throughput, integer microseconds except throughput. */
export function csvText(levels: readonly LevelSummary[], p: number | undefined, decoupled: boolean, verbose: boolean): string {
  const first = levels[0]?.mode === 'concurrency' ? 'Concurrency' : 'Request Rate';
  const withServer = levels.some((l) => l.server !== undefined);
  const pKeys = percentileList(p).map(String);
  const header = [first, 'Inferences/Second'];
  if (decoupled) header.push('Response Throughput');
  header.push('Client Send');
  if (withServer) header.push('Network+Server Send/Recv', 'Server Queue', 'Server Compute Input', 'Server Compute Infer', 'Server Compute Output');
  header.push('Client Recv', ...pKeys.map((k) => `p${k} latency`));
  if (verbose) {
    if (p === undefined) header.push('Avg latency');
    header.push('request/response', 'response wait');
  }
  const withMetrics = verbose && levels.some((l) => l.metrics !== undefined);
  if (withMetrics) header.push('Avg GPU Utilization', 'Avg GPU Power Usage', 'Max GPU Memory Usage', 'Total GPU Memory');
  const gpuCell = (values: Record<string, number> | undefined) => Object.entries(values ?? {}).map(([uuid, v]) => `${uuid}:${v};`).join('');
  const rows = [...levels].sort((a, b) => a.throughput - b.throughput).map((s) => {
    const row = [s.mode === 'concurrency' ? String(s.value) : rate(s.value), rate(s.throughput)];
    if (decoupled) row.push(rate(s.responseThroughput));
    row.push(usec(s.clientSendUs));
    if (withServer) {
      const v = s.server;
      const serverTime = v ? v.queueUs + v.computeInputUs + v.computeInferUs + v.computeOutputUs : 0;
      row.push(
        usec(Math.max(0, s.responseWaitUs - serverTime)),
        usec(v?.queueUs ?? 0),
        usec(v?.computeInputUs ?? 0),
        usec(v?.computeInferUs ?? 0),
        usec(v?.computeOutputUs ?? 0),
      );
    }
    row.push(usec(s.clientRecvUs), ...pKeys.map((k) => usec(s.percentiles[k])));
    if (verbose) {
      if (p === undefined) row.push(usec(s.avgLatencyUs));
      row.push(usec(s.clientSendUs + s.clientRecvUs), usec(s.avgLatencyUs - s.clientSendUs - s.clientRecvUs));
    }
    if (withMetrics) {
      const m = s.metrics;
      row.push(gpuCell(m?.gpuUtilization), gpuCell(m?.gpuPowerUsage), gpuCell(m?.gpuMemoryUsed), gpuCell(m?.gpuMemoryTotal));
    }
    return row.join(',');
  });
  return [header.join(','), ...rows].join('\n') + '\n';
}

/**
 * An ensemble's extra CSV files (§1.6): one per composing model (nested ones included), named
 * `<model>_v<version>.<csv name>` beside the main file. Throughput is the level's scaled by the
 * member's share of the ensemble's successful requests; "Network+Server Send/Recv" holds the
 * member's server overhead; client send and receive are 0.
 */
export function composingCsvFiles(levels: readonly LevelSummary[], csvPath: string): { path: string; text: string }[] {
  const slash = csvPath.lastIndexOf('/');
  const dir = csvPath.slice(0, slash + 1);
  const base = csvPath.slice(slash + 1);
  const first = levels[0]?.mode === 'concurrency' ? 'Concurrency' : 'Request Rate';
  const files = new Map<string, string[]>();
  const sorted = [...levels].sort((a, b) => a.throughput - b.throughput);
  const visit = (level: LevelSummary, parent: ServerBreakdown) => {
    for (const c of parent.composing ?? []) {
      const name = `${dir}${c.model}_v${c.version}.${base}`;
      const rows = files.get(name) ?? [
        [first, 'Inferences/Second', 'Client Send', 'Network+Server Send/Recv', 'Server Queue', 'Server Compute Input', 'Server Compute Infer', 'Server Compute Output', 'Client Recv'].join(','),
      ];
      const top = level.server!;
      const share = top.successCount > 0 ? c.successCount / top.successCount : 0;
      rows.push(
        [
          level.mode === 'concurrency' ? String(level.value) : rate(level.value),
          rate(level.throughput * share),
          '0',
          usec(c.overheadUs),
          usec(c.queueUs),
          usec(c.computeInputUs),
          usec(c.computeInferUs),
          usec(c.computeOutputUs),
          '0',
        ].join(','),
      );
      files.set(name, rows);
      visit(level, c);
    }
  };
  for (const level of sorted) if (level.server) visit(level, level.server);
  return [...files].map(([path, rows]) => ({ path, text: rows.join('\n') + '\n' }));
}
