/**
 * The public types of the `Server` facade: what an embedding program, and every frontend, passes
 * in and gets back. Tensor data is raw little-endian bytes; BYTES tensors use the 4-byte
 * length-prefixed element encoding (protocol.md §2.3).
 */
import type { Trace } from '../observability/trace.js';
import type { DataType, ParameterValue, TypedArray } from '@nereid/protocol';
import type { ModelVersionPolicy } from '../config/model-config.js';

/** Typed arrays accepted as tensor data; they are viewed as bytes, never copied. */
export type TensorData = TypedArray;

export interface InferInput {
  name: string;
  datatype: DataType;
  /** Full shape, batch dimension first when the model batches. */
  shape: readonly number[];
  /**
   * The tensor's bytes (any typed array is viewed as its bytes). For BYTES tensors either the
   * serialized form or an array of elements (strings are UTF-8 encoded).
   */
  data: TensorData | readonly (string | Uint8Array)[];
}

/** A tensor's bytes in a registered shared-memory region (protocol.md §3.17.3). */
export interface SharedMemoryRef {
  region: string;
  byteSize: number;
  /** Offset inside the region; default 0. */
  offset?: number;
}

/** An input whose bytes are read from a registered shared-memory region when the request is accepted. */
export interface SharedMemoryInput {
  name: string;
  datatype: DataType;
  shape: readonly number[];
  sharedMemory: SharedMemoryRef;
}

export interface RequestedOutput {
  name: string;
  /**
   * Write the output's bytes into this region instead of returning them (protocol.md §3.17.3);
   * the response's output then has `sharedMemory` set and empty `data`.
   */
  sharedMemory?: SharedMemoryRef;
  /** Return the top-k classes instead of the tensor (protocol.md §3.11); 0 or absent: off. */
  classification?: number;
}

export interface InferRequest {
  model: string;
  /** Empty or absent: the highest ready version. */
  version?: string;
  id?: string;
  /**
   * Request parameters (protocol.md §3.12): `sequence_id`, `sequence_start`, `sequence_end`,
   * `priority`, `timeout` have their protocol meaning; anything else is passed to the model.
   */
  parameters?: Readonly<Record<string, ParameterValue>>;
  inputs: readonly (InferInput | SharedMemoryInput)[];
  /** Absent or empty: every output of the model, in config order. */
  outputs?: readonly RequestedOutput[];
}

export interface InferOutput {
  name: string;
  datatype: DataType;
  shape: number[];
  /** The tensor's bytes; empty when they were written into shared memory (`sharedMemory`). */
  data: Uint8Array;
  /** Where the bytes were written, for an output requested into shared memory. */
  sharedMemory?: SharedMemoryRef;
}

export interface InferResponse {
  model: string;
  /** The concrete version that served the request. */
  version: string;
  id: string;
  parameters: Record<string, ParameterValue>;
  outputs: InferOutput[];
}

export interface InferOptions {
  /** Aborting cancels the request wherever it is (queue or execution). */
  signal?: AbortSignal;
  /**
   * When the request's bytes arrived (`process.hrtime.bigint()`): a frontend passes the moment the
   * HTTP body was complete, or gRPC handed over the message, so that the request's duration
   * (statistics `success`, protocol.md §3.14) covers its decoding. Default: when the call is made.
   */
  receivedAt?: bigint;
  /**
   * The request's trace, when a frontend sampled it (`Server.tracing.sample`): the facade stamps
   * it and attaches the request's timestamps; the frontend stamps receive and send and ends it.
   */
  trace?: Trace;
}

/** One response of a streaming inference (`Server.inferStream`). */
export interface StreamResponse {
  /** The response; absent for a flags-only final response (a decoupled model ended without data). */
  response?: InferResponse;
  /** The last response of its request. */
  final: boolean;
}

/** What `Server.inferStream` tells as soon as it accepted a request. */
export interface StreamAccepted {
  model: string;
  /** The concrete version serving the request. */
  version: string;
  /**
   * The model is decoupled: zero or many responses, produced at any time
   * (models-and-scheduling.md §8.1). Otherwise exactly one, final, response.
   */
  decoupled: boolean;
}

export interface StreamInferOptions extends InferOptions {
  /**
   * Called with every response, in order, the last with `final` set; never after the promise of
   * `inferStream` settled. A throw from it fails the request (its error rejects that promise).
   */
  onResponse(response: StreamResponse): void;
  /** Called synchronously, before any response, once the request is validated and queued. */
  onAccepted?(accepted: StreamAccepted): void;
}

export interface TensorMetadata {
  name: string;
  datatype: DataType;
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

export interface ServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

export type ModelVersionState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING';

/** A backend of the server (`Server.backends()`), as the start-up backend table shows it. */
export interface BackendDescription {
  name: string;
  /** What it is and where it comes from: "built in: …" or a custom backend's module file. */
  source: string;
  /** The `--backend-config` settings it receives, global ones included. */
  settings: Record<string, string>;
}

export interface ModelVersionStatus {
  name: string;
  version: string;
  state: ModelVersionState;
  reason: string;
}

/**
 * One entry of the repository index (protocol.md §3.13): `version` and `state` for a model with
 * lifecycle history (one entry per version), `name` alone for a model never loaded, `reason`
 * only when non-empty.
 */
export interface RepositoryIndexEntry {
  name: string;
  version?: string;
  state?: ModelVersionState;
  reason?: string;
  /** The version's weight for requests that name no version, when the model has weights (`version_weights`). */
  weight?: number;
}

/** `--model-control-mode` (models-and-scheduling.md §1.9). */
export type ModelControlMode = 'none' | 'poll' | 'explicit';

/** Parameters of a model load (models-and-scheduling.md §1.10). */
export interface LoadModelOptions {
  /** A ModelConfig, as JSON text or object (protocol.md §3.13), used instead of the files on disk. */
  config?: string | Readonly<Record<string, unknown>>;
  /**
   * Files of a model directory used instead of the repository's, by path relative to it
   * (`1/model.onnx`); requires `config`. Written into a fresh directory of the server's own;
   * a path that would leave it is refused.
   */
  files?: ReadonlyMap<string, Uint8Array> | Readonly<Record<string, Uint8Array>>;
  /**
   * Weights of the versions that serve requests naming no version (`{ '1': 90, '2': 10 }`: 90%
   * to version 1); `{}` clears them; left out, the weights stay as they are (docs/protocol.md,
   * `version_weights`). Every key must name a version the load serves.
   */
  versionWeights?: Readonly<Record<string, number>>;
  /**
   * The version policy to serve with (`{ specific: { versions: [1, 2] } }`, `{ latest: { num_versions: 2 } }`,
   * `{ all: {} }`), applied over the model's configuration: the repository's, or `config` when
   * given (docs/protocol.md, `version_policy`). Kept for the model's later reloads from its
   * repository; a load without it goes back to the configuration's own policy.
   */
  versionPolicy?: ModelVersionPolicy | Readonly<Record<string, unknown>>;
}

/** Parameters of a model unload (models-and-scheduling.md §1.10–§1.11). */
export interface UnloadModelOptions {
  /** Also unload the models this one depended on that nothing else needs. */
  unloadDependents?: boolean;
}

export interface StatisticDuration {
  count: number;
  /** Cumulative nanoseconds. */
  ns: bigint;
}

/** One version's statistics, in the shape of the statistics extension (protocol.md §3.14). */
export interface ModelStatisticsReport {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: Record<
    'success' | 'fail' | 'queue' | 'compute_input' | 'compute_infer' | 'compute_output' | 'cache_hit' | 'cache_miss',
    StatisticDuration
  >;
  /** By response index ("0", "1", …): compute_infer, compute_output, success, fail, empty_response, cancel. */
  response_stats: Record<string, Record<'compute_infer' | 'compute_output' | 'success' | 'fail' | 'empty_response' | 'cancel', StatisticDuration>>;
  batch_stats: {
    batch_size: number;
    compute_input: StatisticDuration;
    compute_infer: StatisticDuration;
    compute_output: StatisticDuration;
  }[];
  memory_usage: { type: string; id: number; byte_size: number }[];
}

/**
 * The server's log settings, keyed as the logging extension reports them (protocol.md §3.16).
 * `log_file` empty: the console.
 */
export interface LogSettingsReport {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  log_format: 'default' | 'ISO8601';
}

/** Where a configuration value came from (see `Server.modelEffectiveConfig`). */
export type ConfigOriginName = 'file' | 'override' | 'auto-complete' | 'default';

/** The configuration a version uses, with the origin of each field (docs/protocol.md). */
export interface EffectiveConfigReport {
  name: string;
  version: string;
  /** What the configuration was read from: `config.pbtxt` (or `configs/<name>.pbtxt`), a load's override, or nothing. */
  source: 'file' | 'override' | 'none';
  /** As `GET /v2/models/{m}/config` returns it: every field present. */
  config: Record<string, unknown>;
  /** Field path → origin, in printing order. */
  provenance: Record<string, ConfigOriginName>;
}

/** Seconds: in total and per phase. */
export interface PhaseTimings {
  total_secs: number;
  phases: Record<string, number>;
}

/** Load and unload timings of one model version (docs/operations.md). */
export interface ModelTimingsReport {
  name: string;
  version: string;
  /** The load of the version now READY (`read`, `parse`, `auto_complete`, `backend_init`, `warmup`). */
  load?: PhaseTimings;
  /** The last unload of this version since the server started (`drain`, `release`). */
  unload?: PhaseTimings;
}
