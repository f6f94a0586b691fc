/**
 * `nereid serve` options, named as `tritonserver`'s (protocol.md §6). Values come as
 * `--name=value` or `--name value`; booleans accept true/false, on/off, 1/0 (any case).
 */
import { NereidError } from '@nereid/protocol';
import { checkControlOptions, DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS } from '../core/server.js';
import type { LogFormat } from '../observability/logger.js';
import { histogramFamilies } from '../observability/metrics.js';
import { parseResourceLimit, type ResourceLimit } from '../scheduling/rate-limiter.js';

export interface ServeOptions {
  modelRepositories: string[];
  /** `--model-control-mode` (models-and-scheduling.md §1.9). */
  modelControlMode: 'none' | 'poll' | 'explicit';
  /** `--load-model` (repeatable; mode explicit only): models loaded at start, `*` for all. */
  loadModels: string[];
  /** `--repository-poll-secs`: the poll interval in mode poll. */
  repositoryPollSecs: number;
  strictReadiness: boolean;
  exitOnError: boolean;
  exitTimeoutSecs: number;
  /** `--exit-grace-secs` (Nereid's): seconds of serving while unready before shutting down. */
  exitGraceSecs: number;
  /** `--decoupled-response-timeout-secs` (Nereid's): see `ServerOptions.decoupledResponseTimeoutMs`. */
  decoupledResponseTimeoutSecs: number;
  autoCompleteConfig: boolean;
  modelConfigName: string;
  modelLoadThreadCount: number;
  /** `--model-load-retry-count`: extra attempts of a version load that fails. */
  modelLoadRetryCount: number;
  id: string;
  backendConfig: Map<string, Record<string, string>>;
  /** `--backend-directory`: `<dir>/<backend>/` holds a custom backend package (docs/backends.md). */
  backendDirectory: string;
  allowHttp: boolean;
  httpAddress: string;
  httpPort: number;
  httpMaxInputSize: number;
  rateLimit: 'off' | 'execution_count';
  rateLimitResources: ResourceLimit[];
  allowGrpc: boolean;
  grpcAddress: string;
  grpcPort: number;
  grpcKeepaliveTimeMs: number;
  grpcKeepaliveTimeoutMs: number;
  grpcMaxConnectionAgeMs: number | undefined;
  grpcMaxConnectionAgeGraceMs: number | undefined;
  allowMetrics: boolean;
  allowCpuMetrics: boolean;
  /** `--allow-client-shm` (protocol.md §6.4): clients may register and use shared memory; default false. */
  allowClientShm: boolean;
  /** Accepted; this CPU-only server has no GPU families to drop. */
  allowGpuMetrics: boolean;
  /** Empty: the HTTP address (protocol.md §6.2). */
  metricsAddress: string;
  metricsPort: number;
  metricsIntervalMs: number;
  /** `--metrics-config` settings (protocol.md §6.2; Nereid's own keys in docs/operations.md). */
  metricsConfig: MetricsConfig;
  logVerbose: number;
  logInfo: boolean;
  logWarning: boolean;
  logError: boolean;
  logFormat: LogFormat;
  logFile: string;
  /** Triton options accepted for compatibility that have no effect in this version. */
  ignored: string[];
}

export interface MetricsConfig {
  counterLatencies: boolean;
  histogramLatencies: boolean;
  histogramBatchSize: boolean;
  /** Accepted with a warning: summaries are not implemented. */
  summaryLatencies: boolean;
  /** Bucket bounds by histogram family (`histogram_buckets=<family>:<b1>,<b2>,…`). */
  buckets: Record<string, number[]>;
}

export function parseBool(name: string, text: string): boolean {
  const t = text.trim().toLowerCase();
  if (t === 'true' || t === 'on' || t === '1') return true;
  if (t === 'false' || t === 'off' || t === '0') return false;
  throw new NereidError('REQUEST_PARAMETER', `--${name} expects a boolean (true/false, on/off, 1/0), got '${text}'`);
}

function parseInt(name: string, text: string, min = 0): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) throw new NereidError('REQUEST_PARAMETER', `--${name} expects an integer >= ${min}, got '${text}'`);
  return n;
}

type Kind = 'bool' | 'int' | 'string' | 'flag';

interface OptionSpec {
  kind: Kind;
  repeatable?: boolean;
  apply?: (o: ServeOptions, value: string, name: string) => void;
}

/** One `--metrics-config <key>=<value>` setting. */
function applyMetricsConfig(c: MetricsConfig, text: string): void {
  const eq = text.indexOf('=');
  if (eq === -1) throw new NereidError('REQUEST_PARAMETER', `--metrics-config expects <key>=<value>, got '${text}'`);
  const key = text.slice(0, eq);
  const value = text.slice(eq + 1);
  const name = `metrics-config ${key}`;
  switch (key) {
    case 'counter_latencies':
      c.counterLatencies = parseBool(name, value);
      return;
    case 'histogram_latencies':
      c.histogramLatencies = parseBool(name, value);
      return;
    case 'histogram_batch_size':
      c.histogramBatchSize = parseBool(name, value);
      return;
    case 'summary_latencies':
      c.summaryLatencies = parseBool(name, value);
      return;
    case 'summary_quantiles':
      for (const pair of value.split(',')) {
        const [q, e, ...rest] = pair.split(':').map((x) => (x.trim() === '' ? NaN : Number(x)));
        if (rest.length > 0 || !(q! >= 0 && q! <= 1) || !(e! >= 0 && e! <= 1)) {
          throw new NereidError('REQUEST_PARAMETER', `--metrics-config summary_quantiles expects <quantile>:<error>,…, got '${value}'`);
        }
      }
      return;
    case 'histogram_buckets': {
      const colon = value.indexOf(':');
      const family = value.slice(0, colon);
      const bounds = value.slice(colon + 1).split(',').map((b) => (b.trim() === '' ? NaN : Number(b)));
      if (colon === -1 || !histogramFamilies().includes(family)) {
        throw new NereidError(
          'REQUEST_PARAMETER',
          `--metrics-config histogram_buckets expects <family>:<b1>,<b2>,… with a family among ${histogramFamilies().join(', ')}; got '${value}'`,
        );
      }
      if (bounds.some((b) => !Number.isFinite(b))) {
        throw new NereidError('REQUEST_PARAMETER', `--metrics-config histogram_buckets for ${family} expects finite numbers, got '${value.slice(colon + 1)}'`);
      }
      c.buckets[family] = bounds;
      return;
    }
    default:
      throw new NereidError(
        'REQUEST_PARAMETER',
        `--metrics-config has no key '${key}'; known keys: counter_latencies, histogram_latencies, histogram_batch_size, ` +
          'histogram_buckets, summary_latencies, summary_quantiles',
      );
  }
}

/** Options with an effect. */
const IMPLEMENTED: Record<string, OptionSpec> = {
  'model-repository': { kind: 'string', repeatable: true, apply: (o, v) => void o.modelRepositories.push(v) },
  'model-store': { kind: 'string', repeatable: true, apply: (o, v) => void o.modelRepositories.push(v) },
  'model-control-mode': {
    kind: 'string',
    apply: (o, v, n) => {
      if (v !== 'none' && v !== 'poll' && v !== 'explicit') {
        throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'none', 'poll' or 'explicit', got '${v}'`);
      }
      o.modelControlMode = v;
    },
  },
  'load-model': {
    kind: 'string',
    repeatable: true,
    apply: (o, v, n) => {
      if (v.trim() === '') throw new NereidError('REQUEST_PARAMETER', `--${n} expects a model name or '*'`);
      o.loadModels.push(v);
    },
  },
  'repository-poll-secs': { kind: 'int', apply: (o, v, n) => (o.repositoryPollSecs = parseInt(n, v)) },
  'strict-readiness': { kind: 'bool', apply: (o, v, n) => (o.strictReadiness = parseBool(n, v)) },
  'exit-on-error': { kind: 'bool', apply: (o, v, n) => (o.exitOnError = parseBool(n, v)) },
  'exit-timeout-secs': { kind: 'int', apply: (o, v, n) => (o.exitTimeoutSecs = parseInt(n, v)) },
  'exit-grace-secs': { kind: 'int', apply: (o, v, n) => (o.exitGraceSecs = parseInt(n, v)) },
  'decoupled-response-timeout-secs': {
    kind: 'string',
    apply: (o, v, n) => {
      const secs = Number(v);
      if (v.trim() === '' || !Number.isFinite(secs) || secs < 0) {
        throw new NereidError('REQUEST_PARAMETER', `--${n} expects a number of seconds >= 0 (0: no limit), got '${v}'`);
      }
      o.decoupledResponseTimeoutSecs = secs;
    },
  },
  'disable-auto-complete-config': { kind: 'flag', apply: (o) => (o.autoCompleteConfig = false) },
  'strict-model-config': { kind: 'bool', apply: (o, v, n) => (o.autoCompleteConfig = !parseBool(n, v)) },
  'model-config-name': {
    kind: 'string',
    apply: (o, v, n) => {
      if (/\s/.test(v)) throw new NereidError('REQUEST_PARAMETER', `--${n} must not contain spaces, got '${v}'`);
      o.modelConfigName = v;
    },
  },
  'model-load-thread-count': { kind: 'int', apply: (o, v, n) => (o.modelLoadThreadCount = parseInt(n, v, 1)) },
  'model-load-retry-count': { kind: 'int', apply: (o, v, n) => (o.modelLoadRetryCount = parseInt(n, v)) },
  'model-namespacing': {
    kind: 'bool',
    apply: (_o, v, n) => {
      if (parseBool(n, v)) {
        throw new NereidError(
          'REQUEST_PARAMETER',
          `--${n}=true is not supported by this version of Nereid: a model name must be unique across the --model-repository roots ` +
            `(a name found in two of them is reported UNAVAILABLE); rename one of the models or serve the repositories from separate servers`,
        );
      }
    },
  },
  id: { kind: 'string', apply: (o, v) => (o.id = v) },
  'backend-config': {
    kind: 'string',
    repeatable: true,
    apply: (o, v, n) => {
      // `<backend>,<key>=<value>` or a global `<key>=<value>`.
      const comma = v.indexOf(',');
      const eq = v.indexOf('=');
      if (eq === -1) throw new NereidError('REQUEST_PARAMETER', `--${n} expects <backend>,<key>=<value> or <key>=<value>, got '${v}'`);
      const backend = comma !== -1 && comma < eq ? v.slice(0, comma) : '';
      const setting = comma !== -1 && comma < eq ? v.slice(comma + 1) : v;
      const at = setting.indexOf('=');
      const settings = o.backendConfig.get(backend) ?? {};
      settings[setting.slice(0, at)] = setting.slice(at + 1);
      o.backendConfig.set(backend, settings);
    },
  },
  'backend-directory': { kind: 'string', apply: (o, v) => (o.backendDirectory = v) },
  'allow-http': { kind: 'bool', apply: (o, v, n) => (o.allowHttp = parseBool(n, v)) },
  'http-address': { kind: 'string', apply: (o, v) => (o.httpAddress = v.replace(/^ipv6:\[(.*)\]$/, '$1')) },
  'http-port': { kind: 'int', apply: (o, v, n) => (o.httpPort = parseInt(n, v)) },
  'http-max-input-size': { kind: 'int', apply: (o, v, n) => (o.httpMaxInputSize = parseInt(n, v, 1)) },
  'rate-limit': {
    kind: 'string',
    apply: (o, v, n) => {
      if (v !== 'off' && v !== 'execution_count') {
        throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'off' or 'execution_count', got '${v}'`);
      }
      o.rateLimit = v;
    },
  },
  'rate-limit-resource': { kind: 'string', repeatable: true, apply: (o, v) => void o.rateLimitResources.push(parseResourceLimit(v)) },
  'allow-grpc': { kind: 'bool', apply: (o, v, n) => (o.allowGrpc = parseBool(n, v)) },
  'grpc-address': { kind: 'string', apply: (o, v) => (o.grpcAddress = v.replace(/^ipv6:\[(.*)\]$/, '$1')) },
  'grpc-port': { kind: 'int', apply: (o, v, n) => (o.grpcPort = parseInt(n, v)) },
  'grpc-keepalive-time': { kind: 'int', apply: (o, v, n) => (o.grpcKeepaliveTimeMs = parseInt(n, v, 1)) },
  'grpc-keepalive-timeout': { kind: 'int', apply: (o, v, n) => (o.grpcKeepaliveTimeoutMs = parseInt(n, v, 1)) },
  'grpc-max-connection-age': { kind: 'int', apply: (o, v, n) => (o.grpcMaxConnectionAgeMs = parseInt(n, v, 1)) },
  'grpc-max-connection-age-grace': { kind: 'int', apply: (o, v, n) => (o.grpcMaxConnectionAgeGraceMs = parseInt(n, v, 1)) },
  'allow-metrics': { kind: 'bool', apply: (o, v, n) => (o.allowMetrics = parseBool(n, v)) },
  'allow-cpu-metrics': { kind: 'bool', apply: (o, v, n) => (o.allowCpuMetrics = parseBool(n, v)) },
  'allow-client-shm': { kind: 'bool', apply: (o, v, n) => (o.allowClientShm = parseBool(n, v)) },
  'allow-gpu-metrics': { kind: 'bool', apply: (o, v, n) => (o.allowGpuMetrics = parseBool(n, v)) },
  'metrics-address': { kind: 'string', apply: (o, v) => (o.metricsAddress = v.replace(/^ipv6:\[(.*)\]$/, '$1')) },
  'metrics-port': { kind: 'int', apply: (o, v, n) => (o.metricsPort = parseInt(n, v)) },
  'metrics-interval-ms': {
    kind: 'string',
    apply: (o, v, n) => {
      const ms = Number(v);
      if (v.trim() === '' || !Number.isFinite(ms) || ms <= 0) throw new NereidError('REQUEST_PARAMETER', `--${n} expects a number of milliseconds > 0, got '${v}'`);
      o.metricsIntervalMs = ms;
    },
  },
  'metrics-config': { kind: 'string', repeatable: true, apply: (o, v) => applyMetricsConfig(o.metricsConfig, v) },
  'log-verbose': { kind: 'int', apply: (o, v, n) => (o.logVerbose = parseInt(n, v)) },
  'log-info': { kind: 'bool', apply: (o, v, n) => (o.logInfo = parseBool(n, v)) },
  'log-warning': { kind: 'bool', apply: (o, v, n) => (o.logWarning = parseBool(n, v)) },
  'log-error': { kind: 'bool', apply: (o, v, n) => (o.logError = parseBool(n, v)) },
  'log-format': {
    kind: 'string',
    apply: (o, v, n) => {
      if (v !== 'default' && v !== 'ISO8601') throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'default' or 'ISO8601', got '${v}'`);
      o.logFormat = v;
    },
  },
  'log-file': { kind: 'string', apply: (o, v) => (o.logFile = v) },
};

/** tritonserver options accepted so that existing command lines run, with no effect yet. */
const ACCEPTED: Record<string, Kind> = {
  'repoagent-directory': 'string',
  'reuse-http-port': 'bool',
  'http-thread-count': 'int',
  'http-header-forward-pattern': 'string',
  'http-restricted-api': 'string',
  'reuse-grpc-port': 'bool',
  'grpc-header-forward-pattern': 'string',
  'grpc-restricted-protocol': 'string',
  'grpc-infer-thread-count': 'int',
  'grpc-infer-allocation-pool-size': 'int',
  'grpc-max-response-pool-size': 'int',
  'grpc-infer-response-compression-level': 'string',
  'grpc-use-ssl': 'bool',
  'grpc-use-ssl-mutual': 'bool',
  'grpc-server-cert': 'string',
  'grpc-server-key': 'string',
  'grpc-root-cert': 'string',
  'grpc-keepalive-permit-without-calls': 'bool',
  'grpc-http2-max-pings-without-data': 'int',
  'grpc-http2-min-recv-ping-interval-without-data': 'int',
  'grpc-http2-max-ping-strikes': 'int',
  'allow-sagemaker': 'bool',
  'allow-vertex-ai': 'bool',
  'trace-config': 'string',
  'trace-file': 'string',
  'trace-level': 'string',
  'trace-rate': 'int',
  'trace-count': 'int',
  'trace-log-frequency': 'int',
  'pinned-memory-pool-byte-size': 'int',
  'cuda-memory-pool-byte-size': 'string',
  'cuda-virtual-address-size': 'string',
  'min-supported-compute-capability': 'string',
  'buffer-manager-thread-count': 'int',
  'host-policy': 'string',
  'model-load-gpu-limit': 'string',
  'enable-peer-access': 'bool',
  'cache-config': 'string',
  'response-cache-byte-size': 'int',
  'cache-directory': 'string',
};

export function defaultServeOptions(): ServeOptions {
  return {
    modelRepositories: [],
    modelControlMode: 'none',
    loadModels: [],
    repositoryPollSecs: 15,
    strictReadiness: true,
    exitOnError: true,
    exitTimeoutSecs: 30,
    exitGraceSecs: 0,
    decoupledResponseTimeoutSecs: DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS / 1000,
    autoCompleteConfig: true,
    modelConfigName: '',
    modelLoadThreadCount: 4,
    modelLoadRetryCount: 0,
    id: 'triton',
    backendConfig: new Map(),
    backendDirectory: '',
    allowHttp: true,
    httpAddress: '0.0.0.0',
    httpPort: 8000,
    httpMaxInputSize: 67_108_864,
    rateLimit: 'off',
    rateLimitResources: [],
    allowGrpc: true,
    grpcAddress: '0.0.0.0',
    grpcPort: 8001,
    grpcKeepaliveTimeMs: 7_200_000,
    grpcKeepaliveTimeoutMs: 20_000,
    grpcMaxConnectionAgeMs: undefined,
    grpcMaxConnectionAgeGraceMs: undefined,
    allowMetrics: true,
    allowCpuMetrics: true,
    allowClientShm: false,
    allowGpuMetrics: true,
    metricsAddress: '',
    metricsPort: 8002,
    metricsIntervalMs: 2000,
    metricsConfig: { counterLatencies: true, histogramLatencies: false, histogramBatchSize: false, summaryLatencies: false, buckets: {} },
    logVerbose: 0,
    logInfo: true,
    logWarning: true,
    logError: true,
    logFormat: 'default',
    logFile: '',
    ignored: [],
  };
}

/** Every option name `nereid serve` knows, for help output. */
export function knownOptionNames(): { implemented: string[]; accepted: string[] } {
  return { implemented: Object.keys(IMPLEMENTED), accepted: Object.keys(ACCEPTED) };
}

/** Parses `nereid serve` arguments. Throws a NereidError naming the offending option. */
export function parseServeArgs(argv: readonly string[]): ServeOptions {
  const o = defaultServeOptions();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      throw new NereidError('REQUEST_PARAMETER', `unexpected argument '${arg}': options look like --name=value`);
    }
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    const spec: OptionSpec | undefined = IMPLEMENTED[name] ?? (ACCEPTED[name] ? { kind: ACCEPTED[name]! } : undefined);
    if (spec === undefined) {
      throw new NereidError('REQUEST_PARAMETER', `unrecognized option '--${name}'; run 'nereid serve --help' for the list`);
    }
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (spec.kind === 'flag') value = 'true';
    else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith('--') && spec.kind !== 'string')) {
        throw new NereidError('REQUEST_PARAMETER', `option '--${name}' needs a value`);
      }
      value = next;
      i++;
    }
    if (spec.apply) spec.apply(o, value, name);
    else {
      if (spec.kind === 'bool') parseBool(name, value);
      if (spec.kind === 'int') parseInt(name, value, -Infinity);
      if (!o.ignored.includes(name)) o.ignored.push(name);
    }
  }
  checkControlOptions(o);
  return o;
}
