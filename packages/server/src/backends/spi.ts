/**
 * The backend SPI, version 1 (models-and-scheduling.md §8.4).
 *
 * A backend turns a model directory into something that executes batches of requests. The server
 * owns everything around it: configuration, versions, scheduling, statistics and the wire. A
 * backend is a plain object implementing `Backend`; the registry maps `backend`/`platform` names
 * to implementations, and a custom backend is a JS module exporting one.
 *
 * Lifecycle, per model version:
 *   autoCompleteConfig? → createModel → createInstance × N → execute … → instance.unload × N →
 *   model.unload
 * An instance computes one batch at a time (see `pipelineDepth`). Every request handed to
 * `execute` must receive exactly one response flagged final (see `BackendRequest.respond`); if
 * `execute` rejects, the server sends that error to every request that has not received its final
 * response yet.
 */
import type { DataType, NereidError, ParameterValue } from '@nereid/protocol';
import type { ModelConfig } from '../config/model-config.js';
import type { PlacedDevice } from '../devices/index.js';
import type { InferOptions, InferRequest, InferResponse, LoadModelOptions, StreamInferOptions, UnloadModelOptions } from '../core/types.js';
import type { Logger } from '../observability/logger.js';

export const BACKEND_SPI_VERSION = 1;

/** A tensor as backends see it: raw little-endian bytes (BYTES: 4-byte length-prefixed elements). */
export interface BackendTensor {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/**
 * The signal of requests that cannot be cancelled (in-process callers that pass none). Never
 * aborted: schedulers and backends skip listening to it.
 */
export const NEVER_ABORTED: AbortSignal = new AbortController().signal;

/** What a backend sends for one request. */
export interface BackendResponse {
  readonly outputs: readonly BackendTensor[];
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
}

export interface BackendRequest {
  /** Client-supplied request id ('' when none). */
  readonly id: string;
  /**
   * Inputs by config name. Shapes are what the model sees: the batch dimension first when the
   * model batches, and `reshape` already applied (models-and-scheduling.md §2.7).
   */
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  /** Config output names the request wants; never empty (no request means all outputs). */
  readonly requestedOutputs: readonly string[];
  /**
   * Where the server will copy some outputs once they come back: views of the shared-memory
   * regions the client asked them written into (protocol.md §3.17.3), by config output name. A
   * backend may write an output's bytes there itself and respond with a tensor whose `data` is
   * the start of that view (its first `byteLength` bytes, no more than the view holds): the
   * server then has nothing left to copy. Optional to use; absent when there are none (and on
   * requests of decoupled models). Only the thread that produced the bytes needs to touch the
   * view: the ONNX Runtime backend's worker writes into it by slab id (core/slabs.ts).
   */
  readonly outputBuffers?: ReadonlyMap<string, Uint8Array>;
  /** Custom request parameters (reserved keys removed). */
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  /** The request's batch size: its first dimension for batching models, 1 otherwise. */
  readonly batchSize: number;
  /**
   * Aborted when the client goes away or the request is cancelled. `NEVER_ABORTED` for requests
   * that cannot be cancelled (an embedder's call without a signal): nothing to listen to.
   */
  readonly signal: AbortSignal;
  /**
   * The request's `sequence_id` (protocol.md §3.12; 0n / '' when none) and sequence flags. Models
   * under the sequence batcher also get them as their configured control inputs (§5.3).
   */
  readonly correlationId?: bigint | string;
  readonly sequenceStart?: boolean;
  readonly sequenceEnd?: boolean;
  /**
   * Sends a response (or an error) for this request. Output tensors must be named after config
   * outputs and have the shapes the model produced (batch dimension first for batching models;
   * the server converts `reshape` back to `dims`). `final` defaults to true; a non-decoupled
   * model sends exactly one, final, response; `null` with `final` sends a flags-only final
   * response (decoupled models). Calls after the final response are ignored.
   */
  respond(response: BackendResponse | NereidError | null, final?: boolean): void;
  /**
   * Present on requests of models with `sequence_batching { iterative_sequence: true }`
   * (models-and-scheduling.md §5.9): releases the request back to the sequence batcher instead
   * of ending it, so it runs again in a later batch with START and END false and the sequence's
   * state carried on. Call it before `execute` returns, without sending the final response (a
   * decoupled model may send non-final responses first; a non-decoupled one sends nothing for a
   * rescheduled iteration). The sequence ends when an execution returns without it. Throws a
   * NereidError when the model is not iterative or `execute` already returned.
   */
  reschedule?(): void;
}

/**
 * Timing marks a backend may set while executing a batch (statistics, §9.1). Each takes an
 * optional monotonic timestamp (`process.hrtime.bigint()`, the same clock on every thread), so a
 * backend that computes elsewhere can report when things really happened; without one, "now".
 * Unset marks default to the start and end of the `execute` call.
 */
export interface ExecutionTiming {
  /** The batch started executing (after waiting behind earlier batches of the instance). */
  markComputeStart(at?: bigint): void;
  /** Inputs are prepared and the framework starts computing. */
  markInputsReady(at?: bigint): void;
  /** The framework finished computing; outputs are being extracted. */
  markOutputsStart(at?: bigint): void;
  /** The batch finished executing. */
  markComputeEnd(at?: bigint): void;
  /**
   * Optional: the instance may take its next batch now, before `execute` returns. A backend calls
   * it when the framework has finished this batch and what is left is handing the outputs to the
   * requests, which needs nothing of the instance: the scheduler then sends the next batch at once
   * instead of after every response has been handed over (and encoded and written by the
   * frontends). At most once per execution; ignored under the rate limiter and for warmups.
   */
  releaseInstance?(): void;
}

export interface InstanceSpec {
  /** `<group name>_<index within group>` (§2.10). */
  readonly name: string;
  readonly groupName: string;
  readonly kind: 'KIND_CPU' | 'KIND_GPU' | 'KIND_MODEL';
  /** The server's index of the instance's GPU (KIND_GPU), else 0. */
  readonly deviceId: number;
  /** Where a KIND_GPU instance runs: its GPU or MIG instance (absent for other kinds). */
  readonly device?: PlacedDevice;
  /** Instances of the model being created, in total (for sizing thread pools). */
  readonly instanceCount: number;
}

/**
 * Memory a backend instance holds, as the statistics extension's `memory_usage` reports it:
 * `type` and device `id` (0 for host memory), bytes.
 */
export interface MemoryUsageEntry {
  readonly type: 'CPU' | 'CPU_PINNED' | 'GPU';
  readonly id: number;
  readonly byte_size: number;
}

export interface BackendInstance {
  /**
   * How many `execute` calls may be outstanding at once (default 1). With more, the server may
   * hand the instance its next batch before the current one finished; the instance must still
   * run them one at a time, in call order, and report real compute times through `timing`. This
   * keeps an instance that computes on another thread busy instead of idle between batches.
   */
  readonly pipelineDepth?: number;
  execute(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void>;
  /**
   * Optional readiness probe (Triton's `TRITONBACKEND_ModelInstanceReady`), consulted by
   * model-ready checks (`Server.checkModelReady`: HTTP `…/ready`, gRPC `ModelReady`) while the
   * version is loaded. Absent: the instance is ready. A probe that rejects counts as not ready;
   * it must settle in bounded time (the backend chooses the bound).
   */
  isReady?(): Promise<boolean>;
  /**
   * Optional: called once when the version begins to unload, before the server waits for the
   * executes in flight to settle (it waits for them before `unload`). Those executes may still
   * finish; a backend may bound how long they run by failing them (an execute that never returns
   * would otherwise hold the unload, and a server's shutdown, for good). Must not throw.
   */
  unloading?(): void;
  /**
   * Optional, for decoupled models: the server ended `request`, which this instance is
   * executing, with `error` (a higher-priority request waits for the instance: preemption, model
   * parameter `preemption`). The backend tells the model, so that it stops sending responses for
   * the request and `execute` returns soon; whatever it still sends for it is ignored. Called
   * before the server fails the request; must not throw. A model whose instances lack it cannot
   * enable running preemption (its load fails).
   */
  preempt?(request: BackendRequest, error: NereidError): void;
  /**
   * Optional: the memory this instance holds now (docs/resources.md). Cheap: from a sample the
   * instance keeps; with `fresh`, the instance takes a new sample first (a read of /proc, never
   * on the request path: the server calls it from its sampling timer and for statistics requests
   * when the last sample is old). Absent: the server measures the version once at load (its
   * process's growth, or its files' bytes). Must not throw.
   */
  memoryUsage?(fresh?: boolean): readonly MemoryUsageEntry[];
  /**
   * Optional: stops the instance for good because of `error` (its model outgrew its memory
   * limit): the requests it holds fail with `error`, its process (if any) ends, it is not started
   * again, and every later `execute` rejects with `error`. `unload` still follows. Must not throw.
   */
  terminate?(error: NereidError): void;
  /** Releases the instance. Called once, after its last execute has settled. */
  unload(): Promise<void>;
}

export interface BackendModel {
  createInstance(spec: InstanceSpec): Promise<BackendInstance>;
  /** Releases the model. Called once, after every instance was unloaded. */
  unload(): Promise<void>;
}

export interface ModelContext {
  readonly name: string;
  readonly version: number;
  /** The completed, normalised and validated configuration. */
  readonly config: Readonly<ModelConfig>;
  /** `<repository>/<model>` */
  readonly modelDirectory: string;
  /** `<repository>/<model>/<version>` */
  readonly versionDirectory: string;
  /** `<versionDirectory>/<default_model_filename>` */
  readonly modelPath: string;
  /** `--backend-config=<backend>,<key>=<value>` settings for this backend, plus global ones. */
  readonly backendConfig: Readonly<Record<string, string>>;
  readonly logger: Logger;
  /**
   * The model's memory limit in bytes (0: none; docs/resources.md). The server enforces it; a
   * backend may also use it as a backstop (the Python stub caps its data segment with it).
   */
  readonly memoryLimitBytes?: number;
  /**
   * The GPU memory process `pid` uses, by the server's GPU index, from the server's last
   * nvidia-smi sample (every `--metrics-interval-ms`); empty without GPUs. For backends whose
   * instances run in processes of their own (the Python backend's GPU entries of `memoryUsage`).
   */
  readonly gpuMemoryOf?: (pid: number) => ReadonlyMap<number, number>;
  /**
   * The server's models, for a model that calls other models while it executes (Triton's BLS)
   * or loads and unloads them. Absent when the backend model runs without a server. Calls go
   * through the `Server` facade as an embedding program's would: the same validation,
   * scheduling and errors (NereidError). A model must not wait on a call to itself from its only
   * instance (it would wait forever).
   */
  readonly models?: ModelServices;
}

/** What `ModelContext.models` offers: the `Server` facade's inference and model-control calls. */
export interface ModelServices {
  /** `Server.infer`: one inference; rejects with the facade's NereidError. */
  infer(request: InferRequest, options?: InferOptions): Promise<InferResponse>;
  /**
   * `Server.inferStream`: every response of one request (a decoupled model's many, or one),
   * the last flagged final; rejects with the facade's NereidError.
   */
  inferStream(request: InferRequest, options: StreamInferOptions): Promise<void>;
  /** `Server.isModelReady`: throws the lookup error for an unknown model or version. */
  isModelReady(model: string, version?: string): boolean;
  /** `Server.loadModel` (control mode explicit only). */
  loadModel(model: string, options?: LoadModelOptions): Promise<void>;
  /** `Server.unloadModel` (control mode explicit only). */
  unloadModel(model: string, options?: UnloadModelOptions): Promise<void>;
}

export interface AutoCompleteContext extends Omit<ModelContext, 'config' | 'models'> {
  /** The configuration as read, derived and normalised, before validation of inputs/outputs. */
  readonly config: Readonly<ModelConfig>;
}

export interface Backend {
  readonly name: string;
  readonly spiVersion: typeof BACKEND_SPI_VERSION;
  /**
   * Completes a partial configuration from the model itself (models-and-scheduling.md §3.1 step
   * 7). May change only `max_batch_size`, `input`, `output`, the scheduling choice and
   * `model_transaction_policy.decoupled`. Called only when auto-complete is enabled.
   */
  autoCompleteConfig?(ctx: AutoCompleteContext): Promise<ModelConfig>;
  /** Default instance count for KIND_CPU groups when the config gives none (§3.3). */
  readonly defaultCpuInstanceCount?: number;
  /**
   * The backend can run instances on a GPU (default false). Only then does KIND_AUTO become
   * KIND_GPU where the server has GPUs, and may a group have kind KIND_GPU; its instances get
   * `InstanceSpec.device`.
   */
  readonly gpu?: boolean;
  createModel(ctx: ModelContext): Promise<BackendModel>;
}
