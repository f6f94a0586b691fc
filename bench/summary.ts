/**
 * The table `npm run bench` ends with (bench/run.mjs): the key figure of each issue, read back from
 * the scripts' summary lines (`name: value unit (baseline NAME VALUE UNIT, ratio R)`, bench/lib.ts
 * `report`), with its target and whether this run met it. A figure a script did not print (it
 * failed, or skipped itself) is shown as missing, never guessed.
 */

/** One summary line read back. */
export interface ParsedFigure {
  name: string;
  value: number;
  unit: string;
  baselineName?: string;
  baseline?: number;
  ratio?: number;
}

/** A key figure: which script prints it, what is compared, and the target (on the ratio or the value). */
export interface KeyFigure {
  bench: string;
  figure: string;
  label: string;
  target?: { on: 'ratio' | 'value'; op: '>=' | '<' | '<='; bound: number };
}

/** The targets are the issues' (docs/benchmarks.md lists them with each script). */
export const KEY_FIGURES: readonly KeyFigure[] = [
  { bench: 'http-overhead', figure: 'http_throughput_c16', label: 'HTTP throughput vs bare node:http, c16', target: { on: 'ratio', op: '>=', bound: 0.5 } },
  { bench: 'http-overhead', figure: 'http_transport_latency_c1', label: "HTTP latency, Nereid's HTTP/1.1 vs node:http, c1" },
  { bench: 'http-overhead', figure: 'http_transport_throughput_c16', label: "HTTP throughput, Nereid's HTTP/1.1 vs node:http, c16" },
  { bench: 'http-overhead', figure: 'facade_overhead_c1', label: 'facade overhead per request, c1 (µs)', target: { on: 'value', op: '<', bound: 20 } },
  { bench: 'grpc-overhead', figure: 'grpc_infer_throughput_c16', label: 'gRPC ModelInfer throughput vs bare grpc-js, c16', target: { on: 'ratio', op: '>=', bound: 0.6 } },
  { bench: 'grpc-overhead', figure: 'grpc_stream_throughput_16', label: 'gRPC stream throughput vs bare grpc-js, 16 in flight', target: { on: 'ratio', op: '>=', bound: 0.6 } },
  { bench: 'grpc-overhead', figure: 'grpc_nereid_transport_vs_node_http2_latency_c1', label: "gRPC latency, Nereid's HTTP/2 vs node:http2, c1" },
  { bench: 'grpc-overhead', figure: 'grpc_nereid_transport_vs_node_http2_throughput_c16', label: "gRPC throughput, Nereid's HTTP/2 vs node:http2, c16" },
  { bench: 'perf-protocols', figure: 'perf_http_latency_c1', label: 'nereid perf: HTTP latency vs in process, c1' },
  { bench: 'perf-protocols', figure: 'perf_grpc_latency_c1', label: 'nereid perf: gRPC latency vs in process, c1' },
  { bench: 'dynamic-batching', figure: 'batching_throughput', label: 'dynamic batching vs no batching (throughput)', target: { on: 'ratio', op: '>=', bound: 3 } },
  { bench: 'dynamic-batching', figure: 'batching_vs_ceiling', label: 'dynamic batching vs in-process ONNX Runtime ceiling', target: { on: 'ratio', op: '>=', bound: 0.6 } },
  { bench: 'dynamic-batching', figure: 'accounting_on_vs_off', label: 'memory accounting on vs off (dynamic batching throughput)', target: { on: 'ratio', op: '>=', bound: 0.98 } },
  { bench: 'dynamic-batching-stream', figure: 'batching_throughput', label: 'dynamic batching vs no batching, gRPC streams', target: { on: 'ratio', op: '>=', bound: 3 } },
  { bench: 'dynamic-batching-stream', figure: 'batching_vs_ceiling', label: 'dynamic batching vs ceiling, gRPC streams', target: { on: 'ratio', op: '>=', bound: 0.6 } },
  { bench: 'instance-update', figure: 'instance count change in place (mlp, 1 → 2 instances)', label: 'in-place instance change vs full reload (time)' },
  { bench: 'python-overhead', figure: 'python added latency per request (16 FP32)', label: 'Python backend added latency per request (µs)', target: { on: 'value', op: '<', bound: 200 } },
  { bench: 'python-overhead', figure: 'python 4 MiB tensor bandwidth (in + out)', label: 'Python backend 4 MiB tensor bandwidth (GB/s)', target: { on: 'value', op: '>=', bound: 2 } },
  { bench: 'streaming', figure: 'stream_grpc_messages_per_s', label: 'decoupled gRPC stream messages vs one-response requests' },
  { bench: 'custom-backend', figure: 'custom JS backend, main thread, FP32[1,16] throughput at concurrency 16', label: 'custom JS backend (main thread) vs ONNX Runtime, c16' },
  { bench: 'shared-memory', figure: 'shm_http_vs_http_binary_16mib', label: 'shared memory over HTTP vs HTTP binary, 16 MiB', target: { on: 'ratio', op: '>=', bound: 3 } },
  { bench: 'shared-memory', figure: 'shm_http_binary_gbps', label: 'HTTP binary throughput, 16 MiB (GB/s)', target: { on: 'value', op: '>=', bound: 1 } },
  { bench: 'sequence', figure: 'sequence batcher throughput', label: 'sequence batcher vs dynamic batcher with client-held state' },
  { bench: 'ensemble', figure: 'ensemble added per step', label: 'ensemble added per step (µs)', target: { on: 'value', op: '<', bound: 25 } },
  { bench: 'response-cache', figure: 'cache_hit_http_latency', label: 'response cache hit vs no cache, HTTP latency (MLP)' },
  { bench: 'response-cache', figure: 'cache_miss_http_latency', label: 'response cache miss vs no cache, HTTP latency (MLP)' },
  { bench: 'ocr-pipeline', figure: 'ocr ensemble (5 steps), latency per image', label: 'OCR pipeline: one ensemble request vs 5 client calls (latency)', target: { on: 'ratio', op: '<', bound: 1 } },
  { bench: 'tracing', figure: 'tracing_otel_rate1000_cpu_per_request_c16', label: 'OpenTelemetry tracing at rate 1000 vs off: server CPU per request, HTTP simple c16', target: { on: 'ratio', op: '<', bound: 1.05 } },
  { bench: 'tracing', figure: 'tracing_otel_rate1_cpu_per_request_c16', label: 'OpenTelemetry tracing at rate 1 vs off: server CPU per request' },
  { bench: 'tracing', figure: 'tracing_triton_rate1_cpu_per_request_c16', label: 'Triton trace file at rate 1 vs off: server CPU per request' },
  { bench: 'tracing', figure: 'tracing_off_control_cpu_per_request_c16', label: 'tracing off, a second server vs the first (the run\'s noise)' },
  // Issue 32: Nereid / Triton on the same Python models, measured by perf_analyzer (bench/vs-triton.ts).
  ...['add_sub_http_c1', 'add_sub_http_c4', 'add_sub_http_c16', 'add_sub_grpc_c1', 'add_sub_grpc_c4', 'add_sub_grpc_c16', 'batched_sleep_http_c16', 'batched_sleep_grpc_c16'].flatMap(
    (point): KeyFigure[] => [
      { bench: 'vs-triton', figure: `vs_triton_pa_${point}_throughput`, label: `${point}: throughput vs Triton`, target: { on: 'ratio', op: '>=', bound: 1 } },
      { bench: 'vs-triton', figure: `vs_triton_pa_${point}_p99`, label: `${point}: p99 vs Triton`, target: { on: 'ratio', op: '<=', bound: 1 } },
      { bench: 'vs-triton', figure: `vs_triton_pa_${point}_batch`, label: `${point}: average batch size vs Triton`, target: { on: 'ratio', op: '>=', bound: 1 } },
    ],
  ),
  // Issue 34: what Nereid adds over each framework's runtime called directly (bench/frameworks.ts).
  ...['tensorflow', 'openvino', 'pytorch'].flatMap((fw): KeyFigure[] => [
    { bench: 'frameworks', figure: `${fw} MLP 256 added latency at batch 1`, label: `${fw}: added latency at batch 1 (µs)`, target: { on: 'value', op: '<', bound: 200 } },
    {
      bench: 'frameworks',
      figure: `${fw} MLP 256 throughput under dynamic batching (64 clients)`,
      label: `${fw}: dynamic batching vs the runtime's batch-32 ceiling, MLP 256`,
      target: { on: 'ratio', op: '>=', bound: 0.6 },
    },
    {
      bench: 'frameworks',
      figure: `${fw} MLP 1024 throughput under dynamic batching (64 clients)`,
      label: `${fw}: dynamic batching vs the runtime's batch-32 ceiling, MLP 1024`,
      target: { on: 'ratio', op: '>=', bound: 0.6 },
    },
  ]),
  { bench: 'analyze', figure: 'analyze quick speed-up over Model Analyzer brute (wall time)', label: 'nereid analyze quick vs Model Analyzer brute (wall-time speed-up)', target: { on: 'value', op: '>=', bound: 5 } },
  { bench: 'analyze', figure: 'analyze quick recommendation throughput', label: 'nereid analyze quick recommendation vs best found (throughput)', target: { on: 'ratio', op: '>=', bound: 0.95 } },
];

const NUMBER = String.raw`-?(?:\d+(?:\.\d+)?(?:e[-+]?\d+)?|NaN|Infinity)`;
const LINE = new RegExp(String.raw`^(.+?): (${NUMBER})(?: ([^\s(]+))?(?: \(baseline (.*) (${NUMBER})(?: (\S+))?, ratio (${NUMBER})\))?$`);

/** A summary line of bench/lib.ts `report`, or undefined for any other output. */
export function parseFigureLine(line: string): ParsedFigure | undefined {
  const m = LINE.exec(line.trimEnd());
  if (m === null) return undefined;
  const [, name, value, unit, baselineName, baseline, , ratio] = m;
  const f: ParsedFigure = { name, value: Number(value), unit: unit ?? '' };
  if (ratio !== undefined) {
    f.baselineName = baselineName;
    f.baseline = Number(baseline);
    f.ratio = Number(ratio);
  }
  return f;
}

const fmt = (n: number): string => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(3));

/** The table: one row per key figure of the scripts that ran, `met` / `not met` / `–` (no target), `missing`. */
export function summaryTable(keys: readonly KeyFigure[], results: ReadonlyMap<string, { code: number | null; figures: readonly ParsedFigure[] }>): string {
  const rows: string[][] = [['benchmark', 'figure', 'value', 'ratio', 'target', 'result']];
  for (const k of keys) {
    const run = results.get(k.bench);
    const f = run?.figures.find((x) => x.name === k.figure);
    const target = k.target ? `${k.target.on} ${k.target.op} ${k.target.bound}` : '';
    if (f === undefined) {
      rows.push([k.bench, k.label, '', '', target, run === undefined ? 'not run' : `missing (exit ${run.code})`]);
      continue;
    }
    let result = '–';
    if (k.target) {
      const x = k.target.on === 'ratio' ? f.ratio : f.value;
      result = x === undefined || Number.isNaN(x) ? 'missing' : (k.target.op === '>=' ? x >= k.target.bound : k.target.op === '<=' ? x <= k.target.bound : x < k.target.bound) ? 'met' : 'not met';
    }
    rows.push([k.bench, k.label, `${fmt(f.value)}${f.unit ? ` ${f.unit}` : ''}`, f.ratio === undefined ? '' : fmt(f.ratio), target, result]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [line(rows[0]), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(line)].join('\n');
}
