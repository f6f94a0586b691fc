/**
 * A gRPC server over HTTP/2 (h2c: cleartext HTTP/2 with prior knowledge), on Nereid's own
 * transport (h2/connection.ts, the default) or on `node:http2` (`--grpc-server=node-http2`), serving service
 * definitions of `@nereid/protocol` with handlers of the shapes grpc-frontend.ts and
 * infer-stream.ts use (unary `(call, callback)`, bidirectional `(call)`). It replaces grpc-js's
 * server, whose per-call machinery (interceptors, metadata conversion, channelz) cost about half
 * the server CPU of a call; grpc-js stays selectable (`--grpc-server=grpc-js`).
 *
 * Wire behaviour follows gRPC over HTTP/2 (../shared/spec, PROTOCOL-HTTP2) and, where the tests
 * pin it, grpc-js's statuses and wording: length-prefixed messages split or coalesced in any way
 * across DATA frames; request compression `identity|gzip|deflate` (inflated up to the receive
 * limit); `grpc-timeout` deadlines; `grpc-status`/`grpc-message` trailers (trailers-only before
 * any message); keepalive pings, maximum connection age, SETTINGS_MAX_CONCURRENT_STREAMS.
 *
 * Errors: a broken request ends its call with a status; a broken connection is destroyed; neither
 * reaches the caller of `listen` nor stops the server.
 */
import { EventEmitter } from 'node:events';
import type { AddressInfo } from 'node:net';
import { constants, createServer as createNodeServer, type IncomingHttpHeaders } from 'node:http2';
import { gunzip, gunzipSync, inflate, inflateSync } from 'node:zlib';
import { frameGrpcMessage, NereidError } from '@nereid/protocol';
import { createServer as createNereidServer } from './h2/connection.js';

/**
 * What a call uses of its HTTP/2 stream: met by Nereid's own transport (h2/connection.ts,
 * `H2Stream`) and by node:http2's `ServerHttp2Stream`.
 */
export interface GrpcStream extends EventEmitter {
  readonly id?: number | undefined;
  readonly session?: GrpcSession | undefined;
  readonly closed: boolean;
  readonly destroyed: boolean;
  readonly readableEnded: boolean;
  respond(headers: Record<string, string | number | string[] | undefined>, options?: { endStream?: boolean; waitForTrailers?: boolean }): void;
  write(chunk: Buffer): boolean;
  end(): void;
  sendTrailers(headers: Record<string, string | string[]>): void;
  close(code?: number): void;
  destroy(): void;
  pause(): void;
  resume(): void;
}

/** What the server uses of a connection (`H2Session`, or node:http2's `ServerHttp2Session`). */
export interface GrpcSession extends EventEmitter {
  readonly closed: boolean;
  readonly destroyed: boolean;
  goaway(code: number, lastStreamId: number, data: Buffer): void;
  /** `code`: reset open streams and go away with it (node:http2 takes it as its first argument too). */
  destroy(code?: number): void;
  close(): void;
  ping(callback: (err: Error | null) => void): boolean;
}

interface GrpcListener extends EventEmitter {
  listen(port: number, host: string, callback: () => void): unknown;
  address(): AddressInfo | string | null;
  close(callback?: () => void): unknown;
}

/**
 * Which HTTP/2 implementation carries the calls: Nereid's own (h2/connection.ts), which writes
 * each turn's frames in one write, or node:http2's.
 */
export type H2Transport = 'nereid' | 'node';

/** gRPC status codes used here. */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  DEADLINE_EXCEEDED: 4,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

/** One RPC of a service definition (`GRPC_INFERENCE_SERVICE`'s entries have this shape). */
export interface GrpcMethodDefinition {
  path: string;
  requestStream: boolean;
  responseStream: boolean;
  requestDeserialize(bytes: Buffer): unknown;
  responseSerialize(value: never): Buffer;
}

/** Custom metadata: a call's request headers, or what a status sends in its trailers. */
export class GrpcMetadata {
  readonly #values = new Map<string, (string | Buffer)[]>();

  static fromHeaders(headers: IncomingHttpHeaders): GrpcMetadata {
    const m = new GrpcMetadata();
    for (const [key, value] of Object.entries(headers)) {
      if (key.startsWith(':') || value === undefined) continue;
      const values = Array.isArray(value) ? value : key.endsWith('-bin') ? value.split(',') : [value];
      for (const v of values) m.add(key, key.endsWith('-bin') ? Buffer.from(v.trim(), 'base64') : v);
    }
    return m;
  }

  get(key: string): (string | Buffer)[] {
    return this.#values.get(key.toLowerCase()) ?? [];
  }

  add(key: string, value: string | Buffer): void {
    const k = key.toLowerCase();
    const list = this.#values.get(k);
    if (list === undefined) this.#values.set(k, [value]);
    else list.push(value);
  }

  set(key: string, value: string | Buffer): void {
    this.#values.set(key.toLowerCase(), [value]);
  }

  /** The metadata as HTTP/2 headers (`-bin` values base64). */
  toHeaders(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const [k, values] of this.#values) out[k] = values.map((v) => (typeof v === 'string' ? v : v.toString('base64')));
    return out;
  }
}

/** The status a handler ends a call with. */
export interface GrpcStatusObject {
  code: number;
  details: string;
  metadata?: GrpcMetadata | undefined;
}

export type UnaryCallback<Res> = (error: GrpcStatusObject | null, response?: Res) => void;
export type UnaryHandler<Req, Res> = (call: H2UnaryCall<Req>, callback: UnaryCallback<Res>) => void;
export type DuplexHandler<Req, Res> = (call: H2DuplexCall<Req, Res>) => void;

export interface H2ServerOptions {
  /** The HTTP/2 implementation (default 'nereid'). */
  transport?: H2Transport | undefined;
  /** Largest request message, bytes, as received and after decompression. */
  maxReceiveMessageLength: number;
  /** Largest response message, bytes. */
  maxSendMessageLength: number;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** 0: no limit. */
  maxConcurrentStreams: number;
  maxConnectionAgeMs?: number | undefined;
  maxConnectionAgeGraceMs?: number | undefined;
  /** Keepalive pings also on connections without calls; also lets clients ping such connections. */
  keepalivePermitWithoutCalls?: boolean | undefined;
  /** Keepalive pings sent while the server sends no headers or data (0: no limit). Default 2. */
  maxPingsWithoutData?: number | undefined;
  /** The shortest gap between a client's pings while the server sends nothing (ms). Default 300 000. */
  minRecvPingIntervalWithoutDataMs?: number | undefined;
  /** Pings too soon tolerated before GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") (0: no limit). Default 2. */
  maxPingStrikes?: number | undefined;
}

/**
 * What a connection's ping policy counts (gRPC core's keepalive and ping-abuse rules): kept on the
 * session itself, so a call reaches it through its stream at no lookup cost.
 */
interface PingState {
  /** Calls open on the connection. */
  calls: number;
  /** When the client's last ping came (performance.now()); -Infinity: none since the server last sent. */
  lastPingAt: number;
  /** The client's pings that came too soon since the server last sent headers or data. */
  strikes: number;
  /** Keepalive pings the server sent since it last sent headers or data. */
  pingsWithoutData: number;
  /** The newest stream the client opened (a GOAWAY names it as the last one processed). */
  lastStreamId: number;
}

const PING_STATE = Symbol('nereid.grpcPingState');
type PolicedSession = GrpcSession & { [PING_STATE]?: PingState };
/** A client may ping an idle connection (no calls) this often when the server does not permit pings without calls (gRPC core's rule). */
const IDLE_PING_INTERVAL_MS = 2 * 3_600_000;

/**
 * Ends a connection whose client pings too often: GOAWAY(ENHANCE_YOUR_CALM) with "too_many_pings"
 * as its debug data, which gRPC clients read as a request to ping less (they double their
 * keepalive time), then the connection closes once the frame is out.
 */
function tooManyPings(session: GrpcSession, lastStreamId: number): void {
  try {
    session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM, lastStreamId, Buffer.from('too_many_pings'));
  } catch {
    // Already closing.
  }
  // The GOAWAY goes out with the session's next write; destroying it in the same turn would drop it.
  setImmediate(() => session.destroy());
}

/** The server sends headers or data on the stream's connection: pings are fine again. */
function sentOn(stream: GrpcStream): void {
  const state = (stream.session as PolicedSession | undefined)?.[PING_STATE];
  if (state === undefined) return;
  state.lastPingAt = -Infinity;
  state.strikes = 0;
  state.pingsWithoutData = 0;
}

const TIMEOUT_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };
const TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const ACCEPT_ENCODING = 'identity,deflate,gzip';
/** How long after the trailers a client still sending on a finished call is told to stop. */
const RELEASE_DELAY_MS = 200;
/**
 * Compressed messages at least this large are inflated off the event loop (zlib's thread pool):
 * deflate expands at most about 1032 times, so a smaller one yields at most about a megabyte, a
 * millisecond's work; a larger one could hold every other call for tens of milliseconds.
 */
const ASYNC_INFLATE_BYTES = 1024;
/**
 * The receive windows Nereid's transport announces: a stream's (SETTINGS_INITIAL_WINDOW_SIZE) and
 * the connection's. A request of megabytes then arrives without waiting for window updates; a
 * paused bidirectional call holds at most a stream window of its client's messages.
 */
const STREAM_WINDOW_BYTES = 1024 * 1024;
const CONNECTION_WINDOW_BYTES = 16 * 1024 * 1024;
/** setTimeout's largest delay; a longer deadline never fires. */
const MAX_TIMER_MS = 2_147_483_647;

/** `grpc-message`: percent-encoded UTF-8, bytes outside printable ASCII and '%' escaped (PROTOCOL-HTTP2). */
export function encodeGrpcMessage(message: string): string {
  const bytes = Buffer.from(message, 'utf8');
  let out = '';
  for (const b of bytes) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function ignore(): void {}

/**
 * Drops every listener of a closed stream, and with them the call, its request and its response.
 * node:http2 keeps a closed ServerHttp2Stream through young-generation collections until the next full
 * one (its native half goes with it), so whatever its listeners reach is copied at each scavenge
 * and then promoted: at concurrency 16 that was every call of the last second, megabytes copied
 * per scavenge (14-57 ms pauses) and a mark-compact every second or so.
 */
function detachListeners(this: GrpcStream): void {
  this.removeAllListeners();
  this.on('error', ignore);
}

/** Tells a client still sending on a call that is over to stop (RST_STREAM NO_ERROR). */
function releaseRequestSide(stream: GrpcStream): void {
  if (!stream.readableEnded && !stream.closed) stream.close(constants.NGHTTP2_NO_ERROR);
}

class CallError {
  constructor(readonly status: GrpcStatusObject) {}
}

/**
 * What every call has: the HTTP/2 stream, message decoding, the deadline and the status at the
 * end. Emits 'cancelled' once if the call ends before its status was sent (client reset,
 * deadline, broken request or connection), then 'close' once when the call is over.
 */
abstract class H2Call extends EventEmitter {
  readonly metadata: GrpcMetadata;
  protected readonly stream: GrpcStream;
  protected readonly method: GrpcMethodDefinition;
  readonly #options: H2ServerOptions;
  readonly #encoding: string;
  #chunks: Buffer[] = [];
  #buffered = 0;
  /**
   * Messages still being inflated off the event loop and those behind them, delivered in order:
   * settles once all are delivered (or the call failed); undefined when none are.
   */
  #pending: Promise<void> | undefined;
  #headersSent = false;
  #trailers: Record<string, string | string[]> | undefined;
  #deadline: NodeJS.Timeout | undefined;
  /** The status was sent or the stream is gone. */
  protected done = false;
  cancelled = false;

  constructor(stream: GrpcStream, headers: IncomingHttpHeaders, method: GrpcMethodDefinition, options: H2ServerOptions) {
    super();
    this.stream = stream;
    this.method = method;
    this.#options = options;
    this.metadata = GrpcMetadata.fromHeaders(headers);
    const encoding = headers['grpc-encoding'];
    this.#encoding = typeof encoding === 'string' ? encoding : 'identity';
    stream.on('wantTrailers', () => {
      if (this.#trailers === undefined) return;
      stream.sendTrailers(this.#trailers);
      // An RST_STREAM now would overtake the trailers, which nghttp2 has not sent yet. The timer
      // holds the stream alone (not the call, its request or its response) and goes as soon as
      // the stream closes: the client's end of stream usually follows within microseconds, and a
      // timer per call holding the call would keep every call of the last 200 ms alive through
      // each young-generation collection (megabytes copied, then promoted).
      if (!stream.readableEnded) {
        const release = setTimeout(releaseRequestSide, RELEASE_DELAY_MS, stream);
        release.unref();
        stream.once('close', () => clearTimeout(release));
      }
    });
    const pings = (stream.session as PolicedSession | undefined)?.[PING_STATE];
    if (pings !== undefined) {
      pings.calls++;
      if ((stream.id ?? 0) > pings.lastStreamId) pings.lastStreamId = stream.id ?? 0;
    }
    stream.on('close', () => {
      if (pings !== undefined) pings.calls--;
      if (this.#deadline !== undefined) clearTimeout(this.#deadline);
      if (!this.done) {
        this.done = true;
        this.cancel();
      }
      this.emit('close');
    });
    const timeout = headers['grpc-timeout'];
    if (typeof timeout === 'string') {
      const match = TIMEOUT.exec(timeout);
      if (match === null) {
        process.nextTick(() => this.sendStatus({ code: GrpcCode.INTERNAL, details: `Invalid grpc-timeout value "${timeout}"` }));
      } else {
        const ms = Math.ceil(Number(match[1]) * TIMEOUT_UNITS[match[2]!]!);
        if (ms <= MAX_TIMER_MS) {
          this.#deadline = setTimeout(() => {
            if (this.done) return;
            this.sendStatus({ code: GrpcCode.DEADLINE_EXCEEDED, details: 'Deadline exceeded' });
            this.cancel();
          }, ms);
        }
      }
    }
  }

  /** Marks the call cancelled and emits 'cancelled' (once). */
  protected cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.emit('cancelled');
  }

  /**
   * Splits received bytes into messages; each one decoded, or a status ends the call. Chunks are
   * joined only when a prefix or a message spans them (a large message costs one copy).
   */
  protected decode(chunk: Buffer, onMessage: (message: unknown) => void): void {
    this.#chunks.push(chunk);
    this.#buffered += chunk.byteLength;
    try {
      while (!this.done && this.#buffered >= 5) {
        const length = this.#peek(5).readUInt32BE(1);
        if (length > this.#options.maxReceiveMessageLength) {
          throw new CallError({
            code: GrpcCode.RESOURCE_EXHAUSTED,
            details: `Received message larger than max (${length} vs ${this.#options.maxReceiveMessageLength})`,
          });
        }
        if (this.#buffered < 5 + length) break;
        const framed = this.#take(5 + length);
        const bytes = framed.subarray(5);
        const compressed = framed[0] === 1;
        if (this.#pending === undefined && !(compressed && bytes.byteLength >= ASYNC_INFLATE_BYTES)) {
          onMessage(this.#deserialize(compressed ? this.#inflateSync(bytes) : bytes));
        } else {
          this.#decodeLater(compressed ? this.#inflate(bytes) : Promise.resolve(bytes), onMessage);
        }
      }
    } catch (err) {
      if (!(err instanceof CallError)) throw err;
      this.fail(err.status);
    }
  }

  /** Delivers a message once it is inflated and every message before it was delivered. */
  #decodeLater(plain: Promise<Buffer>, onMessage: (message: unknown) => void): void {
    const previous = this.#pending ?? Promise.resolve();
    const delivered: Promise<void> = previous
      .then(() => plain)
      .then((bytes) => {
        if (!this.done) onMessage(this.#deserialize(bytes));
      })
      .catch((err: unknown) => {
        if (!this.done) this.fail(err instanceof CallError ? err.status : { code: GrpcCode.INTERNAL, details: `Error deserializing request: ${(err as Error).message}` });
      })
      .then(() => {
        if (this.#pending === delivered) this.#pending = undefined;
      });
    // A rejection is handled above; this keeps a failed inflation that nothing awaits yet from
    // counting as unhandled.
    plain.catch(() => undefined);
    this.#pending = delivered;
  }

  /** Runs `fn` once every message received so far was delivered: at once when none is pending. */
  protected whenDecoded(fn: () => void): void {
    if (this.#pending === undefined) fn();
    else void this.#pending.then(fn);
  }

  /** The first `n` buffered bytes (joining the first chunks if they are split). */
  #peek(n: number): Buffer {
    if (this.#chunks[0]!.byteLength < n) this.#chunks = [Buffer.concat(this.#chunks)];
    return this.#chunks[0]!;
  }

  /** Removes and returns the first `n` buffered bytes. */
  #take(n: number): Buffer {
    const first = this.#peek(n);
    this.#buffered -= n;
    if (first.byteLength === n) this.#chunks.shift();
    else this.#chunks[0] = first.subarray(n);
    return first.subarray(0, n);
  }

  /** Whether a partial message is left over (the client ended its side inside one). */
  protected get partial(): boolean {
    return this.#buffered > 0;
  }

  #inflateSync(bytes: Buffer): Buffer {
    this.#checkCompressed();
    const max = this.#options.maxReceiveMessageLength;
    try {
      return this.#encoding === 'gzip' ? gunzipSync(bytes, { maxOutputLength: max }) : inflateSync(bytes, { maxOutputLength: max });
    } catch (err) {
      throw this.#inflateError(err);
    }
  }

  /** Inflates on zlib's thread pool; rejects with the call's status. */
  #inflate(bytes: Buffer): Promise<Buffer> {
    try {
      this.#checkCompressed();
    } catch (err) {
      return Promise.reject(err);
    }
    const options = { maxOutputLength: this.#options.maxReceiveMessageLength };
    return new Promise((resolve, reject) => {
      const done = (err: Error | null, out: Buffer) => (err === null ? resolve(out) : reject(this.#inflateError(err)));
      if (this.#encoding === 'gzip') gunzip(bytes, options, done);
      else inflate(bytes, options, done);
    });
  }

  #checkCompressed(): void {
    if (this.#encoding === 'identity') {
      throw new CallError({ code: GrpcCode.INTERNAL, details: 'Error deserializing request: the message is flagged compressed but grpc-encoding is identity' });
    }
  }

  #inflateError(err: unknown): CallError {
    if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
      return new CallError({ code: GrpcCode.RESOURCE_EXHAUSTED, details: `Received message that decompresses to a size larger than ${this.#options.maxReceiveMessageLength}` });
    }
    return new CallError({ code: GrpcCode.INTERNAL, details: 'Failed to decompress message' });
  }

  #deserialize(bytes: Buffer): unknown {
    try {
      return this.method.requestDeserialize(bytes);
    } catch (err) {
      throw new CallError({ code: GrpcCode.INTERNAL, details: `Error deserializing request: ${(err as Error).message}` });
    }
  }

  /** Ends the call with a status because the request was broken or the deadline passed. */
  protected fail(status: GrpcStatusObject): void {
    this.sendStatus(status);
    this.cancel();
  }

  #respond(): void {
    if (this.#headersSent) return;
    this.#headersSent = true;
    sentOn(this.stream);
    this.stream.respond(
      {
        [constants.HTTP2_HEADER_STATUS]: 200,
        [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
        'grpc-accept-encoding': ACCEPT_ENCODING,
      },
      { waitForTrailers: true },
    );
  }

  /**
   * The response is complete while the client may still be sending: RST_STREAM(NO_ERROR) tells it
   * to stop (RFC 9113 §8.1), so that the stream does not stay half-open.
   */
  #releaseRequestSide(): void {
    releaseRequestSide(this.stream);
  }

  /** Serializes and writes one response message; false while the stream's write buffer is full. */
  protected writeMessage(value: unknown): boolean {
    const bytes = (this.method.responseSerialize as (v: unknown) => Buffer)(value);
    if (bytes.byteLength > this.#options.maxSendMessageLength) {
      this.sendStatus({
        code: GrpcCode.RESOURCE_EXHAUSTED,
        details: `Sent message larger than max (${bytes.byteLength} vs. ${this.#options.maxSendMessageLength})`,
      });
      return false;
    }
    if (this.#headersSent) sentOn(this.stream);
    else this.#respond();
    return this.stream.write(frameGrpcMessage(bytes));
  }

  /** Ends the call with `status` (trailers-only when no message was sent); later calls do nothing. */
  sendStatus(status: GrpcStatusObject): void {
    if (this.done) return;
    this.done = true;
    if (this.#deadline !== undefined) clearTimeout(this.#deadline);
    if (this.stream.destroyed || this.stream.closed) return;
    const trailers: Record<string, string | string[]> = {
      ...status.metadata?.toHeaders(),
      'grpc-status': String(status.code),
    };
    if (status.details !== '') trailers['grpc-message'] = encodeGrpcMessage(status.details);
    try {
      if (!this.#headersSent) {
        this.#headersSent = true;
        sentOn(this.stream);
        this.stream.respond(
          {
            [constants.HTTP2_HEADER_STATUS]: 200,
            [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
            'grpc-accept-encoding': ACCEPT_ENCODING,
            ...trailers,
          },
          { endStream: true },
        );
        this.#releaseRequestSide();
        return;
      }
      this.#trailers = trailers;
      this.stream.end();
    } catch {
      this.stream.destroy();
    }
  }
}

/** A unary call: the handler runs once the client has sent its one message and half-closed. */
export class H2UnaryCall<Req> extends H2Call {
  request!: Req;

  /** Reads the request, then runs `handler`. */
  start(handler: UnaryHandler<Req, unknown>): void {
    let messages = 0;
    this.stream.on('data', (chunk: Buffer) =>
      this.decode(chunk, (message) => {
        if (++messages > 1) {
          this.fail({ code: GrpcCode.UNIMPLEMENTED, details: `Received a second request message for unary method ${this.method.path}` });
          return;
        }
        this.request = message as Req;
      }),
    );
    this.stream.on('end', () => this.whenDecoded(() => this.#run(handler, messages)));
  }

  /** Runs the handler once the request message is in (`messages`: how many came). */
  #run(handler: UnaryHandler<Req, unknown>, messages: number): void {
    if (this.done) return;
    if (messages === 0 || this.partial) {
      this.fail({ code: GrpcCode.UNIMPLEMENTED, details: `Received no request message for unary method ${this.method.path}` });
      return;
    }
    try {
      handler(this, (error, response) => {
        if (this.done) return;
        if (error !== null) {
          this.sendStatus(error);
          return;
        }
        try {
          this.writeMessage(response);
        } catch (err) {
          this.sendStatus({ code: GrpcCode.INTERNAL, details: `Error serializing response: ${(err as Error).message}` });
          return;
        }
        this.sendStatus({ code: GrpcCode.OK, details: '' });
      });
    } catch (err) {
      this.sendStatus({ code: GrpcCode.UNKNOWN, details: `Server method handler threw error ${(err as Error).message}` });
    }
  }
}

/**
 * A bidirectional call: 'data' per request message, 'end' when the client half-closes, 'drain'
 * when a full write buffer empties; `emit('error', status)` ends the call with that status.
 * While paused no message is delivered and the stream is not read, so HTTP/2 flow control holds
 * the client's writes.
 */
export class H2DuplexCall<Req, Res> extends H2Call {
  #queue: unknown[] = [];
  #paused = false;
  #ended = false;
  #endEmitted = false;

  constructor(stream: GrpcStream, headers: IncomingHttpHeaders, method: GrpcMethodDefinition, options: H2ServerOptions) {
    super(stream, headers, method, options);
    // The first listener: a handler's `emit('error', status)` ends the call with that status.
    this.on('error', (status: GrpcStatusObject) => this.sendStatus(status));
    stream.on('drain', () => this.emit('drain'));
  }

  /** Starts reading messages (call after the handler attached its listeners). */
  start(): void {
    const onMessage = (message: unknown) => {
      this.#queue.push(message);
      this.#deliver();
    };
    this.stream.on('data', (chunk: Buffer) => this.decode(chunk, onMessage));
    this.stream.on('end', () =>
      this.whenDecoded(() => {
        this.#ended = true;
        this.#deliver();
      }),
    );
  }

  #deliver(): void {
    while (!this.#paused && !this.done && this.#queue.length > 0) this.emit('data', this.#queue.shift() as Req);
    if (this.#ended && !this.#endEmitted && !this.done && this.#queue.length === 0) {
      this.#endEmitted = true;
      if (this.partial) {
        this.fail({ code: GrpcCode.INTERNAL, details: 'Received a partial message at the end of the stream' });
        return;
      }
      this.emit('end');
    }
  }

  /** Writes one response; false once the write buffer is full (wait for 'drain'). */
  write(message: Res): boolean {
    if (this.done) return false;
    return this.writeMessage(message);
  }

  /** Ends the call with OK. */
  end(): void {
    this.sendStatus({ code: GrpcCode.OK, details: '' });
  }

  pause(): void {
    this.#paused = true;
    this.stream.pause();
  }

  resume(): void {
    this.#paused = false;
    this.#deliver();
    if (!this.#paused) this.stream.resume();
  }
}

type Handler = { method: GrpcMethodDefinition; unary?: UnaryHandler<unknown, unknown>; duplex?: DuplexHandler<unknown, unknown> };

/** The gRPC server: `addService`, `listen`, `tryShutdown`, `forceShutdown`. */
export class H2GrpcServer {
  readonly #options: H2ServerOptions;
  readonly #handlers = new Map<string, Handler>();
  readonly #sessions = new Set<GrpcSession>();
  readonly #http2: GrpcListener;

  constructor(options: H2ServerOptions) {
    this.#options = options;
    this.#http2 =
      (options.transport ?? 'nereid') === 'nereid'
        ? createNereidServer({
            maxConcurrentStreams: options.maxConcurrentStreams,
            initialWindowSize: STREAM_WINDOW_BYTES,
            connectionWindowSize: CONNECTION_WINDOW_BYTES,
          })
        : (createNodeServer({
            settings: options.maxConcurrentStreams > 0 ? { maxConcurrentStreams: options.maxConcurrentStreams } : {},
          }) as unknown as GrpcListener);
    this.#http2.on('session', (session: GrpcSession) => this.#onSession(session));
    this.#http2.on('stream', (stream: GrpcStream, headers: IncomingHttpHeaders) => this.#onStream(stream, headers));
    // A broken connection is the client's problem, never the server's.
    this.#http2.on('sessionError', () => undefined);
  }

  /**
   * Adds the handlers of a service: each key of `implementation` names a method of `service`;
   * a method without a handler answers UNIMPLEMENTED.
   */
  addService(service: Record<string, GrpcMethodDefinition>, implementation: Record<string, unknown>): void {
    for (const [name, method] of Object.entries(service)) {
      const fn = implementation[name];
      if (typeof fn !== 'function') continue;
      if (method.requestStream && method.responseStream) this.#handlers.set(method.path, { method, duplex: fn as DuplexHandler<unknown, unknown> });
      else if (!method.requestStream && !method.responseStream) this.#handlers.set(method.path, { method, unary: fn as UnaryHandler<unknown, unknown> });
      else throw new NereidError('INTERNAL', `gRPC method ${method.path}: only unary and bidirectional methods are served`);
    }
  }

  /** Listens; resolves with the bound port (port 0 picks one). */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.#http2.once('error', onError);
      this.#http2.listen(port, host, () => {
        this.#http2.off('error', onError);
        const address = this.#http2.address();
        resolve(typeof address === 'object' && address !== null ? address.port : port);
      });
    });
  }

  /** Stops listening, sends every connection a GOAWAY and calls `done` once they have closed. */
  tryShutdown(done: () => void): void {
    let pending = 1 + this.#sessions.size;
    const one = () => {
      if (--pending === 0) done();
    };
    this.#http2.close(() => one());
    for (const session of this.#sessions) {
      if (session.closed || session.destroyed) {
        one();
        continue;
      }
      session.once('close', one);
      session.close();
    }
  }

  /**
   * Stops listening and closes every connection now. Open calls end with RST_STREAM CANCEL, which
   * clients report as CANCELLED, as after grpc-js's `forceShutdown` (a stream reset with NO_ERROR
   * and no status would read as INTERNAL, "Call ended without gRPC status").
   */
  forceShutdown(): void {
    this.#http2.close();
    // destroy(code): a code passed second is overridden by the first argument's default.
    for (const session of this.#sessions) session.destroy(constants.NGHTTP2_CANCEL);
  }

  #onSession(session: GrpcSession): void {
    this.#sessions.add(session);
    session.on('error', () => undefined);
    const timers: NodeJS.Timeout[] = [];
    session.once('close', () => {
      this.#sessions.delete(session);
      for (const t of timers) clearTimeout(t);
    });
    const { keepaliveTimeMs, keepaliveTimeoutMs, maxConnectionAgeMs, maxConnectionAgeGraceMs } = this.#options;
    const permitWithoutCalls = this.#options.keepalivePermitWithoutCalls ?? false;
    const maxPingsWithoutData = this.#options.maxPingsWithoutData ?? 2;
    const minPingIntervalMs = this.#options.minRecvPingIntervalWithoutDataMs ?? 300_000;
    const maxPingStrikes = this.#options.maxPingStrikes ?? 2;
    const pings: PingState = { calls: 0, lastPingAt: -Infinity, strikes: 0, pingsWithoutData: 0, lastStreamId: 0 };
    (session as PolicedSession)[PING_STATE] = pings;
    // A client's ping while the server sends nothing must keep its distance from the one before
    // (two hours on a connection without calls unless those are permitted); each one that comes
    // sooner is a strike, and past the strikes allowed the connection ends as gRPC core ends it.
    session.on('ping', () => {
      const now = performance.now();
      const interval = !permitWithoutCalls && pings.calls === 0 ? IDLE_PING_INTERVAL_MS : minPingIntervalMs;
      const early = pings.lastPingAt + interval > now;
      pings.lastPingAt = now;
      if (!early) return;
      pings.strikes++;
      if (maxPingStrikes !== 0 && pings.strikes > maxPingStrikes && !session.destroyed) tooManyPings(session, pings.lastStreamId);
    });
    if (keepaliveTimeMs < MAX_TIMER_MS) {
      const keepalive = setInterval(() => {
        if (session.destroyed || session.closed) return;
        // gRPC core's rules: no keepalive ping on a connection without calls unless permitted, and
        // at most maxPingsWithoutData of them while the server sends no headers or data.
        if (!permitWithoutCalls && pings.calls === 0) return;
        if (maxPingsWithoutData !== 0 && pings.pingsWithoutData >= maxPingsWithoutData) return;
        pings.pingsWithoutData++;
        const unanswered = setTimeout(() => session.destroy(), keepaliveTimeoutMs);
        unanswered.unref();
        try {
          session.ping((err) => {
            clearTimeout(unanswered);
            if (err) session.destroy();
          });
        } catch {
          clearTimeout(unanswered);
          session.destroy();
        }
      }, keepaliveTimeMs);
      keepalive.unref();
      timers.push(keepalive);
    }
    if (maxConnectionAgeMs !== undefined && maxConnectionAgeMs < MAX_TIMER_MS) {
      const age = setTimeout(() => {
        if (session.destroyed || session.closed) return;
        session.close();
        if (maxConnectionAgeGraceMs !== undefined && maxConnectionAgeGraceMs < MAX_TIMER_MS) {
          const grace = setTimeout(() => session.destroy(), maxConnectionAgeGraceMs);
          grace.unref();
          timers.push(grace);
        }
      }, maxConnectionAgeMs);
      age.unref();
      timers.push(age);
    }
  }

  #onStream(stream: GrpcStream, headers: IncomingHttpHeaders): void {
    stream.on('error', ignore);
    // Registered first, so it runs first; the other 'close' listeners still run (an emit calls
    // the listeners it started with).
    stream.once('close', detachListeners);
    if (headers[constants.HTTP2_HEADER_METHOD] !== 'POST') {
      stream.respond({ [constants.HTTP2_HEADER_STATUS]: 405, allow: 'POST' }, { endStream: true });
      return;
    }
    const contentType = headers[constants.HTTP2_HEADER_CONTENT_TYPE];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      stream.respond({ [constants.HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
      return;
    }
    const path = String(headers[constants.HTTP2_HEADER_PATH]);
    const trailersOnly = (code: number, details: string) =>
      stream.respond(
        {
          [constants.HTTP2_HEADER_STATUS]: 200,
          [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
          'grpc-accept-encoding': ACCEPT_ENCODING,
          'grpc-status': String(code),
          'grpc-message': encodeGrpcMessage(details),
        },
        { endStream: true },
      );
    const handler = this.#handlers.get(path);
    if (handler === undefined) {
      trailersOnly(GrpcCode.UNIMPLEMENTED, `The server does not implement the method ${path}`);
      return;
    }
    const encoding = headers['grpc-encoding'];
    if (encoding !== undefined && encoding !== 'identity' && encoding !== 'gzip' && encoding !== 'deflate') {
      trailersOnly(GrpcCode.UNIMPLEMENTED, `Received message compressed with unsupported encoding "${String(encoding)}"`);
      return;
    }
    if (handler.unary !== undefined) {
      new H2UnaryCall(stream, headers, handler.method, this.#options).start(handler.unary);
      return;
    }
    const call = new H2DuplexCall(stream, headers, handler.method, this.#options);
    try {
      handler.duplex!(call);
    } catch (err) {
      call.sendStatus({ code: GrpcCode.UNKNOWN, details: `Server method handler threw error ${(err as Error).message}` });
    }
    call.start();
  }
}
