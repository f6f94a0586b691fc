/**
 * How `nereid perf` reaches the model: HTTP (`HttpClient`), gRPC (`GrpcClient`, unary or one
 * `ModelStreamInfer` stream per sender) or in process (the `Server` facade, no network). Only the
 * public protocol is used outside the in-process kind, so the same code measures Triton.
 */
import { NereidError, parseJson, type DataType } from '@nereid/protocol';
import {
  GrpcClient,
  HttpClient,
  InferenceServerError,
  type ClientInput,
  type ClientRequestedOutput,
  type GrpcInferStream,
} from '@nereid/client';
import type { ModelInfo } from './input-data.js';
import type { PerfOptions } from './options.js';

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
}

/** One request's outcome: responses received, and the client's own time (ms) around the wait. */
export interface Sent {
  responses: number;
  sendMs: number;
  recvMs: number;
}

/** Sends requests for one load slot. `infer` resolves when the request completed, rejects on failure. */
export interface Sender {
  infer(inputs: readonly ClientInput[]): Promise<Sent>;
  close(): void;
}

export interface Transport {
  /** The word perf_analyzer prints: 'HTTP', 'gRPC' or 'in-process'. */
  readonly label: string;
  modelInfo(): Promise<ModelInfo>;
  /** Undefined when the server has no statistics extension. */
  statistics(): Promise<ServerStats | undefined>;
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
  for (const entry of entries) {
    const e = entry as Record<string, unknown>;
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

function modelInfoOf(model: string, metadata: { inputs: { name: string; datatype: string; shape: readonly (number | bigint)[] }[] }, config: { max_batch_size?: unknown; model_transaction_policy?: unknown }): ModelInfo {
  const policy = config.model_transaction_policy as { decoupled?: unknown } | undefined;
  return {
    name: model,
    inputs: metadata.inputs.map((i) => ({ name: i.name, datatype: i.datatype as DataType, shape: i.shape.map(Number) })),
    maxBatchSize: Number(config.max_batch_size ?? 0),
    decoupled: policy?.decoupled === true,
  };
}

class HttpTransport implements Transport {
  readonly label = 'HTTP';
  #client: HttpClient;
  #options: PerfOptions;
  #outputs: ClientRequestedOutput[] | undefined;

  constructor(options: PerfOptions) {
    if (Object.keys(options.headers).length > 0) {
      throw new NereidError('PERF_OPTION', '-H is not supported yet over HTTP by nereid perf; use -i grpc or drop the headers');
    }
    const url = /^https?:\/\//.test(options.url) ? options.url : `http://${options.url}`;
    this.#client = new HttpClient(url);
    this.#options = options;
  }

  async modelInfo(): Promise<ModelInfo> {
    const { model, version } = this.#options;
    try {
      const metadata = (await this.#client.modelMetadata(model, version || undefined)) as Parameters<typeof modelInfoOf>[1];
      const config = await this.#client.modelConfig(model, version || undefined);
      const info = modelInfoOf(model, metadata, config);
      if (this.#options.outputTensorFormat === 'json') {
        const outputs = (metadata as unknown as { outputs: { name: string }[] }).outputs;
        this.#outputs = outputs.map((o) => ({ name: o.name, binary: false }));
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
    const res = await fetch(`${this.#client.url}${path}`);
    const text = await res.text();
    if (!res.ok) return undefined;
    return sumStats(((parseJson(text) as { model_stats?: unknown[] }).model_stats ?? []) as unknown[]);
  }

  sender(): Sender {
    const { model, version } = this.#options;
    const outputs = this.#outputs;
    return {
      infer: async (inputs) => {
        const timing = { sendMs: 0, recvMs: 0 };
        await this.#client.infer({ model, version: version || undefined, inputs, outputs, timing });
        return { responses: 1, ...timing };
      },
      close: () => {},
    };
  }

  async close(): Promise<void> {}
}

class GrpcTransport implements Transport {
  readonly label = 'gRPC';
  #client: GrpcClient;
  #options: PerfOptions;
  #url: string;

  constructor(options: PerfOptions) {
    this.#url = options.url.replace(/^grpcs?:\/\//, '');
    this.#client = new GrpcClient(this.#url);
    this.#options = options;
  }

  async modelInfo(): Promise<ModelInfo> {
    const { model, version } = this.#options;
    const call = { headers: this.#options.headers, deadline: Date.now() + 10_000 };
    try {
      const metadata = await this.#client.modelMetadata(model, version || undefined, call);
      const config = await this.#client.modelConfig(model, version || undefined, call);
      return modelInfoOf(model, metadata, config as unknown as Parameters<typeof modelInfoOf>[2]);
    } catch (err) {
      const code = (err as { grpcCode?: number }).grpcCode;
      if (err instanceof InferenceServerError && code !== 14 && code !== 4) throw modelUnavailable(model, this.#url, err);
      throw unreachable(this.#url, err);
    }
  }

  async statistics(): Promise<ServerStats | undefined> {
    const { model, version } = this.#options;
    try {
      const r = await this.#client.modelStatistics(model, version || undefined, { headers: this.#options.headers });
      return sumStats(r.model_stats);
    } catch {
      return undefined;
    }
  }

  sender(): Sender {
    const { model, version, headers } = this.#options;
    if (!this.#options.streaming) {
      return {
        infer: async (inputs) => {
          const timing = { sendMs: 0, recvMs: 0 };
          await this.#client.infer({ model, version: version || undefined, inputs, headers, timing });
          return { responses: 1, ...timing };
        },
        close: () => {},
      };
    }
    return new StreamSender(this.#client.stream({ headers }), model, version);
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}

/**
 * One `ModelStreamInfer` stream carrying any number of requests at once; responses are matched to
 * requests by id, and a request completes with its final response (decoupled models may send
 * several before it).
 */
class StreamSender implements Sender {
  #stream: GrpcInferStream;
  #model: string;
  #version: string;
  #next = 0;
  #pending = new Map<string, { responses: number; resolve: (s: Sent) => void; reject: (e: unknown) => void }>();
  #failure: unknown;

  constructor(stream: GrpcInferStream, model: string, version: string) {
    this.#stream = stream;
    this.#model = model;
    this.#version = version;
    void this.#read();
  }

  async #read(): Promise<void> {
    try {
      for await (const r of this.#stream) {
        const p = this.#pending.get(r.id);
        if (p === undefined) continue;
        if (r.result !== undefined) p.responses++;
        if (r.error !== undefined) {
          this.#pending.delete(r.id);
          p.reject(r.error);
        } else if (r.final) {
          this.#pending.delete(r.id);
          p.resolve({ responses: p.responses, sendMs: 0, recvMs: 0 });
        }
      }
      this.#failure = new NereidError('PERF_SERVER_UNREACHABLE', 'the gRPC stream ended');
    } catch (err) {
      this.#failure = err;
    }
    for (const p of this.#pending.values()) p.reject(this.#failure);
    this.#pending.clear();
  }

  infer(inputs: readonly ClientInput[]): Promise<Sent> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    const id = String(++this.#next);
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { responses: 0, resolve, reject });
      try {
        this.#stream.send({ model: this.#model, version: this.#version || undefined, id, inputs });
      } catch (err) {
        this.#pending.delete(id);
        reject(err);
      }
    });
  }

  close(): void {
    this.#stream.end();
  }
}

/** The minimal view of `@nereid/server`'s facade this transport uses (imported at run time). */
interface FacadeServer {
  load(): Promise<unknown>;
  stop(): Promise<void>;
  modelMetadata(model: string, version?: string): { inputs: { name: string; datatype: string; shape: number[] }[] };
  modelConfigJson(model: string, version?: string): Record<string, unknown>;
  modelStatistics(model?: string, version?: string): unknown[];
  infer(request: { model: string; version?: string; inputs: readonly ClientInput[] }): Promise<unknown>;
  inferStream(
    request: { model: string; version?: string; inputs: readonly ClientInput[] },
    options: { onResponse: (r: unknown) => void },
  ): Promise<unknown>;
}

class InProcessTransport implements Transport {
  readonly label = 'in-process';
  #server: FacadeServer | undefined;
  #options: PerfOptions;
  #decoupled = false;

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
    return sumStats(this.#server!.modelStatistics(model, version || undefined));
  }

  sender(): Sender {
    const server = this.#server!;
    const { model, version } = this.#options;
    const request = (inputs: readonly ClientInput[]) => ({ model, version: version || undefined, inputs });
    if (this.#decoupled) {
      return {
        infer: async (inputs) => {
          let responses = 0;
          await server.inferStream(request(inputs), { onResponse: (r) => void ((r as { response?: unknown }).response && responses++) });
          return { responses, sendMs: 0, recvMs: 0 };
        },
        close: () => {},
      };
    }
    return {
      infer: async (inputs) => {
        await server.infer(request(inputs));
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
