/**
 * `nereid perf` options: perf_analyzer's flag names, defaults and rules (perf-and-analyzer.md
 * §1.3). Every problem is a NereidError PERF_OPTION, which the command turns into exit code 3.
 */
import { NereidError } from '@nereid/protocol';
import { DEFAULT_DRAIN_TIMEOUT_MS } from './load.js';

export type Protocol = 'http' | 'grpc';
export type GrpcCompression = 'none' | 'gzip' | 'deflate';
export type ServiceKind = 'triton' | 'in_process';
export type MeasurementMode = 'time_windows' | 'count_windows';
export type Distribution = 'constant' | 'poisson';

/** A sweep `start:end:step`; `end` 0 means "until the latency threshold is exceeded" (§1.2.9). */
export interface Range {
  start: number;
  end: number;
  step: number;
}

export interface PerfOptions {
  model: string;
  version: string;
  batchSize: number;
  /** Exactly one of concurrency, requestRate, requestIntervals is set. */
  concurrency?: Range;
  requestRate?: Range;
  /** Gaps in microseconds, replayed in a loop (§1.1 custom intervals). */
  requestIntervals?: string;
  distribution: Distribution;
  protocol: Protocol;
  url: string;
  serviceKind: ServiceKind;
  modelRepository?: string;
  async: boolean;
  streaming: boolean;
  maxThreads?: number;
  inputData: string[];
  shapes: Map<string, number[]>;
  stringLength: number;
  stringData?: string;
  inputTensorFormat: 'binary' | 'json';
  outputTensorFormat: 'binary' | 'json';
  measurementIntervalMs: number;
  measurementMode: MeasurementMode;
  measurementRequestCount: number;
  stabilityPercentage: number;
  maxTrials: number;
  /** Undefined: stabilize and summarize on the average latency. */
  percentile?: number;
  latencyThresholdMs: number;
  binarySearch: boolean;
  requestCount: number;
  warmupRequestCount: number;
  /** `--drain-timeout` (Nereid's own): ms the requests in flight may take once the load stopped sending. */
  drainTimeoutMs: number;
  csvFile?: string;
  verboseCsv: boolean;
  headers: Record<string, string>;
  /** Compression of the gRPC messages this tool sends (`--grpc-compression-algorithm`). */
  grpcCompression: GrpcCompression;
  verbose: boolean;
  /** Beyond perf_analyzer: print the results as one JSON object on stdout. */
  json: boolean;
  /** Beyond perf_analyzer: processes the load is spread over (1: this one). */
  workers: number;
  /** Beyond perf_analyzer: a progress line on stderr while measuring (default: when stderr is a TTY). */
  progress: boolean;
  /** Sequence models: `--sequence-length` (undefined: a JSON stream's length, else 20), `--sequence-length-variation` (20 %). */
  sequenceLength?: number;
  sequenceLengthVariation: number;
  /** `--sequence-id-range start[:end]`: correlation ids dealt from start, wrapping after end (0: no end). */
  sequenceIdStart: number;
  sequenceIdEnd: number;
  /** Rate modes: sequences open at once (`--num-of-sequences`, 4). */
  numOfSequences: number;
  /** `--serial-sequences`: rate modes keep at most one request of a sequence outstanding (concurrency mode always does). */
  serialSequences: boolean;
  /** `--shared-memory`: `system` passes tensors through registered /dev/shm regions. */
  sharedMemory: 'none' | 'system';
  /** `--output-shared-memory-size`: bytes per output region for outputs without a fixed size (102400). */
  outputSharedMemorySize: number;
  /** `--collect-metrics`: scrape `metricsUrl` every `metricsIntervalMs` during each window. */
  collectMetrics: boolean;
  metricsUrl: string;
  metricsIntervalMs: number;
}

function optionError(message: string): NereidError {
  return new NereidError('PERF_OPTION', message);
}

/** Value-taking flags, by every spelling, to the canonical long name. */
const VALUE_FLAGS: Record<string, string> = {
  '-m': 'model-name',
  '--model-name': 'model-name',
  '-x': 'model-version',
  '--model-version': 'model-version',
  '-b': 'batch-size',
  '--batch-size': 'batch-size',
  '--concurrency-range': 'concurrency-range',
  '--request-rate-range': 'request-rate-range',
  '--request-distribution': 'request-distribution',
  '--request-intervals': 'request-intervals',
  '-i': 'protocol',
  '--protocol': 'protocol',
  '-u': 'url',
  '--url': 'url',
  '--service-kind': 'service-kind',
  '--model-repository': 'model-repository',
  '--max-threads': 'max-threads',
  '--shared-memory': 'shared-memory',
  '--output-shared-memory-size': 'output-shared-memory-size',
  '--input-data': 'input-data',
  '--shape': 'shape',
  '--string-length': 'string-length',
  '--string-data': 'string-data',
  '--input-tensor-format': 'input-tensor-format',
  '--output-tensor-format': 'output-tensor-format',
  '-p': 'measurement-interval',
  '--measurement-interval': 'measurement-interval',
  '--measurement-mode': 'measurement-mode',
  '--measurement-request-count': 'measurement-request-count',
  '-s': 'stability-percentage',
  '--stability-percentage': 'stability-percentage',
  '-r': 'max-trials',
  '--max-trials': 'max-trials',
  '--percentile': 'percentile',
  '-l': 'latency-threshold',
  '--latency-threshold': 'latency-threshold',
  '--request-count': 'request-count',
  '--warmup-request-count': 'warmup-request-count',
  '--drain-timeout': 'drain-timeout',
  '-f': 'filename',
  '--filename': 'filename',
  '-H': 'header',
  '--sequence-length': 'sequence-length',
  '--sequence-length-variation': 'sequence-length-variation',
  '--sequence-id-range': 'sequence-id-range',
  '--num-of-sequences': 'num-of-sequences',
  '--workers': 'workers',
  '--metrics-url': 'metrics-url',
  '--metrics-interval': 'metrics-interval',
  '--profile-export-file': 'profile-export-file',
  '--grpc-compression-algorithm': 'grpc-compression-algorithm',
};

const BOOLEAN_FLAGS: Record<string, string> = {
  '-a': 'async',
  '--async': 'async',
  '--sync': 'sync',
  '--streaming': 'streaming',
  '--binary-search': 'binary-search',
  '--verbose-csv': 'verbose-csv',
  '-v': 'verbose',
  '--verbose': 'verbose',
  '--json': 'json',
  '--progress': 'progress',
  '--no-progress': 'no-progress',
  '--serial-sequences': 'serial-sequences',
  '--collect-metrics': 'collect-metrics',
  '-h': 'help',
  '--help': 'help',
};

/** Flags perf_analyzer has that this tool refuses, with the reason shown to the user. */
const NOT_SUPPORTED: Record<string, string> = {
  'profile-export-file': '--profile-export-file is not supported yet',
};

function integer(flag: string, value: string, min: number): number {
  if (!/^-?\d+$/.test(value) || Number(value) < min) {
    throw optionError(`--${flag} needs an integer of at least ${min}, got '${value}'`);
  }
  return Number(value);
}

function decimal(flag: string, value: string, min: number): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < min) throw optionError(`--${flag} needs a number of at least ${min}, got '${value}'`);
  return n;
}

/** `start[:end[:step]]` as perf_analyzer reads it: a missing end is the start, a missing step 1. */
export function parseRange(flag: string, value: string, isFloat: boolean): Range {
  const parts = value.split(':');
  if (parts.length > 3 || parts.some((p) => p === '')) {
    throw optionError(`--${flag} takes start:end:step (e.g. 1:8:1), got '${value}'`);
  }
  const read = (p: string) => (isFloat ? decimal(flag, p, 0) : integer(flag, p, 0));
  const start = read(parts[0]);
  const end = parts.length > 1 ? read(parts[1]) : start;
  const step = parts.length > 2 ? read(parts[2]) : 1;
  if (start <= 0) throw optionError(`--${flag}: the start must be above 0, got '${value}'`);
  if (step <= 0) throw optionError(`--${flag}: the step must be above 0, got '${value}'`);
  if (end !== 0 && end < start) throw optionError(`--${flag}: the end ${end} is below the start ${start}`);
  return { start, end, step };
}

/** `NAME:d1,d2,…` (dimensions without the batch dimension). The name may itself contain ':'. */
function parseShape(value: string): [string, number[]] {
  const at = value.lastIndexOf(':');
  if (at <= 0) throw optionError(`--shape takes NAME:d1,d2,… (e.g. INPUT0:1,16), got '${value}'`);
  const dims = value.slice(at + 1).split(',').map((d) => {
    if (!/^\d+$/.test(d.trim())) throw optionError(`--shape ${value}: '${d}' is not a dimension (a whole number ≥ 0)`);
    return Number(d.trim());
  });
  return [value.slice(0, at), dims];
}

/** The flag's canonical name and its value, from `--flag value`, `--flag=value`, `-Xvalue`. */
function splitFlag(arg: string): { flag: string; inline?: string } {
  if (arg.startsWith('--')) {
    const eq = arg.indexOf('=');
    return eq < 0 ? { flag: arg } : { flag: arg.slice(0, eq), inline: arg.slice(eq + 1) };
  }
  if (arg.length > 2 && VALUE_FLAGS[arg.slice(0, 2)] !== undefined) return { flag: arg.slice(0, 2), inline: arg.slice(2) };
  return { flag: arg };
}

export const USAGE = `Usage: nereid perf -m MODEL [options]   (perf_analyzer's flags; docs/perf.md)
  -m MODEL  -x VERSION  -b BATCH  -u URL  -i http|grpc  --streaming  -a|--async|--sync
  --concurrency-range S:E:ST | --request-rate-range S:E:ST [--request-distribution constant|poisson]
  | --request-intervals FILE
  --input-data random|zero|DIR|FILE.json  --shape NAME:d1,d2  --string-length N  --string-data S
  --shared-memory none|system  --output-shared-memory-size BYTES
  --sequence-length N  --sequence-length-variation PCT  --sequence-id-range S[:E]  --num-of-sequences N
  --serial-sequences  --collect-metrics [--metrics-url HOST:PORT/PATH  --metrics-interval MS]
  -p MS  --measurement-mode time_windows|count_windows  --measurement-request-count N
  -s PCT  -r TRIALS  --percentile P  -l MS  --binary-search  --request-count N
  --warmup-request-count N  -f FILE.csv  --verbose-csv  -H 'Name: value'  -v
  --service-kind triton|in_process --model-repository DIR   --workers N  --json  --progress|--no-progress
  --drain-timeout MS
`;

/** Thrown for `-h`/`--help`: the command prints USAGE and exits 0. */
export class HelpRequested extends Error {}

/** Parses perf_analyzer-style arguments. Throws NereidError PERF_OPTION for anything wrong. */
export function parsePerfArgs(argv: readonly string[], stderrIsTty = false): PerfOptions {
  const values = new Map<string, string[]>();
  const flags = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const { flag, inline } = splitFlag(arg);
    const valueName = VALUE_FLAGS[flag];
    const boolName = BOOLEAN_FLAGS[flag];
    if (valueName !== undefined) {
      let value = inline;
      if (value === undefined) {
        if (i + 1 >= argv.length) throw optionError(`${flag} needs a value`);
        value = argv[++i];
      }
      const list = values.get(valueName) ?? [];
      list.push(value);
      values.set(valueName, list);
    } else if (boolName !== undefined && inline === undefined) {
      flags.add(boolName);
    } else {
      throw optionError(`unknown option '${arg}' (nereid perf -h lists the options)`);
    }
  }
  if (flags.has('help')) throw new HelpRequested();
  for (const name of [...values.keys(), ...flags]) {
    const why = NOT_SUPPORTED[name];
    if (why !== undefined) throw optionError(`--${name}: ${why}`);
  }
  const one = (name: string): string | undefined => {
    const list = values.get(name);
    if (list === undefined) return undefined;
    if (list.length > 1 && name !== 'input-data' && name !== 'shape' && name !== 'header') throw optionError(`--${name} given ${list.length} times; give it once`);
    return list[list.length - 1];
  };
  const choice = <T extends string>(name: string, allowed: readonly T[], fallback: T): T => {
    const v = one(name);
    if (v === undefined) return fallback;
    if (!(allowed as readonly string[]).includes(v)) throw optionError(`--${name} must be one of ${allowed.join(', ')}, got '${v}'`);
    return v as T;
  };

  const model = one('model-name');
  if (model === undefined || model === '') throw optionError('-m MODEL is required: the name of the model to measure');

  const sharedMemory = choice('shared-memory', ['none', 'system', 'cuda'], 'none') as 'none' | 'system' | 'cuda';
  if (sharedMemory === 'cuda') {
    throw optionError('--shared-memory cuda needs CUDA devices, and Nereid serves on CPU only; use --shared-memory system or none');
  }
  const outputShmArg = one('output-shared-memory-size');
  if (outputShmArg !== undefined && sharedMemory === 'none') {
    throw optionError('--output-shared-memory-size applies only with --shared-memory system');
  }
  const idRange = one('sequence-id-range');
  let sequenceIdStart = 1;
  let sequenceIdEnd = 0;
  if (idRange !== undefined) {
    const parts = idRange.split(':');
    if (parts.length > 2 || parts.some((p) => p === '')) throw optionError(`--sequence-id-range takes start[:end] (e.g. 1:1000), got '${idRange}'`);
    sequenceIdStart = integer('sequence-id-range', parts[0], 1);
    sequenceIdEnd = parts.length > 1 ? integer('sequence-id-range', parts[1], 1) : 0;
    if (sequenceIdEnd !== 0 && sequenceIdEnd < sequenceIdStart) throw optionError(`--sequence-id-range: the end ${sequenceIdEnd} is below the start ${sequenceIdStart}`);
    if (Math.max(sequenceIdStart, sequenceIdEnd) > Number.MAX_SAFE_INTEGER) throw optionError(`--sequence-id-range: ids above ${Number.MAX_SAFE_INTEGER} are not supported`);
  }

  const protocol = choice<Protocol>('protocol', ['http', 'grpc'], 'http');
  const serviceKind = choice<ServiceKind>('service-kind', ['triton', 'in_process'], 'triton');
  const grpcCompression = choice<GrpcCompression>('grpc-compression-algorithm', ['none', 'gzip', 'deflate'], 'none');
  if (one('grpc-compression-algorithm') !== undefined && (protocol !== 'grpc' || serviceKind !== 'triton')) {
    throw optionError('--grpc-compression-algorithm applies only with -i grpc');
  }
  const modelRepository = one('model-repository');
  if (serviceKind === 'in_process' && modelRepository === undefined) {
    throw optionError('--service-kind in_process needs --model-repository DIR');
  }
  if (serviceKind !== 'in_process' && modelRepository !== undefined) {
    throw optionError('--model-repository applies only to --service-kind in_process');
  }
  const streaming = flags.has('streaming');
  if (streaming && protocol !== 'grpc' && serviceKind === 'triton') throw optionError('--streaming needs -i grpc');
  if (flags.has('async') && flags.has('sync')) throw optionError('--async and --sync exclude each other');

  const concurrencyArg = one('concurrency-range');
  const rateArg = one('request-rate-range');
  const intervals = one('request-intervals');
  const modes = [concurrencyArg, rateArg, intervals].filter((v) => v !== undefined).length;
  if (modes > 1) throw optionError('give only one of --concurrency-range, --request-rate-range and --request-intervals');
  const concurrency = rateArg === undefined && intervals === undefined ? parseRange('concurrency-range', concurrencyArg ?? '1:1:1', false) : undefined;
  const requestRate = rateArg !== undefined ? parseRange('request-rate-range', rateArg, true) : undefined;
  const range = concurrency ?? requestRate;

  const latencyThresholdMs = one('latency-threshold') !== undefined ? decimal('latency-threshold', one('latency-threshold')!, 0) : 0;
  if (range !== undefined && range.end === 0 && latencyThresholdMs === 0) {
    throw optionError('the range end and --latency-threshold cannot both be 0: give an end or a threshold');
  }
  const binarySearch = flags.has('binary-search');
  if (binarySearch && intervals !== undefined) throw optionError('--binary-search needs --concurrency-range or --request-rate-range');
  if (binarySearch && latencyThresholdMs === 0) throw optionError('--binary-search needs --latency-threshold MS');
  if (binarySearch && range!.end === 0) throw optionError('--binary-search needs a range end above 0');

  if (one('request-count') !== undefined && Number(one('request-count')) > 0 && concurrency === undefined) {
    throw optionError('--request-count is supported in concurrency mode only so far; use -p windows with --request-rate-range');
  }
  const percentileArg = one('percentile');
  const percentile = percentileArg !== undefined ? decimal('percentile', percentileArg, 0) : undefined;
  if (percentile !== undefined && (percentile <= 0 || percentile >= 100)) {
    throw optionError(`--percentile must lie between 0 and 100 (exclusive), got ${percentileArg}`);
  }

  const shapes = new Map<string, number[]>();
  for (const s of values.get('shape') ?? []) {
    const [name, dims] = parseShape(s);
    shapes.set(name, dims);
  }
  const headers: Record<string, string> = {};
  for (const h of values.get('header') ?? []) {
    const at = h.indexOf(':');
    if (at <= 0) throw optionError(`-H takes 'Name: value', got '${h}'`);
    headers[h.slice(0, at).trim()] = h.slice(at + 1).trim();
  }
  const inputData = values.get('input-data') ?? ['random'];
  const url = one('url') ?? (protocol === 'grpc' ? 'localhost:8001' : 'localhost:8000');
  const maxThreads = one('max-threads');
  const workers = integer('workers', one('workers') ?? '1', 1);
  if (workers > 1 && serviceKind === 'in_process') throw optionError('--workers needs a server to reach; it does not apply to --service-kind in_process');
  if (workers > 1 && intervals !== undefined) throw optionError('--workers does not apply to --request-intervals');
  if (sharedMemory === 'system' && serviceKind === 'in_process') {
    throw optionError('--shared-memory system needs a server to register regions with; in process tensors are never copied over a wire: use --shared-memory none');
  }
  if (sharedMemory === 'system' && workers > 1) throw optionError('--shared-memory system does not apply with --workers; drop one of them');
  if (one('num-of-sequences') !== undefined && concurrency !== undefined) {
    throw optionError('--num-of-sequences applies to --request-rate-range and --request-intervals; in concurrency mode each of the N slots runs one sequence at a time');
  }
  const collectMetrics = flags.has('collect-metrics');
  const metricsUrlArg = one('metrics-url');
  const metricsIntervalArg = one('metrics-interval');
  if (!collectMetrics && metricsUrlArg !== undefined) throw optionError('Must specify --collect-metrics when using the --metrics-url option.');
  if (!collectMetrics && metricsIntervalArg !== undefined) throw optionError('Must specify --collect-metrics when using the --metrics-interval option.');
  if (collectMetrics && serviceKind === 'in_process') {
    throw optionError('--collect-metrics scrapes a server\'s metrics endpoint; it does not apply to --service-kind in_process');
  }
  if (metricsUrlArg !== undefined && !/^(https?:\/\/)?[^\s/:]+(:\d+)?(\/\S*)?$/.test(metricsUrlArg)) {
    throw optionError(`--metrics-url takes HOST:PORT/PATH (e.g. localhost:8002/metrics), got '${metricsUrlArg}'`);
  }

  return {
    model,
    version: one('model-version') ?? '',
    batchSize: integer('batch-size', one('batch-size') ?? '1', 1),
    concurrency,
    requestRate,
    requestIntervals: intervals,
    distribution: choice<Distribution>('request-distribution', ['constant', 'poisson'], 'constant'),
    protocol,
    url,
    serviceKind,
    modelRepository,
    async: flags.has('async'),
    streaming,
    maxThreads: maxThreads === undefined ? undefined : integer('max-threads', maxThreads, 1),
    inputData,
    shapes,
    stringLength: integer('string-length', one('string-length') ?? '128', 0),
    stringData: one('string-data'),
    inputTensorFormat: choice('input-tensor-format', ['binary', 'json'], 'binary'),
    outputTensorFormat: choice('output-tensor-format', ['binary', 'json'], 'binary'),
    measurementIntervalMs: integer('measurement-interval', one('measurement-interval') ?? '5000', 1),
    measurementMode: choice<MeasurementMode>('measurement-mode', ['time_windows', 'count_windows'], 'time_windows'),
    measurementRequestCount: integer('measurement-request-count', one('measurement-request-count') ?? '50', 1),
    stabilityPercentage: decimal('stability-percentage', one('stability-percentage') ?? '10', 0),
    maxTrials: integer('max-trials', one('max-trials') ?? '10', 1),
    percentile,
    latencyThresholdMs,
    binarySearch,
    requestCount: integer('request-count', one('request-count') ?? '0', 0),
    warmupRequestCount: integer('warmup-request-count', one('warmup-request-count') ?? '0', 0),
    drainTimeoutMs: integer('drain-timeout', one('drain-timeout') ?? String(DEFAULT_DRAIN_TIMEOUT_MS), 1),
    csvFile: one('filename'),
    verboseCsv: flags.has('verbose-csv'),
    headers,
    grpcCompression,
    verbose: flags.has('verbose'),
    json: flags.has('json'),
    workers,
    progress: flags.has('progress') || (stderrIsTty && !flags.has('no-progress')),
    sequenceLength: one('sequence-length') === undefined ? undefined : integer('sequence-length', one('sequence-length')!, 1),
    sequenceLengthVariation: decimal('sequence-length-variation', one('sequence-length-variation') ?? '20', 0),
    sequenceIdStart,
    sequenceIdEnd,
    numOfSequences: integer('num-of-sequences', one('num-of-sequences') ?? '4', 1),
    serialSequences: flags.has('serial-sequences'),
    sharedMemory,
    outputSharedMemorySize: outputShmArg === undefined ? 102400 : integer('output-shared-memory-size', outputShmArg, 1),
    collectMetrics,
    metricsUrl: metricsUrlArg ?? 'localhost:8002/metrics',
    metricsIntervalMs: metricsIntervalArg === undefined ? 1000 : integer('metrics-interval', metricsIntervalArg, 1),
  };
}
