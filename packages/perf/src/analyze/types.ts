/**
 * The shapes `nereid analyze` passes between its parts: the parsed configuration (config.ts), the
 * candidate model configurations the search produces (search.ts), the measurements the engine
 * takes (engine.ts), and the ranked result the outputs are written from (rank.ts, outputs.ts,
 * report-html.ts). Model Analyzer's names are kept where it has one (perf-and-analyzer.md §2).
 */

/** The metrics objectives and constraints can name (Model Analyzer's tags). */
export type MetricTag =
  | 'perf_throughput'
  | 'perf_latency_avg'
  | 'perf_latency_p90'
  | 'perf_latency_p95'
  | 'perf_latency_p99'
  | 'gpu_used_memory'
  | 'gpu_free_memory'
  | 'gpu_utilization'
  | 'cpu_used_ram'
  | 'cpu_free_ram';

export const METRIC_TAGS: readonly MetricTag[] = [
  'perf_throughput',
  'perf_latency_avg',
  'perf_latency_p90',
  'perf_latency_p95',
  'perf_latency_p99',
  'gpu_used_memory',
  'gpu_free_memory',
  'gpu_utilization',
  'cpu_used_ram',
  'cpu_free_ram',
];

/** Whether a larger value of the metric is better. */
export const HIGHER_IS_BETTER: Readonly<Record<MetricTag, boolean>> = {
  perf_throughput: true,
  perf_latency_avg: false,
  perf_latency_p90: false,
  perf_latency_p95: false,
  perf_latency_p99: false,
  gpu_used_memory: false,
  gpu_free_memory: true,
  gpu_utilization: true,
  cpu_used_ram: false,
  cpu_free_ram: true,
};

/** Objective weights, normalized so that they sum to 1. */
export type Objectives = Partial<Record<MetricTag, number>>;

/** `{min}` and/or `{max}` per metric, in the metric's unit (ms, infer/sec, MB, %). */
export type Constraints = Partial<Record<MetricTag, { min?: number; max?: number }>>;

/** A sweep of values a user fixed: a list (a comma string and `{start, stop, step}` are expanded). */
export type ValueList = number[];

/**
 * One profiled model. `modelConfigParameters` set means a manual sweep: the cartesian product of
 * its values (Model Analyzer's rule: a list-valued field needs a list of lists to be swept).
 */
export interface ProfileModel {
  name: string;
  objectives: Objectives;
  constraints: Constraints;
  /** Fixed client sweeps (`parameters: {concurrency, batch_sizes, request_rate}`); undefined: searched. */
  concurrency?: ValueList;
  requestRate?: ValueList;
  batchSizes: ValueList;
  /** The manual space: field → candidate values (already a list of candidates per field). */
  modelConfigParameters?: Record<string, unknown[]>;
  /** perf_analyzer flags (kebab-case, without dashes) merged over the global ones. */
  perfAnalyzerFlags: Record<string, string | string[]>;
  cpuOnly: boolean;
  weighting: number;
}

export type SearchMode = 'brute' | 'quick';
export type LaunchMode = 'local' | 'remote';
export type AnalyzeMode = 'online' | 'offline';

export interface SearchLimits {
  minConcurrency: number;
  maxConcurrency: number;
  minModelBatchSize: number;
  maxModelBatchSize: number;
  minInstanceCount: number;
  maxInstanceCount: number;
  minRequestRate: number;
  maxRequestRate: number;
  requestRateSearchEnable: boolean;
  /** `run_config_search_disable`: only the manual space (and the default config). */
  disable: boolean;
  maxBinarySearchSteps: number;
  /** quick mode: skip the concurrency re-sweep of the top configs. */
  concurrencySweepDisable: boolean;
}

export interface AnalyzeConfig {
  modelRepository: string;
  models: ProfileModel[];
  mode: AnalyzeMode;
  searchMode: SearchMode;
  launchMode: LaunchMode;
  /** Profile the models' variants side by side on one server (Model Analyzer's multi-model mode). */
  profileModelsConcurrently: boolean;
  search: SearchLimits;
  clientProtocol: 'grpc' | 'http';
  /** remote mode: where the server is; local mode: filled in once the server is up. */
  httpEndpoint: string;
  grpcEndpoint: string;
  metricsUrl: string;
  /** local mode: the server command (default: this installation's `nereid serve`). */
  serverPath?: string;
  serverFlags: Record<string, string>;
  serverEnvironment: Record<string, string>;
  outputModelRepositoryPath: string;
  overrideOutputModelRepository: boolean;
  checkpointDirectory: string;
  exportPath: string;
  numConfigsPerModel: number;
  numTopModelConfigs: number;
  /** Global perf_analyzer flags (kebab-case keys). */
  perfAnalyzerFlags: Record<string, string | string[]>;
  /** Seconds before one measurement is abandoned (`perf_analyzer_timeout`, 600). */
  perfAnalyzerTimeout: number;
  /** Retries with a longer window when a measurement does not stabilize (10). */
  perfAnalyzerMaxAutoAdjusts: number;
  /** Beyond Model Analyzer: stop searching after this many seconds (0: no limit) and report what was measured. */
  timeBudgetSeconds: number;
  skipSummaryReports: boolean;
  /** `skip_detailed_reports`: no per-config detailed reports (config.ts always sets it). */
  skipDetailedReports?: boolean;
  /** Where the progress goes: a bar on a TTY, plain lines otherwise. */
  progress: 'auto' | 'bar' | 'lines' | 'none';
}

/** What a variant changes, the columns Model Analyzer reports about a config. */
export interface VariantSummary {
  instanceCount: number;
  /** `KIND_CPU` / `KIND_GPU` / `KIND_AUTO`, as the instance_group says (first group). */
  instanceKind: string;
  maxBatchSize: number;
  dynamicBatching: boolean;
  preferredBatchSizes: number[];
  maxQueueDelayUs: number;
  /** Other changed fields, `path=value`, for the report's description. */
  other: string[];
}

/** One candidate model configuration (a "model config variant"). */
export interface Variant {
  /** `<model>_config_default` or `<model>_config_<n>`. */
  name: string;
  model: string;
  isDefault: boolean;
  /** The variant's ModelConfig as JSON (the load API's `config` parameter), `name` = `name`. */
  config: Record<string, unknown>;
  summary: VariantSummary;
}

/** One measured load level of one variant (times in milliseconds, memory in MB). */
export interface Measurement {
  variant: string;
  model: string;
  batchSize: number;
  /** Exactly one is set. */
  concurrency?: number;
  requestRate?: number;
  /** infer/sec. */
  perf_throughput: number;
  perf_latency_avg: number;
  perf_latency_p90: number;
  perf_latency_p95: number;
  perf_latency_p99: number;
  perf_client_send_recv: number;
  perf_client_response_wait: number;
  perf_server_queue: number;
  perf_server_compute_input: number;
  perf_server_compute_infer: number;
  perf_server_compute_output: number;
  /** Resident memory of the server's processes (model processes included), MB; undefined when unavailable. */
  cpu_used_ram?: number;
  cpu_free_ram?: number;
  gpu_used_memory?: number;
  gpu_free_memory?: number;
  gpu_utilization?: number;
  gpu_power_usage?: number;
  /** Whether the measurement stabilized (an unstable one is kept, marked, and not ranked first). */
  stable: boolean;
  /** A screening measurement of quick search: one short window, no stability gate. */
  screening?: boolean;
  /** Errors among the measured requests. */
  errors: number;
  /** Wall time the measurement took, ms. */
  wallMs: number;
  /** ISO time it was taken. */
  at: string;
  /** Multi-model mode: the other variants loaded and loaded at the same time. */
  alongside?: string[];
}

/** A variant that was skipped, or failed to load or measure, and why. */
export interface Skipped {
  variant: string;
  model: string;
  reason: string;
}

/** A variant's place in its model's ranking. */
export interface RankedVariant {
  variant: string;
  /** Its representative measurement (the best passing one, else the best of all). */
  best: Measurement;
  /** Some measurement satisfies every constraint. */
  passes: boolean;
  /** By how much the best measurement misses the constraints (0 when it passes), for ordering failures. */
  miss: number;
}

export interface ModelResult {
  model: string;
  objectives: Objectives;
  constraints: Constraints;
  /** Best first. */
  ranking: RankedVariant[];
  /** Every measurement of this model on the p99-latency / throughput Pareto frontier, by latency. */
  frontier: Measurement[];
  /** The highest-throughput measurement within the constraints (or the best effort when none pass). */
  throughputOptimized?: Measurement;
  /** The lowest-p99 measurement within the constraints (throughput floor respected). */
  latencyOptimized?: Measurement;
  /** Set when no measurement satisfies the constraints: what was asked and the closest reached. */
  unmet?: string;
  /** "In N measurements across M configurations, …" (Model Analyzer's summary sentence). */
  sentence: string;
}

export interface AnalysisResult {
  /** Nereid's version and the server the measurements were taken on. */
  server: { name: string; version: string; endpoint: string; launchMode: LaunchMode };
  mode: AnalyzeMode;
  searchMode: SearchMode;
  startedAt: string;
  wallSeconds: number;
  variants: Variant[];
  measurements: Measurement[];
  skipped: Skipped[];
  models: ModelResult[];
  /** Multi-model mode: per model, how its throughput alone compares with it alongside the others. */
  interference?: { model: string; alone?: number; together?: number; change?: number; note: string }[];
  /** The run was cut short (time budget or interrupt); the results cover what was measured. */
  partial?: string;
}
