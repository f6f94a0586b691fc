/**
 * How `nereid perf` reaches the model: HTTP (`HttpClient`), gRPC (`GrpcClient`, unary or one
 * `ModelStreamInfer` stream per sender) or in process (the `Server` facade, no network). Only the
 * public protocol is used outside the in-process kind, so the same code measures Triton.
 */
import { NereidError, parseJson, type DataType, type ParameterValue } from '@nereid/protocol';
import {
  GrpcClient,
  HttpClient,
  InferenceServerError,
  type ClientInput,
  type ClientRequestedOutput,
  type ClientSharedMemoryInput,
  type GrpcInferStream,
} from '@nereid/client';
import type { ModelInfo } from './input-data.js';
import type { PerfOptions } from './options.js';
import { StreamRequests } from './stream-requests.js';

/** One cumulative statistics counter (count, nanoseconds). */
export interface Duration {
  count: number;
  ns: number;
}

/** The model's cumulative statistics (statistics extension, protocol.md §3.14), summed over versions. */
export interface ServerStats {
  inferenceCount: number;
  executionCount: number;
  success: Duration;
  fail: Duration;
  queue: Duration;
  computeInput: Duration;
  computeInfer: Duration;
  computeOutput: Duration;
  cacheHit: Duration;
  cacheMiss: Duration;
  /** An ensemble's composing models by name, each with its own composing models (perf_analyzer's breakdown). */
  composing?: Record<string, ServerStats>;
  /** The versions the entries came from, comma-separated. */
  versions?: string;
}

/** An input as sent: bytes on the wire, or a place in a registered shared-memory region. */
export type PerfInput = ClientInput | ClientSharedMemoryInput;

/** One request's outcome: responses received, and the client's own time (ms) around the wait. */
export interface Sent {
  responses: number;
  sendMs: number;
  recvMs: number;
}

/**
 * Sends requests for one load slot. `infer` resolves when the request completed, rejects on
 * failure; `parameters` are request parameters (sequence_id, sequence_start, sequence_end).
 */
export interface Sender {
  infer(inputs: readonly PerfInput[], parameters?: Record<string, ParameterValue>): Promise<Sent>;
  close(): void;
}

export interface Transport {
  /** The word perf_analyzer prints: 'HTTP', 'gRPC' or 'in-process'. */
  readonly label: string;
  modelInfo(): Promise<ModelInfo>;
  /**
   * Undefined when the server has no statistics extension. For an ensemble, `composing` holds the
   * composing models' statistics too (all of them read in the same call).
   */
  statistics(): Promise<ServerStats | undefined>;
  /** Every request asks for these outputs from now on (shared-memory outputs). Not in process. */
  requestOutputs(outputs: readonly ClientRequestedOutput[]): void;
  /** The system shared-memory extension (protocol.md §3.17). Not in process. */
  registerSystemSharedMemory(name: string, key: string, byteSize: number): Promise<void>;
  unregisterSystemSharedMemory(name: string): Promise<void>;
  sender(): Sender;
  close(): Promise<void>;
}

const ZERO: Duration = { count: 0, ns: 0 };

function duration(d: unknown): Duration {
  const o = (d ?? {}) as { count?: unknown; ns?: unknown };
  return { count: Number(o.count ?? 0), ns: Number(o.ns ?? 0) };
}

function add(a: Duration, b: Duration): Duration {
  return { count: a.count + b.count, ns: a.ns + b.ns };
}

/** Sums the JSON/protobuf `model_stats` entries (snake_case in both forms). */
export function sumStats(entries: readonly unknown[]): ServerStats {
  const total: ServerStats = {
    inferenceCount: 0,
    executionCount: 0,
    success: ZERO,
    fail: ZERO,
    queue: ZERO,
    computeInput: ZERO,
    computeInfer: ZERO,
    computeOutput: ZERO,
    cacheHit: ZERO,
    cacheMiss: ZERO,
  };
  const versions: string[] = [];
  for (const entry of entries) {
    const e = entry as Record<string, unknown>;
    if (e.version !== undefined) versions.push(String(e.version));
    const s = (e.inference_stats ?? {}) as Record<string, unknown>;
    total.inferenceCount += Number(e.inference_count ?? 0);
    total.executionCount += Number(e.execution_count ?? 0);
    total.success = add(total.success, duration(s.success));
    total.fail = add(total.fail, duration(s.fail));
    total.queue = add(total.queue, duration(s.queue));
    total.computeInput = add(total.computeInput, duration(s.compute_input));
    total.computeInfer = add(total.computeInfer, duration(s.compute_infer));
    total.computeOutput = add(total.computeOutput, duration(s.compute_output));
    total.cacheHit = add(total.cacheHit, duration(s.cache_hit));
    total.cacheMiss = add(total.cacheMiss, duration(s.cache_miss));
  }
  if (versions.length > 0) total.versions = versions.join(',');
  return total;
}

/** The client's error for a connection that failed (fetch's TypeError, wrapped as 503). */
function connectionFailure(err: unknown): TypeError | undefined {
  const cause = err instanceof InferenceServerError ? (err as { cause?: unknown }).cause : undefined;
  return cause instanceof TypeError ? cause : undefined;
}

function unreachable(url: string, failure: unknown): NereidError {
  const err = connectionFailure(failure) ?? failure;
  const inner = (err as { cause?: { code?: string; message?: string; errors?: { code?: string }[] } }).cause;
  const cause =
    (typeof inner?.code === 'string' ? inner.code : undefined) ??
    inner?.errors?.[0]?.code ??
    (err instanceof InferenceServerError ? err.message : inner?.message) ??
    (err instanceof Error ? err.message : String(err));
  return new NereidError(
    'PERF_SERVER_UNREACHABLE',
    `cannot reach the server at ${url} (${cause}); start it, or give its address with -u HOST:PORT`,
    { cause: failure },
  );
}

function modelUnavailable(model: string, url: string, err: InferenceServerError): NereidError {
  return new NereidError(
    'PERF_SERVER_UNREACHABLE',
    `model '${model}' is not available on the server at ${url}: ${err.message}; check -m, -x and that the model is loaded`,
    { cause: err },
  );
}

type ConfigView = {
  max_batch_size?: unknown;
  model_transaction_policy?: unknown;
  sequence_batching?: unknown;
  ensemble_scheduling?: unknown;
};
type MetadataView = {
  inputs: { name: string; datatype: string; shape: readonly (number | bigint)[] }[];
  outputs?: { name: string; datatype: string; shape: readonly (number | bigint)[] }[];
};

/** An ensemble's steps' model names, each once, in step order (none for other models). */
function composingOf(config: ConfigView): string[] {
  const steps = (config.ensemble_scheduling as { step?: { model_name?: unknown }[] } | undefined)?.step ?? [];
  return [...new Set(steps.map((s) => String(s.model_name ?? '')).filter((n) => n !== ''))];
}

function modelInfoOf(model: string, metadata: MetadataView, config: ConfigView): ModelInfo {
  const policy = config.model_transaction_policy as { decoupled?: unknown } | undefined;
  const tensor = (t: { name: string; datatype: string; shape: readonly (number | bigint)[] }) => ({ name: t.name, datatype: t.datatype as DataType, shape: t.shape.map(Number) });
  return {
    name: model,
    inputs: metadata.inputs.map(tensor),
    outputs: (metadata.outputs ?? []).map(tensor),
    maxBatchSize: Number(config.max_batch_size ?? 0),
    decoupled: policy?.decoupled === true,
    sequence: config.sequence_batching !== undefined && config.sequence_batching !== null,
    composing: composingOf(config),
  };
}

/**
 * The composing models below `model`, by name: model → its composing models, recursively (an
 * ensemble step may itself be an ensemble). `config` reads a model's configuration.
 */
async function composingTree(top: readonly string[], config: (model: string) => Promise<ConfigView>): Promise<Map<string, string[]>> {
  const tree = new Map<string, string[]>();
  const visit = async (name: string): Promise<void> => {
    if (tree.has(name)) return;
    tree.set(name, []);
    const below = composingOf(await config(name));
    tree.set(name, below);
    for (const b of below) await visit(b);
  };
  for (const name of top) await visit(name);
  return tree;
}

/** Attaches the composing models' statistics (from one all-model statistics reply) to `stats`. */
function withComposing(stats: ServerStats, names: readonly string[], tree: ReadonlyMap<string, string[]>, all: readonly unknown[]): ServerStats {
  if (names.length === 0) return stats;
  const composing: Record<string, ServerStats> = {};
  for (const name of names) {
    const own = sumStats(all.filter((e) => (e as { name?: unknown }).name === name));
    composing[name] = withComposing(own, tree.get(name) ?? [], tree, all);
  }
  return { ...stats, composing };
}

class HttpTransport implements Transport {
  readonly label = 'HTTP';
  #client: HttpClient;
  #options: PerfOptions;
  #outputs: ClientRequestedOutput[] | undefined;
  #composing: string[] = [];
  #tree = new Map<string, string[]>();

  constructor(options: PerfOptions) {
    const url = /^https?:\/\//.test(options.url) ? options.url : `http://${options.url}`;
    // -H headers go with every call, inference and the rest.
    this.#client = new HttpClient(url, { headers: options.headers });
    this.#options = options;
  }

  async modelInfo(): Promise<ModelInfo> {
    const { model, version } = this.#options;
    try {
      const metadata = (await this.#client.modelMetadata(model, version || undefined)) as MetadataView;
      const config = await this.#client.modelConfig(model, version || undefined);
      const info = modelInfoOf(model, metadata, config);
      this.#tree = await composingTree(info.composing, (m) => this.#client.modelConfig(m));
      this.#composing = info.composing;
      if (this.#options.outputTensorFormat === 'json') {
        this.#outputs = info.outputs.map((o) => ({ name: o.name, binary: false }));
      }
      return info;
    } catch (err) {
      if (err instanceof InferenceServerError && connectionFailure(err) === undefined) throw modelUnavailable(model, this.#client.url, err);
      throw unreachable(this.#client.url, err);
    }
  }

  async statistics(): Promise<ServerStats | undefined> {
    const { model, version } = this.#options;
    const path = `/v2/models/${encodeURIComponent(model)}${version ? `/versions/${version}` : ''}/stats`;
    const [own, all] = await Promise.all([this.#stats(path), this.#composing.length > 0 ? this.#stats('/v2/models/stats') : []]);
    if (own === undefined) return undefined;
    return withComposing(sumStats(own), this.#composing, this.#tree, all ?? []);
  }

  async #stats(path: string): Promise<unknown[] | undefined> {
    const res = await fetch(`${this.#client.url}${path}`, { headers: { ...this.#options.headers, 'Accept-Encoding': 'identity' } });
    const text = await res.text();
    if (!res.ok) return undefined;
    return ((parseJson(text) as { model_stats?: unknown[] }).model_stats ?? []) as unknown[];
  }

  requestOutputs(outputs: readonly ClientRequestedOutput[]): void {
    this.#outputs = [...outputs];
  }

  registerSystemSharedMemory(name: string, key: string, byteSize: number): Promise<void> {
    return this.#client.registerSystemSharedMemory(name, key, byteSize);
  }

  unregisterSystemSharedMemory(name: string): Promise<void> {
    return this.#client.unregisterSystemSharedMemory(name);
  }

  sender(): Sender {
    const { model, version } = this.#options;
    const outputs = this.#outputs;
    return {
      infer: async (inputs, parameters) => {
        const timing = { sendMs: 0, recvMs: 0 };
        await this.#client.infer({ model, version: version || undefined, inputs, outputs, parameters, timing });
        return { responses: 1, ...timing };
      },
      close: () => {},
    };
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}

class GrpcTransport implements Transport {
  readonly label = 'gRPC';
  #client: GrpcClient;
  #options: PerfOptions;
  #url: string;
  #outputs: ClientRequestedOutput[] | undefined;
  #composing: string[] = [];
  #tree = new Map<string, string[]>();

  constructor(options: PerfOptions) {
    this.#url = options.url.replace(/^grpcs?:\/\//, '');
    this.#client = new GrpcClient(this.#url, options.grpcCompression === 'none' ? {} : { compression: options.grpcCompression });
    this.#options = options;
  }

  async modelInfo(): Promise<ModelInfo> {
    const { model, version } = this.#options;
    const call = { headers: this.#options.headers, deadline: Date.now() + 10_000 };
    try {
      const metadata = await this.#client.modelMetadata(model, version || undefined, call);
      const config = await this.#client.modelConfig(model, version || undefined, call);
      const info = modelInfoOf(model, metadata, config as unknown as ConfigView);
      this.#tree = await composingTree(info.composing, async (m) => (await this.#client.modelConfig(m, undefined, call)) as unknown as ConfigView);
      this.#composing = info.composing;
      return info;
    } catch (err) {
      const code = (err as { grpcCode?: number }).grpcCode;
      if (err instanceof InferenceServerError && code !== 14 && code !== 4) throw modelUnavailable(model, this.#url, err);
      throw unreachable(this.#url, err);
    }
  }

  async statistics(): Promise<ServerStats | undefined> {
    const { model, version } = this.#options;
    const call = { headers: this.#options.headers };
    try {
      const [own, all] = await Promise.all([
        this.#client.modelStatistics(model, version || undefined, call),
        this.#composing.length > 0 ? this.#client.modelStatistics(undefined, undefined, call) : undefined,
      ]);
      return withComposing(sumStats(own.model_stats), this.#composing, this.#tree, all?.model_stats ?? []);
    } catch {
      return undefined;
    }
  }

  requestOutputs(outputs: readonly ClientRequestedOutput[]): void {
    this.#outputs = [...outputs];
  }

  registerSystemSharedMemory(name: string, key: string, byteSize: number): Promise<void> {
    return this.#client.registerSystemSharedMemory(name, key, byteSize, 0, { headers: this.#options.headers });
  }

  unregisterSystemSharedMemory(name: string): Promise<void> {
    return this.#client.unregisterSystemSharedMemory(name, { headers: this.#options.headers });
  }

  sender(): Sender {
    const { model, version, headers } = this.#options;
    const outputs = this.#outputs;
    if (!this.#options.streaming) {
      return {
        infer: async (inputs, parameters) => {
          const timing = { sendMs: 0, recvMs: 0 };
          await this.#client.infer({ model, version: version || undefined, inputs, outputs, headers, parameters, timing });
          return { responses: 1, ...timing };
        },
        close: () => {},
      };
    }
    return new StreamSender(this.#client.stream({ headers }), model, version, outputs);
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}

/**
 * One `ModelStreamInfer` stream carrying any number of requests at once; `StreamRequests` matches
 * responses to requests by id and decides when each is complete. Every request asks for an empty
 * final response, so that a decoupled model's request that ends with a flags-only final completes.
 */
class StreamSender implements Sender {
  #stream: GrpcInferStream;
  #model: string;
  #version: string;
  #requests = new StreamRequests();
  #failure: unknown;
  #outputs: readonly ClientRequestedOutput[] | undefined;

  constructor(stream: GrpcInferStream, model: string, version: string, outputs?: readonly ClientRequestedOutput[]) {
    this.#stream = stream;
    this.#model = model;
    this.#version = version;
    this.#outputs = outputs;
    void this.#read();
  }

  async #read(): Promise<void> {
    try {
      for await (const r of this.#stream) this.#requests.settle(r);
      this.#failure = new NereidError('PERF_SERVER_UNREACHABLE', 'the gRPC stream ended');
    } catch (err) {
      this.#failure = err;
    }
    this.#requests.failAll(this.#failure);
  }

  infer(inputs: readonly PerfInput[], parameters?: Record<string, ParameterValue>): Promise<Sent> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    const { id, done } = this.#requests.open();
    try {
      this.#stream.send({ model: this.#model, version: this.#version || undefined, id, inputs, outputs: this.#outputs, parameters, enableEmptyFinalResponse: true });
    } catch (err) {
      this.#requests.abandon(id, err);
    }
    return done;
  }

  close(): void {
    this.#stream.end();
  }
}

/** The minimal view of `@nereid/server`'s facade this transport uses (imported at run time). */
interface FacadeServer {
  load(): Promise<unknown>;
  stop(): Promise<void>;
  modelMetadata(model: string, version?: string): MetadataView;
  modelConfigJson(model: string, version?: string): Record<string, unknown>;
  modelStatistics(model?: string, version?: string): unknown[];
  infer(request: { model: string; version?: string; inputs: readonly PerfInput[]; parameters?: Record<string, ParameterValue> }): Promise<unknown>;
  inferStream(
    request: { model: string; version?: string; inputs: readonly PerfInput[]; parameters?: Record<string, ParameterValue> },
    options: { onResponse: (r: unknown) => void },
  ): Promise<unknown>;
}

class InProcessTransport implements Transport {
  readonly label = 'in-process';
  #server: FacadeServer | undefined;
  #options: PerfOptions;
  #decoupled = false;
  #composing: string[] = [];
  #tree = new Map<string, string[]>();

  constructor(options: PerfOptions) {
    this.#options = options;
  }

  async modelInfo(): Promise<ModelInfo> {
    const specifier = '@nereid/server';
    const mod = (await import(specifier)) as {
      Server: new (o: object) => FacadeServer;
      silentLogger: () => unknown;
    };
    const server = new mod.Server({ modelRepositories: [this.#options.modelRepository!], logger: mod.silentLogger() });
    this.#server = server;
    await server.load();
    const { model, version } = this.#options;
    try {
      const info = modelInfoOf(model, server.modelMetadata(model, version || undefined), server.modelConfigJson(model, version || undefined));
      this.#decoupled = info.decoupled;
      this.#tree = await composingTree(info.composing, async (m) => server.modelConfigJson(m));
      this.#composing = info.composing;
      return info;
    } catch (err) {
      throw new NereidError(
        'PERF_SERVER_UNREACHABLE',
        `model '${model}' is not available from the repository ${this.#options.modelRepository}: ${err instanceof Error ? err.message : String(err)}`,
        { cause: err },
      );
    }
  }

  async statistics(): Promise<ServerStats | undefined> {
    const { model, version } = this.#options;
    const own = sumStats(this.#server!.modelStatistics(model, version || undefined));
    return withComposing(own, this.#composing, this.#tree, this.#composing.length > 0 ? this.#server!.modelStatistics() : []);
  }

  requestOutputs(): void {
    throw new NereidError('PERF_OPTION', 'shared-memory outputs do not apply in process');
  }

  async registerSystemSharedMemory(): Promise<void> {
    throw new NereidError('PERF_OPTION', '--shared-memory system does not apply to --service-kind in_process');
  }

  async unregisterSystemSharedMemory(): Promise<void> {}

  sender(): Sender {
    const server = this.#server!;
    const { model, version } = this.#options;
    const request = (inputs: readonly PerfInput[], parameters?: Record<string, ParameterValue>) => ({ model, version: version || undefined, inputs, parameters });
    if (this.#decoupled) {
      return {
        infer: async (inputs, parameters) => {
          let responses = 0;
          await server.inferStream(request(inputs, parameters), { onResponse: (r) => void ((r as { response?: unknown }).response && responses++) });
          return { responses, sendMs: 0, recvMs: 0 };
        },
        close: () => {},
      };
    }
    return {
      infer: async (inputs, parameters) => {
        await server.infer(request(inputs, parameters));
        return { responses: 1, sendMs: 0, recvMs: 0 };
      },
      close: () => {},
    };
  }

  async close(): Promise<void> {
    await this.#server?.stop();
  }
}

export function createTransport(options: PerfOptions): Transport {
  if (options.serviceKind === 'in_process') return new InProcessTransport(options);
  return options.protocol === 'grpc' ? new GrpcTransport(options) : new HttpTransport(options);
}
