/**
 * A gRPC client for KServe v2 / Triton servers (Nereid or Triton) on @grpc/grpc-js, with the
 * surface of `HttpClient` (protocol.md §4, §7.4). Tensors always travel as raw bytes.
 */
import {
  Metadata,
  credentials as grpcCredentials,
  makeGenericClientConstructor,
  type CallOptions as CallOptions_,
  type ChannelCredentials,
  type Client,
  type ServiceError,
} from '@grpc/grpc-js';
import type { CudaSharedMemoryStatus, SystemSharedMemoryStatus } from './shared-memory.js';
import { GRPC_HEALTH_SERVICE, GRPC_INFERENCE_SERVICE, NereidError, configPb, healthPb, type pb } from '@nereid/protocol';
import { withRetry, type CallOptions, type LogSettings, type RetryPolicy } from './call-options.js';
import { grpcServerError } from './errors.js';
import { decodeInferResponse, encodeInferRequest } from './grpc-codec.js';
import { GrpcInferStream } from './grpc-infer-stream.js';
import type { BaseInferOptions } from './infer-options.js';
import type { InferResult } from './infer-result.js';
import {
  configText,
  versionPolicyText,
  versionWeightsText,
  fileParameters,
  type LoadModelOptions,
  type RepositoryIndexEntry,
  type RepositoryIndexOptions,
  type UnloadModelOptions,
} from './repository.js';

/** The largest message either way, as Triton's clients configure it (protocol.md §4.9). */
export const GRPC_MAX_MESSAGE_SIZE = 2_147_483_647;

/** Keepalive pings (grpc-js channel options `grpc.keepalive_*`); unset fields keep grpc-js's defaults (no pings). */
export interface GrpcKeepaliveOptions {
  /** `grpc.keepalive_time_ms`: idle time before a ping. */
  timeMs?: number;
  /** `grpc.keepalive_timeout_ms`: how long to wait for the ping's answer. */
  timeoutMs?: number;
  /** `grpc.keepalive_permit_without_calls`: ping with no call open. */
  permitWithoutCalls?: boolean;
}

export interface GrpcClientOptions {
  /** Default: insecure (plaintext). */
  credentials?: ChannelCredentials;
  keepalive?: GrpcKeepaliveOptions;
  /**
   * Compression of every message this client sends (`grpc.default_compression_algorithm`);
   * default 'none'. Compressed responses are always accepted.
   */
  compression?: 'gzip' | 'deflate' | 'none';
  /** Largest message sent and received, in bytes; default 2 147 483 647 (protocol.md §7.4 item 4). */
  maxMessageSize?: number;
  /** Retry policy of idempotent calls (default: none); a call's `retry` overrides it. */
  retry?: RetryPolicy;
  /** Default deadline of every unary call, in ms (default: none); a call's `timeout` overrides it. */
  timeout?: number;
  /** Further grpc-js channel options; they override the ones above. */
  channelOptions?: Readonly<Record<string, string | number>>;
}

/** Per-call settings, for every method (`headers` are gRPC metadata, `timeout` the deadline). */
export type GrpcCallOptions = CallOptions;

/**
 * `GrpcClient.infer` options: those of `HttpClient.infer` less the HTTP-only ones, plus the call
 * settings. `timeout` here is the client's deadline; the server-side request timeout is
 * `parameters.timeout` (microseconds, protocol.md §3.12).
 */
export interface GrpcInferOptions extends BaseInferOptions, GrpcCallOptions {}

/** `GrpcClient.stream` options: settings of the whole call (its deadline covers every request). */
export type GrpcStreamOptions = GrpcCallOptions;

export interface ServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

export interface TensorMetadata {
  name: string;
  datatype: string;
  /** -1 for a variable dimension. */
  shape: number[];
}

export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

/** `grpc.health.v1` serving status (protocol.md §4.4). */
export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** The decoded `ModelConfig` message: snake_case fields, enums by name, 64-bit integers as numbers. */
export type ModelConfig = configPb.ModelConfig;

/**
 * The decoded `ModelStatisticsResponse` (protocol.md §3.14, §4.3): snake_case fields; every
 * counter, duration and timestamp is a bigint (uint64 on the wire, cumulative nanoseconds
 * overflow 2^53 on a long-running server), so values are exact.
 */
export type ModelStatisticsResponse = pb.ModelStatisticsResponse;

/** The statistics of one model version, an element of `ModelStatisticsResponse.model_stats`. */
export type ModelStatistics = pb.ModelStatistics;

interface UnaryMethod<Req, Res> {
  path: string;
  requestSerialize(value: Req): Buffer;
  responseDeserialize(bytes: Buffer): Res;
}

const InferenceClient = makeGenericClientConstructor(GRPC_INFERENCE_SERVICE, 'GRPCInferenceService');

const COMPRESSION_ALGORITHM = { none: 0, deflate: 1, gzip: 2 } as const;

/**
 * A client of `inference.GRPCInferenceService` (and `grpc.health.v1.Health`) over one grpc-js
 * channel. Methods may be called concurrently; the channel connects on first use and reconnects
 * as grpc-js does. Failed calls reject with InferenceServerError (`grpcCode` and the server's
 * message, or the transport's for a connection failure); requests this client cannot encode
 * reject with NereidError before anything is sent. Call `close()` when done.
 */
export class GrpcClient {
  /** The channel target, e.g. `localhost:8001`. */
  readonly url: string;
  readonly #client: Client;
  readonly #retry: RetryPolicy | undefined;
  readonly #timeout: number | undefined;
  #closed = false;

  /** @param url  `host:port`, e.g. `localhost:8001` (any grpc-js target). */
  constructor(url: string, options: GrpcClientOptions = {}) {
    this.url = url;
    this.#retry = options.retry;
    this.#timeout = options.timeout;
    const maxMessageSize = options.maxMessageSize ?? GRPC_MAX_MESSAGE_SIZE;
    const channel: Record<string, string | number> = {
      'grpc.max_send_message_length': maxMessageSize,
      'grpc.max_receive_message_length': maxMessageSize,
    };
    if (options.compression !== undefined) channel['grpc.default_compression_algorithm'] = COMPRESSION_ALGORITHM[options.compression];
    const keepalive = options.keepalive ?? {};
    if (keepalive.timeMs !== undefined) channel['grpc.keepalive_time_ms'] = keepalive.timeMs;
    if (keepalive.timeoutMs !== undefined) channel['grpc.keepalive_timeout_ms'] = keepalive.timeoutMs;
    if (keepalive.permitWithoutCalls !== undefined) channel['grpc.keepalive_permit_without_calls'] = keepalive.permitWithoutCalls ? 1 : 0;
    Object.assign(channel, options.channelOptions);
    this.#client = new InferenceClient(url, options.credentials ?? grpcCredentials.createInsecure(), channel);
  }

  /**
   * Closes the channel. Calls already under way finish; calls made just before that have not
   * started yet fail (UNAVAILABLE); later calls reject with NereidError (UNAVAILABLE).
   */
  close(): void {
    this.#closed = true;
    this.#client.close();
  }

  async isServerLive(options?: GrpcCallOptions): Promise<boolean> {
    return (await this.#unary(GRPC_INFERENCE_SERVICE.ServerLive, {}, options, true)).live;
  }

  async isServerReady(options?: GrpcCallOptions): Promise<boolean> {
    return (await this.#unary(GRPC_INFERENCE_SERVICE.ServerReady, {}, options, true)).ready;
  }

  /**
   * Whether the model (version) is ready. A model no repository holds is an error (NOT_FOUND), as
   * with Triton's Python client (protocol.md §7.4 item 6); a model the repository knows that cannot
   * serve that version answers `false`; an invalid version string is an error (INVALID_ARGUMENT).
   */
  async isModelReady(model: string, version?: string, options?: GrpcCallOptions): Promise<boolean> {
    return (await this.#unary(GRPC_INFERENCE_SERVICE.ModelReady, { name: model, version: version ?? '' }, options, true)).ready;
  }

  async serverMetadata(options?: GrpcCallOptions): Promise<ServerMetadata> {
    const m = await this.#unary(GRPC_INFERENCE_SERVICE.ServerMetadata, {}, options, true);
    return { name: m.name, version: m.version, extensions: m.extensions };
  }

  async modelMetadata(model: string, version?: string, options?: GrpcCallOptions): Promise<ModelMetadata> {
    const m = await this.#unary(GRPC_INFERENCE_SERVICE.ModelMetadata, { name: model, version: version ?? '' }, options, true);
    const tensor = (t: pb.ModelMetadataResponse_TensorMetadata): TensorMetadata => ({
      name: t.name,
      datatype: t.datatype,
      shape: t.shape.map(Number),
    });
    return { name: m.name, versions: m.versions, platform: m.platform, inputs: m.inputs.map(tensor), outputs: m.outputs.map(tensor) };
  }

  /** The model's normalized configuration (protocol.md §4.5), decoded. */
  async modelConfig(model: string, version?: string, options?: GrpcCallOptions): Promise<ModelConfig> {
    const r = await this.#unary(GRPC_INFERENCE_SERVICE.ModelConfig, { name: model, version: version ?? '' }, options, true);
    // An absent message field is its default value (proto3).
    return r.config ?? configPb.ModelConfig.decode(new Uint8Array(0));
  }

  /**
   * Cumulative statistics (`ModelStatistics`, protocol.md §3.14): of every READY version of every
   * model (no `model`), of one model's READY versions (no `version`), or of one version. A model
   * or version that is unknown or not READY is an error (INVALID_ARGUMENT, "requested model '<m>'
   * is not available"); a server without the statistics extension answers UNIMPLEMENTED.
   */
  async modelStatistics(model?: string, version?: string, options?: GrpcCallOptions): Promise<ModelStatisticsResponse> {
    return this.#unary(GRPC_INFERENCE_SERVICE.ModelStatistics, { name: model ?? '', version: version ?? '' }, options, true);
  }

  /**
   * The repository index (`RepositoryIndex`, protocol.md §3.13): every model of the server's
   * repositories, one entry per version with its state and reason; empty fields are left out.
   */
  async repositoryIndex(options: RepositoryIndexOptions & GrpcCallOptions = {}): Promise<RepositoryIndexEntry[]> {
    const r = await this.#unary(GRPC_INFERENCE_SERVICE.RepositoryIndex, { repository_name: '', ready: options.ready ?? false }, options, true);
    return r.models.map((m) => ({
      name: m.name,
      ...(m.version ? { version: m.version } : {}),
      ...(m.state ? { state: m.state } : {}),
      ...(m.reason ? { reason: m.reason } : {}),
    }));
  }

  /**
   * Loads or reloads a model (`RepositoryModelLoad`); resolves once the server serves it. Needs
   * a server in explicit model control mode. Override files travel as raw bytes, `versionWeights`
   * and `versionPolicy` as `version_weights` and `version_policy` with their JSON text in `string_param`.
   */
  async loadModel(model: string, options: LoadModelOptions & GrpcCallOptions = {}): Promise<void> {
    const parameters: Record<string, pb.ModelRepositoryParameter> = {};
    const config = configText(options.config);
    if (config !== undefined) parameters.config = { string_param: config };
    const weights = versionWeightsText(options.versionWeights);
    if (weights !== undefined) parameters.version_weights = { string_param: weights };
    const policy = versionPolicyText(options.versionPolicy);
    if (policy !== undefined) parameters.version_policy = { string_param: policy };
    for (const [key, bytes] of fileParameters(options.files)) parameters[key] = { bytes_param: bytes };
    await this.#unary(GRPC_INFERENCE_SERVICE.RepositoryModelLoad, { repository_name: '', model_name: model, parameters }, options);
  }

  /** Unloads a model (`RepositoryModelUnload`); needs explicit model control mode. */
  async unloadModel(model: string, options: UnloadModelOptions & GrpcCallOptions = {}): Promise<void> {
    const parameters = { unload_dependents: { bool_param: options.unloadDependents ?? false } };
    await this.#unary(GRPC_INFERENCE_SERVICE.RepositoryModelUnload, { repository_name: '', model_name: model, parameters }, options);
  }

  /** `grpc.health.v1.Health/Check` (protocol.md §4.4): SERVING when the server is ready. */
  /**
   * Registers system shared-memory region `name` (protocol.md §3.17.1, §4.8): `byteSize` bytes at
   * `offset` of the POSIX object `key` (see `SystemSharedMemoryRegion`). The server must run with
   * `--allow-client-shm=true`.
   */
  async registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0, options?: GrpcCallOptions): Promise<void> {
    await this.#unary(GRPC_INFERENCE_SERVICE.SystemSharedMemoryRegister, { name, key, offset: BigInt(offset), byte_size: BigInt(byteSize) }, options);
  }

  /** Unregisters one system region, or all of them without `name`; unknown names succeed. */
  async unregisterSystemSharedMemory(name?: string, options?: GrpcCallOptions): Promise<void> {
    await this.#unary(GRPC_INFERENCE_SERVICE.SystemSharedMemoryUnregister, { name: name ?? '' }, options);
  }

  /** Status of every system region, or of the one named (unknown → NOT_FOUND), in the HTTP client's form. */
  async systemSharedMemoryStatus(name?: string, options?: GrpcCallOptions): Promise<SystemSharedMemoryStatus[]> {
    const r = await this.#unary(GRPC_INFERENCE_SERVICE.SystemSharedMemoryStatus, { name: name ?? '' }, options, true);
    return Object.values(r.regions).map((s) => ({ name: s.name, key: s.key, offset: Number(s.offset), byte_size: Number(s.byte_size) }));
  }

  /** Registers a CUDA region from its 64-byte cudaIpcMemHandle_t (protocol.md §3.17.2). */
  async registerCudaSharedMemory(name: string, rawHandle: Uint8Array, deviceId: number, byteSize: number, options?: GrpcCallOptions): Promise<void> {
    await this.#unary(
      GRPC_INFERENCE_SERVICE.CudaSharedMemoryRegister,
      { name, raw_handle: rawHandle, device_id: BigInt(deviceId), byte_size: BigInt(byteSize) },
      options,
    );
  }

  async unregisterCudaSharedMemory(name?: string, options?: GrpcCallOptions): Promise<void> {
    await this.#unary(GRPC_INFERENCE_SERVICE.CudaSharedMemoryUnregister, { name: name ?? '' }, options);
  }

  async cudaSharedMemoryStatus(name?: string, options?: GrpcCallOptions): Promise<CudaSharedMemoryStatus[]> {
    const r = await this.#unary(GRPC_INFERENCE_SERVICE.CudaSharedMemoryStatus, { name: name ?? '' }, options, true);
    return Object.values(r.regions).map((s) => ({ name: s.name, device_id: Number(s.device_id), byte_size: Number(s.byte_size) }));
  }

  /** The server's log settings (`LogSettings` with no settings, protocol.md §4.8), in the HTTP client's form. */
  async logSettings(options?: GrpcCallOptions): Promise<LogSettings> {
    return settingsOf(await this.#unary(GRPC_INFERENCE_SERVICE.LogSettings, { settings: {} }, options, true));
  }

  /**
   * Updates the settings given (`LogSettings`) and returns all of them as they now are. Numbers
   * travel as `uint32_param`, booleans as `bool_param`, strings as `string_param`.
   */
  async updateLogSettings(settings: Readonly<LogSettings>, options?: GrpcCallOptions): Promise<LogSettings> {
    const request: pb.LogSettingsRequest = { settings: {} };
    for (const [key, value] of Object.entries(settings)) {
      request.settings[key] =
        typeof value === 'boolean' ? { bool_param: value } : typeof value === 'number' ? { uint32_param: value } : { string_param: value };
    }
    return settingsOf(await this.#unary(GRPC_INFERENCE_SERVICE.LogSettings, request, options));
  }

  async healthCheck(service = '', options?: GrpcCallOptions): Promise<HealthStatus> {
    const r = await this.#unary(GRPC_HEALTH_SERVICE.Check, { service }, options, true);
    const S = healthPb.HealthCheckResponse_ServingStatus;
    switch (r.status) {
      case S.SERVING:
        return 'SERVING';
      case S.NOT_SERVING:
        return 'NOT_SERVING';
      case S.SERVICE_UNKNOWN:
        return 'SERVICE_UNKNOWN';
      default:
        return 'UNKNOWN';
    }
  }

  /**
   * One inference (`ModelInfer`). Input bytes are sent from the caller's typed arrays without a
   * copy; the caller must not change them until the promise settles. Output bytes are views over
   * the received message.
   */
  async infer(options: GrpcInferOptions): Promise<InferResult> {
    const began = performance.now();
    const request = encodeInferRequest(options);
    const built = performance.now();
    const response = await this.#unary(GRPC_INFERENCE_SERVICE.ModelInfer, request, options);
    const answered = performance.now();
    const result = decodeInferResponse(response);
    if (options.timing) {
      options.timing.sendMs = built - began;
      options.timing.recvMs = performance.now() - answered;
    }
    return result;
  }

  /**
   * Opens a `ModelStreamInfer` call (protocol.md §4.7): `send` requests, read results with
   * `for await`, `end()` when done sending. Requests of non-decoupled models are answered in the
   * order sent; in-band errors arrive as results with `error` and the stream stays open.
   */
  stream(options: GrpcStreamOptions = {}): GrpcInferStream {
    this.#checkOpen();
    const method = GRPC_INFERENCE_SERVICE.ModelStreamInfer;
    const call = this.#client.makeBidiStreamRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      metadataOf(options.headers),
      options.timeout === undefined ? {} : { deadline: Date.now() + options.timeout },
    );
    return new GrpcInferStream(call, options.signal);
  }

  /** One unary call; `idempotent` calls are retried per the policy (call's, else the client's). */
  #unary<Req, Res>(method: UnaryMethod<Req, Res>, request: Req, options: GrpcCallOptions = {}, idempotent = false): Promise<Res> {
    const attempt = () => this.#unaryOnce(method, request, options);
    if (!idempotent) return attempt();
    return withRetry(options.retry ?? this.#retry, options.signal, attempt);
  }

  #unaryOnce<Req, Res>(method: UnaryMethod<Req, Res>, request: Req, options: GrpcCallOptions): Promise<Res> {
    const signal = options.signal;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      this.#checkOpen();
      const call = this.#client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        request,
        metadataOf(options.headers),
        this.#callOptions(options),
        (err: ServiceError | null, response?: Res) => {
          signal?.removeEventListener('abort', onAbort);
          if (signal?.aborted) reject(signal.reason);
          else if (err) reject(grpcServerError(err.code, err.details, err));
          else resolve(response!);
        },
      );
      const onAbort = () => call.cancel();
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #callOptions(options: GrpcCallOptions): CallOptions_ {
    const timeout = options.timeout ?? this.#timeout;
    return timeout === undefined ? {} : { deadline: Date.now() + timeout };
  }

  #checkOpen(): void {
    if (this.#closed) throw new NereidError('UNAVAILABLE', `this GrpcClient of ${this.url} has been closed`);
  }
}

function metadataOf(headers: Readonly<Record<string, string>> | undefined): Metadata {
  const metadata = new Metadata();
  if (headers !== undefined) for (const key of Object.keys(headers)) metadata.set(key, headers[key]!);
  return metadata;
}

/** A LogSettings response as plain values. */
function settingsOf(response: pb.LogSettingsResponse): LogSettings {
  const out: LogSettings = {};
  for (const [key, v] of Object.entries(response.settings)) {
    const value = v.bool_param ?? v.uint32_param ?? v.string_param;
    if (value !== undefined) out[key] = value;
  }
  return out;
}
