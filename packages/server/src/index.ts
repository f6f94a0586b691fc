/**
 * @nereid/server — the public surface. Everything else is internal.
 */
export { Server, NEREID_VERSION, type ServerOptions, type StartReport } from './core/server.js';
export type {
  BackendDescription,
  InferInput,
  InferOptions,
  InferOutput,
  InferRequest,
  InferResponse,
  StreamInferOptions,
  StreamResponse,
  StreamAccepted,
  LogSettingsReport,
  ModelMetadata,
  ModelStatisticsReport,
  ModelTimingsReport,
  EffectiveConfigReport,
  ConfigOriginName,
  PhaseTimings,
  StatisticDuration,
  ModelVersionState,
  ModelVersionStatus,
  ModelControlMode,
  RepositoryIndexEntry,
  LoadModelOptions,
  UnloadModelOptions,
  RequestedOutput,
  SharedMemoryInput,
  SharedMemoryRef,
  ServerMetadata,
  TensorData,
  TensorMetadata,
} from './core/types.js';
export {
  SharedMemoryManager,
  type SharedMemoryOptions,
  type SystemSharedMemoryStatus,
  type CudaSharedMemoryStatus,
} from './core/shared-memory.js';
export { GrpcFrontend, type GrpcFrontendOptions } from './frontends/grpc/grpc-frontend.js';
export { HttpFrontend, DEFAULT_HTTP_MAX_INPUT_SIZE, type HttpFrontendOptions } from './frontends/http/http-frontend.js';
export { MetricsFrontend, type MetricsFrontendOptions } from './frontends/metrics/metrics-frontend.js';
export {
  DEFAULT_TRACE_SETTINGS,
  TRACE_TENSORS,
  TRACE_TIMESTAMPS,
  Trace,
  TraceManager,
  epochNs,
  type TraceMode,
  type TraceSettingValues,
  type TraceSettingsAnswer,
  type TraceSettingsUpdate,
  type TraceSink,
  type TraceTensor,
} from './observability/trace.js';
export { TraceFileWriter } from './observability/trace-file.js';
export { OpenTelemetrySink, defaultOpenTelemetrySettings, type OpenTelemetrySettings } from './observability/opentelemetry.js';
export { DeviceList, type Device, type Gpu, type MigInstance, type PlacedDevice } from './devices/index.js';
export {
  BACKEND_SPI_VERSION,
  type AutoCompleteContext,
  type Backend,
  type BackendInstance,
  type BackendModel,
  type BackendRequest,
  type BackendResponse,
  type BackendTensor,
  type ExecutionTiming,
  type InstanceSpec,
  type ModelContext,
  type ModelServices,
  NEVER_ABORTED,
} from './backends/spi.js';
export { gatherInput, scatterOutput, unionOfRequestedOutputs } from './backends/batching.js';
export type { BackendFactory, BackendFactoryOptions } from './backends/custom/module-loader.js';
export { runInWorkers, type WorkerBackendOptions } from './backends/custom/worker-backend.js';
export { createLogger, silentLogger, type Logger, type LogSettings } from './observability/logger.js';
export { parseCacheConfig, requestKey, LocalCache, type CacheConfig, type CacheCounters, type ResponseCache } from './cache/index.js';
export {
  ServerMetrics,
  VersionHistograms,
  HistogramSeries,
  REQUEST_HISTOGRAM,
  QUEUE_HISTOGRAM,
  COMPUTE_HISTOGRAM,
  BATCH_SIZE_HISTOGRAM,
  FIRST_RESPONSE_HISTOGRAM,
  DEFAULT_LATENCY_BUCKETS_US,
  DEFAULT_FIRST_RESPONSE_BUCKETS_MS,
  LOAD_PHASES,
  UNLOAD_PHASES,
  LOAD_PHASE_FAMILY,
  UNLOAD_PHASE_FAMILY,
  type LoadPhase,
  type UnloadPhase,
  type UnloadRecord,
  type MetricsOptions,
  type MeteredVersion,
} from './observability/metrics.js';
export type * from './config/model-config.js';
/** The intra-op thread count per instance of ONNX Runtime and PyTorch models that do not set one. */
export { defaultIntraOpThreads } from './backends/threads.js';
export { SERVE_NODE_OPTIONS } from './cli/node-options.js';
/** `nereid serve`'s option table (what `--help` prints) and its parser. */
export {
  SERVE_OPTIONS,
  OPTION_GROUPS,
  optionFormat,
  parseServeArgs,
  type OptionGroup,
  type ServeOptionSpec,
  type ServeOptions,
} from './cli/options.js';
/** Byte access to /dev/shm files through the native addon's mappings, or positioned I/O. */
export { fileBytes, mappingUnavailableReason, type FileBytes } from './core/mapped-file.js';
// The model configuration's text and JSON forms, for tools that write config.pbtxt files (`nereid analyze`).
export { parseModelConfigText } from './config/pbtxt-parser.js';
export { printModelConfigText } from './config/pbtxt-printer.js';
export { modelConfigFromJson, modelConfigToJson } from './config/config-json.js';
