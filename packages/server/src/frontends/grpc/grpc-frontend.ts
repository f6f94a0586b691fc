/**
 * The gRPC frontend (protocol.md §4): `inference.GRPCInferenceService` and `grpc.health.v1.Health`
 * on our gRPC server (h2-server.ts) over our own HTTP/2 transport or node:http2 (`--grpc-server=node-http2`), or on
 * @grpc/grpc-js's (`--grpc-server=grpc-js`).
 * A translation layer to the `Server` facade, like the HTTP frontend; it never touches schedulers
 * or backends.
 */
import {
  GRPC_HEALTH_SERVICE,
  GRPC_INFERENCE_SERVICE,
  NereidError,
  toNereidError,
  healthPb,
  whenEncoded,
  type pb,
} from '@nereid/protocol';
import { toProtoModelConfig } from '../../config/index.js';
import type { Server } from '../../core/server.js';
import type { LogSettingsReport, ModelStatisticsReport, StatisticDuration } from '../../core/types.js';
import type { Trace, TraceSettingsAnswer, TraceSettingsUpdate } from '../../observability/trace.js';
import { decodeInferRequest, encodeInferResponse, MAX_MESSAGE_SIZE, requestedVersion } from './infer-codec.js';
import { InferStream, STOPPING_MESSAGE } from './infer-stream.js';
import { repositoryIndex, repositoryModelLoad, repositoryModelUnload } from './repository-codec.js';
import { GrpcJsServer } from './grpc-js-server.js';
import {
  H2GrpcServer,
  type H2DuplexCall,
  type H2UnaryCall,
  type GrpcMethodDefinition,
  type UnaryCallback,
} from './h2-server.js';
import { grpcError } from './status.js';
import { AbortControllerPool } from '../../core/abort-watch.js';

/**
 * Which gRPC server carries the services: ours on our own HTTP/2 transport (default), ours on
 * node:http2, or grpc-js's.
 */
export type GrpcServerKind = 'http2' | 'node-http2' | 'grpc-js';

export interface GrpcFrontendOptions {
  /** `--grpc-address`, default 0.0.0.0. */
  address?: string;
  /** `--grpc-port`, default 8001; 0 picks a free port. */
  port?: number;
  /** `--grpc-keepalive-time` (ms), default 7 200 000. */
  keepaliveTimeMs?: number;
  /** `--grpc-keepalive-timeout` (ms), default 20 000. */
  keepaliveTimeoutMs?: number;
  /** `--grpc-max-connection-age` (ms); unset: unlimited. */
  maxConnectionAgeMs?: number;
  /** `--grpc-max-connection-age-grace` (ms); unset: unlimited. */
  maxConnectionAgeGraceMs?: number;
  /** `--grpc-max-concurrent-streams`: calls open at once on one connection (0: no limit). */
  maxConcurrentStreams?: number;
  /**
   * `--grpc-max-input-size`: the largest request message, bytes, as received and after
   * decompression (default and most: MAX_MESSAGE_SIZE).
   */
  maxInputSize?: number;
  /** `--grpc-server`, default `http2`. */
  server?: GrpcServerKind;
  /** `--grpc-keepalive-permit-without-calls`, default false. */
  keepalivePermitWithoutCalls?: boolean;
  /** `--grpc-http2-max-pings-without-data`, default 2 (0: no limit). */
  maxPingsWithoutData?: number;
  /** `--grpc-http2-min-recv-ping-interval-without-data` (ms), default 300 000. */
  minRecvPingIntervalWithoutDataMs?: number;
  /** `--grpc-http2-max-ping-strikes`, default 2 (0: no limit). */
  maxPingStrikes?: number;
}

export const DEFAULT_GRPC_MAX_CONCURRENT_STREAMS = 1024;

type ServerUnaryCall<Req> = Pick<H2UnaryCall<Req>, 'request' | 'metadata' | 'once' | 'off'>;
type Unary<Req, Res> = (call: ServerUnaryCall<Req>, callback: UnaryCallback<Res>) => void;
type UntypedServiceImplementation = Record<string, unknown>;

/** A TraceSetting request as the facade's update: an empty value list clears the setting. */
function fromProtoTraceSettings(settings: pb.TraceSettingRequest['settings']): TraceSettingsUpdate {
  const update = new Map<string, readonly string[] | null>();
  for (const [name, v] of Object.entries(settings)) update.set(name, v.value.length === 0 ? null : v.value);
  return update;
}

function toProtoTraceSettings(answer: TraceSettingsAnswer): pb.TraceSettingResponse {
  const settings: pb.TraceSettingResponse['settings'] = {};
  for (const [name, value] of Object.entries(answer)) settings[name] = { value };
  return { settings };
}

/** The client's W3C trace context from the call's metadata, for a sampled request. */
function traceCarrier(trace: Trace, metadata: { get(key: string): (string | Buffer)[] }): void {
  const parent = metadata.get('traceparent')[0];
  if (typeof parent !== 'string') return;
  trace.carrier = { traceparent: parent };
  const state = metadata.get('tracestate')[0];
  if (typeof state === 'string') trace.carrier.tracestate = state;
}

/**
 * A `LogSettingsRequest` as the facade's update (protocol.md §4.8 LogSettings): each choice becomes
 * its value, so a wrong choice is a wrong type there; a value with no choice becomes `undefined`.
 */
function fromProtoLogSettings(settings: pb.LogSettingsRequest['settings']): Record<string, unknown> {
  const update: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(settings)) update[key] = v.bool_param ?? v.uint32_param ?? v.string_param;
  return update;
}

/** A uint64 field of a shared-memory register request as a safe integer. */
function uint64(value: bigint, field: string, region: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new NereidError('SHM_REGISTER_INVALID', `'${field}' of the shared memory register request for region '${region}' is too large (${value})`);
  }
  return Number(value);
}

function toProtoLogSettings(s: LogSettingsReport): pb.LogSettingsResponse {
  return {
    settings: {
      log_file: { string_param: s.log_file },
      log_info: { bool_param: s.log_info },
      log_warning: { bool_param: s.log_warning },
      log_error: { bool_param: s.log_error },
      log_verbose_level: { uint32_param: s.log_verbose_level },
      log_format: { string_param: s.log_format },
    },
  };
}

function toProtoStatistics(s: ModelStatisticsReport): pb.ModelStatistics {
  const d = (x: StatisticDuration): pb.StatisticDuration => ({ count: BigInt(x.count), ns: x.ns });
  const i = s.inference_stats;
  return {
    name: s.name,
    version: s.version,
    last_inference: BigInt(s.last_inference),
    inference_count: BigInt(s.inference_count),
    execution_count: BigInt(s.execution_count),
    inference_stats: {
      success: d(i.success),
      fail: d(i.fail),
      queue: d(i.queue),
      compute_input: d(i.compute_input),
      compute_infer: d(i.compute_infer),
      compute_output: d(i.compute_output),
      cache_hit: d(i.cache_hit),
      cache_miss: d(i.cache_miss),
    },
    batch_stats: s.batch_stats.map((b) => ({
      batch_size: BigInt(b.batch_size),
      compute_input: d(b.compute_input),
      compute_infer: d(b.compute_infer),
      compute_output: d(b.compute_output),
    })),
    memory_usage: s.memory_usage.map((m) => ({ type: m.type, id: BigInt(m.id), byte_size: BigInt(m.byte_size) })),
    response_stats: Object.fromEntries(
      Object.entries(s.response_stats).map(([k, r]) => [
        k,
        {
          compute_infer: d(r.compute_infer!),
          compute_output: d(r.compute_output!),
          success: d(r.success!),
          fail: d(r.fail!),
          empty_response: d(r.empty_response!),
          cancel: d(r.cancel!),
        },
      ]),
    ),
  };
}

export class GrpcFrontend {
  readonly #server: Server;
  readonly #grpc: H2GrpcServer | GrpcJsServer;
  readonly #options: Required<Pick<GrpcFrontendOptions, 'address' | 'port'>>;
  #port = 0;
  #shuttingDown = false;
  /** Open ModelStreamInfer streams, to finish them at shutdown. */
  readonly #streams = new Set<InferStream>();
  /** ModelInfer calls being answered. */
  #unaryInflight = 0;
  /** The signals of ModelInfer calls, reused (core/abort-watch.ts). */
  readonly #aborts = new AbortControllerPool();
  #idleWaiters: (() => void)[] = [];

  constructor(server: Server, options: GrpcFrontendOptions = {}) {
    this.#server = server;
    this.#options = { address: options.address ?? '0.0.0.0', port: options.port ?? 8001 };
    const serverOptions = {
      maxReceiveMessageLength: Math.min(options.maxInputSize ?? MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE),
      maxSendMessageLength: MAX_MESSAGE_SIZE,
      keepaliveTimeMs: options.keepaliveTimeMs ?? 7_200_000,
      keepaliveTimeoutMs: options.keepaliveTimeoutMs ?? 20_000,
      maxConcurrentStreams: options.maxConcurrentStreams ?? DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
      maxConnectionAgeMs: options.maxConnectionAgeMs,
      maxConnectionAgeGraceMs: options.maxConnectionAgeGraceMs,
      keepalivePermitWithoutCalls: options.keepalivePermitWithoutCalls,
      maxPingsWithoutData: options.maxPingsWithoutData,
      minRecvPingIntervalWithoutDataMs: options.minRecvPingIntervalWithoutDataMs,
      maxPingStrikes: options.maxPingStrikes,
    };
    this.#grpc =
      options.server === 'grpc-js'
        ? new GrpcJsServer(serverOptions)
        : new H2GrpcServer({ ...serverOptions, transport: options.server === 'node-http2' ? 'node' : 'nereid' });
    this.#grpc.addService(GRPC_INFERENCE_SERVICE as Record<string, GrpcMethodDefinition>, this.#inferenceService());
    this.#grpc.addService(GRPC_HEALTH_SERVICE as Record<string, GrpcMethodDefinition>, { Check: this.#check });
  }

  /** Starts listening; resolves with the bound port. */
  listen(): Promise<number> {
    const { address, port } = this.#options;
    return this.#grpc.listen(address, port).then(
      (bound) => {
        this.#port = bound;
        return bound;
      },
      (err: Error) => {
        throw new NereidError('UNAVAILABLE', `gRPC service could not listen on ${address}:${port}: ${err.message}`);
      },
    );
  }

  get port(): number {
    return this.#port;
  }

  /**
   * Shutdown: refuses new inference calls and streams from now on (UNAVAILABLE, Triton's "GRPC
   * server is shutting down…") while still listening, so a client is told rather than reset;
   * calls in flight finish and open streams end once answered (`InferStream.finish`).
   */
  stopAccepting(): void {
    this.#shuttingDown = true;
    this.finishStreams();
  }

  /** Resolves once no ModelInfer call and no stream is open (at once if none is). */
  idle(): Promise<void> {
    if (this.#unaryInflight === 0 && this.#streams.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  #checkIdle(): void {
    if (this.#unaryInflight !== 0 || this.#streams.size !== 0 || this.#idleWaiters.length === 0) return;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w();
  }

  /**
   * Shutdown, once the server has stopped: ends every open ModelStreamInfer stream with OK as soon
   * as its requests are answered, so that `close` need not wait for clients to end them.
   */
  finishStreams(): void {
    for (const stream of this.#streams) stream.finish();
  }

  /**
   * Stops accepting connections and calls, waits for open calls to finish, then closes; after
   * `graceMs`, closes them by force.
   */
  close(graceMs = 30_000): Promise<void> {
    this.#shuttingDown = true;
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.#grpc.forceShutdown(), graceMs);
      timer.unref();
      this.#grpc.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Closes every connection now. */
  forceClose(): void {
    this.#grpc.forceShutdown();
  }

  #refuseIfStopping(): void {
    if (this.#shuttingDown || this.#server.exiting) {
      throw new NereidError('SERVER_STOPPING', STOPPING_MESSAGE);
    }
  }

  #inferenceService(): UntypedServiceImplementation {
    const server = this.#server;
    const unary =
      <Req, Res>(fn: (request: Req, call: ServerUnaryCall<Req>) => Res | Promise<Res>): Unary<Req, Res> =>
      (call, callback) => {
        let result: Res | Promise<Res>;
        try {
          result = fn(call.request, call);
        } catch (err) {
          callback(grpcError(err));
          return;
        }
        if (result instanceof Promise) result.then((r) => callback(null, r), (err: unknown) => callback(grpcError(err)));
        else callback(null, result);
      };

    const impl: UntypedServiceImplementation = {
      ServerLive: unary<pb.ServerLiveRequest, pb.ServerLiveResponse>(() => {
        if (server.exiting) throw new NereidError('SERVER_STOPPING', 'Server exiting');
        return { live: server.isLive() };
      }),
      ServerReady: unary<pb.ServerReadyRequest, pb.ServerReadyResponse>(() => {
        if (server.exiting) throw new NereidError('SERVER_STOPPING', 'Server exiting');
        return { ready: server.isReady() };
      }),
      ModelReady: unary<pb.ModelReadyRequest, pb.ModelReadyResponse>(async (r) => ({
        ready: await server.checkModelReady(r.name, requestedVersion(r.name, r.version)),
      })),
      ServerMetadata: unary<pb.ServerMetadataRequest, pb.ServerMetadataResponse>(() => server.metadata()),
      ModelMetadata: unary<pb.ModelMetadataRequest, pb.ModelMetadataResponse>((r) => {
        const m = server.modelMetadata(r.name, requestedVersion(r.name, r.version));
        const tensor = (t: { name: string; datatype: string; shape: number[] }) => ({
          name: t.name,
          datatype: t.datatype,
          shape: t.shape.map((d) => BigInt(d)),
        });
        return { name: m.name, versions: m.versions, platform: m.platform, inputs: m.inputs.map(tensor), outputs: m.outputs.map(tensor) };
      }),
      ModelConfig: unary<pb.ModelConfigRequest, pb.ModelConfigResponse>((r) => ({
        config: toProtoModelConfig(server.modelConfig(r.name, requestedVersion(r.name, r.version))),
      })),
      ModelInfer: unary<pb.ModelInferRequest, pb.ModelInferResponse>(async (request, call) => {
        // The request's clock starts when the gRPC server hands over the received message, before its
        // conversion into the server's request (docs/protocol.md, statistics).
        const receivedAt = process.hrtime.bigint();
        let trace: Trace | undefined;
        if (server.tracing.enabled) {
          trace = server.tracing.sample(request.model_name, call.metadata.get('traceparent').length > 0);
          if (trace !== undefined) {
            trace.stamp('GRPC_WAITREAD_START', receivedAt);
            traceCarrier(trace, call.metadata);
          }
        }
        this.#refuseIfStopping();
        this.#unaryInflight++;
        const abort = this.#aborts.take();
        // grpc-js emits 'cancelled' when any call ends, answered ones included: only a cancel
        // that comes while the request is being served may abort it.
        const onCancelled = () => abort.abort();
        call.once('cancelled', onCancelled);
        try {
          if (trace === undefined) {
            const response = await server.infer(decodeInferRequest(request), { signal: abort.signal, receivedAt });
            const message = encodeInferResponse(response);
            // The outputs' pooled buffers go back once the server has copied their bytes into the message.
            if (server.holdsPooledOutputs(response)) whenEncoded(message, () => server.recycleOutputs(response));
            return message;
          }
          const decoded = decodeInferRequest(request);
          trace.stamp('GRPC_WAITREAD_END');
          const response = await server.infer(decoded, { signal: abort.signal, receivedAt, trace });
          trace.stamp('GRPC_SEND_START');
          const message = encodeInferResponse(response);
          const pooled = server.holdsPooledOutputs(response);
          const sent = trace;
          whenEncoded(message, () => {
            if (pooled) server.recycleOutputs(response);
            sent.stamp('GRPC_SEND_END');
            sent.end();
          });
          return message;
        } catch (err) {
          if (trace !== undefined) {
            trace.error = toNereidError(err).message;
            trace.end();
          }
          throw err instanceof NereidError && err.code === 'MODEL_DECOUPLED_UNSUPPORTED'
            ? new NereidError(err.code, "ModelInfer RPC doesn't support models with decoupled transaction policy")
            : err;
        } finally {
          call.off('cancelled', onCancelled);
          this.#aborts.give(abort);
          this.#unaryInflight--;
          this.#checkIdle();
        }
      }),
      ModelStatistics: unary<pb.ModelStatisticsRequest, pb.ModelStatisticsResponse>((r) => ({
        model_stats: server.modelStatistics(r.name || undefined, r.version || undefined).map(toProtoStatistics),
      })),
      RepositoryIndex: unary<pb.RepositoryIndexRequest, pb.RepositoryIndexResponse>((r) => repositoryIndex(server, r)),
      RepositoryModelLoad: unary<pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse>((r) => repositoryModelLoad(server, r)),
      RepositoryModelUnload: unary<pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse>((r) => repositoryModelUnload(server, r)),
      // The shared-memory extensions (protocol.md §3.17, §4.8).
      SystemSharedMemoryStatus: unary<pb.SystemSharedMemoryStatusRequest, pb.SystemSharedMemoryStatusResponse>((r) => ({
        regions: Object.fromEntries(
          server.sharedMemory
            .systemStatus(r.name)
            .map((s) => [s.name, { name: s.name, key: s.key, offset: BigInt(s.offset), byte_size: BigInt(s.byte_size) }]),
        ),
      })),
      SystemSharedMemoryRegister: unary<pb.SystemSharedMemoryRegisterRequest, pb.SystemSharedMemoryRegisterResponse>((r) => {
        server.sharedMemory.registerSystem(r.name, r.key, uint64(r.offset, 'offset', r.name), uint64(r.byte_size, 'byte_size', r.name));
        return {};
      }),
      SystemSharedMemoryUnregister: unary<pb.SystemSharedMemoryUnregisterRequest, pb.SystemSharedMemoryUnregisterResponse>((r) => {
        server.sharedMemory.unregisterSystem(r.name);
        return {};
      }),
      CudaSharedMemoryStatus: unary<pb.CudaSharedMemoryStatusRequest, pb.CudaSharedMemoryStatusResponse>((r) => ({
        regions: Object.fromEntries(
          server.sharedMemory
            .cudaStatus(r.name)
            .map((s) => [s.name, { name: s.name, device_id: BigInt(s.device_id), byte_size: BigInt(s.byte_size) }]),
        ),
      })),
      CudaSharedMemoryRegister: unary<pb.CudaSharedMemoryRegisterRequest, pb.CudaSharedMemoryRegisterResponse>((r) =>
        server.sharedMemory
          .registerCuda(r.name, r.raw_handle, Number(r.device_id), uint64(r.byte_size, 'byte_size', r.name))
          .then(() => ({})),
      ),
      CudaSharedMemoryUnregister: unary<pb.CudaSharedMemoryUnregisterRequest, pb.CudaSharedMemoryUnregisterResponse>((r) =>
        server.sharedMemory.unregisterCuda(r.name).then(() => ({})),
      ),
      // The trace extension (docs/observability.md): no settings named is a query.
      TraceSetting: unary<pb.TraceSettingRequest, pb.TraceSettingResponse>((r) => {
        const model = r.model_name === '' ? undefined : r.model_name;
        const update = fromProtoTraceSettings(r.settings);
        return toProtoTraceSettings(update.size === 0 ? server.traceSettings(model) : server.updateTraceSettings(model, update, { grpc: true }));
      }),
      LogSettings: unary<pb.LogSettingsRequest, pb.LogSettingsResponse>((r) =>
        toProtoLogSettings(server.updateLogSettings(fromProtoLogSettings(r.settings))),
      ),
      ModelStreamInfer: (call: H2DuplexCall<pb.ModelInferRequest, pb.ModelStreamInferResponse>) => {
        if (this.#shuttingDown || server.exiting) {
          call.emit('error', grpcError(new NereidError('SERVER_STOPPING', STOPPING_MESSAGE)));
          return;
        }
        const stream = new InferStream(server, call, server.logger, () => {
          this.#streams.delete(stream);
          this.#checkIdle();
        });
        this.#streams.add(stream);
      },
    };
    return impl;
  }

  #check = (
    _call: ServerUnaryCall<healthPb.HealthCheckRequest>,
    callback: UnaryCallback<healthPb.HealthCheckResponse>,
  ): void => {
    const serving = !this.#server.exiting && this.#server.isReady();
    callback(null, {
      status: serving ? healthPb.HealthCheckResponse_ServingStatus.SERVING : healthPb.HealthCheckResponse_ServingStatus.NOT_SERVING,
    });
  };
}
