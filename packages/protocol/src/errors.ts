/**
 * The error registry: every error Nereid reports has a stable code, and every code has one kind.
 * The kind maps to an HTTP status and a gRPC status in exactly one table (protocol.md §2.6).
 */

/** The error categories of protocol.md §2.6. */
export type ErrorKind =
  | 'INTERNAL'
  | 'NOT_FOUND'
  | 'UNAVAILABLE'
  | 'UNSUPPORTED'
  | 'INVALID_ARG'
  | 'ALREADY_EXISTS'
  | 'CANCELLED'
  | 'UNKNOWN';

/** gRPC status codes used by the mapping (numbers as in grpc/status.h). */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** The one mapping from error kind to wire status (protocol.md §2.6). */
export const ERROR_KIND_STATUS: Readonly<Record<ErrorKind, { readonly http: number; readonly grpc: number }>> = {
  INTERNAL: { http: 500, grpc: GrpcStatus.INTERNAL },
  NOT_FOUND: { http: 404, grpc: GrpcStatus.NOT_FOUND },
  UNAVAILABLE: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  UNSUPPORTED: { http: 501, grpc: GrpcStatus.UNIMPLEMENTED },
  INVALID_ARG: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  ALREADY_EXISTS: { http: 400, grpc: GrpcStatus.ALREADY_EXISTS },
  CANCELLED: { http: 400, grpc: GrpcStatus.CANCELLED },
  UNKNOWN: { http: 400, grpc: GrpcStatus.UNKNOWN },
};

/**
 * Registered error codes and their kinds. Codes are stable identifiers (tests and tools may rely
 * on them); messages are for people and name the model, version, tensor and the likely fix.
 */
export const ERROR_CODES = {
  // Model lookup (protocol.md §2.1)
  MODEL_NOT_FOUND: 'NOT_FOUND',
  MODEL_VERSION_NOT_FOUND: 'NOT_FOUND',
  MODEL_NO_READY_VERSION: 'NOT_FOUND',
  MODEL_VERSION_NOT_READY: 'UNAVAILABLE',
  MODEL_VERSION_INVALID: 'INVALID_ARG',
  STATISTICS_UNAVAILABLE: 'INVALID_ARG',
  SERVER_NOT_READY: 'UNAVAILABLE',
  SERVER_STOPPING: 'UNAVAILABLE',

  // Request decoding and validation (protocol.md §3.7–§3.12, models-and-scheduling.md §3.7)
  REQUEST_MALFORMED: 'INVALID_ARG',
  REQUEST_TOO_LARGE: 'INVALID_ARG',
  REQUEST_JSON_DATA: 'INTERNAL',
  REQUEST_PARAMETER: 'INVALID_ARG',
  REQUEST_PARAMETER_TYPE: 'INVALID_ARG',
  REQUEST_COMPRESSION_UNSUPPORTED: 'UNSUPPORTED',
  REQUEST_COMPRESSION_INVALID: 'INVALID_ARG',
  INPUT_UNKNOWN: 'INVALID_ARG',
  INPUT_MISSING: 'INVALID_ARG',
  INPUT_DUPLICATE: 'INVALID_ARG',
  INPUT_DATATYPE: 'INVALID_ARG',
  INPUT_SHAPE: 'INVALID_ARG',
  INPUT_BYTE_SIZE: 'INVALID_ARG',
  INPUT_DATA_SOURCE: 'INVALID_ARG',
  INPUT_BYTES_ENCODING: 'INVALID_ARG',
  INPUT_BYTES_UNSUPPORTED: 'UNSUPPORTED',
  INPUT_JSON_UNSUPPORTED: 'INVALID_ARG',
  BATCH_SIZE: 'INVALID_ARG',
  OUTPUT_UNKNOWN: 'INVALID_ARG',
  OUTPUT_PARAMETER: 'INVALID_ARG',
  OUTPUT_JSON_UNSUPPORTED: 'INVALID_ARG',
  CLASSIFICATION_UNSUPPORTED: 'INVALID_ARG',
  MODEL_DECOUPLED_UNSUPPORTED: 'UNSUPPORTED',
  // Sequence batcher (models-and-scheduling.md §5.1, §5.7)
  SEQUENCE_ID_MISSING: 'INVALID_ARG',
  SEQUENCE_ID_TYPE: 'INVALID_ARG',
  SEQUENCE_BATCH_SIZE: 'INVALID_ARG',
  SEQUENCE_START_MISSING: 'INVALID_ARG',
  SEQUENCE_TIMEOUT: 'UNAVAILABLE',

  // Configuration and loading (models-and-scheduling.md §2, §3)
  CONFIG_PARSE: 'INVALID_ARG',
  CONFIG_INVALID: 'INVALID_ARG',
  CONFIG_UNSUPPORTED: 'UNSUPPORTED',
  CONFIG_MISSING: 'INVALID_ARG',
  MODEL_LOAD_FAILED: 'INVALID_ARG',
  REPOSITORY_INVALID: 'INVALID_ARG',
  BACKEND_NOT_FOUND: 'INVALID_ARG',
  /** A backend Triton has and Nereid cannot run on this server (TensorRT, OpenVINO, …). */
  BACKEND_UNSUPPORTED: 'UNSUPPORTED',
  /** A custom backend module that cannot be imported or does not implement the SPI. */
  BACKEND_MODULE_INVALID: 'INVALID_ARG',

  // Model control: the repository extension and control modes (models-and-scheduling.md §1.9–§1.11)
  MODEL_CONTROL_DISABLED: 'UNAVAILABLE',
  MODEL_NAME_INVALID: 'INVALID_ARG',
  MODEL_NOT_IN_REPOSITORY: 'INTERNAL',
  /**
   * An explicit load that failed before any version was tried: the configuration (file or
   * override) could not be read, parsed or validated, or a file override was refused. Triton
   * reports these as its repository poll failing (`failed to load '<m>', failed to poll from model
   * repository`, INTERNAL).
   */
  MODEL_POLL_FAILED: 'INTERNAL',
  MODEL_UNLOAD_FAILED: 'INTERNAL',
  LOAD_PARAMETER: 'INVALID_ARG',
  FILE_OVERRIDE_INVALID: 'INVALID_ARG',
  REPOSITORY_NAME_UNSUPPORTED: 'UNSUPPORTED',

  /** The configured response cache cannot be used at start (a Redis server that does not answer). */
  CACHE_UNAVAILABLE: 'INTERNAL',

  // Shared-memory extensions (protocol.md §3.17)
  SHM_DISABLED: 'UNSUPPORTED',
  SHM_REGION_NOT_FOUND: 'NOT_FOUND',
  SHM_REGION_EXISTS: 'ALREADY_EXISTS',
  SHM_REGISTER_INVALID: 'INVALID_ARG',
  /** The object cannot be opened or is smaller than the region: Triton's INTERNAL answers. */
  SHM_REGISTER_FAILED: 'INTERNAL',
  SHM_RANGE: 'INVALID_ARG',
  SHM_REGION_CHANGED: 'INVALID_ARG',
  SHM_OUTPUT_TOO_SMALL: 'INTERNAL',
  SHM_IO: 'INTERNAL',
  CUDA_SHM_UNSUPPORTED: 'INVALID_ARG',
  // The load generator, `nereid perf` (perf-and-analyzer.md §1)
  /** A command-line option that is unknown, malformed or conflicting (perf_analyzer's exit code 3). */
  PERF_OPTION: 'INVALID_ARG',
  /** Input data or shapes that do not fit the model (`--input-data`, `--shape`). */
  PERF_INPUT_DATA: 'INVALID_ARG',
  /** The server to measure cannot be reached or does not serve the model. */
  PERF_SERVER_UNREACHABLE: 'UNAVAILABLE',
  /** A request still unanswered when the load stopped sending, past `--drain-timeout`. */
  PERF_NO_RESPONSE: 'UNAVAILABLE',
  /** `nereid analyze`: a configuration key or value it cannot use (found before anything is measured). */
  ANALYZE_CONFIG: 'INVALID_ARG',
  /** `nereid analyze`: the server to measure on could not be started or reached. */
  ANALYZE_SERVER: 'UNAVAILABLE',
  /** `nereid operator`: a command-line option it cannot use. */
  OPERATOR_OPTION: 'INVALID_ARG',
  /** `nereid operator`: the Kubernetes API answered an error or could not be reached. */
  KUBERNETES_API: 'UNAVAILABLE',
  /** `nereid operator`: Prometheus (`--prometheus-url`) answered an error or could not be reached. */
  PROMETHEUS_QUERY: 'UNAVAILABLE',

  // The trace extension (docs/observability.md)
  /** A trace setting's value that does not parse or is out of range (Triton's wording). */
  TRACE_SETTING_INVALID: 'INVALID_ARG',
  /** The trace file (or another operator-only trace setting) sent through the API: Triton's 501. */
  TRACE_SETTING_READ_ONLY: 'UNSUPPORTED',
  /** A model trace setting for a model the server does not hold (Triton's "unknown model", 400). */
  TRACE_MODEL_UNKNOWN: 'INVALID_ARG',

  // Execution
  BACKEND_ERROR: 'INTERNAL',
  /** A conditional ensemble step's condition tensor is not one BOOL element (docs/ensembles.md). */
  ENSEMBLE_CONDITION: 'INVALID_ARG',
  // A Python stub (docs/backends.md) that died, hung past its execute timeout, or could not start.
  PYTHON_STUB_FAILED: 'INTERNAL',
  /** A load that would pass a model's memory limit or the server's memory budget (docs/resources.md). */
  MEMORY_BUDGET: 'UNAVAILABLE',
  /** A model stopped because it outgrew its memory limit while serving (docs/resources.md). */
  MODEL_MEMORY_LIMIT: 'UNAVAILABLE',
  // Errors a model reports with a code of its own (pb_utils.TritonError codes INVALID_ARG, UNKNOWN).
  MODEL_ERROR_INVALID_ARG: 'INVALID_ARG',
  MODEL_ERROR_UNKNOWN: 'UNKNOWN',
  /** A decoupled model left a request without a response, and without its final one, too long. */
  RESPONSE_TIMEOUT: 'UNAVAILABLE',
  REQUEST_CANCELLED: 'CANCELLED',
  /** A request a higher-priority one preempted (model parameter `preemption`, docs/resources.md). */
  REQUEST_PREEMPTED: 'UNAVAILABLE',
  INTERNAL: 'INTERNAL',
  UNSUPPORTED: 'UNSUPPORTED',
  NOT_FOUND: 'NOT_FOUND',
  ALREADY_EXISTS: 'ALREADY_EXISTS',
  UNAVAILABLE: 'UNAVAILABLE',
} as const satisfies Record<string, ErrorKind>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The one error type that crosses Nereid's layers. */
export class NereidError extends Error {
  readonly code: ErrorCode;
  readonly kind: ErrorKind;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'NereidError';
    this.code = code;
    this.kind = ERROR_CODES[code];
  }

  /** HTTP status of this error's kind (protocol.md §2.6). */
  get httpStatus(): number {
    return ERROR_KIND_STATUS[this.kind].http;
  }

  /** gRPC status code of this error's kind (protocol.md §2.6). */
  get grpcStatus(): number {
    return ERROR_KIND_STATUS[this.kind].grpc;
  }
}

export function isNereidError(value: unknown): value is NereidError {
  return value instanceof NereidError;
}

/**
 * Turns anything thrown into a NereidError: NereidErrors pass through, everything else becomes
 * `code` (INTERNAL by default) with the original message, prefixed by `context` when given.
 */
export function toNereidError(err: unknown, code: ErrorCode = 'INTERNAL', context?: string): NereidError {
  if (err instanceof NereidError) return err;
  const text = err instanceof Error ? err.message : String(err);
  return new NereidError(code, context ? `${context}: ${text}` : text, { cause: err });
}
