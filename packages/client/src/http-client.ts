/**
 * An HTTP/REST client for KServe v2 / Triton servers (Nereid or Triton). Inference goes through
 * `node:http` on keep-alive connections (the request body written as its parts, no joined copy);
 * the other calls use Node's `fetch`. Tensors go binary both ways by default, like Triton's Python
 * client (protocol.md §7.1).
 */
import {
  INFERENCE_HEADER_CONTENT_LENGTH,
  joinInferenceBody,
  parseJson,
  splitInferenceBody,
  tensorDataToJson,
  type DataType,
} from '@nereid/protocol';
import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { gunzipSync, inflateSync, gzipSync, deflateSync } from 'node:zlib';
import { withRetry, type CallOptions, type ClientDefaults, type LogSettings } from './call-options.js';
import { InferenceServerError } from './errors.js';
import { inputBytes, isSharedMemoryInput, sharedMemoryParameters, type ClientInferOptions } from './infer-options.js';
import type { CudaSharedMemoryStatus, SystemSharedMemoryStatus } from './shared-memory.js';
import { InferResult, type ResultOutput } from './infer-result.js';
import {
  configText,
  fileParameters,
  type LoadModelOptions,
  type RepositoryIndexEntry,
  type RepositoryIndexOptions,
  type UnloadModelOptions,
} from './repository.js';

/**
 * Reads an HTTP inference response's JSON header and binary blobs into the shared result form:
 * outputs with `binary_data_size` take the next blob (a view), the others keep their JSON `data`.
 */
function httpResult(header: Record<string, unknown>, binary: Uint8Array): InferResult {
  const outputs: ResultOutput[] = [];
  let offset = 0;
  for (const out of (header.outputs as Record<string, unknown>[]) ?? []) {
    const params = out.parameters as Record<string, unknown> | undefined;
    const base = { name: String(out.name), datatype: out.datatype as DataType, shape: (out.shape as number[]).map(Number) };
    if (params?.binary_data_size !== undefined) {
      const size = Number(params.binary_data_size);
      outputs.push({ ...base, data: binary.subarray(offset, offset + size) });
      offset += size;
    } else if (out.data === undefined) {
      // A shared-memory output: the bytes are in the region (protocol.md §3.17.3).
      outputs.push({ ...base, data: new Uint8Array(0) });
    } else {
      outputs.push({ ...base, json: out.data });
    }
  }
  return new InferResult({
    model: String(header.model_name),
    version: String(header.model_version),
    id: typeof header.id === 'string' ? header.id : undefined,
    parameters: (header.parameters as Record<string, unknown>) ?? {},
    outputs,
  });
}

/** A request of the generate extension (protocol.md §3.18). */
export interface GenerateOptions {
  model: string;
  version?: string;
  /**
   * The JSON object sent: keys named after model inputs become those inputs (a scalar or a flat
   * array), `id` is the request id, anything else a request parameter; so is every key of a
   * nested `parameters` object. E.g. `{ id: '1', text_input: 'hi', parameters: { max_tokens: 8 } }`.
   */
  body: Readonly<Record<string, unknown>>;
  /** `generate` honours `timeout` and `headers` too; `generateStream` only the signal. */
  signal?: AbortSignal;
  timeout?: number;
  headers?: Readonly<Record<string, string>>;
}

/**
 * A generate response object: `model_name`, `model_version`, `id` when the request had one, each
 * output under its name (one element: the value itself; more: a flat array) and each response
 * parameter under its name. Integers beyond 2^53 are bigints.
 */
export type GenerateResponse = Record<string, unknown>;

async function errorOf(res: Response): Promise<InferenceServerError> {
  const text = await res.text();
  let message = text;
  try {
    message = (JSON.parse(text) as { error?: string }).error ?? text;
  } catch {
    // not JSON: keep the text
  }
  return new InferenceServerError(res.status, message);
}

/**
 * The `data` of each Server-Sent Event of a response body, as it arrives. Events without data
 * (comments, keep-alives) are skipped.
 */
async function* serverSentData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffered = '';
  const dataOf = (event: string): string | undefined => {
    const lines = event.split('\n').filter((line) => line.startsWith('data:'));
    return lines.length === 0 ? undefined : lines.map((line) => line.slice(line.startsWith('data: ') ? 6 : 5)).join('\n');
  };
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
    let end: number;
    while ((end = buffered.indexOf('\n\n')) !== -1) {
      const data = dataOf(buffered.slice(0, end));
      buffered = buffered.slice(end + 2);
      if (data !== undefined) yield data;
    }
  }
  const rest = dataOf(buffered + decoder.decode());
  if (rest !== undefined) yield rest;
}

/** `HttpClient` settings: defaults for every call. */
export interface HttpClientOptions extends ClientDefaults {
  /** Headers sent with every request (e.g. authorization); a call's own `headers` add to them. */
  headers?: Readonly<Record<string, string>>;
}

/** The body of `POST /v2/models/{m}/stats`-style answers: the statistics JSON (protocol.md §3.14); integers beyond 2^53 are bigints. */
export type HttpModelStatisticsResponse = { model_stats: Record<string, unknown>[] };

/** A call that got no complete answer within its timeout (it was cancelled): 504. */
function timedOut(what: string, timeout: number, cause?: unknown): InferenceServerError {
  return new InferenceServerError(504, `${what} got no complete answer within the ${timeout} ms timeout; the request was cancelled`, { cause });
}

/** A call that could not reach the server (`reason`: the socket error's code or message): 503. */
function unreachable(what: string, reason: string, cause: unknown): InferenceServerError {
  return new InferenceServerError(503, `${what} failed: cannot reach the server (${reason})`, { cause });
}

/** One answer read whole by {@link HttpClient}'s `node:http` path. */
interface RawAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export class HttpClient {
  readonly url: string;
  readonly #defaults: HttpClientOptions;
  readonly #target: URL;
  /** Keep-alive connections of the inference path; idle ones do not keep the process alive. */
  readonly #agent: HttpAgent;

  /** @param url  e.g. `http://localhost:8000` */
  constructor(url: string, options: HttpClientOptions = {}) {
    this.url = url.replace(/\/+$/, '');
    this.#defaults = options;
    this.#target = new URL(this.url);
    this.#agent = this.#target.protocol === 'https:' ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  }

  /** Closes the idle keep-alive connections of the inference path (in-flight calls finish). */
  close(): void {
    this.#agent.destroy();
  }

  /**
   * A request's headers: the client's defaults, then `first`, then `last` (a later one wins), with
   * `Accept-Encoding: identity` unless one of them names an encoding. Without it `fetch` asks
   * for gzip/deflate on every call and the server compresses every response (protocol.md §3.10).
   */
  #headers(first: Readonly<Record<string, string>> | undefined, last: Readonly<Record<string, string>> | undefined): Record<string, string> {
    const headers: Record<string, string> = { ...this.#defaults.headers, ...first, ...last };
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'accept-encoding')) headers['Accept-Encoding'] = 'identity';
    return headers;
  }

  /**
   * One request on the inference path under the call's signal and timeout, with #fetch's error
   * contract: a connection failure is InferenceServerError 503 (the cause kept), a timeout 504
   * (the connection is closed, which cancels the request on the server), an abort rejects with the
   * signal's reason (likewise closing the connection). `parts` are written in order, uncopied.
   * Resolves once the whole body has arrived; `answered` is called when the response starts.
   */
  #exchange(path: string, headers: OutgoingHttpHeaders, parts: readonly Uint8Array[], options: CallOptions, answered: () => void): Promise<RawAnswer> {
    const what = `POST ${this.url}${path}`;
    const timeout = options.timeout ?? this.#defaults.timeout;
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<RawAnswer>((resolve, reject) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const finish = (err: unknown, answer?: RawAnswer) => {
        if (settled) return;
        settled = true;
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (err === undefined) resolve(answer!);
        else reject(err);
      };
      const send = this.#target.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = send({
        protocol: this.#target.protocol,
        hostname: this.#target.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: this.#target.port,
        path: `${this.#target.pathname.replace(/\/+$/, '')}${path}`,
        method: 'POST',
        agent: this.#agent,
        headers,
      });
      const onAbort = () => {
        finish(signal!.reason);
        req.destroy();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeout !== undefined) {
        timer = setTimeout(() => {
          finish(timedOut(what, timeout));
          req.destroy();
        }, timeout);
      }
      req.on('error', (err: NodeJS.ErrnoException) => {
        finish(unreachable(what, err.code ?? err.message, err));
      });
      req.on('response', (res) => {
        answered();
        const chunks: Buffer[] = [];
        let length = 0;
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          length += chunk.length;
        });
        res.on('end', () => finish(undefined, { status: res.statusCode ?? 0, headers: res.headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, length) }));
        res.on('error', (err: Error) => finish(new InferenceServerError(503, `${what} failed: the connection broke while the answer arrived (${err.message})`, { cause: err })));
      });
      req.cork();
      for (const part of parts) req.write(part);
      req.end();
      req.uncork();
    });
  }

  /**
   * One HTTP exchange under the call's signal and timeout. A connection failure becomes
   * InferenceServerError 503 (the cause kept), a timeout InferenceServerError 504, an abort
   * the signal's reason. Idempotent calls are retried per the policy.
   */
  async #fetch<T>(path: string, init: RequestInit, options: CallOptions, idempotent: boolean, read: (res: Response) => Promise<T>): Promise<T> {
    const attempt = async (): Promise<T> => {
      const timeout = options.timeout ?? this.#defaults.timeout;
      const signals: AbortSignal[] = [];
      if (options.signal) signals.push(options.signal);
      const timer = timeout === undefined ? undefined : AbortSignal.timeout(timeout);
      if (timer) signals.push(timer);
      const headers = this.#headers(init.headers as Record<string, string> | undefined, options.headers);
      const request: RequestInit = { ...init, headers };
      if (signals.length > 0) request.signal = signals.length === 1 ? signals[0]! : AbortSignal.any(signals);
      const what = `${init.method ?? 'GET'} ${this.url}${path}`;
      try {
        return await read(await fetch(`${this.url}${path}`, request));
      } catch (err) {
        if (options.signal?.aborted) throw options.signal.reason;
        if (timer?.aborted) throw timedOut(what, timeout!, err);
        if (err instanceof TypeError && !(err instanceof InferenceServerError)) {
          const cause = (err as { cause?: { code?: string; message?: string } }).cause;
          throw unreachable(what, cause?.code ?? cause?.message ?? err.message, err);
        }
        throw err;
      }
    };
    if (!idempotent) return attempt();
    return withRetry(options.retry ?? this.#defaults.retry, options.signal, attempt);
  }

  async #getJson(path: string, options: CallOptions = {}): Promise<unknown> {
    return this.#fetch(path, { method: 'GET' }, options, true, (res) => this.#json(res));
  }

  async #status(path: string, options: CallOptions = {}): Promise<boolean> {
    return this.#fetch(path, { method: 'GET' }, options, true, async (res) => {
      await res.arrayBuffer();
      return res.status === 200;
    });
  }

  async #json(res: Response): Promise<unknown> {
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        message = (JSON.parse(text) as { error?: string }).error ?? text;
      } catch {
        // not JSON: keep the text
      }
      throw new InferenceServerError(res.status, message);
    }
    return text.length ? parseJson(text) : undefined;
  }

  #modelPath(model: string, version?: string): string {
    return `/v2/models/${encodeURIComponent(model)}${version ? `/versions/${version}` : ''}`;
  }

  /** Whether the server is live; an unreachable server rejects (503), after the retries. */
  async isServerLive(options?: CallOptions): Promise<boolean> {
    return this.#status('/v2/health/live', options);
  }

  /** Whether the server is ready (any answer but 200 is `false`; only an unreachable server is retried). */
  async isServerReady(options?: CallOptions): Promise<boolean> {
    return this.#status('/v2/health/ready', options);
  }

  async isModelReady(model: string, version?: string, options?: CallOptions): Promise<boolean> {
    return this.#status(`${this.#modelPath(model, version)}/ready`, options);
  }

  async serverMetadata(options?: CallOptions): Promise<{ name: string; version: string; extensions: string[] }> {
    return (await this.#getJson('/v2', options)) as { name: string; version: string; extensions: string[] };
  }

  async modelMetadata(model: string, version?: string, options?: CallOptions): Promise<Record<string, unknown>> {
    return (await this.#getJson(this.#modelPath(model, version), options)) as Record<string, unknown>;
  }

  async modelConfig(model: string, version?: string, options?: CallOptions): Promise<Record<string, unknown>> {
    return (await this.#getJson(`${this.#modelPath(model, version)}/config`, options)) as Record<string, unknown>;
  }

  /**
   * Cumulative statistics (`GET …/stats`, protocol.md §3.14): of every READY version of every
   * model (no `model`), of one model's READY versions (no `version`), or of one version; the
   * JSON form (gRPC's `modelStatistics` gives the decoded message, with bigint counters).
   */
  async modelStatistics(model?: string, version?: string, options?: CallOptions): Promise<HttpModelStatisticsResponse> {
    const path = model === undefined ? '/v2/models/stats' : `${this.#modelPath(model, version)}/stats`;
    return (await this.#getJson(path, options)) as HttpModelStatisticsResponse;
  }

  /** The server's log settings (`GET /v2/logging`, protocol.md §3.16). */
  async logSettings(options?: CallOptions): Promise<LogSettings> {
    return (await this.#getJson('/v2/logging', options)) as LogSettings;
  }

  /** Updates the settings given (`POST /v2/logging`) and returns all of them as they now are. */
  async updateLogSettings(settings: Readonly<LogSettings>, options?: CallOptions): Promise<LogSettings> {
    return (await this.#post('/v2/logging', settings, options)) as LogSettings;
  }

  async #post(path: string, body: unknown, options: CallOptions = {}, idempotent = false): Promise<unknown> {
    return this.#fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }, options, idempotent, (res) => this.#json(res));
  }

  /**
   * The repository index (`POST /v2/repository/index`, protocol.md §3.13): every model of the
   * server's repositories, one entry per version with its state and reason.
   */
  async repositoryIndex(options: RepositoryIndexOptions & CallOptions = {}): Promise<RepositoryIndexEntry[]> {
    return (await this.#post('/v2/repository/index', { ready: options.ready ?? false }, options, true)) as RepositoryIndexEntry[];
  }

  /**
   * Loads or reloads a model (`POST /v2/repository/models/{m}/load`); resolves once the server
   * serves it. Needs a server in explicit model control mode. Override files travel as base64,
   * `versionWeights` and `versionPolicy` as the JSON objects `version_weights` and `version_policy`.
   */
  async loadModel(model: string, options: LoadModelOptions & CallOptions = {}): Promise<void> {
    const parameters: Record<string, unknown> = {};
    const config = configText(options.config);
    if (config !== undefined) parameters.config = config;
    if (options.versionWeights !== undefined) parameters.version_weights = { ...options.versionWeights };
    if (options.versionPolicy !== undefined) parameters.version_policy = structuredClone(options.versionPolicy);
    for (const [key, bytes] of fileParameters(options.files)) parameters[key] = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
    await this.#post(`/v2/repository/models/${encodeURIComponent(model)}/load`, Object.keys(parameters).length ? { parameters } : {}, options);
  }

  /** Unloads a model (`POST /v2/repository/models/{m}/unload`); needs explicit model control mode. */
  async unloadModel(model: string, options: UnloadModelOptions & CallOptions = {}): Promise<void> {
    await this.#post(
      `/v2/repository/models/${encodeURIComponent(model)}/unload`,
      { parameters: { unload_dependents: options.unloadDependents ?? false } },
      options,
    );
  }

  /**
   * Registers system shared-memory region `name` (`POST /v2/systemsharedmemory/region/{name}/register`,
   * protocol.md §3.17.1): `byteSize` bytes at `offset` of the POSIX object `key` (see
   * `SystemSharedMemoryRegion`). The server must run with `--allow-client-shm=true`.
   */
  async registerSystemSharedMemory(name: string, key: string, byteSize: number, offset = 0, options?: CallOptions): Promise<void> {
    await this.#post(`/v2/systemsharedmemory/region/${encodeURIComponent(name)}/register`, { key, offset, byte_size: byteSize }, options);
  }

  /** Unregisters one system region, or all of them without `name`; unknown names succeed. */
  async unregisterSystemSharedMemory(name?: string, options?: CallOptions): Promise<void> {
    await this.#postEmpty(name ? `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/unregister` : '/v2/systemsharedmemory/unregister', options);
  }

  /** Status of every system region, or of the one named (unknown → InferenceServerError 404). */
  async systemSharedMemoryStatus(name?: string, options?: CallOptions): Promise<SystemSharedMemoryStatus[]> {
    const path = name ? `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/status` : '/v2/systemsharedmemory/status';
    return (await this.#getJson(path, options)) as SystemSharedMemoryStatus[];
  }

  /** Registers a CUDA region from its 64-byte cudaIpcMemHandle_t (protocol.md §3.17.2). */
  async registerCudaSharedMemory(name: string, rawHandle: Uint8Array, deviceId: number, byteSize: number, options?: CallOptions): Promise<void> {
    const b64 = Buffer.from(rawHandle.buffer, rawHandle.byteOffset, rawHandle.byteLength).toString('base64');
    await this.#post(`/v2/cudasharedmemory/region/${encodeURIComponent(name)}/register`, { raw_handle: { b64 }, device_id: deviceId, byte_size: byteSize }, options);
  }

  async unregisterCudaSharedMemory(name?: string, options?: CallOptions): Promise<void> {
    await this.#postEmpty(name ? `/v2/cudasharedmemory/region/${encodeURIComponent(name)}/unregister` : '/v2/cudasharedmemory/unregister', options);
  }

  async cudaSharedMemoryStatus(name?: string, options?: CallOptions): Promise<CudaSharedMemoryStatus[]> {
    const path = name ? `/v2/cudasharedmemory/region/${encodeURIComponent(name)}/status` : '/v2/cudasharedmemory/status';
    return (await this.#getJson(path, options)) as CudaSharedMemoryStatus[];
  }

  async #postEmpty(path: string, options: CallOptions = {}): Promise<void> {
    await this.#fetch(path, { method: 'POST' }, options, false, (res) => this.#json(res));
  }

  async infer(options: ClientInferOptions): Promise<InferResult> {
    const began = performance.now();
    const header: Record<string, unknown> = {};
    if (options.id) header.id = options.id;
    const parameters: Record<string, unknown> = { ...(options.parameters ?? {}) };
    const blobs: Uint8Array[] = [];
    // JSON data is spliced in as exact text (64-bit integers keep every digit).
    const rawData: string[] = [];
    header.inputs = options.inputs.map((input) => {
      const entry: Record<string, unknown> = { name: input.name, shape: input.shape, datatype: input.datatype };
      if (isSharedMemoryInput(input)) {
        entry.parameters = sharedMemoryParameters(input.sharedMemory);
      } else if (input.json) {
        rawData.push(tensorDataToJson(input.datatype, inputBytes(input), `input '${input.name}'`));
        entry.data = `\u0000raw${rawData.length - 1}`;
      } else {
        const bytes = inputBytes(input);
        entry.parameters = { binary_data_size: bytes.byteLength };
        blobs.push(bytes);
      }
      return entry;
    });
    if (options.outputs) {
      header.outputs = options.outputs.map((o) => {
        if (o.sharedMemory) return { name: o.name, parameters: { binary_data: false, ...sharedMemoryParameters(o.sharedMemory) } };
        const params: Record<string, unknown> = { binary_data: o.binary ?? true };
        if (o.classCount) params.classification = o.classCount;
        return { name: o.name, parameters: params };
      });
    } else {
      parameters.binary_data_output = true;
    }
    if (Object.keys(parameters).length > 0) header.parameters = parameters;

    const json = JSON.stringify(header).replace(/"\\u0000raw(\d+)"/g, (_m, i: string) => rawData[Number(i)]!);
    const body = joinInferenceBody(json, blobs);
    let parts: readonly Uint8Array[] = body.chunks;
    let length = body.totalLength;
    const headers = this.#headers(options.headers, options.responseCompression ? { 'Accept-Encoding': options.responseCompression } : undefined);
    if (blobs.length > 0) headers[INFERENCE_HEADER_CONTENT_LENGTH] = String(body.headerLength);
    else headers['Content-Type'] = 'application/json';
    if (options.requestCompression) {
      const joined = Buffer.concat(body.chunks, body.totalLength);
      const packed = options.requestCompression === 'gzip' ? gzipSync(joined) : deflateSync(joined);
      parts = [packed];
      length = packed.length;
      headers['Content-Encoding'] = options.requestCompression;
    }
    headers['Content-Length'] = String(length);

    const path = `${this.#modelPath(options.model, options.version)}/infer`;
    const built = performance.now();
    let answered = built;
    const res = await this.#exchange(path, headers, parts, options, () => {
      answered = performance.now();
    });
    let raw = res.body;
    const encoding = res.headers['content-encoding'];
    if (encoding === 'gzip' || (encoding !== undefined && raw.length > 1 && raw[0] === 0x1f && raw[1] === 0x8b)) raw = gunzipSync(raw);
    else if (encoding === 'deflate') raw = inflateSync(raw);
    if (res.status < 200 || res.status > 299) {
      let message = raw.toString('utf8');
      try {
        message = (JSON.parse(message) as { error?: string }).error ?? message;
      } catch {
        // not JSON
      }
      throw new InferenceServerError(res.status, message);
    }
    const headerLength = res.headers[INFERENCE_HEADER_CONTENT_LENGTH.toLowerCase()];
    const split = splitInferenceBody(raw, typeof headerLength === 'string' ? headerLength : undefined);
    const result = httpResult(parseJson(split.header) as Record<string, unknown>, split.binary);
    if (options.timing) {
      options.timing.sendMs = built - began;
      options.timing.recvMs = performance.now() - answered;
    }
    return result;
  }

  #generateUrl(options: GenerateOptions, stream: boolean): string {
    return `${this.url}${this.#modelPath(options.model, options.version)}/${stream ? 'generate_stream' : 'generate'}`;
  }

  /**
   * `POST …/generate` (protocol.md §3.18): one request, one response object. Throws
   * InferenceServerError with the server's status and message on failure.
   */
  async generate(options: GenerateOptions): Promise<GenerateResponse> {
    const path = `${this.#modelPath(options.model, options.version)}/generate`;
    return (await this.#post(path, options.body, options)) as GenerateResponse;
  }

  /**
   * `POST …/generate_stream` (protocol.md §3.18): the model's responses as they come, one per
   * Server-Sent Event; the iteration ends after the final one. An error before the first
   * response throws InferenceServerError with the HTTP status; an error event later throws one
   * with status 400 (the event carries no category, like a gRPC stream's in-band error) after
   * the responses before it. Leaving a `for await` loop early, or aborting `signal`, closes the
   * connection, which cancels the request on the server.
   */
  async *generateStream(options: GenerateOptions): AsyncGenerator<GenerateResponse, void, undefined> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal!.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await fetch(this.#generateUrl(options, true), {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', 'Accept-Encoding': 'identity' },
        body: JSON.stringify(options.body),
        signal: controller.signal,
      });
      if (!res.ok) throw await errorOf(res);
      if (res.body === null) return;
      for await (const data of serverSentData(res.body)) {
        const event = parseJson(data, 'a generate_stream event') as GenerateResponse;
        if (typeof event.error === 'string' && Object.keys(event).length === 1) throw new InferenceServerError(400, event.error);
        yield event;
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      controller.abort();
    }
  }
}
