/**
 * The `Server` facade: Nereid's in-process API, the counterpart of Triton's C API. Frontends
 * translate the wire to these calls; a Node program may embed Nereid and call them directly:
 *
 * ```ts
 * import { Server } from '@nereid/server';
 * const server = await Server.start({ modelRepositories: ['./models'] });
 * const res = await server.infer({ model: 'simple', inputs: [...] });
 * await server.stop();
 * ```
 */
import { NereidError, toNereidError, fromConfigDataType, type ParameterValue } from '@nereid/protocol';
import { BackendRegistry } from '../backends/registry.js';
import { startCudaHelper } from '../backends/python/cuda-helper.js';
import { DEFAULT_PYTHON } from '../backends/python/python-backend.js';
import type { Backend, BackendResponse, BackendTensor } from '../backends/spi.js';
import { DEFAULT_CONFIG_LIMITS, InstanceBudget, modelConfigToJson, type ConfigLimits } from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
import { createLogger, type Logger, type LogSettings } from '../observability/logger.js';
import { ServerMetrics, type MetricsOptions } from '../observability/metrics.js';
import { TRACE_TENSORS, TraceManager, type Trace, type TraceSettingValues, type TraceSettingsAnswer, type TraceSettingsUpdate } from '../observability/trace.js';
import { TraceFileWriter } from '../observability/trace-file.js';
import { OpenTelemetrySink, defaultOpenTelemetrySettings, openTelemetryAnswer, type OpenTelemetrySettings } from '../observability/opentelemetry.js';
import { DeviceList, GpuSampler, MigHolds, describeDevices, discoverDevices } from '../devices/index.js';
import { ModelManager, type VersionStatus } from '../repository/model-manager.js';
import { loadRequestOf } from './repository-parameters.js';
import type { ModelStatistics } from '../observability/model-statistics.js';
import { classify } from './classification.js';
import { applyLogSettingsUpdate, logSettingsReport } from './log-settings.js';
import { DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS, InferenceRequest, type ResponseSink } from './inference-request.js';
import { ModelVersion, ModelVersionFactory } from './model-version.js';
import { MemoryAccounting } from './memory.js';
import { backendSettings } from './version-config.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import type { RequestTimes } from '../scheduling/scheduler.js';
import { RateLimiter, type ResourceLimit } from '../scheduling/rate-limiter.js';
import { interpretParameters } from './request-parameters.js';
import { createCache, requestKey, type CacheConfig, type ResponseCache } from '../cache/index.js';
import { checkBackendOutput } from './response-validation.js';
import { isLent, returnView } from './buffer-pool.js';
import { SharedMemoryManager, type SharedMemoryLease } from './shared-memory.js';
import { undoReshape, validateRequest, type ValidatedRequest } from './request-validation.js';
import type {
  BackendDescription,
  InferInput,
  InferOptions,
  InferOutput,
  SharedMemoryInput,
  SharedMemoryRef,
  InferRequest,
  InferResponse,
  StreamInferOptions,
  LogSettingsReport,
  ModelMetadata,
  EffectiveConfigReport,
  ModelStatisticsReport,
  ModelTimingsReport,
  ModelVersionStatus,
  LoadModelOptions,
  ModelControlMode,
  RepositoryIndexEntry,
  ServerMetadata,
  UnloadModelOptions,
} from './types.js';

export const NEREID_VERSION = '0.1.0';

const EMPTY_BYTES = new Uint8Array(0);
/** Lookup failures that the model-ready check answers as not ready rather than as errors. */
const NOT_READY_LOOKUPS: ReadonlySet<string> = new Set(['MODEL_NOT_FOUND', 'MODEL_VERSION_NOT_FOUND', 'MODEL_NO_READY_VERSION', 'MODEL_VERSION_NOT_READY']);

/** A request whose shared-memory inputs were read (`#bindSharedMemory`). */
type ResolvedRequest = InferRequest & { inputs: readonly InferInput[] };

function isSharedMemoryInput(input: InferInput | SharedMemoryInput): input is SharedMemoryInput {
  return (input as Partial<SharedMemoryInput>).sharedMemory !== undefined;
}

/** Whether any input or requested output of `request` refers to a shared-memory region. */
function usesSharedMemory(request: InferRequest): boolean {
  for (const input of request.inputs) if (isSharedMemoryInput(input)) return true;
  if (request.outputs !== undefined) for (const out of request.outputs) if (out.sharedMemory !== undefined) return true;
  return false;
}

/** A request bound to its shared-memory regions (`Server#bindSharedMemory`). */
interface BoundRequest {
  request: ResolvedRequest;
  /** Views of mapped regions outputs go into (`BackendRequest.outputBuffers`); absent when none. */
  outputBuffers?: ReadonlyMap<string, Uint8Array>;
  /**
   * Writes the outputs with references into their regions; the response then carries none of
   * their bytes. A promise where an output goes to a CUDA region (copied to the device first).
   */
  deliver(response: InferResponse): InferResponse | Promise<InferResponse>;
  /** Releases the regions' leases (once the request has settled). */
  release(): void;
  /**
   * An input came from a CUDA region: the request bypasses the response cache, which hashes
   * only inputs in CPU memory (models-and-scheduling.md §8.2).
   */
  deviceInputs?: boolean;
}

const unchanged = (response: InferResponse): InferResponse => response;
const nothing = (): void => undefined;
export { DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS };

/** Extensions this server implements, in Triton's order (protocol.md §2.5). */
const EXTENSIONS = [
  'classification',
  'sequence',
  'model_repository',
  'model_repository(unload_dependents)',
  'schedule_policy',
  'model_configuration',
  'system_shared_memory',
  'cuda_shared_memory',
  'binary_tensor_data',
  'parameters',
  'statistics',
  'trace',
  'logging',
];

export interface ServerOptions {
  /** Model repository roots (`--model-repository`, repeatable). */
  modelRepositories: readonly string[];
  /**
   * The trace settings the server starts with (`--trace-config`, docs/observability.md); default
   * level OFF. In mode `triton` with a `file`, traces are written there.
   */
  trace?: Partial<TraceSettingValues>;
  /**
   * Mode `opentelemetry`'s exporter settings (`--trace-config opentelemetry,…`); default: the
   * defaults of `defaultOpenTelemetrySettings()`, which read OTEL_BSP_* from the environment.
   */
  opentelemetry?: OpenTelemetrySettings;
  /** Server name in server metadata (`--id`); default `triton`, as clients expect. */
  id?: string;
  /** `--strict-readiness` (default true): ready only while every model is ready. */
  strictReadiness?: boolean;
  /** Auto-complete model configurations (default true; `--disable-auto-complete-config`). */
  autoCompleteConfig?: boolean;
  /** `--model-config-name`. */
  modelConfigName?: string;
  /** `--model-load-thread-count` (default 4): loads at once, at start-up and after. */
  modelLoadThreadCount?: number;
  /** `--model-load-retry-count` (default 0): extra attempts of a version load that fails (§1.10). */
  modelLoadRetryCount?: number;
  /** `--model-control-mode` (default `none`, models-and-scheduling.md §1.9). */
  modelControlMode?: ModelControlMode;
  /** `--load-model`: the models loaded at start in mode `explicit`; `['*']` loads every one. */
  loadModels?: readonly string[];
  /**
   * `--repository-poll-secs`: the poll interval in mode `poll` (default 15); fractions allowed. In
   * mode `explicit` with S3 repositories, when given, the interval of the re-check of loaded
   * models (docs/model-repository-s3.md); not given, no re-check.
   */
  repositoryPollSecs?: number;
  /** `--model-repository-cache-dir`: where S3 repositories are mirrored; default the OS temp directory. */
  modelRepositoryCacheDir?: string;
  /** `--repository-settle-secs` (default 2): see docs/model-repository-s3.md. */
  repositorySettleSecs?: number;
  /**
   * `--model-config-limit`: bounds on what a model configuration may ask for (instances, batch
   * sizes, priority levels, …); each one not given keeps its default (docs/configuration.md).
   */
  configLimits?: Partial<ConfigLimits>;
  /** `--backend-config`: backend → key → value; key '' holds global settings. */
  backendConfig?: ReadonlyMap<string, Readonly<Record<string, string>>>;
  /** `--backend-directory`: `<dir>/<backend>/` holds a custom backend package (docs/backends.md). */
  backendDirectory?: string;
  /** `--rate-limit` (default off): `execution_count` makes instances wait for resources (§7.3). */
  rateLimit?: 'off' | 'execution_count';
  /** `--rate-limit-resource`: explicit resource pool sizes. */
  rateLimitResources?: readonly ResourceLimit[];
  /** Extra backends (custom backends); built-in ones are always available. */
  backends?: readonly Backend[];
  /** A logger, or settings for the default console logger. */
  logger?: Logger;
  log?: Partial<LogSettings>;
  /**
   * `--decoupled-response-timeout-secs` (default 300 s; 0: no limit): once a decoupled model's
   * `execute` returned without a request's final response, the longest the request may go
   * without any response before it fails with RESPONSE_TIMEOUT.
   */
  decoupledResponseTimeoutMs?: number;
  /**
   * `--allow-client-shm` (protocol.md §3.17, default false): clients may register, unregister and
   * use shared-memory regions. Status queries work either way.
   */
  allowClientShm?: boolean;
  /** Prometheus metrics settings (`--metrics-config`, `--allow-cpu-metrics`, …; protocol.md §5). */
  metrics?: MetricsOptions;
  /** `--memory-budget`: bytes all loaded models together may hold (docs/resources.md); 0 or absent: none. */
  memoryBudgetBytes?: number;
  /** `--model-memory-limit`: the memory limit of a model that sets no `memory_limit`; 0 or absent: none. */
  modelMemoryLimitBytes?: number;
  /**
   * `--memory-sample-interval-ms` (default 1000): how often stub-hosted models' memory is sampled
   * and checked against their limits; 0: never (figures from their load only, no stop at run time).
   */
  memorySampleIntervalMs?: number;
  /**
   * GPU discovery at start (docs/resources.md): the nvidia-smi command (default `nvidia-smi` on
   * PATH) and the longest one call may take; `false`: no discovery, the server has no GPUs.
   * CUDA_VISIBLE_DEVICES of the server's environment restricts and renumbers the GPUs found.
   */
  gpuDiscovery?: { readonly command?: string; readonly timeoutMs?: number } | false;
  /**
   * `--cache-config`: the response cache shared by every model that enables it
   * (models-and-scheduling.md §8.2); created by `load`. Absent: no cache.
   */
  cache?: CacheConfig;
}

export interface StartReport {
  /** Model versions (or models) that failed to load, with their reasons; empty if none. */
  failures: ModelVersionStatus[];
}

type ServerState = 'created' | 'loading' | 'ready' | 'stopping' | 'stopped';

function toStatus(s: VersionStatus): ModelVersionStatus {
  return { name: s.name, version: s.version === undefined ? '' : String(s.version), state: s.state, reason: s.reason };
}

function statisticsReport(v: ModelVersion): ModelStatisticsReport {
  const s: ModelStatistics = v.stats;
  const d = (x: { count: number; ns: bigint }) => ({ count: x.count, ns: x.ns });
  return {
    name: s.name,
    version: s.version,
    last_inference: s.lastInference,
    inference_count: s.inferenceCount,
    execution_count: s.executionCount,
    inference_stats: {
      success: d(s.success),
      fail: d(s.fail),
      queue: d(s.queue),
      compute_input: d(s.computeInput),
      compute_infer: d(s.computeInfer),
      compute_output: d(s.computeOutput),
      cache_hit: d(s.cacheHit),
      cache_miss: d(s.cacheMiss),
    },
    response_stats: Object.fromEntries(
      s.responseStats().map((r) => [
        r.key,
        {
          compute_infer: d(r.computeInfer),
          compute_output: d(r.computeOutput),
          success: d(r.success),
          fail: d(r.fail),
          empty_response: d(r.emptyResponse),
          cancel: d(r.cancel),
        },
      ]),
    ),
    batch_stats: s.batchStats().map((b) => ({
      batch_size: b.batchSize,
      compute_input: d(b.computeInput),
      compute_infer: d(b.computeInfer),
      compute_output: d(b.computeOutput),
    })),
    memory_usage: v.memory.map((m) => ({ type: m.type, id: m.id, byte_size: m.byte_size })),
  };
}

export class Server {
  readonly logger: Logger;
  /**
   * The server's Prometheus metrics (protocol.md §5): per-model series for every READY version,
   * read at scrape time. A `MetricsFrontend` serves them; embedders may read `metrics.text()`.
   */
  readonly metrics: ServerMetrics;
  /**
   * The shared-memory regions (protocol.md §3.17): frontends register, unregister and query them
   * here; `infer` and `inferStream` resolve the tensor references of a request against them.
   */
  readonly sharedMemory: SharedMemoryManager;
  /** Memory accounting, limits and the budget of the loaded models (docs/resources.md). */
  readonly memory: MemoryAccounting;
  /** Request tracing: the trace settings and the sampling of requests (docs/observability.md). */
  readonly tracing: TraceManager;
  readonly #options: ServerOptions;
  readonly #registry: BackendRegistry;
  readonly #models: ModelManager<ModelVersion>;
  readonly #responseTimeoutMs: number;
  #state: ServerState = 'created';
  #startReport: StartReport = { failures: [] };
  #stopping: Promise<void> | undefined;
  #devices: DeviceList = DeviceList.NONE;
  #gpuSampler: GpuSampler | undefined;
  /** Readiness withdrawn ahead of a shutdown (`withdrawReadiness`). */
  #readinessWithdrawn = false;
  /** The response cache (`ServerOptions.cache`), from `load` on. */
  #cache: ResponseCache | undefined;

  constructor(options: ServerOptions) {
    this.#options = options;
    this.#responseTimeoutMs = options.decoupledResponseTimeoutMs ?? DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS;
    this.logger = options.logger ?? createLogger(options.log);
    this.tracing = new TraceManager(options.trace);
    const traceFile = this.tracing.global;
    if (traceFile.mode === 'triton' && traceFile.file !== '') {
      this.tracing.addSink(new TraceFileWriter(traceFile.file, () => this.tracing.global.logFrequency, (m) => this.logger.error(m)));
    } else if (traceFile.mode === 'opentelemetry') {
      const settings = options.opentelemetry ?? defaultOpenTelemetrySettings();
      this.tracing.addSink(new OpenTelemetrySink(settings, (m) => this.logger.error(m)));
      this.tracing.modeSettings = openTelemetryAnswer(settings);
    }
    // CUDA regions are opened by a helper run by the Python backend's interpreter, which has the
    // CUDA runtime (cupy or torch) that the stubs of KIND_GPU models use.
    const python = backendSettings(options.backendConfig ?? new Map(), 'python')['python-executable'] || DEFAULT_PYTHON;
    this.sharedMemory = new SharedMemoryManager({
      allowClient: options.allowClientShm ?? false,
      cuda: () => startCudaHelper({ python, logger: this.logger }),
      logError: (message) => this.logger.error(message),
    });
    this.memory = new MemoryAccounting({
      budgetBytes: options.memoryBudgetBytes ?? 0,
      defaultLimitBytes: options.modelMemoryLimitBytes ?? 0,
      ...(options.memorySampleIntervalMs !== undefined ? { sampleIntervalMs: options.memorySampleIntervalMs } : {}),
      logger: this.logger,
    });
    this.metrics = new ServerMetrics(
      () => this.#models.readyServables().map((s) => s.servable),
      options.metrics,
      this.logger,
      () => this.#models.versionWeights(),
    );
    this.metrics.setMemorySource(this.memory);
    const registry = new BackendRegistry(undefined, { backendDirectory: options.backendDirectory });
    for (const b of options.backends ?? []) registry.register(b);
    this.#registry = registry;
    const limits: ConfigLimits = { ...DEFAULT_CONFIG_LIMITS, ...options.configLimits };
    const factory = new ModelVersionFactory(registry, {
      instanceBudget: new InstanceBudget(limits['instances-per-server']),
      memory: this.memory,
      onMemoryStop: (version, error) => this.#models.stopServing(version.name, version, error.message),
      devices: () => this.#devices,
      migHolds: new MigHolds(),
      gpuMemoryOf: (pid) => this.#gpuSampler?.processMemory(pid) ?? new Map(),
      responseCache: () => this.#cache,
      backendConfig: options.backendConfig ?? new Map(),
      logger: this.logger,
      metrics: this.metrics,
      models: {
        infer: (request, inferOptions) => this.infer(request, inferOptions),
        inferStream: (request, streamOptions) => this.inferStream(request, streamOptions),
        isModelReady: (model, version) => this.isModelReady(model, version),
        loadModel: (model, loadOptions) => this.loadModel(model, loadOptions),
        unloadModel: (model, unloadOptions) => this.unloadModel(model, unloadOptions),
      },
      ensembleHost: {
        infer: (request, inferOptions) => this.#inferTimed(request, inferOptions),
        inferStream: (request, streamOptions) => this.inferStream(request, streamOptions),
        resolve: (model, version) => {
          const mv = this.#resolve(model, version);
          return { version: mv.version, config: mv.config };
        },
        route: (model, version) => {
          const mv = this.#resolve(model, version, true);
          return { version: mv.version, config: mv.config };
        },
      },
      ...(options.rateLimit === 'execution_count' ? { rateLimiter: new RateLimiter(options.rateLimitResources) } : {}),
    });
    checkControlOptions(options);
    this.#models = new ModelManager(
      {
        repositories: options.modelRepositories,
        controlMode: options.modelControlMode ?? 'none',
        autoCompleteConfig: options.autoCompleteConfig ?? true,
        modelConfigName: options.modelConfigName ?? '',
        limits,
        loadThreadCount: options.modelLoadThreadCount ?? 4,
        loadRetryCount: options.modelLoadRetryCount ?? 0,
        ...(options.modelRepositoryCacheDir !== undefined ? { repositoryCacheDir: options.modelRepositoryCacheDir } : {}),
        ...(options.repositorySettleSecs !== undefined ? { repositorySettleSecs: options.repositorySettleSecs } : {}),
        logger: this.logger,
      },
      factory,
    );
  }

  /** Creates a server and loads its repositories. Rejects only for an unusable repository. */
  static async start(options: ServerOptions): Promise<Server> {
    const server = new Server(options);
    await server.load();
    return server;
  }

  /**
   * The start-up load (models-and-scheduling.md §1.9): every model of the repositories in control
   * modes `none` and `poll`, the `loadModels` in mode `explicit`; then, in mode `poll`, polling
   * starts. Models that fail are recorded (and reported here) while the others serve. Rejects for
   * a missing or unreadable repository.
   */
  async load(): Promise<StartReport> {
    if (this.#state !== 'created') throw new NereidError('INTERNAL', 'the server was already started');
    this.#state = 'loading';
    const discovery = this.#options.gpuDiscovery;
    if (discovery !== false) {
      this.#devices = await discoverDevices({ ...discovery, visibleDevices: process.env['CUDA_VISIBLE_DEVICES'], logger: this.logger });
      for (const line of describeDevices(this.#devices)) this.logger.info(line);
      if (this.#devices.hasGpu) {
        this.#gpuSampler = new GpuSampler(this.#devices, { ...discovery, intervalMs: this.metrics.intervalMs, processes: true, logger: this.logger });
        this.metrics.useGpuSampler(this.#gpuSampler);
      }
    }
    if (this.#options.cache !== undefined) {
      try {
        this.#cache = await createCache(this.#options.cache, this.logger);
      } catch (err) {
        this.#state = 'stopped';
        throw err;
      }
      this.metrics.useCache(this.#cache);
    }
    try {
      const failures = await this.#models.startup(this.#options.loadModels);
      this.#startReport = { failures: failures.map(toStatus) };
    } catch (err) {
      this.#state = 'stopped';
      throw toNereidError(err, 'REPOSITORY_INVALID');
    }
    this.#state = 'ready';
    this.metrics.start();
    this.memory.start();
    this.#gpuSampler?.start();
    if (this.#options.modelControlMode !== 'explicit') this.#models.startPolling(this.#options.repositoryPollSecs ?? 15);
    else if (this.#options.repositoryPollSecs !== undefined && this.#options.repositoryPollSecs > 0) this.#models.startPolling(this.#options.repositoryPollSecs);
    return this.#startReport;
  }

  /** The response cache (`ServerOptions.cache`) once `load` created it; undefined without one. */
  get responseCache(): ResponseCache | undefined {
    return this.#cache;
  }

  /** The GPUs and MIG instances found at start (none before `load`, or without discovery). */
  get devices(): DeviceList {
    return this.#devices;
  }

  get startReport(): StartReport {
    return this.#startReport;
  }

  /** Stopping or stopped: health checks then fail with "Server exiting" (protocol.md §3.3). */
  get exiting(): boolean {
    return this.#state === 'stopping' || this.#state === 'stopped';
  }

  /** Live: able to answer metadata and inference requests (protocol.md §3.3). */
  isLive(): boolean {
    return this.#state === 'loading' || this.#state === 'ready';
  }

  /** Ready: started, not stopping, and with strict readiness every model ready (protocol.md §3.3). */
  isReady(): boolean {
    if (this.#state !== 'ready' || this.#readinessWithdrawn) return false;
    return this.#options.strictReadiness === false || this.#models.allReady();
  }

  /**
   * Turns readiness false for good while everything else keeps serving: the grace period of a
   * graceful shutdown (`--exit-grace-secs`, docs/operations.md), during which load balancers see
   * the server unready and stop sending it work before anything is refused. `stop()` follows.
   * Backend instances are told the shutdown began (`BackendInstance.unloading`): the Python
   * backend bounds each execute by its unload timeout from now on, so that a hung execute cannot
   * hold the shutdown past `--exit-timeout-secs` without an answer.
   */
  withdrawReadiness(): void {
    this.#readinessWithdrawn = true;
    for (const { servable } of this.#models.readyServables()) servable.unloading();
  }

  /**
   * The backends this server runs, as Triton's start-up backend table lists them: every built-in
   * and registered backend, then each custom backend module a model load has used so far,
   * with the `--backend-config` settings it receives (global ones included).
   */
  backends(): BackendDescription[] {
    const config = this.#options.backendConfig ?? new Map<string, Readonly<Record<string, string>>>();
    return this.#registry.describe().map((b) => ({ ...b, settings: backendSettings(config, b.name) }));
  }

  metadata(): ServerMetadata {
    return { name: this.#options.id ?? 'triton', version: NEREID_VERSION, extensions: [...EXTENSIONS] };
  }

  /**
   * Resolves a model version or throws the protocol.md §2.1 lookup error. `route`: for an inference
   * request, which when it names no version follows the model's version weights.
   */
  #resolve(model: string, version?: string, route = false): ModelVersion {
    if (this.#state !== 'ready' && this.#state !== 'loading') {
      throw new NereidError('SERVER_NOT_READY', 'Server not ready');
    }
    return (route ? this.#models.route(model, version) : this.#models.resolve(model, version)).servable;
  }

  /**
   * Whether the resolved version is READY in the repository; lookup failures throw (protocol.md
   * §3.3). Synchronous: backends' readiness probes are not consulted (see `checkModelReady`).
   */
  isModelReady(model: string, version?: string): boolean {
    this.#resolve(model, version);
    return true;
  }

  /**
   * The model-ready check of the health endpoints: the version is READY and every instance's
   * readiness probe answers true (`BackendInstance.isReady`; a Python model's `is_ready()`,
   * models-and-scheduling.md §8.5). A model or version that cannot be found or is not READY is
   * `false`, not an error, as Triton's model-ready check answers (HTTP 400 `Model version not
   * ready`, gRPC `ready: false`, whether the repository knows the name or not); a server that is
   * not ready still throws.
   */
  async checkModelReady(model: string, version?: string): Promise<boolean> {
    let servable: ModelVersion;
    try {
      servable = this.#resolve(model, version);
    } catch (err) {
      if (err instanceof NereidError && NOT_READY_LOOKUPS.has(err.code)) return false;
      throw err;
    }
    return servable.probeReady();
  }

  modelMetadata(model: string, version?: string): ModelMetadata {
    const mv = this.#resolve(model, version);
    const batched = mv.config.max_batch_size > 0;
    const tensor = (t: { name: string; data_type: ModelConfig['input'][number]['data_type']; dims: number[] }) => ({
      name: t.name,
      datatype: fromConfigDataType(t.data_type)!,
      shape: batched ? [-1, ...t.dims] : [...t.dims],
    });
    return {
      name: model,
      versions: version ? [String(mv.version)] : this.#models.readyVersions(model).map(String),
      platform: mv.platform,
      inputs: mv.config.input.map(tensor),
      outputs: mv.config.output.map(tensor),
    };
  }

  /** The complete, normalised configuration in use (protocol.md §3.6). */
  modelConfig(model: string, version?: string): ModelConfig {
    return structuredClone(this.#resolve(model, version).config);
  }

  /** The configuration as the JSON object the config endpoint returns (protocol.md §3.6). */
  modelConfigJson(model: string, version?: string): Record<string, unknown> {
    return modelConfigToJson(this.#resolve(model, version).config, { emitDefaults: true, int64AsString: false });
  }

  /**
   * The configuration in use with the origin of each field (Nereid's effective-configuration
   * extension, docs/protocol.md): `config` is what `modelConfigJson` returns; `provenance` maps
   * each field path (`max_batch_size`, `input[0].dims`, `parameters["k"].string_value`) to
   * `file`, `override`, `auto-complete` or `default`.
   */
  modelEffectiveConfig(model: string, version?: string): EffectiveConfigReport {
    const mv = this.#resolve(model, version);
    return {
      name: mv.name,
      version: String(mv.version),
      source: mv.configSource,
      config: modelConfigToJson(mv.config, { emitDefaults: true, int64AsString: false }),
      provenance: { ...mv.provenance },
    };
  }

  /**
   * How long loading each READY version took, per phase, and the last unload of each version
   * unloaded since the server started (docs/operations.md, load and unload timings). Optionally
   * of one model only. Sorted by model then version.
   */
  modelTimings(model?: string): ModelTimingsReport[] {
    const byKey = new Map<string, ModelTimingsReport>();
    const entry = (name: string, version: number): ModelTimingsReport => {
      const key = `${name}\0${version}`;
      let report = byKey.get(key);
      if (report === undefined) {
        report = { name, version: String(version) };
        byKey.set(key, report);
      }
      return report;
    };
    for (const u of this.metrics.unloads()) {
      if (model !== undefined && u.name !== model) continue;
      entry(u.name, u.version).unload = { total_secs: u.totalSecs, phases: { ...u.phases } };
    }
    for (const s of this.#models.readyServables(model)) {
      entry(s.name, s.version).load = { total_secs: s.servable.loadDurationSecs, phases: { ...s.servable.loadPhases } };
    }
    return [...byKey.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : Number(a.version) - Number(b.version)));
  }

  /**
   * Statistics of every READY version (no model), of one model's READY versions, or of one
   * version (protocol.md §3.14). Unknown or unready models are INVALID_ARG errors, as Triton's.
   */
  modelStatistics(model?: string, version?: string): ModelStatisticsReport[] {
    if (this.#state !== 'ready' && this.#state !== 'loading') {
      throw new NereidError('SERVER_NOT_READY', 'Server not ready');
    }
    this.memory.refreshIfStale();
    if (model === undefined || model === '') {
      return this.#models.readyServables().map((s) => statisticsReport(s.servable));
    }
    const ready = this.#models.readyServables(model);
    if (ready.length === 0) {
      throw new NereidError('STATISTICS_UNAVAILABLE', `requested model '${model}' is not available`);
    }
    if (version === undefined || version === '' || version === '-1') return ready.map((s) => statisticsReport(s.servable));
    const one = ready.find((s) => String(s.version) === version);
    if (one === undefined) {
      throw new NereidError('STATISTICS_UNAVAILABLE', `requested model version is not available for model '${model}'`);
    }
    return [statisticsReport(one.servable)];
  }

  /**
   * The trace settings (the trace extension, docs/observability.md) of the server, or of `model`
   * when named: a model without settings of its own answers the global ones.
   */
  traceSettings(model?: string): TraceSettingsAnswer {
    if (model !== undefined) this.#checkTraceModel(model);
    return this.tracing.answer(model);
  }

  /**
   * Updates the global trace settings, or `model`'s (null clears a setting: a model's falls back
   * to the global one, a global one to its value at start), and returns them. All or nothing:
   * an invalid value throws TRACE_SETTING_INVALID, the trace file or mode TRACE_SETTING_READ_ONLY.
   */
  updateTraceSettings(model: string | undefined, update: TraceSettingsUpdate, options: { grpc?: boolean } = {}): TraceSettingsAnswer {
    if (model !== undefined) this.#checkTraceModel(model);
    return this.tracing.update(model, update, options);
  }

  #checkTraceModel(model: string): void {
    try {
      this.#resolve(model);
    } catch (err) {
      if (err instanceof NereidError && err.code === 'SERVER_NOT_READY') throw err;
      throw new NereidError('TRACE_MODEL_UNKNOWN', `Request for unknown model : ${model}`);
    }
  }

  /** A traced request's response came back from its model: INFER_RESPONSE_COMPLETE, and its output tensors at level TENSORS. */
  #traceResponse(trace: Trace, response: BackendResponse | null): void {
    // As in Triton, where the frontend stamps it: an ensemble step's trace has none.
    if (trace.parentId === 0) trace.stamp('INFER_RESPONSE_COMPLETE');
    if (response !== null && trace.level & TRACE_TENSORS && Array.isArray(response.outputs)) trace.recordTensors('TENSOR_BACKEND_OUTPUT', response.outputs);
  }

  /** The current log settings (the logging extension, protocol.md §3.16). */
  logSettings(): LogSettingsReport {
    return logSettingsReport(this.logger);
  }

  /**
   * Updates the log settings and returns them (protocol.md §3.16, §4.8). `update` is keyed as the
   * extension is (`log_info`, `log_verbose_level`, …); `null` values are ignored. All or nothing:
   * an invalid setting throws (UNSUPPORTED for `log_file`, INVALID_ARG otherwise) and changes
   * nothing.
   */
  updateLogSettings(update: Readonly<Record<string, unknown>>): LogSettingsReport {
    applyLogSettingsUpdate(this.logger, update);
    return logSettingsReport(this.logger);
  }

  /**
   * The repository index (protocol.md §3.13): every model of the repositories and every model
   * with lifecycle history, sorted by name, one entry per version; `ready`: READY versions only.
   */
  async repositoryIndex(options: { ready?: boolean } = {}): Promise<RepositoryIndexEntry[]> {
    this.#checkLive();
    return this.#models.index(options.ready ?? false);
  }

  /**
   * Loads or reloads a model (control mode `explicit`; protocol.md §3.13, models-and-scheduling.md
   * §1.10). Resolves once it serves. Serving versions keep serving while new copies load and are
   * switched over when every one is ready; a failed load leaves them as they were and rejects
   * with the failure (also recorded in the index). Other modes: UNAVAILABLE, as Triton's.
   */
  async loadModel(model: string, options: LoadModelOptions = {}): Promise<void> {
    this.#checkLive();
    await this.#models.load(model, loadRequestOf(model, options));
  }

  /**
   * Unloads a model (control mode `explicit`): its versions refuse new requests at once and are
   * released once their in-flight ones finish; models that depend on it go too, and with
   * `unloadDependents` what it depended on and nothing else needs (§1.11). Resolves once no
   * version is READY; unloading a model that is not loaded succeeds.
   */
  async unloadModel(model: string, options: UnloadModelOptions = {}): Promise<void> {
    this.#checkLive();
    await this.#models.unload(model, { unloadDependents: options.unloadDependents ?? false });
  }

  #checkLive(): void {
    if (this.#state === 'stopping' || this.#state === 'stopped') throw new NereidError('SERVER_STOPPING', 'Server exiting');
    if (this.#state === 'created') throw new NereidError('SERVER_NOT_READY', 'Server not ready');
  }

  /** Every known model version and its state. */
  modelStatuses(): ModelVersionStatus[] {
    return this.#models.statuses().map(toStatus);
  }

  /**
   * Hands the output buffers of `response` back to the server for reuse, once the caller is done
   * with them (written out, copied elsewhere): large outputs live in pooled buffers, and a caller
   * that gives them back spares the server a fresh allocation (page faults, garbage collection) for
   * the next response. Optional: outputs never handed back are garbage collected like any memory.
   * After this call the response's output bytes may change at any moment; do not read them.
   */
  recycleOutputs(response: InferResponse): void {
    for (const out of response.outputs) returnView(out.data);
  }

  /**
   * Whether `recycleOutputs(response)` would hand anything back: a caller may skip arranging the
   * call when not (small outputs are not pooled).
   */
  holdsPooledOutputs(response: InferResponse): boolean {
    for (const out of response.outputs) if (isLent(out.data)) return true;
    return false;
  }

  /**
   * Runs one inference. Rejects with a NereidError for lookup failures, invalid requests
   * (synchronously validated, protocol.md §3.7) and execution errors. Decoupled models, which may
   * send any number of responses, are refused (MODEL_DECOUPLED_UNSUPPORTED): use `inferStream`.
   */
  async infer(request: InferRequest, options: InferOptions = {}): Promise<InferResponse> {
    const requestTime = options.receivedAt ?? process.hrtime.bigint();
    const trace = options.trace;
    if (trace !== undefined) trace.stamp('REQUEST_START');
    const mv = this.#resolve(request.model, request.version, true);
    if (mv.config.model_transaction_policy?.decoupled) {
      throw new NereidError(
        'MODEL_DECOUPLED_UNSUPPORTED',
        `model '${mv.name}' uses the decoupled transaction policy, which sends any number of responses; use a streaming API`,
      );
    }
    const bound = this.#bindSharedMemory(request, true);
    const shm = bound instanceof Promise ? await bound : bound;
    try {
      const { inferenceRequest, validated } = this.#prepare(mv, shm.request, options, requestTime, undefined, shm.outputBuffers);
      let response: BackendResponse;
      if (mv.responseCache === undefined || shm.deviceInputs) {
        mv.scheduler.enqueue(inferenceRequest);
        response = await inferenceRequest.delivered;
      } else {
        response = (await this.#cached(mv, mv.responseCache, inferenceRequest)).response;
      }
      if (trace !== undefined) this.#traceResponse(trace, response);
      const delivered = shm.deliver(this.#toResponse(mv, validated, request.id ?? '', response, mv.config.platform !== 'ensemble'));
      return delivered instanceof Promise ? await delivered : delivered;
    } finally {
      shm.release();
    }
  }

  /**
   * `infer` for an ensemble's step (core/ensemble.ts), with the step request's timestamps, from
   * which the ensemble's compute durations are summed (models-and-scheduling.md §6.6).
   */
  async #inferTimed(request: InferRequest, options: InferOptions): Promise<{ response: InferResponse; times: RequestTimes }> {
    const requestTime = process.hrtime.bigint();
    const trace = options.trace;
    if (trace !== undefined) trace.stamp('REQUEST_START', requestTime);
    const mv = this.#resolve(request.model, request.version, true);
    if (mv.config.model_transaction_policy?.decoupled) {
      throw new NereidError('MODEL_DECOUPLED_UNSUPPORTED', `model '${mv.name}' is decoupled; decoupled ensemble steps are not supported yet`);
    }
    // A step's inputs are tensors the ensemble holds, never shared-memory references.
    const { inferenceRequest, validated } = this.#prepare(mv, request as ResolvedRequest, options, requestTime, undefined);
    let response: BackendResponse;
    if (mv.responseCache === undefined) {
      mv.scheduler.enqueue(inferenceRequest);
      response = await inferenceRequest.delivered;
    } else {
      const cached = await this.#cached(mv, mv.responseCache, inferenceRequest);
      response = cached.response;
      // A hit ran nothing: no compute times to wait for.
      if (cached.hit) {
        if (trace !== undefined) this.#traceResponse(trace, response);
        return { response: this.#toResponse(mv, validated, request.id ?? '', response, mv.config.platform !== 'ensemble'), times: inferenceRequest.times };
      }
    }
    if (trace !== undefined) this.#traceResponse(trace, response);
    // The instance stamps the compute times once `execute` returns, which may be just after the
    // response was delivered: wait a few turns for them (microtasks first, they cost nothing).
    const times = inferenceRequest.times;
    for (let turn = 0; times.computeEnd === 0n && turn < 40; turn++) {
      await (turn < 20 ? Promise.resolve() : new Promise<void>((resolve) => setImmediate(resolve)));
    }
    return {
      response: this.#toResponse(mv, validated, request.id ?? '', response, mv.config.platform !== 'ensemble'),
      times: inferenceRequest.times,
    };
  }

  /**
   * Resolves a request's shared-memory references (protocol.md §3.17.3): inputs are views of
   * their regions where the regions are mapped (no copy), else read now into buffers pooled by the
   * manager; output references are range-checked now and written by `deliver`, which first
   * verifies that no input region shrank under its mapping while the request used it. The regions
   * stay acquired until `release`, so unregistering one meanwhile cannot pull it from under the
   * request. Synchronous, so a stream's requests keep their order, except where an input lies in
   * a CUDA region: its bytes are copied from the device first and the binding is a promise (the
   * request is then queued after `inferStream` returned; the gRPC stream holds back the requests
   * after it until `onAccepted`). Outputs into CUDA regions are copied to the device by
   * `deliver`, which is then a promise too.
   *
   * `release` runs once the request has settled: its backend has answered it (backends keep no
   * input after responding, docs/backends.md), so the input buffers go back to the pool and the
   * regions may be unmapped; an output that a delivered response carries as bytes over one of them
   * (a model that echoes an input) is copied out first (`keepOutOfPool`).
   *
   * With `returnOutputs` (`infer`: the one, final response of a request whose steps have all
   * ended), `deliver` hands each output it copied into a region back (`returnView`), so a pooled
   * output buffer is reused. Streams keep them: a decoupled ensemble's later iterations may still
   * read a tensor an earlier response carried.
   */
  #bindSharedMemory(request: InferRequest, returnOutputs: boolean): BoundRequest | Promise<BoundRequest> {
    if (!usesSharedMemory(request)) return { request: request as ResolvedRequest, deliver: unchanged, release: nothing };
    const leases = new Map<string, SharedMemoryLease>();
    /** Buffers under the inputs (region views and pooled copies): kept out of responses. */
    const pooled = new Set<ArrayBufferLike>();
    /** The pooled copies among them, recycled on release. */
    const copies: ArrayBufferLike[] = [];
    /** Inputs copied from CUDA regions (views lent by the runtime's channel), returned on release. */
    const fetched: Uint8Array[] = [];
    let fetches: Promise<void>[] | undefined;
    const release = (): void => {
      for (const lease of leases.values()) lease.release();
      for (const buffer of copies) this.sharedMemory.recycle(buffer);
      for (const view of fetched) returnView(view);
      copies.length = 0;
      fetched.length = 0;
      pooled.clear();
    };
    const lease = (region: string): SharedMemoryLease => {
      let l = leases.get(region);
      if (l === undefined) {
        l = this.sharedMemory.acquire(region);
        leases.set(region, l);
      }
      return l;
    };
    const outputRefs = new Map<string, SharedMemoryRef>();
    let outputBuffers: Map<string, Uint8Array> | undefined;
    let inputs: InferInput[] | undefined;
    try {
      if (request.inputs.some(isSharedMemoryInput)) {
        inputs = request.inputs.map((input) => {
          if (!isSharedMemoryInput(input)) return input;
          const ref = input.sharedMemory;
          const region = lease(ref.region);
          if (region.cuda !== undefined) {
            const copied: InferInput = { name: input.name, datatype: input.datatype, shape: input.shape, data: EMPTY_BYTES };
            const fetch = region.cuda.fetch(ref.offset ?? 0, ref.byteSize).then((data) => {
              copied.data = data;
              pooled.add(data.buffer);
              fetched.push(data);
            });
            (fetches ??= []).push(fetch);
            return copied;
          }
          const data = region.read(ref.offset ?? 0, ref.byteSize);
          pooled.add(data.buffer);
          if (!region.mapped) copies.push(data.buffer);
          return { name: input.name, datatype: input.datatype, shape: input.shape, data };
        });
      }
      for (const out of request.outputs ?? []) {
        if (out.sharedMemory === undefined) continue;
        const ref = out.sharedMemory;
        const region = lease(ref.region);
        region.check(ref.offset ?? 0, ref.byteSize);
        outputRefs.set(out.name, ref);
        // Bytes the response carries as they are (not classified) may be written in place.
        const target = out.classification ? undefined : region.target(ref.offset ?? 0, ref.byteSize);
        if (target !== undefined) (outputBuffers ??= new Map()).set(out.name, target);
      }
    } catch (err) {
      release();
      throw err;
    }
    const resolved = (inputs === undefined ? request : { ...request, inputs }) as ResolvedRequest;
    const deliver = (response: InferResponse): InferResponse | Promise<InferResponse> => {
      for (const l of leases.values()) l.verify();
      if (outputRefs.size === 0) return keepOutOfPool(response, pooled);
      const written: Uint8Array[] | undefined = returnOutputs ? [] : undefined;
      let stores: Promise<void>[] | undefined;
      for (let i = 0; i < response.outputs.length; i++) {
        const out = response.outputs[i]!;
        const ref = outputRefs.get(out.name);
        if (ref === undefined) continue;
        if (out.data.byteLength > ref.byteSize) {
          throw new NereidError(
            'SHM_OUTPUT_TOO_SMALL',
            `shared memory size specified with the request for output '${out.name}' (${ref.byteSize} bytes) should be at least ${out.data.byteLength} bytes to hold the results`,
          );
        }
        const target = outputBuffers?.get(out.name);
        const region = leases.get(ref.region)!;
        if (region.cuda !== undefined) {
          (stores ??= []).push(region.cuda.store(ref.offset ?? 0, out.data));
          written?.push(out.data);
        } else if (target !== undefined && out.data.buffer === target.buffer && out.data.byteOffset === target.byteOffset) {
          // The backend wrote it there.
          region.confirm(ref.offset ?? 0, out.data.byteLength);
        } else {
          region.write(ref.offset ?? 0, out.data);
          written?.push(out.data);
        }
        response.outputs[i] = { name: out.name, datatype: out.datatype, shape: out.shape, data: EMPTY_BYTES, sharedMemory: ref };
      }
      const finish = (): InferResponse => {
        if (written !== undefined && written.length > 0) {
          // A tensor the response also carries as bytes (two outputs of one tensor) stays out.
          const carried = new Set(response.outputs.map((o) => o.data));
          for (const view of written) if (!carried.has(view)) returnView(view);
        }
        return keepOutOfPool(response, pooled);
      };
      return stores === undefined ? finish() : Promise.all(stores).then(finish);
    };
    const bound: BoundRequest = { request: resolved, ...(outputBuffers && { outputBuffers }), deliver, release, deviceInputs: fetches !== undefined };
    if (fetches === undefined) return bound;
    return Promise.all(fetches).then(
      () => bound,
      (err: unknown) => {
        release();
        throw err;
      },
    );
  }

  /**
   * Runs one inference whose responses arrive one by one (models-and-scheduling.md §8.1): for a
   * decoupled model zero, one or many, each handed to `options.onResponse` as the model sends it,
   * the last with `final` set (a flags-only final response has no `response`); for any other model
   * exactly one, final. Resolves once the final response was handed over; rejects with the
   * request's error (lookup, validation, execution, cancellation through `options.signal`, or
   * RESPONSE_TIMEOUT when a decoupled model stays silent without finishing the request longer
   * than `decoupledResponseTimeoutMs`), after the responses sent before it. With
   * `preserve_ordering`, a request's responses wait until earlier requests are final.
   */
  async inferStream(request: InferRequest, options: StreamInferOptions): Promise<void> {
    const requestTime = options.receivedAt ?? process.hrtime.bigint();
    const trace = options.trace;
    if (trace !== undefined) trace.stamp('REQUEST_START');
    const mv = this.#resolve(request.model, request.version, true);
    const decoupled = mv.config.model_transaction_policy?.decoupled ?? false;
    const id = request.id ?? '';
    const bound = this.#bindSharedMemory(request, false);
    const shm = bound instanceof Promise ? await bound : bound;
    try {
      if (decoupled) {
        await this.#inferDecoupled(mv, shm.request, options, requestTime, id, shm.deliver);
      } else {
        const { inferenceRequest, validated } = this.#prepare(mv, shm.request, options, requestTime, undefined, shm.outputBuffers);
        let pending: Promise<BackendResponse>;
        if (mv.responseCache === undefined || shm.deviceInputs) {
          mv.scheduler.enqueue(inferenceRequest);
          pending = inferenceRequest.delivered;
        } else {
          pending = this.#cached(mv, mv.responseCache, inferenceRequest).then((c) => c.response);
        }
        options.onAccepted?.({ model: mv.name, version: String(mv.version), decoupled });
        const response = await pending;
        if (trace !== undefined) this.#traceResponse(trace, response);
        const delivered = shm.deliver(this.#toResponse(mv, validated, id, response, true));
        options.onResponse({ response: delivered instanceof Promise ? await delivered : delivered, final: true });
      }
    } finally {
      shm.release();
    }
  }

  /** `inferStream` for a decoupled model: every response goes to `options.onResponse` as it comes. */
  async #inferDecoupled(
    mv: ModelVersion,
    request: ResolvedRequest,
    options: StreamInferOptions,
    requestTime: bigint,
    id: string,
    deliver: BoundRequest['deliver'],
  ): Promise<void> {
    let failure: NereidError | undefined;
    let inferenceRequest!: InferenceRequest;
    const fail = (err: unknown): void => {
      failure ??= toNereidError(err, 'INTERNAL');
      inferenceRequest.fail(failure);
    };
    /**
     * Responses whose outputs are being copied into CUDA regions: later responses wait behind
     * them, so the client sees them in the order the model sent them.
     */
    let copying: Promise<void> | undefined;
    const trace = options.trace;
    const sink: ResponseSink = (data, final) => {
      if (failure !== undefined) return;
      if (trace !== undefined && (final || data !== null)) this.#traceResponse(trace, data);
      try {
        if (data === null) {
          if (copying === undefined) options.onResponse({ final });
          else copying = copying.then(() => (failure === undefined ? options.onResponse({ final }) : undefined));
          return;
        }
        const response = deliver(this.#toResponse(mv, prepared.validated, id, data, false));
        if (copying === undefined && !(response instanceof Promise)) {
          options.onResponse({ response, final });
          return;
        }
        copying = (copying ?? Promise.resolve())
          .then(() => response)
          .then((r) => (failure === undefined ? options.onResponse({ response: r, final }) : undefined))
          .catch(fail);
      } catch (err) {
        fail(err);
      }
    };
    const prepared = this.#prepare(mv, request, options, requestTime, sink);
    inferenceRequest = prepared.inferenceRequest;
    mv.scheduler.enqueue(inferenceRequest);
    options.onAccepted?.({ model: mv.name, version: String(mv.version), decoupled: true });
    await inferenceRequest.delivered;
    if (copying !== undefined) await copying;
    if (failure !== undefined) throw failure;
  }

  /**
   * Answers `request` from the response cache, or runs it and inserts its response
   * (models-and-scheduling.md §8.2, §9.1): a hit is counted as a success and a cache hit, with
   * no inference or execution; a miss that succeeded as a cache miss of its lookup and insert
   * time. A failed request inserts nothing. Cache errors never reach the request: the cache
   * answers them as misses (cache/response-cache.ts).
   */
  async #cached(mv: ModelVersion, cache: ResponseCache, request: InferenceRequest): Promise<{ response: BackendResponse; hit: boolean }> {
    const lookupStart = process.hrtime.bigint();
    // As in Triton, whose scheduler stamps the queue start before its cache lookup.
    request.times.queue = lookupStart;
    const key = requestKey(mv.name, mv.version, request.inputs, request.requestedOutputs);
    const found = cache.lookup(key);
    const hit = found instanceof Promise ? await found : found;
    const lookupEnd = process.hrtime.bigint();
    if (hit !== undefined) {
      mv.stats.onCacheHit(request.times.request, lookupStart, lookupEnd);
      // Completes the request (its end time, for a trace's REQUEST_END); nothing waits on it.
      request.respond(hit, true);
      return { response: hit, hit: true };
    }
    mv.scheduler.enqueue(request);
    const response = await request.delivered;
    const insertStart = process.hrtime.bigint();
    const inserted = cache.insert(key, response);
    if (inserted instanceof Promise) await inserted;
    mv.stats.onCacheMiss(lookupEnd - lookupStart + (process.hrtime.bigint() - insertStart));
    return { response, hit: false };
  }

  #prepare(
    mv: ModelVersion,
    request: ResolvedRequest,
    options: InferOptions,
    requestTime: bigint,
    sink: ResponseSink | undefined,
    outputBuffers?: ReadonlyMap<string, Uint8Array>,
  ): { inferenceRequest: InferenceRequest; validated: ValidatedRequest } {
    const params = interpretParameters(request.parameters, mv.name);
    const validated = validateRequest(mv.io, request.inputs, request.outputs);
    const inferenceRequest = new InferenceRequest({
      id: request.id ?? '',
      model: mv.name,
      inputs: validated.inputs,
      requestedOutputs: validated.requestedOutputs,
      outputBuffers,
      parameters: params.custom,
      batchSize: validated.batchSize,
      priority: params.priority,
      timeoutUs: params.timeoutUs,
      correlationId: params.sequenceId,
      sequenceStart: params.sequenceStart,
      sequenceEnd: params.sequenceEnd,
      signal: options.signal ?? NEVER_ABORTED,
      requestTime,
      ...(sink === undefined ? {} : { onResponse: sink, responseTimeoutMs: this.#responseTimeoutMs }),
    });
    const trace = options.trace;
    if (trace !== undefined) {
      trace.version = String(mv.version);
      trace.requestId = request.id ?? '';
      trace.attach(inferenceRequest.times, () => inferenceRequest.completedAt, mv.config.platform !== 'ensemble');
      if (trace.level & TRACE_TENSORS) trace.recordTensors('TENSOR_QUEUE_INPUT', validated.inputs.values());
      inferenceRequest.trace = trace;
    }
    return { inferenceRequest, validated };
  }

  /**
   * A backend response as the facade's: requested outputs in request order, `reshape` undone,
   * classification applied. `strict`: every requested output must be there (one response per
   * request); otherwise (a decoupled model's responses) the requested outputs it carries.
   */
  #toResponse(mv: ModelVersion, validated: ValidatedRequest, id: string, response: BackendResponse, strict: boolean): InferResponse {
    const outputs: InferOutput[] = [];
    if (!Array.isArray(response.outputs)) throw new NereidError('BACKEND_ERROR', `model '${mv.name}' responded without an 'outputs' array`);
    for (const name of validated.requestedOutputs) {
      let tensor: BackendTensor | undefined;
      for (const t of response.outputs) {
        if (t.name === name) {
          tensor = t;
          break;
        }
      }
      if (tensor === undefined) {
        if (!strict) continue;
        throw new NereidError('BACKEND_ERROR', `model '${mv.name}' did not produce requested output '${name}'`);
      }
      const spec = mv.io.outputs.get(name)!;
      checkBackendOutput(mv.name, spec, tensor);
      if (spec.reshape !== undefined) {
        const batched = mv.io.maxBatchSize > 0;
        const item = undoReshape(batched ? tensor.shape.slice(1) : tensor.shape, spec.dims, spec.reshape);
        tensor = { ...tensor, shape: batched ? [tensor.shape[0]!, ...item] : item };
      }
      const k = validated.classification.get(name);
      if (k !== undefined) tensor = classify(tensor, k, mv.io.maxBatchSize > 0, mv.labels.get(name), mv.name);
      outputs.push({ name, datatype: tensor.datatype, shape: [...tensor.shape], data: tensor.data });
    }
    return {
      model: mv.name,
      version: String(mv.version),
      id,
      parameters: { ...(response.parameters ?? {}) } as Record<string, ParameterValue>,
      outputs,
    };
  }

  /**
   * Stops the server: not ready from now on, in-flight requests complete, every model is
   * unloaded. Idempotent: every call resolves once the server has stopped.
   */
  stop(): Promise<void> {
    if (this.#state === 'stopped') return Promise.resolve();
    this.#stopping ??= (async () => {
      this.#state = 'stopping';
      await this.#models.shutdown();
      this.sharedMemory.close();
      this.metrics.stop();
      this.memory.stop();
      this.#gpuSampler?.stop();
      await this.#cache?.close();
      await this.tracing.close();
      this.#state = 'stopped';
    })();
    return this.#stopping;
  }
}

/**
 * Cross-option rules of the control mode (models-and-scheduling.md §1.9, protocol.md §6.1):
 * REQUEST_PARAMETER errors naming the options.
 */
export function checkControlOptions(options: Pick<ServerOptions, 'modelControlMode' | 'loadModels' | 'repositoryPollSecs'>): void {
  const mode = options.modelControlMode ?? 'none';
  const loadModels = options.loadModels ?? [];
  if (loadModels.length > 0 && mode !== 'explicit') {
    throw new NereidError('REQUEST_PARAMETER', `--load-model is only valid with --model-control-mode=explicit (the mode is '${mode}')`);
  }
  if (loadModels.includes('*') && loadModels.length > 1) {
    throw new NereidError('REQUEST_PARAMETER', "--load-model=* loads every model and must be the only --load-model");
  }
  const secs = options.repositoryPollSecs ?? 15;
  if (mode === 'poll' && !(secs > 0)) {
    throw new NereidError('REQUEST_PARAMETER', `--repository-poll-secs must be > 0 in mode poll, got ${secs}`);
  }
}

/**
 * `response` with every output it carries over one of the `pooled` input buffers copied into
 * memory of its own: those buffers (views of mapped regions, or copies pooled by the shared-memory
 * manager) may be unmapped or reused once the request settles, while the response may be read
 * later.
 */
function keepOutOfPool(response: InferResponse, pooled: ReadonlySet<ArrayBufferLike>): InferResponse {
  if (pooled.size === 0) return response;
  for (let i = 0; i < response.outputs.length; i++) {
    const out = response.outputs[i]!;
    if (pooled.has(out.data.buffer)) response.outputs[i] = { ...out, data: new Uint8Array(out.data) };
  }
  return response;
}
