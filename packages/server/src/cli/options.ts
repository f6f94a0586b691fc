/**
 * `nereid serve` options, named as `tritonserver`'s (protocol.md §6). Values come as
 * `--name=value` or `--name value`; booleans accept true/false, on/off, 1/0 (any case).
 *
 * One table (`SERVE_OPTIONS`) holds every option with its group, value format, default,
 * description and either its effect (`apply`) or why it is ignored: the parser and
 * `nereid serve --help` (serve-help.ts) both read it.
 */
import { NereidError } from '@nereid/protocol';
import { checkBackendConfigKey } from './backend-config.js';
import { CONFIG_LIMIT_NAMES, parseConfigLimit, type ConfigLimitName } from '../config/index.js';
import { checkControlOptions, DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS } from '../core/server.js';
import { DEFAULT_MEMORY_SAMPLE_INTERVAL_MS, parseByteSize } from '../core/memory.js';
import { DEFAULT_GRPC_MAX_CONCURRENT_STREAMS, type GrpcServerKind } from '../frontends/grpc/grpc-frontend.js';
import { MAX_MESSAGE_SIZE } from '../frontends/grpc/infer-codec.js';
import { DEFAULT_HTTP_LIMITS, type HttpServerKind } from '../frontends/http/http-frontend.js';
import type { LogFormat } from '../observability/logger.js';
import { histogramFamilies } from '../observability/metrics.js';
import { applyOpenTelemetrySetting, checkOpenTelemetrySettings, defaultOpenTelemetrySettings, type OpenTelemetrySettings } from '../observability/opentelemetry.js';
import { DEFAULT_TRACE_SETTINGS, parseLogFrequency, parseTraceCount, parseTraceLevel, parseTraceMode, parseTraceRate, type TraceSettingValues } from '../observability/trace.js';
import { parseResourceLimit, type ResourceLimit } from '../scheduling/rate-limiter.js';
import { isS3Uri, parseS3Uri } from '../repository/s3-location.js';
import { parseCacheConfig, splitCacheSetting, type CacheConfig } from '../cache/index.js';

export interface ServeOptions {
  modelRepositories: string[];
  /** `--model-control-mode` (models-and-scheduling.md §1.9). */
  modelControlMode: 'none' | 'poll' | 'explicit';
  /** `--load-model` (repeatable; mode explicit only): models loaded at start, `*` for all. */
  loadModels: string[];
  /** `--repository-poll-secs`: the poll interval in mode poll (and the S3 re-check in mode explicit). */
  repositoryPollSecs: number;
  /** `--repository-poll-secs` was given. */
  repositoryPollSecsGiven: boolean;
  /** `--model-repository-cache-dir`; '' for the OS temp directory. */
  modelRepositoryCacheDir: string;
  /** `--repository-settle-secs`. */
  repositorySettleSecs: number;
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
  /** `--model-config-limit` (Nereid's): limits given, by name; the others keep their defaults. */
  configLimits: Partial<Record<ConfigLimitName, number>>;
  id: string;
  backendConfig: Map<string, Record<string, string>>;
  /** `--backend-directory`: `<dir>/<backend>/` holds a custom backend package (docs/backends.md). */
  backendDirectory: string;
  allowHttp: boolean;
  httpAddress: string;
  httpPort: number;
  httpMaxInputSize: number;
  /** `--http-headers-timeout` (ms). */
  httpHeadersTimeoutMs: number;
  /** `--http-request-timeout` (ms). */
  httpRequestTimeoutMs: number;
  /** `--http-keepalive-timeout` (ms). */
  httpKeepAliveTimeoutMs: number;
  /** `--http-max-connections` (0: no limit). */
  httpMaxConnections: number;
  /** `--http-server`: which HTTP/1.1 server carries the HTTP/REST endpoint. */
  httpServer: HttpServerKind;
  rateLimit: 'off' | 'execution_count';
  rateLimitResources: ResourceLimit[];
  allowGrpc: boolean;
  grpcAddress: string;
  grpcPort: number;
  grpcKeepaliveTimeMs: number;
  grpcKeepaliveTimeoutMs: number;
  grpcMaxConnectionAgeMs: number | undefined;
  grpcMaxConnectionAgeGraceMs: number | undefined;
  /** `--grpc-keepalive-permit-without-calls`. */
  grpcKeepalivePermitWithoutCalls: boolean;
  /** `--grpc-http2-max-pings-without-data` (0: no limit). */
  grpcMaxPingsWithoutData: number;
  /** `--grpc-http2-min-recv-ping-interval-without-data` (ms). */
  grpcMinRecvPingIntervalWithoutDataMs: number;
  /** `--grpc-http2-max-ping-strikes` (0: no limit). */
  grpcMaxPingStrikes: number;
  /** `--grpc-max-concurrent-streams` (0: no limit). */
  grpcMaxConcurrentStreams: number;
  /** `--grpc-max-input-size`: the largest request message, bytes, as received and after decompression. */
  grpcMaxInputSize: number;
  /** `--grpc-server`: which gRPC server carries the services. */
  grpcServer: GrpcServerKind;
  allowMetrics: boolean;
  allowCpuMetrics: boolean;
  allowGpuMetrics: boolean;
  /** `--allow-client-shm` (protocol.md §6.4): clients may register and use shared memory; default false. */
  allowClientShm: boolean;
  /** Empty: the HTTP address (protocol.md §6.2). */
  metricsAddress: string;
  metricsPort: number;
  metricsIntervalMs: number;
  /** `--metrics-config` settings (protocol.md §6.2; Nereid's own keys in docs/operations.md). */
  metricsConfig: MetricsConfig;
  /** `--trace-config` and the deprecated `--trace-*` options (docs/observability.md). */
  traceConfig: TraceConfig;
  logVerbose: number;
  logInfo: boolean;
  logWarning: boolean;
  logError: boolean;
  logFormat: LogFormat;
  logFile: string;
  /** Options given that have no effect in this version (`IgnoredOption`), by name, each once. */
  ignored: string[];
  /** Start-up warnings about settings given that have no effect (a `--backend-config` key Nereid does not use), each once. */
  warnings: string[];
  /** `--memory-budget` in bytes; 0: none. */
  memoryBudgetBytes: number;
  /** `--model-memory-limit` in bytes; 0: none. */
  modelMemoryLimitBytes: number;
  /** `--memory-sample-interval-ms`; 0: no samples. */
  memorySampleIntervalMs: number;
  /** `--cache-config` values as given, in order. */
  cacheSettings: string[];
  /** `--response-cache-byte-size` (deprecated form of `local,size=`); 0: not given. */
  responseCacheByteSize: number;
  /** The response cache those configure (checked at the end of parsing); undefined: none. */
  cache: CacheConfig | undefined;
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

function parseInt(name: string, text: string, min = 0, max = Infinity): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    const what = min === -Infinity ? 'an integer' : max === Infinity ? `an integer >= ${min}` : `an integer from ${min} to ${max}`;
    throw new NereidError('REQUEST_PARAMETER', `--${name} expects ${what}, got '${text}'`);
  }
  return n;
}

/** A byte-size option (`512MiB`, `8GiB`, `1000000`; core/memory.ts); 0 means none. */
function byteSizeOption(name: string, text: string): number {
  const bytes = parseByteSize(text);
  if (bytes === undefined) throw new NereidError('REQUEST_PARAMETER', `--${name} expects a byte size such as 512MiB, 8GiB or 1000000, got '${text}'`);
  return bytes;
}

/** What `--trace-config` gathered: the global settings, and each mode's own keys. */
export interface TraceConfig {
  settings: TraceSettingValues;
  /**
   * `--trace-config opentelemetry,<key>=<value>` settings in the order given (each value checked
   * here), for the OpenTelemetry mode: `openTelemetrySettings` applies them over the defaults.
   */
  opentelemetry: [string, string][];
}

/** A `--trace-config` value as `tritonserver` takes it: `<key>=<value>` or `<mode>,<key>=<value>`. */
function applyTraceConfig(c: TraceConfig, text: string, name = 'trace-config'): void {
  const comma = text.indexOf(',');
  const eq = text.indexOf('=');
  const mode = comma !== -1 && comma < eq ? text.slice(0, comma) : '';
  const pair = mode === '' ? text : text.slice(comma + 1);
  const at = pair.indexOf('=');
  if (at === -1) throw new NereidError('REQUEST_PARAMETER', `--${name} expects [<mode>,]<setting>=<value>, got '${text}'`);
  const key = pair.slice(0, at);
  const value = pair.slice(at + 1);
  const checked = <T>(parse: (v: string) => T): T => {
    try {
      return parse(value);
    } catch (err) {
      const given = name === 'trace-config' ? `--trace-config ${text}` : `--${name}=${value}`;
      throw new NereidError('REQUEST_PARAMETER', `${given}: ${(err as Error).message}`);
    }
  };
  if (mode === '') {
    switch (key) {
      case 'level': {
        // Repeatable: TIMESTAMPS and TENSORS add up; OFF turns tracing off.
        const level = checked((v) => parseTraceLevel([v]));
        c.settings.level = level === 0 ? 0 : c.settings.level | level;
        return;
      }
      case 'rate':
        c.settings.rate = checked(parseTraceRate);
        return;
      case 'count':
        c.settings.count = checked(parseTraceCount);
        return;
      case 'mode':
        c.settings.mode = checked(parseTraceMode);
        return;
      default:
        throw new NereidError('REQUEST_PARAMETER', `--${name}: unknown global trace setting '${key}' (the global settings are level, rate, count and mode; file and log-frequency take the mode: triton,file=<path>)`);
    }
  }
  if (mode === 'triton') {
    switch (key) {
      case 'file':
        if (value === '') throw new NereidError('REQUEST_PARAMETER', `--${name} triton,file= needs a path`);
        c.settings.file = value;
        return;
      case 'log-frequency':
        c.settings.logFrequency = checked(parseLogFrequency);
        return;
      default:
        throw new NereidError('REQUEST_PARAMETER', `--${name}: unknown setting '${key}' of trace mode triton (its settings are file and log-frequency)`);
    }
  }
  if (mode === 'opentelemetry') {
    applyOpenTelemetrySetting(defaultOpenTelemetrySettings({}), key, value);
    c.opentelemetry.push([key, value]);
    return;
  }
  throw new NereidError('REQUEST_PARAMETER', `--${name}: unknown trace mode '${mode}' in '${text}' (the modes are triton and opentelemetry)`);
}

/**
 * The settings of mode opentelemetry: Triton's defaults, those of the OTEL_BSP_* variables of
 * `env`, then the `--trace-config opentelemetry,…` options in order; checked as a whole. Throws
 * (REQUEST_PARAMETER) naming the option or variable that cannot be used.
 */
export function openTelemetrySettings(c: TraceConfig, env: NodeJS.ProcessEnv = process.env): OpenTelemetrySettings {
  const settings = defaultOpenTelemetrySettings(env);
  for (const [key, value] of c.opentelemetry) applyOpenTelemetrySetting(settings, key, value);
  checkOpenTelemetrySettings(settings);
  return settings;
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

type Kind = 'bool' | 'int' | 'string' | 'flag';

/**
 * The groups of `nereid serve --help`, in order: `tritonserver --help`'s groups, so an option is
 * found where Triton's users look for it.
 */
export const OPTION_GROUPS = [
  'Server',
  'Logging',
  'Model Repository',
  'HTTP',
  'GRPC',
  'Sagemaker',
  'Vertex',
  'Metrics',
  'Tracing',
  'Backend',
  'Repository Agent',
  'Response Cache',
  'Rate Limiter',
  'Memory/Device Management',
  'Deprecated',
] as const;

export type OptionGroup = (typeof OPTION_GROUPS)[number];

/** What every option of the table says about itself; `nereid serve --help` prints it. */
interface OptionDoc {
  readonly group: OptionGroup;
  readonly kind: Kind;
  /** The value as help shows it; without it, the kind's (`<boolean>`, `<integer>`, `<string>`). Not for flags. */
  readonly format?: string;
  /**
   * The default: either the value text itself, so that giving `--name=<default>` changes nothing
   * (a unit test holds the table to that), or, in parentheses, what happens without the option.
   */
  readonly default: string;
  /** What the option does, for people: one or a few sentences. */
  readonly description: string;
  readonly repeatable?: boolean;
  /** An option of Nereid's own, which `tritonserver` does not have. */
  readonly nereidOnly?: boolean;
  /** For a `tritonserver` option whose meaning in Nereid differs: how. */
  readonly nereidMeaning?: string;
}

/** An option with an effect: `apply` validates the value and sets it (throws a NereidError). */
interface EffectiveOption extends OptionDoc {
  readonly apply: (o: ServeOptions, value: string, name: string) => void;
  readonly ignored?: never;
}

/**
 * A `tritonserver` option accepted so that existing command lines run, with no effect: the value
 * is still checked against the kind, and the server warns at start. `ignored` says why.
 */
interface IgnoredOption extends OptionDoc {
  readonly ignored: string;
  readonly apply?: never;
}

/** One entry of the option table: parsing and `--help` both read it. */
export type ServeOptionSpec = EffectiveOption | IgnoredOption;

const NO_GPU = 'Nereid has no CUDA memory management of its own: GPU memory belongs to the stub processes of KIND_GPU instances';
const NO_TLS = 'no TLS in this version; terminate TLS in front of Nereid (a proxy or a service mesh)';
const BUILT_IN_CACHES = "the caches (local, redis) are built into Nereid; there is no cache library to look for";
const NO_SAGEMAKER = 'Nereid has no SageMaker endpoint';
const NO_VERTEX = 'Nereid has no Vertex AI endpoint';
const ONE_LOOP = 'Nereid serves every request on the Node.js event loop, so there are no request threads to size';

const stripIpv6 = (v: string): string => v.replace(/^ipv6:\[(.*)\]$/, '$1');

/**
 * Every option `nereid serve` knows, in help order within each group. Adding an option here is
 * all it takes for the parser to take it and for `--help` to describe it; the type requires a
 * group, a default and a description, and `options.test.ts` that they are not empty.
 */
/** `--model-repository` and its other name: an S3 URI is checked at once, with the other option errors. */
function addRepository(o: ServeOptions, v: string): void {
  if (isS3Uri(v)) parseS3Uri(v);
  o.modelRepositories.push(v);
}

const OPTIONS = {
  // ---------------------------------------------------------------- Server
  id: {
    group: 'Server',
    kind: 'string',
    default: 'triton',
    description: 'The server name reported in server metadata (GET /v2) and the start-up option table.',
    apply: (o, v) => (o.id = v),
  },
  'exit-timeout-secs': {
    group: 'Server',
    kind: 'int',
    default: '30',
    description: 'On SIGINT or SIGTERM, how long to wait for in-flight requests and streams before exiting anyway (status 1).',
    apply: (o, v, n) => (o.exitTimeoutSecs = parseInt(n, v)),
  },
  'exit-grace-secs': {
    group: 'Server',
    kind: 'int',
    default: '0',
    nereidOnly: true,
    description:
      'On SIGINT or SIGTERM, keep serving for this long while readiness answers "not ready", so load balancers stop ' +
      'sending work before connections are refused; --exit-timeout-secs starts after it.',
    apply: (o, v, n) => (o.exitGraceSecs = parseInt(n, v)),
  },
  'decoupled-response-timeout-secs': {
    group: 'Server',
    kind: 'string',
    format: '<number>',
    default: String(DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS / 1000),
    nereidOnly: true,
    description:
      "Once a decoupled model's execute has returned without a request's final response, the longest the request may " +
      'go without any response before it fails with RESPONSE_TIMEOUT; fractions allowed, 0 means no limit.',
    apply: (o, v, n) => {
      const secs = Number(v);
      if (v.trim() === '' || !Number.isFinite(secs) || secs < 0) {
        throw new NereidError('REQUEST_PARAMETER', `--${n} expects a number of seconds >= 0 (0: no limit), got '${v}'`);
      }
      o.decoupledResponseTimeoutSecs = secs;
    },
  },
  'allow-client-shm': {
    group: 'Server',
    kind: 'bool',
    default: 'false',
    nereidMeaning:
      'system shared memory only (registering a CUDA region is refused: no GPU); the status queries answer either way',
    description: 'Let clients register, unregister and use shared-memory regions for input and output tensors.',
    apply: (o, v, n) => (o.allowClientShm = parseBool(n, v)),
  },

  // ---------------------------------------------------------------- Logging
  'log-verbose': {
    group: 'Logging',
    kind: 'int',
    default: '0',
    description: 'The verbose log level: 0 writes no verbose lines, 1 and above write the verbose lines of that level and below.',
    apply: (o, v, n) => (o.logVerbose = parseInt(n, v)),
  },
  'log-info': { group: 'Logging', kind: 'bool', default: 'true', description: 'Write info lines.', apply: (o, v, n) => (o.logInfo = parseBool(n, v)) },
  'log-warning': { group: 'Logging', kind: 'bool', default: 'true', description: 'Write warning lines.', apply: (o, v, n) => (o.logWarning = parseBool(n, v)) },
  'log-error': { group: 'Logging', kind: 'bool', default: 'true', description: 'Write error lines.', apply: (o, v, n) => (o.logError = parseBool(n, v)) },
  'log-format': {
    group: 'Logging',
    kind: 'string',
    format: '<default|ISO8601>',
    default: 'default',
    description: '"default" starts each line with severity, date and time as "I1202 17:36:00.123456"; "ISO8601" as "2026-12-02T17:36:00Z I".',
    apply: (o, v, n) => {
      if (v !== 'default' && v !== 'ISO8601') throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'default' or 'ISO8601', got '${v}'`);
      o.logFormat = v;
    },
  },
  'log-file': {
    group: 'Logging',
    kind: 'string',
    format: '<path>',
    default: '(the console)',
    description: 'Append the log to this file instead of writing it to the console (info and verbose lines to stdout, the others to stderr).',
    apply: (o, v) => (o.logFile = v),
  },

  // ---------------------------------------------------------------- Model Repository
  'model-store': {
    group: 'Model Repository',
    kind: 'string',
    format: '<path>',
    repeatable: true,
    default: '(none)',
    description: 'Another name for --model-repository.',
    apply: addRepository,
  },
  'model-repository': {
    group: 'Model Repository',
    kind: 'string',
    format: '<path>',
    repeatable: true,
    default: '(required)',
    description:
      'A model repository directory (one sub-directory per model) or an S3 bucket and prefix ' +
      '(s3://<bucket>/<prefix>, s3://<host>:<port>/<bucket>/<prefix>; docs/model-repository-s3.md). Give it again for ' +
      'more repositories; a model name found in two of them is reported UNAVAILABLE.',
    apply: addRepository,
  },
  'exit-on-error': {
    group: 'Model Repository',
    kind: 'bool',
    default: 'true',
    description: 'Exit (status 1) when a model fails to load at start-up; false serves the models that did load.',
    apply: (o, v, n) => (o.exitOnError = parseBool(n, v)),
  },
  'disable-auto-complete-config': {
    group: 'Model Repository',
    kind: 'flag',
    default: '(auto-complete on)',
    description:
      'Take each config.pbtxt as it is: the server and backends do not fill in missing fields (from the ONNX graph, for ' +
      'instance), so every model needs a complete config.pbtxt.',
    apply: (o) => (o.autoCompleteConfig = false),
  },
  'strict-readiness': {
    group: 'Model Repository',
    kind: 'bool',
    default: 'true',
    description:
      'true: /v2/health/ready answers ready only while no model the server was asked to serve has failed. false: ready ' +
      'means the server is up and answering, whatever the models.',
    apply: (o, v, n) => (o.strictReadiness = parseBool(n, v)),
  },
  'model-control-mode': {
    group: 'Model Repository',
    kind: 'string',
    format: '<none|poll|explicit>',
    default: 'none',
    description:
      'none: every model is loaded at start and the set never changes. poll: the repositories are rescanned every ' +
      '--repository-poll-secs and changes are loaded and unloaded. explicit: only the --load-model models are loaded at ' +
      'start; afterwards the model repository API (load, unload) changes the set.',
    apply: (o, v, n) => {
      if (v !== 'none' && v !== 'poll' && v !== 'explicit') {
        throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'none', 'poll' or 'explicit', got '${v}'`);
      }
      o.modelControlMode = v;
    },
  },
  'repository-poll-secs': {
    group: 'Model Repository',
    kind: 'int',
    default: '(15 in mode poll, none in mode explicit)',
    description:
      'In mode poll: seconds between two scans of the repositories (above 0). In mode explicit, with S3 repositories ' +
      '(a Nereid extension): when given, every this many seconds the loaded models are checked against the store and ' +
      'those whose objects changed are reloaded, keeping the config override they were loaded with.',
    apply: (o, v, n) => {
      o.repositoryPollSecs = parseInt(n, v);
      o.repositoryPollSecsGiven = true;
    },
  },
  'model-repository-cache-dir': {
    group: 'Model Repository',
    kind: 'string',
    format: '<path>',
    default: '(the OS temp directory)',
    description:
      'Where S3 model repositories are mirrored: the server makes a directory of its own in it and removes it at exit ' +
      '(docs/model-repository-s3.md).',
    apply: (o, v) => (o.modelRepositoryCacheDir = v),
  },
  'repository-settle-secs': {
    group: 'Model Repository',
    kind: 'int',
    default: '2',
    description:
      'S3 repositories: a model directory without a SHA256SUMS manifest is taken only once every object in it is at ' +
      'least this many seconds old by the store\'s clock and listings this far apart agree, so that an upload in ' +
      'progress never loads.',
    apply: (o, v, n) => (o.repositorySettleSecs = parseInt(n, v)),
  },
  'load-model': {
    group: 'Model Repository',
    kind: 'string',
    format: '<model|*>',
    repeatable: true,
    default: '(none)',
    description: 'In mode explicit only: a model to load at start. "*" loads every model and must then be the only --load-model.',
    apply: (o, v, n) => {
      if (v.trim() === '') throw new NereidError('REQUEST_PARAMETER', `--${n} expects a model name or '*'`);
      o.loadModels.push(v);
    },
  },
  'model-config-name': {
    group: 'Model Repository',
    kind: 'string',
    format: '<name>',
    default: '(config.pbtxt)',
    description: 'Read configs/<name>.pbtxt in each model directory where it exists, config.pbtxt elsewhere. No spaces.',
    apply: (o, v, n) => {
      if (/\s/.test(v)) throw new NereidError('REQUEST_PARAMETER', `--${n} must not contain spaces, got '${v}'`);
      o.modelConfigName = v;
    },
  },
  'model-load-thread-count': {
    group: 'Model Repository',
    kind: 'int',
    default: '4',
    description: 'How many models load at once, at start-up and afterwards (polls, load requests); the others wait their turn.',
    apply: (o, v, n) => (o.modelLoadThreadCount = parseInt(n, v, 1)),
  },
  'model-load-retry-count': {
    group: 'Model Repository',
    kind: 'int',
    default: '0',
    description: 'Extra attempts of a model version load that fails, each failure logged.',
    apply: (o, v, n) => (o.modelLoadRetryCount = parseInt(n, v)),
  },
  'model-config-limit': {
    group: 'Model Repository',
    kind: 'string',
    format: '<limit>=<n>',
    repeatable: true,
    nereidOnly: true,
    default: '(the defaults of docs/configuration.md)',
    description:
      'Raise or lower one bound on what a model configuration may ask for, from a file or a load request: ' +
      `${CONFIG_LIMIT_NAMES.join(', ')}. A configuration above a limit fails to load with an error naming the field, its value and the limit.`,
    apply: (o, v, n) => {
      const [limit, value] = parseConfigLimit(v, n);
      o.configLimits[limit] = value;
    },
  },
  'model-namespacing': {
    group: 'Model Repository',
    kind: 'bool',
    default: 'false',
    description:
      'Only false is accepted: this version of Nereid does not namespace models by repository, so a model name must be ' +
      'unique across the repositories; true is refused at start.',
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
  'enable-peer-access': {
    group: 'Model Repository',
    kind: 'bool',
    default: 'true',
    description: 'CUDA peer access between GPUs.',
    ignored: NO_GPU,
  },

  // ---------------------------------------------------------------- HTTP
  'allow-http': { group: 'HTTP', kind: 'bool', default: 'true', description: 'Serve the HTTP/REST endpoint.', apply: (o, v, n) => (o.allowHttp = parseBool(n, v)) },
  'http-address': {
    group: 'HTTP',
    kind: 'string',
    format: '<host>',
    default: '0.0.0.0',
    description: 'The address the HTTP endpoint listens on (an IPv6 address also as ipv6:[::1]).',
    apply: (o, v) => (o.httpAddress = stripIpv6(v)),
  },
  'http-port': {
    group: 'HTTP',
    kind: 'int',
    default: '8000',
    description: 'The port of the HTTP endpoint; 0 lets the system choose (the start-up log says which).',
    apply: (o, v, n) => (o.httpPort = parseInt(n, v)),
  },
  'reuse-http-port': {
    group: 'HTTP',
    kind: 'bool',
    default: 'false',
    description: 'Let several servers listen on the same HTTP port.',
    ignored: 'Node.js 20 cannot share a listening port between processes',
  },
  'http-header-forward-pattern': {
    group: 'HTTP',
    kind: 'string',
    format: '<regex>',
    default: '(none)',
    description: 'Forward the HTTP headers whose names match as request parameters.',
    ignored: 'no header forwarding in this version',
  },
  'http-thread-count': { group: 'HTTP', kind: 'int', default: '8', description: 'Threads that handle HTTP requests.', ignored: ONE_LOOP },
  'http-restricted-api': {
    group: 'HTTP',
    kind: 'string',
    format: '<apis>:<key>=<value>',
    repeatable: true,
    default: '(none)',
    description: 'Require a header for groups of HTTP endpoints.',
    ignored: 'no endpoint restrictions in this version; put such checks in a proxy in front of Nereid',
  },
  'http-max-input-size': {
    group: 'HTTP',
    kind: 'int',
    default: '67108864',
    description: 'The largest HTTP request body, in bytes, as received and after decompression.',
    apply: (o, v, n) => (o.httpMaxInputSize = parseInt(n, v, 1)),
  },
  'http-headers-timeout': {
    group: 'HTTP',
    kind: 'int',
    default: String(DEFAULT_HTTP_LIMITS.headersTimeoutMs),
    nereidOnly: true,
    description:
      'Milliseconds a client may take to send the header block of a request; a connection that has not sent it by then is ' +
      'answered 408 and closed.',
    apply: (o, v, n) => (o.httpHeadersTimeoutMs = parseInt(n, v, 1)),
  },
  'http-request-timeout': {
    group: 'HTTP',
    kind: 'int',
    default: String(DEFAULT_HTTP_LIMITS.requestTimeoutMs),
    nereidOnly: true,
    description:
      'Milliseconds a client may take to send a whole request, header and body; a slower one is answered 408 and its ' +
      'connection closed. 0 means no limit.',
    apply: (o, v, n) => (o.httpRequestTimeoutMs = parseInt(n, v, 0)),
  },
  'http-keepalive-timeout': {
    group: 'HTTP',
    kind: 'int',
    default: String(DEFAULT_HTTP_LIMITS.keepAliveTimeoutMs),
    nereidOnly: true,
    description: 'Milliseconds an idle keep-alive connection stays open for its next request.',
    apply: (o, v, n) => (o.httpKeepAliveTimeoutMs = parseInt(n, v, 1)),
  },
  'http-max-connections': {
    group: 'HTTP',
    kind: 'int',
    default: String(DEFAULT_HTTP_LIMITS.maxConnections),
    nereidOnly: true,
    description: 'Open HTTP connections at most; a connection beyond them is closed as soon as it is accepted. 0 means no limit.',
    apply: (o, v, n) => (o.httpMaxConnections = parseInt(n, v, 0)),
  },
  'http-server': {
    group: 'HTTP',
    kind: 'string',
    format: '<nereid|node>',
    default: 'nereid',
    nereidOnly: true,
    description:
      "The HTTP/1.1 server implementation: 'nereid' is Nereid's own (requests parsed in one pass, a response's head " +
      "and body in one write); 'node' is Node's node:http, kept as a fallback. Both serve the same endpoint with the " +
      'same limits.',
    apply: (o, v, n) => {
      if (v !== 'nereid' && v !== 'node') throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'nereid' or 'node', got '${v}'`);
      o.httpServer = v;
    },
  },

  // ---------------------------------------------------------------- GRPC
  'allow-grpc': { group: 'GRPC', kind: 'bool', default: 'true', description: 'Serve the gRPC endpoint.', apply: (o, v, n) => (o.allowGrpc = parseBool(n, v)) },
  'grpc-address': {
    group: 'GRPC',
    kind: 'string',
    format: '<host>',
    default: '0.0.0.0',
    description: 'The address the gRPC endpoint listens on (an IPv6 address also as ipv6:[::1]).',
    apply: (o, v) => (o.grpcAddress = stripIpv6(v)),
  },
  'grpc-port': {
    group: 'GRPC',
    kind: 'int',
    default: '8001',
    description: 'The port of the gRPC endpoint; 0 lets the system choose (the start-up log says which).',
    apply: (o, v, n) => (o.grpcPort = parseInt(n, v)),
  },
  'reuse-grpc-port': {
    group: 'GRPC',
    kind: 'bool',
    default: 'false',
    description: 'Let several servers listen on the same gRPC port.',
    ignored: 'Node.js 20 cannot share a listening port between processes',
  },
  'grpc-header-forward-pattern': {
    group: 'GRPC',
    kind: 'string',
    format: '<regex>',
    default: '(none)',
    description: 'Forward the gRPC metadata whose keys match as request parameters.',
    ignored: 'no metadata forwarding in this version',
  },
  'grpc-infer-thread-count': { group: 'GRPC', kind: 'int', default: '2', description: 'Threads that handle gRPC inference calls.', ignored: ONE_LOOP },
  'grpc-infer-allocation-pool-size': {
    group: 'GRPC',
    kind: 'int',
    default: '8',
    description: 'Request and response objects kept for reuse.',
    ignored: 'the gRPC library allocates its messages itself; there is no pool to size',
  },
  'grpc-max-response-pool-size': {
    group: 'GRPC',
    kind: 'int',
    default: '(no limit)',
    description: 'The most response objects a stream may hold.',
    ignored: "a stream's responses are bounded by HTTP/2 flow control instead: the stream stops taking requests while the client reads slower than the server answers",
  },
  'grpc-use-ssl': { group: 'GRPC', kind: 'bool', default: 'false', description: 'Serve gRPC over TLS.', ignored: NO_TLS },
  'grpc-use-ssl-mutual': { group: 'GRPC', kind: 'bool', default: 'false', description: 'Serve gRPC over mutual TLS.', ignored: NO_TLS },
  'grpc-server-cert': { group: 'GRPC', kind: 'string', format: '<path>', default: '(none)', description: "The server's PEM certificate.", ignored: NO_TLS },
  'grpc-server-key': { group: 'GRPC', kind: 'string', format: '<path>', default: '(none)', description: "The server's PEM key.", ignored: NO_TLS },
  'grpc-root-cert': { group: 'GRPC', kind: 'string', format: '<path>', default: '(none)', description: 'The PEM root certificate clients are checked against.', ignored: NO_TLS },
  'grpc-infer-response-compression-level': {
    group: 'GRPC',
    kind: 'string',
    format: '<none|low|medium|high>',
    default: 'none',
    description: 'How much the server compresses inference responses.',
    ignored: 'gRPC responses are sent uncompressed in this version',
  },
  'grpc-keepalive-time': {
    group: 'GRPC',
    kind: 'int',
    default: '7200000',
    description: 'Milliseconds between keepalive pings the server sends on a connection.',
    apply: (o, v, n) => (o.grpcKeepaliveTimeMs = parseInt(n, v, 1)),
  },
  'grpc-keepalive-timeout': {
    group: 'GRPC',
    kind: 'int',
    default: '20000',
    description: 'Milliseconds the server waits for the answer to a keepalive ping before it closes the connection.',
    apply: (o, v, n) => (o.grpcKeepaliveTimeoutMs = parseInt(n, v, 1)),
  },
  'grpc-keepalive-permit-without-calls': {
    group: 'GRPC',
    kind: 'bool',
    default: 'false',
    description: 'Send keepalive pings on connections without calls, and accept clients\' pings on them.',
    apply: (o, v, n) => (o.grpcKeepalivePermitWithoutCalls = parseBool(n, v)),
  },
  'grpc-http2-max-pings-without-data': {
    group: 'GRPC',
    kind: 'int',
    default: '2',
    description: 'Keepalive pings the server sends while it sends no headers or data (0: no limit).',
    apply: (o, v, n) => (o.grpcMaxPingsWithoutData = parseInt(n, v)),
  },
  'grpc-http2-min-recv-ping-interval-without-data': {
    group: 'GRPC',
    kind: 'int',
    default: '300000',
    description: 'The shortest gap, in milliseconds, between pings the server accepts while it sends no headers or data.',
    apply: (o, v, n) => (o.grpcMinRecvPingIntervalWithoutDataMs = parseInt(n, v)),
  },
  'grpc-http2-max-ping-strikes': {
    group: 'GRPC',
    kind: 'int',
    default: '2',
    description: 'Pings sooner than that tolerated before the server ends the connection (GOAWAY ENHANCE_YOUR_CALM, "too_many_pings"; 0: no limit).',
    apply: (o, v, n) => (o.grpcMaxPingStrikes = parseInt(n, v)),
  },
  'grpc-max-connection-age': {
    group: 'GRPC',
    kind: 'int',
    default: '(no limit)',
    description: 'Milliseconds after which the server asks a client to open a new connection (GOAWAY).',
    apply: (o, v, n) => (o.grpcMaxConnectionAgeMs = parseInt(n, v, 1)),
  },
  'grpc-max-connection-age-grace': {
    group: 'GRPC',
    kind: 'int',
    default: '(no limit)',
    description: 'Milliseconds the calls of a connection past its maximum age may go on before it is closed.',
    apply: (o, v, n) => (o.grpcMaxConnectionAgeGraceMs = parseInt(n, v, 1)),
  },
  'grpc-max-concurrent-streams': {
    group: 'GRPC',
    kind: 'int',
    default: String(DEFAULT_GRPC_MAX_CONCURRENT_STREAMS),
    nereidOnly: true,
    description:
      'Calls (unary or streaming) one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a client ' +
      'waits for one to end before it starts another. 0 means no limit.',
    apply: (o, v, n) => (o.grpcMaxConcurrentStreams = parseInt(n, v, 0)),
  },
  'grpc-max-input-size': {
    group: 'GRPC',
    kind: 'int',
    default: String(MAX_MESSAGE_SIZE),
    nereidOnly: true,
    description:
      'The largest gRPC request message, in bytes, as received and after decompression (a larger one is refused with ' +
      'RESOURCE_EXHAUSTED). The default is the gRPC maximum, as in Triton; a compressed message is inflated up to it ' +
      'before it is refused, so lower it where clients are not trusted.',
    apply: (o, v, n) => (o.grpcMaxInputSize = parseInt(n, v, 1, MAX_MESSAGE_SIZE)),
  },
  'grpc-server': {
    group: 'GRPC',
    kind: 'string',
    format: '<http2|node-http2|grpc-js>',
    default: 'http2',
    nereidOnly: true,
    description:
      "The gRPC server implementation: 'http2' is Nereid's own gRPC server on its own HTTP/2 transport (a call's " +
      "response, data and trailers in one write); 'node-http2' is the same gRPC server on Node's HTTP/2; 'grpc-js' " +
      "is @grpc/grpc-js's server. All three speak the same protocol; the last two are kept as fallbacks.",
    apply: (o, v, n) => {
      if (v !== 'http2' && v !== 'node-http2' && v !== 'grpc-js') {
        throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'http2', 'node-http2' or 'grpc-js', got '${v}'`);
      }
      o.grpcServer = v;
    },
  },
  'grpc-restricted-protocol': {
    group: 'GRPC',
    kind: 'string',
    format: '<protocols>:<key>=<value>',
    repeatable: true,
    default: '(none)',
    description: 'Require a metadata key for groups of gRPC calls.',
    ignored: 'no call restrictions in this version; put such checks in a proxy in front of Nereid',
  },

  // ---------------------------------------------------------------- Sagemaker, Vertex
  'allow-sagemaker': { group: 'Sagemaker', kind: 'bool', default: 'false', description: 'Serve the SageMaker endpoint.', ignored: NO_SAGEMAKER },
  'sagemaker-port': { group: 'Sagemaker', kind: 'int', default: '8080', description: 'The port of the SageMaker endpoint.', ignored: NO_SAGEMAKER },
  'sagemaker-safe-port-range': {
    group: 'Sagemaker',
    kind: 'string',
    format: '<first>-<last>',
    default: '(none)',
    description: 'The ports the other endpoints may use beside SageMaker.',
    ignored: NO_SAGEMAKER,
  },
  'sagemaker-thread-count': { group: 'Sagemaker', kind: 'int', default: '8', description: 'Threads that handle SageMaker requests.', ignored: NO_SAGEMAKER },
  'allow-vertex-ai': { group: 'Vertex', kind: 'bool', default: 'false', description: 'Serve the Vertex AI endpoint.', ignored: NO_VERTEX },
  'vertex-ai-port': { group: 'Vertex', kind: 'int', default: '8080', description: 'The port of the Vertex AI endpoint.', ignored: NO_VERTEX },
  'vertex-ai-thread-count': { group: 'Vertex', kind: 'int', default: '8', description: 'Threads that handle Vertex AI requests.', ignored: NO_VERTEX },
  'vertex-ai-default-model': {
    group: 'Vertex',
    kind: 'string',
    format: '<model>',
    default: '(none)',
    description: 'The model that Vertex AI requests without a model name go to.',
    ignored: NO_VERTEX,
  },

  // ---------------------------------------------------------------- Metrics
  'allow-metrics': {
    group: 'Metrics',
    kind: 'bool',
    default: 'true',
    description: 'Serve the Prometheus metrics endpoint (GET /metrics).',
    apply: (o, v, n) => (o.allowMetrics = parseBool(n, v)),
  },
  'allow-gpu-metrics': {
    group: 'Metrics',
    kind: 'bool',
    default: 'true',
    description: 'Report the GPU families (nv_gpu_utilization, nv_gpu_memory_*_bytes, nv_gpu_power_*, nv_energy_consumption) of the GPUs nvidia-smi finds.',
    apply: (o, v, n) => (o.allowGpuMetrics = parseBool(n, v)),
  },
  'allow-cpu-metrics': {
    group: 'Metrics',
    kind: 'bool',
    default: 'true',
    description: 'Report the CPU families: nv_cpu_utilization, nv_cpu_memory_total_bytes, nv_cpu_memory_used_bytes.',
    apply: (o, v, n) => (o.allowCpuMetrics = parseBool(n, v)),
  },
  'metrics-address': {
    group: 'Metrics',
    kind: 'string',
    format: '<host>',
    default: '(the HTTP address)',
    description: "The address the metrics endpoint listens on; address and port must differ from the HTTP and gRPC endpoints'.",
    apply: (o, v) => (o.metricsAddress = stripIpv6(v)),
  },
  'metrics-port': {
    group: 'Metrics',
    kind: 'int',
    default: '8002',
    description: 'The port of the metrics endpoint; 0 lets the system choose.',
    apply: (o, v, n) => (o.metricsPort = parseInt(n, v)),
  },
  'metrics-interval-ms': {
    group: 'Metrics',
    kind: 'string',
    format: '<number>',
    default: '2000',
    description: 'Milliseconds between two samples of the CPU and GPU families (above 0).',
    apply: (o, v, n) => {
      const ms = Number(v);
      if (v.trim() === '' || !Number.isFinite(ms) || ms <= 0) throw new NereidError('REQUEST_PARAMETER', `--${n} expects a number of milliseconds > 0, got '${v}'`);
      o.metricsIntervalMs = ms;
    },
  },
  'metrics-config': {
    group: 'Metrics',
    kind: 'string',
    format: '<key>=<value>',
    repeatable: true,
    default: '(none)',
    description:
      'A metrics setting. counter_latencies (true): the latency counters. histogram_latencies (false): latency ' +
      'histograms. histogram_batch_size (false, Nereid\'s own): a batch size histogram. histogram_buckets=<family>:<b1>,<b2>,... ' +
      "(Nereid's own): a histogram's bucket bounds. summary_latencies and summary_quantiles are checked and have no " +
      'effect: this version has no summaries. Other keys are refused.',
    apply: (o, v) => applyMetricsConfig(o.metricsConfig, v),
  },

  // ---------------------------------------------------------------- Tracing
  'trace-config': {
    group: 'Tracing',
    kind: 'string',
    format: '[<mode>,]<key>=<value>',
    repeatable: true,
    default: '(level OFF, rate 1000, count -1, mode triton)',
    description:
      'A trace setting. Global: level=<OFF|TIMESTAMPS|TENSORS> (repeat to combine TIMESTAMPS and TENSORS), ' +
      'rate=<n> (trace every n-th request), count=<n> (stop after n traces; -1: no limit), mode=<triton|opentelemetry>. ' +
      'Mode triton: triton,file=<path> (the trace file; only the operator sets it), triton,log-frequency=<n> (a new file ' +
      '<path>.<k> every n traces; 0: one file written until shutdown). Mode opentelemetry: opentelemetry,url=<OTLP/HTTP traces URL> ' +
      '(http://localhost:4318/v1/traces), opentelemetry,resource=<key>=<value> (repeatable), opentelemetry,bsp_max_queue_size=<n> (2048), ' +
      'opentelemetry,bsp_schedule_delay=<ms> (5000), opentelemetry,bsp_max_export_batch_size=<n> (512); rate=0 traces only requests with a traceparent.',
    apply: (o, v) => applyTraceConfig(o.traceConfig, v),
  },

  // ---------------------------------------------------------------- Backend
  'backend-directory': {
    group: 'Backend',
    kind: 'string',
    format: '<path>',
    default: '(none)',
    nereidMeaning: 'it holds JavaScript backend packages, <path>/<backend>/, not shared libraries',
    description: 'Where custom backends are looked for after the model\'s own directories.',
    apply: (o, v) => (o.backendDirectory = v),
  },
  'backend-config': {
    group: 'Backend',
    kind: 'string',
    format: '<backend>,<key>=<value>',
    repeatable: true,
    default: '(none)',
    description:
      'A setting for one backend, or for every backend as <key>=<value>: for example python,python-executable=<path>, ' +
      'default-max-batch-size=<n>, or <backend>,module=<specifier> for the module of a custom backend. A key the built-in ' +
      "backend does not know is refused; one Triton's backend takes and Nereid's does not use is accepted with a warning " +
      "(the keys: docs/backends.md). A custom backend's keys reach its module as given.",
    apply: (o, v, n) => {
      const comma = v.indexOf(',');
      const eq = v.indexOf('=');
      if (eq === -1) throw new NereidError('REQUEST_PARAMETER', `--${n} expects <backend>,<key>=<value> or <key>=<value>, got '${v}'`);
      const backend = comma !== -1 && comma < eq ? v.slice(0, comma) : '';
      const setting = comma !== -1 && comma < eq ? v.slice(comma + 1) : v;
      const at = setting.indexOf('=');
      const warning = checkBackendConfigKey(backend, setting.slice(0, at));
      if (warning !== undefined && !o.warnings.includes(warning)) o.warnings.push(warning);
      const settings = o.backendConfig.get(backend) ?? {};
      settings[setting.slice(0, at)] = setting.slice(at + 1);
      o.backendConfig.set(backend, settings);
    },
  },

  // ---------------------------------------------------------------- Repository Agent
  'repoagent-directory': {
    group: 'Repository Agent',
    kind: 'string',
    format: '<path>',
    default: '(none)',
    description: 'Where repository agents are looked for.',
    ignored: 'no repository agents in this version',
  },

  // ---------------------------------------------------------------- Response Cache
  'cache-config': {
    group: 'Response Cache',
    kind: 'string',
    format: '<cache>,<key>=<value>',
    repeatable: true,
    default: '(no cache)',
    description:
      'A setting of the response cache, which models with response_cache { enable: true } use: local,size=<bytes> ' +
      '(an in-memory cache evicting least-recently-used entries) or redis,<key>=<value> for a Redis server ' +
      '(host, port required; user, password, db, connect_timeout, socket_timeout, pool_size, wait_timeout, cert, key, ' +
      'cacert, cacert_dir, sni). Repeat it for each setting; one cache at most.',
    apply: (o, v) => {
      splitCacheSetting(v);
      o.cacheSettings.push(v);
    },
  },
  'cache-directory': {
    group: 'Response Cache',
    kind: 'string',
    format: '<path>',
    default: '(none)',
    description: 'Where cache implementations are looked for.',
    ignored: BUILT_IN_CACHES,
  },

  // ---------------------------------------------------------------- Rate Limiter
  'rate-limit': {
    group: 'Rate Limiter',
    kind: 'string',
    format: '<off|execution_count>',
    default: 'off',
    description:
      "off: a request runs as soon as an instance is free. execution_count: an instance runs only once the resources its " +
      "model's rate_limiter section requires are free; of the instances waiting, the one with the fewest executions " +
      '(weighted by priority) goes first.',
    apply: (o, v, n) => {
      if (v !== 'off' && v !== 'execution_count') {
        throw new NereidError('REQUEST_PARAMETER', `--${n} must be 'off' or 'execution_count', got '${v}'`);
      }
      o.rateLimit = v;
    },
  },
  'rate-limit-resource': {
    group: 'Rate Limiter',
    kind: 'string',
    format: '<name>:<count>[:<device>]',
    repeatable: true,
    default: '(the most any instance needs)',
    description: 'How many of a resource there are, on one device or, without <device>, on each.',
    apply: (o, v) => void o.rateLimitResources.push(parseResourceLimit(v)),
  },

  // ---------------------------------------------------------------- Memory/Device Management
  'pinned-memory-pool-byte-size': { group: 'Memory/Device Management', kind: 'int', default: '268435456', description: 'Bytes of pinned host memory for GPU transfers.', ignored: NO_GPU },
  'cuda-memory-pool-byte-size': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<gpu>:<bytes>',
    repeatable: true,
    default: '(64 MiB per GPU)',
    description: 'Bytes of CUDA memory pool on a GPU.',
    ignored: NO_GPU,
  },
  'cuda-virtual-address-size': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<gpu>:<bytes>',
    repeatable: true,
    default: '(1 GiB per GPU)',
    description: 'CUDA virtual address space of each growable implicit state.',
    ignored: NO_GPU,
  },
  'min-supported-compute-capability': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<float>',
    default: '(of the build)',
    description: 'GPUs below this CUDA compute capability are not used.',
    ignored: NO_GPU,
  },
  'buffer-manager-thread-count': {
    group: 'Memory/Device Management',
    kind: 'int',
    default: '0',
    description: 'Threads that help copy tensors.',
    ignored: 'tensors are copied by the thread that needs them (the event loop or a backend worker)',
  },
  'host-policy': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<policy>,<key>=<value>',
    repeatable: true,
    default: '(none)',
    description: 'A NUMA node or CPU cores for a named host policy.',
    ignored: 'no host policies in this version; pin the process with taskset or numactl instead',
  },
  // Memory accounting and budgets (docs/resources.md).
  'memory-budget': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<bytes>',
    nereidOnly: true,
    default: '(none)',
    description:
      'Memory all loaded models together may hold, as a byte size (512MiB, 8GiB, 1000000). A load that would pass it fails naming the model, its need and the budget.',
    apply: (o, v, n) => (o.memoryBudgetBytes = byteSizeOption(n, v)),
  },
  'model-memory-limit': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<bytes>',
    nereidOnly: true,
    default: '(none)',
    description:
      'The memory limit of a model that sets no memory_limit parameter. A load over it fails; a Python or PyTorch model that outgrows it while serving is stopped.',
    apply: (o, v, n) => (o.modelMemoryLimitBytes = byteSizeOption(n, v)),
  },
  'memory-sample-interval-ms': {
    group: 'Memory/Device Management',
    kind: 'int',
    nereidOnly: true,
    default: String(DEFAULT_MEMORY_SAMPLE_INTERVAL_MS),
    description:
      "Milliseconds between two samples of the Python and PyTorch models' memory, each checked against its limit; 0: no samples (figures from the load only).",
    apply: (o, v, n) => (o.memorySampleIntervalMs = parseInt(n, v)),
  },
  'model-load-gpu-limit': {
    group: 'Memory/Device Management',
    kind: 'string',
    format: '<gpu>:<fraction>',
    repeatable: true,
    default: '(no limit)',
    description: 'Refuse loads while a GPU has more than this fraction of its memory in use.',
    ignored: NO_GPU,
  },

  // ---------------------------------------------------------------- Deprecated
  'strict-model-config': {
    group: 'Deprecated',
    kind: 'bool',
    default: 'false',
    description: 'true is the same as --disable-auto-complete-config.',
    apply: (o, v, n) => (o.autoCompleteConfig = !parseBool(n, v)),
  },
  'response-cache-byte-size': {
    group: 'Deprecated',
    kind: 'int',
    default: '(no cache)',
    description: 'Same as --cache-config=local,size=<bytes>.',
    apply: (o, v, n) => (o.responseCacheByteSize = parseInt(n, v)),
  },
  'trace-file': {
    group: 'Deprecated',
    kind: 'string',
    format: '<path>',
    default: '(none)',
    description: 'Same as --trace-config=triton,file=<path>.',
    apply: (o, v, n) => applyTraceConfig(o.traceConfig, `triton,file=${v}`, n),
  },
  'trace-level': {
    group: 'Deprecated',
    kind: 'string',
    format: '<OFF|TIMESTAMPS|TENSORS>',
    repeatable: true,
    default: 'OFF',
    description: 'Same as --trace-config=level=<level>.',
    apply: (o, v, n) => applyTraceConfig(o.traceConfig, `level=${v}`, n),
  },
  'trace-rate': {
    group: 'Deprecated',
    kind: 'int',
    default: '1000',
    description: 'Same as --trace-config=rate=<n>.',
    apply: (o, v, n) => applyTraceConfig(o.traceConfig, `rate=${v}`, n),
  },
  'trace-count': {
    group: 'Deprecated',
    kind: 'int',
    default: '-1',
    description: 'Same as --trace-config=count=<n>.',
    apply: (o, v, n) => applyTraceConfig(o.traceConfig, `count=${v}`, n),
  },
  'trace-log-frequency': {
    group: 'Deprecated',
    kind: 'int',
    default: '0',
    description: 'Same as --trace-config=triton,log-frequency=<n>.',
    apply: (o, v, n) => applyTraceConfig(o.traceConfig, `triton,log-frequency=${v}`, n),
  },
} satisfies Record<string, ServeOptionSpec>;

/** The option table: name (without `--`) → spec, in help order within each group. */
export const SERVE_OPTIONS: Readonly<Record<string, ServeOptionSpec>> = OPTIONS;

/** The value format help shows for an option: its `format`, else its kind's; `(no value)` for a flag. */
export function optionFormat(spec: ServeOptionSpec): string {
  if (spec.kind === 'flag') return '(no value)';
  return spec.format ?? (spec.kind === 'bool' ? '<boolean>' : spec.kind === 'int' ? '<integer>' : '<string>');
}

export function defaultServeOptions(): ServeOptions {
  return {
    modelRepositories: [],
    modelControlMode: 'none',
    loadModels: [],
    repositoryPollSecs: 15,
    repositoryPollSecsGiven: false,
    modelRepositoryCacheDir: '',
    repositorySettleSecs: 2,
    strictReadiness: true,
    exitOnError: true,
    exitTimeoutSecs: 30,
    exitGraceSecs: 0,
    decoupledResponseTimeoutSecs: DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS / 1000,
    autoCompleteConfig: true,
    modelConfigName: '',
    modelLoadThreadCount: 4,
    modelLoadRetryCount: 0,
    configLimits: {},
    id: 'triton',
    backendConfig: new Map(),
    backendDirectory: '',
    allowHttp: true,
    httpAddress: '0.0.0.0',
    httpPort: 8000,
    httpMaxInputSize: 67_108_864,
    httpHeadersTimeoutMs: DEFAULT_HTTP_LIMITS.headersTimeoutMs,
    httpRequestTimeoutMs: DEFAULT_HTTP_LIMITS.requestTimeoutMs,
    httpKeepAliveTimeoutMs: DEFAULT_HTTP_LIMITS.keepAliveTimeoutMs,
    httpMaxConnections: DEFAULT_HTTP_LIMITS.maxConnections,
    httpServer: 'nereid',
    rateLimit: 'off',
    rateLimitResources: [],
    allowGrpc: true,
    grpcAddress: '0.0.0.0',
    grpcPort: 8001,
    grpcKeepaliveTimeMs: 7_200_000,
    grpcKeepaliveTimeoutMs: 20_000,
    grpcMaxConnectionAgeMs: undefined,
    grpcMaxConnectionAgeGraceMs: undefined,
    grpcKeepalivePermitWithoutCalls: false,
    grpcMaxPingsWithoutData: 2,
    grpcMinRecvPingIntervalWithoutDataMs: 300_000,
    grpcMaxPingStrikes: 2,
    grpcMaxConcurrentStreams: DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
    grpcMaxInputSize: MAX_MESSAGE_SIZE,
    grpcServer: 'http2',
    allowMetrics: true,
    allowCpuMetrics: true,
    allowGpuMetrics: true,
    allowClientShm: false,
    metricsAddress: '',
    metricsPort: 8002,
    metricsIntervalMs: 2000,
    metricsConfig: { counterLatencies: true, histogramLatencies: false, histogramBatchSize: false, summaryLatencies: false, buckets: {} },
    traceConfig: { settings: { ...DEFAULT_TRACE_SETTINGS }, opentelemetry: [] },
    logVerbose: 0,
    logInfo: true,
    logWarning: true,
    logError: true,
    logFormat: 'default',
    logFile: '',
    ignored: [],
    warnings: [],
    memoryBudgetBytes: 0,
    modelMemoryLimitBytes: 0,
    memorySampleIntervalMs: DEFAULT_MEMORY_SAMPLE_INTERVAL_MS,
    cacheSettings: [],
    responseCacheByteSize: 0,
    cache: undefined,
  };
}

/** Why an option given has no effect, for the start-up warning; undefined for an option with one. */
export function ignoredReason(name: string): string | undefined {
  return SERVE_OPTIONS[name]?.ignored;
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
    const spec = Object.hasOwn(SERVE_OPTIONS, name) ? SERVE_OPTIONS[name] : undefined;
    if (spec === undefined) {
      throw new NereidError('REQUEST_PARAMETER', `unrecognized option '--${name}'; run 'nereid serve --help' for the list`);
    }
    let value: string;
    if (spec.kind === 'flag') {
      if (eq !== -1) throw new NereidError('REQUEST_PARAMETER', `option '--${name}' takes no value, got '${arg}'`);
      value = '';
    } else if (eq !== -1) value = arg.slice(eq + 1);
    else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith('--') && spec.kind !== 'string')) {
        throw new NereidError('REQUEST_PARAMETER', `option '--${name}' needs a value`);
      }
      value = next;
      i++;
    }
    if (spec.apply !== undefined) spec.apply(o, value, name);
    else {
      if (spec.kind === 'bool') parseBool(name, value);
      if (spec.kind === 'int') parseInt(name, value, -Infinity);
      if (!o.ignored.includes(name)) o.ignored.push(name);
    }
  }
  checkControlOptions(o);
  o.cache = parseCacheConfig(o.cacheSettings, o.responseCacheByteSize);
  return o;
}
