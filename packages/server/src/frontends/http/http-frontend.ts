/**
 * The HTTP/REST frontend (protocol.md §3): KServe v2 and Triton's extensions over HTTP/1.1, on
 * Nereid's own HTTP/1.1 server (h1/server.ts, the default) or `node:http` (`--http-server=node`).
 * It translates requests to `Server` facade calls and never touches schedulers or backends.
 */
import { createServer, type Server as NodeHttpServer } from 'node:http';
import { Server as NetServer, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { INFERENCE_HEADER_CONTENT_LENGTH, NereidError, clientErrorMessage, splitInferenceBody, stringifyJson, toNereidError } from '@nereid/protocol';
import type { Server } from '../../core/server.js';
import { BufferPool } from '../../core/buffer-pool.js';
import { decodeContent, jsonObjectBody, readBody, readBodyInto, type PooledBody } from './body.js';
import { compressBody, negotiateEncoding } from './compression.js';
import type { InferRequest, InferResponse } from '../../core/types.js';
import { decodeGenerateRequest, encodeGenerateResponse, sseErrorFrame, sseFrame } from './generate-codec.js';
import { decodeJsonInferRequest, decodeRawBinaryRequest, encodeInferResponse, type DecodedInferRequest } from './infer-codec.js';
import { decodeIndexRequest, decodeLoadRequest, decodeUnloadRequest } from './repository-codec.js';
import { boundPort, listenHttp } from './listen.js';
import { decodeCudaRegister, decodeSystemRegister } from './shared-memory-codec.js';
import { decodeTraceSettingsUpdate, encodeTraceSettings } from './trace-codec.js';
import type { Trace } from '../../observability/trace.js';
import { LiveSet } from '../../core/id-map.js';
import { H1Server } from './h1/server.js';
import type { HttpRequest, HttpResponse } from './transport.js';

export interface HttpFrontendOptions {
  /** `--http-address`, default 0.0.0.0. */
  address?: string;
  /** `--http-port`, default 8000; 0 picks a free port. */
  port?: number;
  /** `--http-max-input-size`, default 64 MiB. */
  maxInputSize?: number;
  /** `--http-headers-timeout`: ms to receive a request's header block. */
  headersTimeoutMs?: number;
  /** `--http-request-timeout`: ms to receive a whole request (0: no limit). */
  requestTimeoutMs?: number;
  /** `--http-keepalive-timeout`: ms an idle keep-alive connection stays open. */
  keepAliveTimeoutMs?: number;
  /** `--http-max-connections`: open connections at most (0: no limit). */
  maxConnections?: number;
  /** `--http-server`: Nereid's own HTTP/1.1 server (`nereid`, the default) or `node:http` (`node`). */
  server?: HttpServerKind;
}

export type HttpServerKind = 'nereid' | 'node';

export const DEFAULT_HTTP_MAX_INPUT_SIZE = 67_108_864;

/**
 * Connection limits. Node's own defaults let a client that never finishes its header block hold
 * a connection for a minute or more (its timeouts are checked every 30 s) and open any number of
 * connections.
 */
export const DEFAULT_HTTP_LIMITS = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 300_000,
  keepAliveTimeoutMs: 65_000,
  maxConnections: 4096,
} as const;

/** How often Node checks the header and request timeouts of open connections, at most. */
const TIMEOUT_CHECK_MS = 1000;

type Method = 'GET' | 'POST';
type Handler = (req: HttpRequest, res: HttpResponse, model: string, version: string | undefined) => Promise<void> | void;

interface Route {
  methods: Partial<Record<Method, Handler>>;
  model: string;
  version: string | undefined;
}

const JSON_TYPE = 'application/json';

/** Idle request-body buffers the frontend keeps for reuse. */
const BODY_POOL_BYTES = 128 * 1024 * 1024;

const PENDING_RESPONSES = Symbol('nereid.pendingResponses');

/**
 * The callbacks waiting on a connection's responses, run when it closes. Node gives a
 * pipelined response still queued behind an earlier one no 'close' of its own when the client
 * hangs up: without this, such a response would count as in flight forever (and its request
 * body would never go back to the pool).
 */
function pendingOf(socket: Socket): LiveSet<() => void> {
  const holder = socket as Socket & { [PENDING_RESPONSES]?: LiveSet<() => void> };
  let pending = holder[PENDING_RESPONSES];
  if (pending === undefined) {
    // Not a Set: a long-lived one turning over per request chains its requests for the garbage
    // collector (core/id-map.ts).
    const set = new LiveSet<() => void>();
    pending = set;
    holder[PENDING_RESPONSES] = set;
    socket.once('close', () => {
      for (const done of set.values()) done();
    });
  }
  return pending;
}

/**
 * Calls `release` once: when `res` is finished or closed, or when its connection closes (now, if
 * any of these has already happened).
 */
function afterResponse(req: HttpRequest, res: HttpResponse, release: () => void): void {
  if (res.writableFinished || res.destroyed || req.socket.destroyed) {
    release();
    return;
  }
  const pending = pendingOf(req.socket);
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    res.off('finish', once);
    res.off('close', once);
    pending.delete(id);
    release();
  };
  res.once('finish', once);
  res.once('close', once);
  const id = pending.add(once);
}
const EVENT_STREAM_TYPE = 'text/event-stream; charset=utf-8';

/** The client asked for Server-Sent Events (`Accept: text/event-stream`). */
function acceptsEvents(req: HttpRequest): boolean {
  const accept = req.headers.accept;
  return accept !== undefined && /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept);
}

function sendJson(res: HttpResponse, status: number, body: string): void {
  res.writeHead(status, { 'Content-Type': JSON_TYPE, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

function sendError(res: HttpResponse, err: unknown, extraHeaders: Record<string, string> = {}): void {
  const error = toNereidError(err);
  const body = JSON.stringify({ error: clientErrorMessage(error.message, 'body') });
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(error.httpStatus, { 'Content-Type': JSON_TYPE, 'Content-Length': Buffer.byteLength(body), ...extraHeaders });
  res.end(body);
}

/** Health and model-ready answers carry no content type (protocol.md §3.2). */
function sendStatus(res: HttpResponse, status: number): void {
  res.writeHead(status, { 'Content-Length': 0 });
  res.end();
}

/** 200 or 400; while the server exits, Triton's UNAVAILABLE "Server exiting" (protocol.md §3.3). */
function healthStatus(server: Server, ok: boolean): number {
  if (server.exiting) throw new NereidError('SERVER_STOPPING', 'Server exiting');
  return ok ? 200 : 400;
}

/** The facade's "decoupled model" refusal in this frontend's words (protocol.md §3.7.3). */
function decoupledError(err: unknown, message: string): unknown {
  return err instanceof NereidError && err.code === 'MODEL_DECOUPLED_UNSUPPORTED' ? new NereidError(err.code, message) : err;
}

const CONNECTION_SIGNAL = Symbol('nereid.connectionSignal');

/**
 * The cancellation signal of a connection, aborted when it closes. HTTP/1.1 requests on one
 * connection follow each other, so a close always belongs to the request in flight (if any): a
 * client that goes away cancels its request (protocol.md §3.1). One controller per connection
 * rather than per request keeps that off the per-request cost.
 */
function connectionSignal(socket: Socket): AbortSignal {
  const holder = socket as Socket & { [CONNECTION_SIGNAL]?: AbortSignal };
  let signal = holder[CONNECTION_SIGNAL];
  if (signal === undefined) {
    const controller = new AbortController();
    signal = controller.signal;
    holder[CONNECTION_SIGNAL] = signal;
    socket.once('close', () => controller.abort());
  }
  return signal;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

export class HttpFrontend {
  readonly #server: Server;
  readonly #http: H1Server | NodeHttpServer;
  readonly #options: Required<Pick<HttpFrontendOptions, 'address' | 'port' | 'maxInputSize'>>;
  readonly #handlers: Record<string, Partial<Record<Method, Handler>>>;
  /** Responses not yet finished (for a shutdown that lets them complete). */
  readonly #inflight = new LiveSet<HttpResponse>();
  /**
   * Buffers inference request bodies are read into (`readBodyInto`). A body, and the input
   * tensors that view it, belong to its request until the request has settled and its response
   * has been written out (or the connection closed); only then does the buffer go back. Large
   * bodies are slabs (core/slabs.ts), which an ONNX Runtime worker reads its inputs from as
   * they lie.
   */
  readonly #bodies = new BufferPool({ shared: true, maxBytes: BODY_POOL_BYTES });
  #idleWaiters: (() => void)[] = [];
  /** Responses carry `Connection: close` (see `drain`). */
  #draining = false;
  /** Every new request is refused (see `stopAccepting`). */
  #stopping = false;
  /** performance.now() of the last accepted connection. */
  #lastConnectionAt = 0;
  #closed: Promise<void> | undefined;

  constructor(server: Server, options: HttpFrontendOptions = {}) {
    this.#server = server;
    this.#options = {
      address: options.address ?? '0.0.0.0',
      port: options.port ?? 8000,
      maxInputSize: options.maxInputSize ?? DEFAULT_HTTP_MAX_INPUT_SIZE,
    };
    this.#handlers = {
      serverMetadata: { GET: (_q, res) => sendJson(res, 200, JSON.stringify(this.#server.metadata())) },
      live: { GET: (_q, res) => sendStatus(res, healthStatus(this.#server, this.#server.isLive())) },
      ready: { GET: (_q, res) => sendStatus(res, healthStatus(this.#server, this.#server.isReady())) },
      modelReady: {
        GET: async (_q, res, m, v) => {
          if (await this.#server.checkModelReady(m, v)) sendStatus(res, 200);
          else sendJson(res, 400, JSON.stringify({ error: 'Model version not ready' }));
        },
      },
      modelMetadata: { GET: (_q, res, m, v) => sendJson(res, 200, JSON.stringify(this.#server.modelMetadata(m, v))) },
      modelConfig: { GET: (_q, res, m, v) => sendJson(res, 200, JSON.stringify(this.#server.modelConfigJson(m, v))) },
      effectiveConfig: { GET: (_q, res, m, v) => sendJson(res, 200, JSON.stringify(this.#server.modelEffectiveConfig(m, v))) },
      infer: { POST: (req, res, m, v) => this.#infer(req, res, m, v) },
      generate: { POST: (req, res, m, v) => this.#generate(req, res, m, v, false) },
      generateStream: { POST: (req, res, m, v) => this.#generate(req, res, m, v, true) },
      stats: {
        GET: (_q, res, m, v) =>
          sendJson(res, 200, stringifyJson({ model_stats: this.#server.modelStatistics(m || undefined, v) })),
      },
      // The trace extension (docs/observability.md).
      traceSetting: {
        GET: (_q, res, m) => sendJson(res, 200, encodeTraceSettings(this.#server.traceSettings(m || undefined))),
        POST: async (req, res, m) => {
          const update = decodeTraceSettingsUpdate(await readBody(req, this.#options.maxInputSize));
          sendJson(res, 200, encodeTraceSettings(this.#server.updateTraceSettings(m || undefined, update)));
        },
      },
      logging: {
        GET: (_q, res) => sendJson(res, 200, JSON.stringify(this.#server.logSettings())),
        POST: (req, res) => this.#updateLogging(req, res),
      },
      // The model repository extension (protocol.md §3.13).
      repositoryIndex: {
        POST: async (req, res) => {
          const { ready } = decodeIndexRequest(await readBody(req, this.#options.maxInputSize));
          sendJson(res, 200, JSON.stringify(await this.#server.repositoryIndex({ ready })));
        },
      },
      repositoryLoad: {
        POST: async (req, res, m) => {
          await this.#server.loadModel(m, decodeLoadRequest(m, await readBody(req, this.#options.maxInputSize)));
          sendJson(res, 200, '');
        },
      },
      repositoryUnload: {
        POST: async (req, res, m) => {
          await this.#server.unloadModel(m, decodeUnloadRequest(await readBody(req, this.#options.maxInputSize)));
          sendJson(res, 200, '');
        },
      },
      // The shared-memory extensions (protocol.md §3.17); the region name travels as `model`.
      systemShmStatus: { GET: (_q, res, r) => sendJson(res, 200, JSON.stringify(this.#server.sharedMemory.systemStatus(r))) },
      systemShmRegister: {
        POST: async (req, res, r) => {
          const body = await readBody(req, this.#options.maxInputSize);
          this.#server.sharedMemory.checkClientAllowed();
          if (r === '') throw new NereidError('SHM_REGISTER_INVALID', 'Shared memory register request needs a region name: POST /v2/systemsharedmemory/region/{name}/register');
          const { key, offset, byteSize } = decodeSystemRegister(body, r);
          this.#server.sharedMemory.registerSystem(r, key, offset, byteSize);
          sendJson(res, 200, '');
        },
      },
      systemShmUnregister: {
        POST: async (req, res, r) => {
          await readBody(req, this.#options.maxInputSize);
          this.#server.sharedMemory.unregisterSystem(r);
          sendJson(res, 200, '');
        },
      },
      cudaShmStatus: { GET: (_q, res, r) => sendJson(res, 200, JSON.stringify(this.#server.sharedMemory.cudaStatus(r))) },
      cudaShmRegister: {
        POST: async (req, res, r) => {
          const body = await readBody(req, this.#options.maxInputSize);
          this.#server.sharedMemory.checkClientAllowed();
          if (r === '') throw new NereidError('SHM_REGISTER_INVALID', 'Shared memory register request needs a region name: POST /v2/cudasharedmemory/region/{name}/register');
          const { rawHandle, deviceId, byteSize } = decodeCudaRegister(body, r);
          await this.#server.sharedMemory.registerCuda(r, rawHandle, deviceId, byteSize);
          sendJson(res, 200, '');
        },
      },
      cudaShmUnregister: {
        POST: async (req, res, r) => {
          await readBody(req, this.#options.maxInputSize);
          await this.#server.sharedMemory.unregisterCuda(r);
          sendJson(res, 200, '');
        },
      },
      repositoryNamed: {
        POST: (req) => {
          req.resume();
          throw new NereidError('REPOSITORY_NAME_UNSUPPORTED', "'repository_name' specification is not supported");
        },
      },
    };
    const headersTimeout = options.headersTimeoutMs ?? DEFAULT_HTTP_LIMITS.headersTimeoutMs;
    const requestTimeout = options.requestTimeoutMs ?? DEFAULT_HTTP_LIMITS.requestTimeoutMs;
    const keepAliveTimeout = options.keepAliveTimeoutMs ?? DEFAULT_HTTP_LIMITS.keepAliveTimeoutMs;
    const checkInterval = Math.min(TIMEOUT_CHECK_MS, Math.max(10, Math.floor(headersTimeout / 4)));
    const handle = (req: HttpRequest, res: HttpResponse) => void this.#handle(req, res);
    if ((options.server ?? 'nereid') === 'nereid') {
      const h1 = new H1Server({ headersTimeout, requestTimeout, keepAliveTimeout, checkInterval }, handle);
      h1.on('handlerError', (err: unknown) => this.#server.logger.error(`HTTP request handler failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`));
      this.#http = h1;
    } else {
      const http = createServer(
        {
          keepAliveTimeout,
          headersTimeout,
          // Node requires requestTimeout >= headersTimeout unless it is 0 (no limit).
          requestTimeout: requestTimeout === 0 ? 0 : Math.max(requestTimeout, headersTimeout),
          connectionsCheckingInterval: checkInterval,
        },
        handle,
      );
      // The C++ client sends an empty `Expect:` header; Node would answer 417 without this.
      http.on('checkExpectation', handle);
      this.#http = http;
    }
    this.#http.on('connection', () => (this.#lastConnectionAt = performance.now()));
    const maxConnections = options.maxConnections ?? DEFAULT_HTTP_LIMITS.maxConnections;
    if (maxConnections > 0) this.#http.maxConnections = maxConnections;
  }

  /** Starts listening; resolves with the bound port. */
  listen(): Promise<number> {
    return listenHttp(this.#http, 'HTTP', this.#options.address, this.#options.port);
  }

  get port(): number {
    return boundPort(this.#http, this.#options.port);
  }

  /**
   * Stops accepting connections. Requests in flight finish, and their responses (and any later
   * ones on connections still open) carry `Connection: close`, so each connection ends after its
   * response. Idle connections stay open until `closeAllConnections`: a request already sent on
   * one but not yet read is answered rather than cut off. Resolves once every connection is
   * closed.
   */
  close(): Promise<void> {
    this.drain();
    // net.Server's close rather than http.Server's, which also closes idle connections at once.
    this.#closed ??= new Promise((resolve) => NetServer.prototype.close.call(this.#http, () => resolve()));
    return this.#closed;
  }

  /**
   * Resolves once no connection has been accepted for `quietMs` (at most `maxWaitMs` from now).
   * Closing a listening socket resets the connections the kernel has completed but the server
   * not yet accepted: their clients sent a request and get no answer. Waiting for a quiet moment
   * first lets those be accepted and answered (refused, during a shutdown).
   */
  async quiet(quietMs: number, maxWaitMs: number): Promise<void> {
    const deadline = performance.now() + maxWaitMs;
    for (;;) {
      const now = performance.now();
      const wait = Math.min(this.#lastConnectionAt + quietMs, deadline) - now;
      if (wait <= 0) return;
      await new Promise((resolve) => setTimeout(resolve, Math.ceil(wait)));
    }
  }

  /**
   * Shutdown, after the grace period: from now on every new request but the health probes, on
   * any connection, is answered 503 "Server is stopping…" with `Connection: close`; requests already being handled
   * go on. The frontend still listens (see `close`), so a client that connects now is told
   * rather than reset.
   */
  stopAccepting(): void {
    this.drain();
    this.#stopping = true;
  }

  /**
   * From now on every response carries `Connection: close`, so clients open a new connection for
   * their next request (and a load balancer can send it elsewhere) while this frontend still
   * serves: the grace period of a shutdown.
   */
  drain(): void {
    if (this.#draining) return;
    this.#draining = true;
    for (const res of this.#inflight.values()) if (!res.headersSent) res.setHeader('Connection', 'close');
  }

  /** Resolves once no request is being handled (at once if none is). */
  idle(): Promise<void> {
    if (this.#inflight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Closes every remaining connection, idle or kept alive (after the server has drained). */
  closeAllConnections(): void {
    this.#http.closeAllConnections();
    // What http.Server's close adds to net.Server's: its connection-checking timer goes.
    if (this.#closed !== undefined) this.#http.close();
  }

  #track(req: HttpRequest, res: HttpResponse): void {
    const id = this.#inflight.add(res);
    if (this.#draining) res.setHeader('Connection', 'close');
    afterResponse(req, res, () => {
      this.#inflight.delete(id);
      if (this.#inflight.size === 0 && this.#idleWaiters.length > 0) {
        const waiters = this.#idleWaiters;
        this.#idleWaiters = [];
        for (const w of waiters) w();
      }
    });
  }

  #route(path: string): Route | undefined {
    const s = path.split('/');
    if (s[0] !== '' || s[1] !== 'v2') return undefined;
    const n = s.length;
    const route = (name: string, model = '', version?: string): Route | undefined => {
      const methods = this.#handlers[name];
      return methods ? { methods, model, version } : undefined;
    };
    if (n === 2) return route('serverMetadata');
    if (s[2] === 'logging' && n === 3) return route('logging');
    if (s[2] === 'trace' && n === 4 && s[3] === 'setting') return route('traceSetting');
    if (s[2] === 'health' && n === 4) return s[3] === 'live' ? route('live') : s[3] === 'ready' ? route('ready') : undefined;
    if (s[2] === 'repository') return this.#repositoryRoute(s, route);
    if (s[2] === 'systemsharedmemory') return this.#sharedMemoryRoute(s, 'system', route);
    if (s[2] === 'cudasharedmemory') return this.#sharedMemoryRoute(s, 'cuda', route);
    if (s[2] !== 'models' || n < 4 || s[3] === '') return undefined;
    // Matched before the model patterns: never "metadata of a model called stats" (§3.2).
    if (n === 4 && s[3] === 'stats') return route('stats');
    const model = decodeSegment(s[3]!);
    let rest = s.slice(4);
    let version: string | undefined;
    if (rest[0] === 'versions') {
      if (rest.length < 2 || !/^[0-9]+$/.test(rest[1]!)) return undefined;
      version = rest[1]!;
      rest = rest.slice(2);
    }
    if (rest.length === 0) return route('modelMetadata', model, version);
    // Triton has the model form only, without a version.
    if (rest.length === 2 && rest[0] === 'trace' && rest[1] === 'setting' && version === undefined) return route('traceSetting', model);
    if (rest.length !== 1) return undefined;
    switch (rest[0]) {
      case 'ready':
        return route('modelReady', model, version);
      case 'config':
        return route('modelConfig', model, version);
      case 'effective-config':
        return route('effectiveConfig', model, version);
      case 'infer':
        return route('infer', model, version);
      case 'generate':
        return route('generate', model, version);
      case 'generate_stream':
        return route('generateStream', model, version);
      case 'stats':
        return route('stats', model, version);
      default:
        return undefined;
    }
  }

  /**
   * `/v2/{system,cuda}sharedmemory/status|register|unregister` and the same under
   * `region/{r}/` (protocol.md §3.2); a register without region reaches its handler, which refuses it.
   */
  #sharedMemoryRoute(s: readonly string[], kind: 'system' | 'cuda', route: (name: string, model?: string) => Route | undefined): Route | undefined {
    const n = s.length;
    let region = '';
    let action: string | undefined;
    if (n === 4) action = s[3];
    else if (n === 6 && s[3] === 'region' && s[4] !== '') {
      region = decodeSegment(s[4]!);
      action = s[5];
    }
    switch (action) {
      case 'status':
        return route(`${kind}ShmStatus`, region);
      case 'register':
        return route(`${kind}ShmRegister`, region);
      case 'unregister':
        return route(`${kind}ShmUnregister`, region);
      default:
        return undefined;
    }
  }

  /**
   * `/v2/repository/index`, `/v2/repository/models/{m}/load|unload`, and the same with a
   * repository segment after `repository`, which is refused (protocol.md §3.2).
   */
  #repositoryRoute(s: readonly string[], route: (name: string, model?: string) => Route | undefined): Route | undefined {
    const n = s.length;
    if (n === 4 && s[3] === 'index') return route('repositoryIndex');
    if (n === 6 && s[3] === 'models' && s[4] !== '') {
      if (s[5] === 'load') return route('repositoryLoad', decodeSegment(s[4]!));
      if (s[5] === 'unload') return route('repositoryUnload', decodeSegment(s[4]!));
    }
    if (s[3] === '') return undefined;
    if ((n === 5 && s[4] === 'index') || (n === 7 && s[4] === 'models' && s[5] !== '' && (s[6] === 'load' || s[6] === 'unload'))) {
      return route('repositoryNamed');
    }
    return undefined;
  }

  async #handle(req: HttpRequest, res: HttpResponse): Promise<void> {
    this.#track(req, res);
    // Health probes keep their own answers (a liveness probe must not fail because of a drain).
    if (this.#stopping && !req.url?.startsWith('/v2/health/')) {
      req.resume();
      sendError(res, new NereidError('SERVER_STOPPING', 'Server is stopping, HTTP service has stopped accepting new requests'));
      return;
    }
    try {
      const url = req.url ?? '/';
      const logger = this.#server.logger;
      if (logger.isVerbose(1)) logger.verbose(1, `HTTP request: ${req.method} ${url}`);
      const q = url.indexOf('?');
      const route = this.#route(q === -1 ? url : url.slice(0, q));
      if (route === undefined) {
        req.resume();
        sendJson(res, 404, '{"error":"Not Found"}');
        return;
      }
      const handler = route.methods[req.method as Method];
      if (handler === undefined) {
        req.resume();
        sendJson(res, 405, '{"error":"Method Not Allowed"}');
        return;
      }
      await handler(req, res, route.model, route.version);
    } catch (err) {
      req.resume();
      sendError(res, err);
    }
  }

  /** `POST /v2/logging` (protocol.md §3.16): a JSON object of settings; null values are ignored. */
  async #updateLogging(req: HttpRequest, res: HttpResponse): Promise<void> {
    const update = jsonObjectBody(await readBody(req, this.#options.maxInputSize), 'logging');
    sendJson(res, 200, JSON.stringify(this.#server.updateLogSettings(update)));
  }

  async #infer(req: HttpRequest, res: HttpResponse, model: string, version: string | undefined): Promise<void> {
    let trace: Trace | undefined;
    if (this.#server.tracing.enabled) trace = this.#startTrace(req, model);
    const signal = connectionSignal(req.socket);
    let read: PooledBody | undefined;
    let body: Buffer;
    // The request's clock starts once its body is complete (its bytes have arrived): decoding and
    // everything after it count in its duration (docs/protocol.md, statistics).
    let receivedAt: bigint;
    try {
      const headerLength = Number(req.headers[INFERENCE_HEADER_CONTENT_LENGTH]);
      read = await readBodyInto(req, this.#options.maxInputSize, this.#bodies, Number.isSafeInteger(headerLength) ? headerLength : 0);
      receivedAt = process.hrtime.bigint();
      if (trace !== undefined) trace.stamp('HTTP_RECV_END', receivedAt);
      body = await decodeContent(read.bytes, req.headers['content-encoding'], this.#options.maxInputSize);
      if (body !== read.bytes) read.release();
    } catch (err) {
      read?.release();
      const error = toNereidError(err);
      if (error.code === 'REQUEST_TOO_LARGE') res.setHeader('Connection', 'close');
      sendError(res, error, error.code === 'REQUEST_COMPRESSION_UNSUPPORTED' ? { 'Accept-Encoding': 'gzip, deflate' } : {});
      if (trace !== undefined) {
        trace.error = error.message;
        trace.end();
      }
      return;
    }
    // The response's outputs, once known: they go back (`recycleOutputs`) with the body.
    const sent: { response?: InferResponse } = {};
    try {
      await this.#inferBody(req, res, model, version, body, signal, sent, receivedAt, trace);
    } catch (err) {
      if (trace !== undefined) {
        trace.error = toNereidError(err).message;
        trace.stamp('HTTP_SEND_START');
      }
      throw err;
    } finally {
      // The request has settled (its backend answered it); the response may still be on its way.
      afterResponse(req, res, () => {
        read.release();
        if (sent.response !== undefined) this.#server.recycleOutputs(sent.response);
        if (trace !== undefined) {
          trace.stamp('HTTP_SEND_END');
          trace.end();
        }
      });
    }
  }

  /** Samples an inference request for tracing (only while some trace setting is on). */
  #startTrace(req: HttpRequest, model: string): Trace | undefined {
    const parent = req.headers.traceparent;
    const trace = this.#server.tracing.sample(model, typeof parent === 'string');
    if (trace === undefined) return undefined;
    trace.stamp('HTTP_RECV_START');
    if (typeof parent === 'string') {
      trace.carrier = { traceparent: parent };
      const state = req.headers.tracestate;
      if (typeof state === 'string') trace.carrier.tracestate = state;
    }
    return trace;
  }

  async #inferBody(
    req: HttpRequest,
    res: HttpResponse,
    model: string,
    version: string | undefined,
    body: Buffer,
    signal: AbortSignal,
    sent: { response?: InferResponse },
    receivedAt: bigint,
    trace: Trace | undefined,
  ): Promise<void> {
    const split = splitInferenceBody(body, req.headers[INFERENCE_HEADER_CONTENT_LENGTH] as string | undefined);
    const decoded = split.rawBinary
      ? decodeRawBinaryRequest(split.binary, this.#server.modelConfig(model, version), model, version)
      : decodeJsonInferRequest(split.header, split.binary, model, version);
    if (acceptsEvents(req)) {
      await this.#inferEvents(res, decoded, signal, receivedAt, trace);
      return;
    }
    const response = await this.#server.infer(decoded.request, trace === undefined ? { signal, receivedAt } : { signal, receivedAt, trace }).catch((err: unknown) => {
      throw decoupledError(err, "HTTP end point doesn't support models with decoupled transaction policy");
    });
    sent.response = response;
    if (trace !== undefined) trace.stamp('HTTP_SEND_START');
    const encoded = encodeInferResponse(response, decoded);

    const headers: Record<string, string | number> = {
      'Content-Type': encoded.binary ? 'application/octet-stream' : JSON_TYPE,
    };
    if (encoded.binary) headers['Inference-Header-Content-Length'] = encoded.headerLength;
    const coding = negotiateEncoding(req.headers['accept-encoding']);
    if (coding !== 'identity') {
      const whole = Buffer.concat(encoded.chunks, encoded.totalLength);
      const compressed = await compressBody(coding, whole);
      if (compressed !== undefined) {
        headers['Content-Encoding'] = coding;
        headers['Content-Length'] = compressed.byteLength;
        res.writeHead(200, headers);
        res.end(compressed);
        return;
      }
    }
    headers['Content-Length'] = encoded.totalLength;
    res.writeHead(200, headers);
    if (encoded.chunks.length === 1) {
      res.end(encoded.chunks[0]);
      return;
    }
    res.cork();
    for (const chunk of encoded.chunks) res.write(chunk);
    res.end();
  }

  /**
   * `POST …/infer` with `Accept: text/event-stream` (beyond Triton, docs/protocol.md): every
   * response of the request, decoupled models included, as one Server-Sent Event holding the
   * JSON response body of §3.7.2 with `parameters.triton_final_response`. Outputs are JSON only.
   */
  async #inferEvents(res: HttpResponse, decoded: DecodedInferRequest, signal: AbortSignal, receivedAt: bigint, trace: Trace | undefined): Promise<void> {
    const { request } = decoded;
    for (const [name, binary] of decoded.binaryOutputs) {
      if (binary) {
        throw new NereidError(
          'OUTPUT_PARAMETER',
          `output '${name}' of the request for model '${request.model}' asks for binary data, which server-sent events cannot carry; request JSON data or drop the Accept: text/event-stream header`,
        );
      }
    }
    const json = { binaryOutputs: new Map<string, boolean>(), defaultBinary: false };
    await this.#events(res, request, signal, receivedAt, trace, (response, final) => {
      const withFlag = { ...response, parameters: { ...response.parameters, triton_final_response: final } };
      return Buffer.from(encodeInferResponse(withFlag, { ...json, request }).chunks[0]!).toString('utf8');
    });
  }

  /**
   * The generate extension (protocol.md §3.18): `generate` answers with the one response's JSON
   * object; `generate_stream` with one Server-Sent Event per response.
   */
  async #generate(req: HttpRequest, res: HttpResponse, model: string, version: string | undefined, stream: boolean): Promise<void> {
    const signal = connectionSignal(req.socket);
    const body = await readBody(req, this.#options.maxInputSize);
    const receivedAt = process.hrtime.bigint();
    const coding = req.headers['content-encoding'];
    if (coding !== undefined && coding.trim().toLowerCase() !== 'identity') {
      throw new NereidError('REQUEST_COMPRESSION_INVALID', "Unsupported content-encoding, only 'identity' is supported.");
    }
    const request = decodeGenerateRequest(body, this.#server.modelMetadata(model, version), version);
    if (stream) {
      await this.#events(res, request, signal, receivedAt, undefined, (response) => encodeGenerateResponse(response));
      return;
    }
    const responses: InferResponse[] = [];
    await this.#server.inferStream(request, {
      signal,
      receivedAt,
      onResponse: (r) => {
        if (r.response !== undefined) responses.push(r.response);
      },
    });
    if (responses.length !== 1) {
      throw new NereidError(
        'BACKEND_ERROR',
        `model '${request.model}' sent ${responses.length} responses to a generate request, which takes exactly one; use generate_stream`,
      );
    }
    sendJson(res, 200, encodeGenerateResponse(responses[0]!));
  }

  /**
   * Streams a request's responses as Server-Sent Events (protocol.md §3.18): the status is
   * fixed by the first response (an error before it is an ordinary JSON error response); a later
   * error is an event `{"error": …}`; the stream ends after the final response, and a flags-only
   * final response adds no event.
   */
  async #events(
    res: HttpResponse,
    request: InferRequest,
    signal: AbortSignal,
    receivedAt: bigint,
    trace: Trace | undefined,
    encode: (response: InferResponse, final: boolean) => string,
  ): Promise<void> {
    const start = () => {
      if (res.headersSent) return;
      // A traced request's events: HTTP_SEND_START at the first, HTTP_SEND_END once the response ends.
      trace?.stamp('HTTP_SEND_START');
      res.writeHead(200, { 'Content-Type': EVENT_STREAM_TYPE, 'Cache-Control': 'no-cache' });
    };
    try {
      await this.#server.inferStream(request, {
        signal,
        receivedAt,
        ...(trace !== undefined && { trace }),
        onResponse: (r) => {
          if (r.response === undefined) return;
          const frame = sseFrame(encode(r.response, r.final));
          start();
          res.write(frame);
        },
      });
    } catch (err) {
      if (!res.headersSent) throw err;
      res.end(sseErrorFrame(clientErrorMessage(toNereidError(err).message, 'body')));
      return;
    }
    start();
    res.end();
  }
}
