/**
 * Nereid's own HTTP/1.1 server transport (RFC 9112), under the HTTP/REST frontend
 * (`--http-server=nereid`, the default; `--http-server=node` keeps `node:http`).
 *
 * Why: `node:http` spends about 20 µs of server CPU per request on what its C parser hands to
 * JavaScript (a callback per header block, an IncomingMessage stream, a ServerResponse stream,
 * events, header objects built twice). Measured on the benchmarks' VM, a bare server answering
 * fixed bytes on this transport's design served 1.8× the requests of a bare `node:http` server at
 * 16 connections, and 40 µs less latency per request at one (docs/benchmarks.md, http-overhead).
 *
 * What it is: a `net.Server` whose connections parse requests in JavaScript, one at a time per
 * connection (a pipelined request is parsed once the response before it has been written), and
 * answer through small request and response objects with the subset of `node:http`'s interface the
 * frontend uses (`HttpRequest` and `HttpResponse` in ../transport.ts), so that the frontend
 * runs unchanged on either.
 *
 * - Requests: request line (`METHOD target HTTP/1.x`), header fields (token names, values without
 *   control characters; obsolete line folding refused), `Content-Length` (one, decimal, at most
 *   2^53 − 1) or `Transfer-Encoding: chunked` (chunk extensions skipped, trailers read and
 *   dropped), never both (request smuggling); `Expect: 100-continue` answered before the body is
 *   read; HTTP/1.0 keep-alive only when asked for.
 * - Responses: `Content-Length` when the handler gives it, else chunked (HTTP/1.1) or
 *   close-delimited (HTTP/1.0); `Date`, and `Connection: keep-alive` with `Keep-Alive: timeout=N`
 *   or `Connection: close`; no body for HEAD, 204 and 304. A response's head and body leave in one
 *   write; whatever a response writes within one turn of the event loop is one write.
 * - Limits, as `node:http` applies them: the header block (request line and fields) at most
 *   `maxHeaderSize` bytes (431), `headersTimeout` to receive it and `requestTimeout` to receive the
 *   whole request (408), `keepAliveTimeout` for an idle connection; malformed requests get 400
 *   with `Connection: close`. Reading pauses while a request's unread body or the requests queued
 *   behind a response hold more than they should.
 */
import { EventEmitter } from 'node:events';
import { STATUS_CODES } from 'node:http';
import { Server as NetServer, type Socket } from 'node:net';
import type { HttpHeaders } from '../transport.js';

export interface H1ServerOptions {
  /** ms to receive a request's header block (0: no limit). */
  headersTimeout: number;
  /** ms to receive a whole request, body included (0: no limit). */
  requestTimeout: number;
  /** ms an idle keep-alive connection stays open. */
  keepAliveTimeout: number;
  /** Largest header block (request line and header fields), bytes. */
  maxHeaderSize?: number;
  /** How often the timeouts are checked, ms. */
  checkInterval?: number;
}

export type H1Handler = (req: H1Request, res: H1Response) => void;

/** Node's default `--max-http-header-size`. */
export const DEFAULT_MAX_HEADER_SIZE = 16 * 1024;
/** A request's body bytes held unread before the connection stops reading. */
const BODY_HIGH_WATER = 4 * 1024 * 1024;
/** Bytes of later (pipelined) requests held while a response is pending before reading pauses. */
const QUEUED_HIGH_WATER = 64 * 1024;
/** Longest chunk-size line of a chunked body (size and extensions). */
const MAX_CHUNK_LINE = 4096;
/** Writes of a response joined into one buffer below this size; larger ones go as one writev. */
const JOIN_BELOW = 16 * 1024;
/** After a `Connection: close` response, how long the connection drains what the client still sends. */
const LINGER_MS = 5000;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Characters a field value may not hold: controls other than HTAB, and DEL. */
const BAD_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([^\x00-\x20\x7f]+) HTTP\/1\.([01])$/;
const HEX = /^[0-9a-fA-F]{1,13}$/;
/** Fields of which a repeat is dropped, as node:http does; a repeated Content-Length is refused. */
const SINGLE = new Set([
  'age', 'authorization', 'content-type', 'etag', 'expires', 'from', 'host', 'if-modified-since', 'if-unmodified-since',
  'last-modified', 'location', 'max-forwards', 'proxy-authorization', 'referer', 'retry-after', 'server', 'user-agent',
]);

class ParseError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `text` from `from` without leading and trailing spaces and tabs (OWS, RFC 9110 §5.6.3). */
function trimSpace(text: string, from: number): string {
  let a = from;
  let b = text.length;
  while (a < b && (text.charCodeAt(a) === 32 || text.charCodeAt(a) === 9)) a++;
  while (b > a && (text.charCodeAt(b - 1) === 32 || text.charCodeAt(b - 1) === 9)) b--;
  return text.slice(a, b);
}

let dateSecond = -1;
let dateText = '';
/** The `Date` field, formatted once a second. */
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

/**
 * A request: its line and fields, and its body as `data`/`end` events (a paused stream until a
 * `data` listener or `resume()`, as node:http's IncomingMessage). `aborted` and `error` when the
 * connection ends or breaks before the body is complete.
 */
export class H1Request extends EventEmitter {
  readonly method: string;
  readonly url: string;
  readonly httpVersion: string;
  readonly headers: HttpHeaders;
  readonly socket: Socket;
  /** The whole body has arrived (`end` may still be due). */
  complete = false;
  #held: Buffer[] | undefined;
  #heldBytes = 0;
  #flowing = false;
  #scheduled = false;
  #endEmitted = false;
  #failed = false;
  readonly #conn: H1Connection;

  constructor(conn: H1Connection, method: string, url: string, minor: string, headers: HttpHeaders) {
    super();
    this.#conn = conn;
    this.socket = conn.socket;
    this.method = method;
    this.url = url;
    this.httpVersion = minor === '1' ? '1.1' : '1.0';
    this.headers = headers;
  }

  override on(event: string | symbol, listener: (...args: any[]) => void): this {
    super.on(event, listener);
    if (event === 'data') this.resume();
    return this;
  }

  resume(): this {
    if (!this.#flowing) {
      this.#flowing = true;
      this.#schedule();
    }
    return this;
  }

  /** Unread body bytes held. */
  get held(): number {
    return this.#heldBytes;
  }

  /** @internal A piece of the body. */
  push(chunk: Buffer): void {
    if (this.#flowing && !this.#scheduled && this.#held === undefined) {
      this.emit('data', chunk);
      return;
    }
    (this.#held ??= []).push(chunk);
    this.#heldBytes += chunk.byteLength;
  }

  /** @internal The body is complete. */
  end(): void {
    this.complete = true;
    if (this.#flowing) this.#schedule();
  }

  /** @internal The connection ended or broke, or the request was answered, before the body was complete. */
  fail(): void {
    if (this.complete || this.#failed) return;
    this.#failed = true;
    this.#held = undefined;
    this.#heldBytes = 0;
    this.emit('aborted');
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    process.nextTick(() => this.#flow());
  }

  #flow(): void {
    this.#scheduled = false;
    if (this.#failed) return;
    const held = this.#held;
    if (held !== undefined) {
      this.#held = undefined;
      this.#heldBytes = 0;
      for (const chunk of held) this.emit('data', chunk);
      this.#conn.bodyRead();
    }
    if (this.complete && !this.#endEmitted && this.#held === undefined) {
      this.#endEmitted = true;
      this.emit('end');
    }
  }
}

/**
 * A response: `writeHead`/`setHeader`, `write`, `end`, as node:http's ServerResponse; `finish`
 * once its last bytes are handed to the socket, `close` if the connection ends before that.
 */
export class H1Response extends EventEmitter {
  statusCode = 200;
  headersSent = false;
  writableFinished = false;
  destroyed = false;
  readonly #conn: H1Connection;
  readonly #req: H1Request;
  #fields: Map<string, [string, string | number]> | undefined;
  #headText = '';
  /** Declared Content-Length, or -1 (chunked or close-delimited). */
  #length = -1;
  #written = 0;
  #chunked = false;
  #noBody = false;
  #keepAlive: boolean;
  #out: (Buffer | string)[] = [];
  #outBytes = 0;
  #flushScheduled = false;
  #ended = false;

  constructor(conn: H1Connection, req: H1Request, keepAlive: boolean) {
    super();
    this.#conn = conn;
    this.#req = req;
    this.#keepAlive = keepAlive;
  }

  /** @internal Whether the connection stays open after this response. */
  get keepAlive(): boolean {
    return this.#keepAlive;
  }

  setHeader(name: string, value: string | number): this {
    if (this.headersSent) throw new Error(`cannot set header '${name}' after the response head was sent`);
    (this.#fields ??= new Map()).set(name.toLowerCase(), [name, value]);
    return this;
  }

  getHeader(name: string): string | number | undefined {
    return this.#fields?.get(name.toLowerCase())?.[1];
  }

  writeHead(status: number, headers?: Record<string, string | number>): this {
    if (this.headersSent) throw new Error('the response head was already sent');
    this.statusCode = status;
    if (headers !== undefined) for (const name of Object.keys(headers)) this.setHeader(name, headers[name]!);
    this.#buildHead();
    return this;
  }

  /** No-op: every write of one turn already leaves in one write. */
  cork(): void {}

  uncork(): void {}

  write(chunk: Uint8Array | string): boolean {
    if (this.#ended || this.destroyed) return false;
    if (!this.headersSent) this.#buildHead();
    this.#add(chunk);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      process.nextTick(() => {
        this.#flushScheduled = false;
        if (!this.#ended) this.#flush(false);
      });
    }
    return true;
  }

  end(chunk?: Uint8Array | string): this {
    if (this.#ended) return this;
    this.#ended = true;
    if (this.destroyed) return this;
    if (!this.headersSent) {
      if (this.#length < 0 && !this.#fields?.has('transfer-encoding')) {
        // The whole body is known: say its length.
        const n = chunk === undefined ? 0 : typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.byteLength;
        this.setHeader('Content-Length', n);
      }
      this.#buildHead();
    }
    if (chunk !== undefined) this.#add(chunk);
    this.#flush(true);
    return this;
  }

  destroy(): this {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.#conn.destroy();
    return this;
  }

  /** @internal The connection closed. */
  closed(): void {
    if (this.writableFinished) return;
    this.destroyed = true;
    this.emit('close');
  }

  #buildHead(): void {
    this.headersSent = true;
    const status = this.statusCode;
    const req = this.#req;
    this.#noBody = req.method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200);
    let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n`;
    let connection: string | undefined;
    if (this.#fields !== undefined) {
      for (const [key, [name, value]] of this.#fields) {
        if (key === 'content-length') this.#length = Number(value);
        else if (key === 'connection') {
          connection = String(value);
          continue;
        } else if (key === 'transfer-encoding') this.#chunked = /(^|,)\s*chunked\s*$/i.test(String(value));
        head += `${name}: ${value}\r\n`;
      }
    }
    if (connection !== undefined && /(^|,)\s*close\s*(,|$)/i.test(connection)) this.#keepAlive = false;
    if (this.#length < 0 && !this.#chunked && !this.#noBody) {
      if (req.httpVersion === '1.1') {
        this.#chunked = true;
        head += 'Transfer-Encoding: chunked\r\n';
      } else this.#keepAlive = false; // close-delimited
    }
    head += `Date: ${httpDate()}\r\n`;
    head += this.#keepAlive ? `Connection: keep-alive\r\nKeep-Alive: timeout=${this.#conn.keepAliveSeconds}\r\n\r\n` : 'Connection: close\r\n\r\n';
    this.#headText = head;
    this.#outBytes += head.length;
  }

  #add(chunk: Uint8Array | string): void {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (bytes.byteLength === 0 || this.#noBody) return;
    this.#written += bytes.byteLength;
    if (this.#length >= 0 && this.#written > this.#length) {
      // More than the declared length would break the connection's framing.
      this.#conn.destroy();
      return;
    }
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (this.#chunked) {
      this.#out.push(`${buffer.byteLength.toString(16)}\r\n`, buffer, '\r\n');
      this.#outBytes += buffer.byteLength + 12;
    } else {
      this.#out.push(buffer);
      this.#outBytes += buffer.byteLength;
    }
  }

  #flush(last: boolean): void {
    if (this.destroyed) return;
    if (last && this.#chunked) {
      this.#out.push('0\r\n\r\n');
      this.#outBytes += 5;
    }
    const head = this.#headText;
    this.#headText = '';
    const out = this.#out;
    this.#out = [];
    const total = this.#outBytes;
    this.#outBytes = 0;
    const done = last ? () => this.#finished() : undefined;
    if (head === '' && out.length === 0) {
      if (done !== undefined) this.#conn.write(undefined, done);
      return;
    }
    if (total < JOIN_BELOW || out.length === 0) {
      let joined: Buffer;
      if (out.length === 0) joined = Buffer.from(head, 'latin1');
      else {
        joined = Buffer.allocUnsafe(total);
        let at = head.length === 0 ? 0 : joined.write(head, 0, 'latin1');
        for (const piece of out) at += typeof piece === 'string' ? joined.write(piece, at, 'latin1') : piece.copy(joined, at);
        joined = joined.subarray(0, at);
      }
      this.#conn.write(joined, done);
    } else {
      this.#conn.writeMany(head === '' ? out : [head, ...out], done);
    }
    if (last) this.#conn.responseEnded(this);
  }

  #finished(): void {
    if (this.writableFinished) return;
    this.writableFinished = true;
    this.emit('finish');
  }
}

type State = 'head' | 'body' | 'wait' | 'closed';

/** One client connection: parses its requests one at a time and writes their responses. */
class H1Connection {
  readonly socket: Socket;
  readonly #server: H1Server;
  #state: State = 'head';
  /** Unparsed bytes. */
  #buf: Buffer | undefined;
  /** Where the search for the end of the header block resumes. */
  #scanFrom = 0;
  #req: H1Request | undefined;
  #res: H1Response | undefined;
  /** Body framing of the request being read: bytes left ('length'), or a chunked body's state. */
  #bodyMode: 'length' | 'chunked' = 'length';
  #remaining = 0;
  #chunkState: 'size' | 'data' | 'data-crlf' | 'trailers' = 'size';
  #trailerBytes = 0;
  /** The request's body is read and dropped (its response came first). */
  #dumping = false;
  /** performance.now() when the current request's first byte came (0: none yet), and when idle began. */
  headStart = 0;
  idleSince: number;
  #paused = false;
  /** Inside #process. */
  #processing = false;

  constructor(server: H1Server, socket: Socket) {
    this.#server = server;
    this.socket = socket;
    this.idleSince = performance.now();
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', () => this.destroy());
    socket.on('close', () => this.#onClose());
    socket.on('end', () => {
      // The client ended its side: as node:http does, its request is cancelled (a response in
      // progress ends with the connection) and the connection closes once what was written is out.
      this.#state = 'closed';
      this.#buf = undefined;
      this.#req?.fail();
      socket.end();
      setTimeout(() => this.destroy(), LINGER_MS).unref();
    });
  }

  get keepAliveSeconds(): number {
    return Math.max(1, Math.round(this.#server.options.keepAliveTimeout / 1000));
  }

  get state(): State {
    return this.#state;
  }

  /** The request in flight is being received (its head or its body). */
  get receiving(): boolean {
    return (this.#state === 'head' && this.headStart !== 0) || (this.#state === 'body' && !this.#dumping);
  }

  write(data: Buffer | undefined, done?: () => void): void {
    if (this.socket.destroyed || this.socket.writableEnded) return;
    if (data === undefined) {
      if (done !== undefined) this.socket.write(Buffer.alloc(0), () => done());
      return;
    }
    this.socket.write(data, done === undefined ? undefined : () => done());
  }

  writeMany(pieces: (Buffer | string)[], done?: () => void): void {
    const socket = this.socket;
    if (socket.destroyed || socket.writableEnded) return;
    socket.cork();
    const last = pieces.length - 1;
    for (let i = 0; i < last; i++) {
      const p = pieces[i]!;
      if (typeof p === 'string') socket.write(p, 'latin1');
      else socket.write(p);
    }
    const p = pieces[last]!;
    const cb = done === undefined ? undefined : () => done();
    if (typeof p === 'string') socket.write(p, 'latin1', cb);
    else socket.write(p, cb);
    socket.uncork();
  }

  destroy(): void {
    if (!this.socket.destroyed) this.socket.destroy();
  }

  /** A request's body has been read out of its held chunks: reading may resume. */
  bodyRead(): void {
    this.#updatePause();
  }

  /** `res` has written its last bytes: the connection goes on with the next request, or closes. */
  responseEnded(res: H1Response): void {
    if (res !== this.#res || this.#state === 'closed') return;
    this.#res = undefined;
    if (!res.keepAlive) {
      this.#state = 'closed';
      this.#req?.fail();
      this.#req = undefined;
      this.#buf = undefined;
      // Drain what the client still sends (a body refused before it was read), so that closing
      // does not reset the connection under the response; then close.
      this.socket.end();
      setTimeout(() => this.destroy(), LINGER_MS).unref();
      this.#updatePause();
      return;
    }
    if (this.#state === 'body') {
      // Answered before its body was read: the rest of the body is read and dropped.
      this.#dumping = true;
      this.#req?.fail();
      this.#updatePause();
      return;
    }
    this.#nextRequest();
  }

  #nextRequest(): void {
    this.#req = undefined;
    this.#dumping = false;
    this.#state = 'head';
    this.headStart = 0;
    this.idleSince = performance.now();
    this.#updatePause();
    // Within #process (a handler that answered at once) its loop goes on to the next request;
    // otherwise the next request starts on the next tick, not inside the response's `end()`.
    if (this.#buf !== undefined && !this.#processing) process.nextTick(() => this.#process());
  }

  /** Refuses the request being received: `status` with `Connection: close`, unless its response has begun. */
  fail(status: number): void {
    if (this.#state === 'closed') return;
    const res = this.#res;
    this.#state = 'closed';
    this.#buf = undefined;
    if (res === undefined || !res.headersSent) {
      const text = STATUS_CODES[status] ?? 'Bad Request';
      this.socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`, 'latin1');
      setTimeout(() => this.destroy(), LINGER_MS).unref();
    } else this.destroy();
    this.#req?.fail();
  }

  #onClose(): void {
    this.#state = 'closed';
    this.#buf = undefined;
    this.#server.forget(this);
    this.#req?.fail();
    this.#res?.closed();
  }

  #onData(chunk: Buffer): void {
    if (this.#state === 'closed') return;
    if (this.#state === 'head' && this.headStart === 0) this.headStart = performance.now();
    this.#buf = this.#buf === undefined ? chunk : Buffer.concat([this.#buf, chunk]);
    this.#process();
  }

  #process(): void {
    this.#processing = true;
    try {
      while (this.#buf !== undefined) {
        if (this.#state === 'head') {
          if (!this.#parseHead()) break;
        } else if (this.#state === 'body') {
          if (!this.#parseBody()) break;
        } else break;
      }
    } catch (err) {
      if (err instanceof ParseError) this.fail(err.status);
      else {
        // A handler that threw: its connection ends with a 500, the server goes on.
        this.fail(500);
        this.#server.emit('handlerError', err);
      }
      return;
    } finally {
      this.#processing = false;
    }
    this.#updatePause();
  }

  #updatePause(): void {
    const held = this.#state === 'closed' ? 0 : (this.#req?.held ?? 0);
    const queued = this.#state === 'wait' ? (this.#buf?.byteLength ?? 0) : 0;
    const pause = held > BODY_HIGH_WATER || queued > QUEUED_HIGH_WATER;
    if (pause === this.#paused) return;
    this.#paused = pause;
    if (pause) this.socket.pause();
    else this.socket.resume();
  }

  /** Parses a header block and starts its request; false while it is incomplete. */
  #parseHead(): boolean {
    let buf = this.#buf!;
    // Empty lines before a request line are skipped (RFC 9112 §2.2).
    let start = 0;
    while (start + 1 < buf.length && buf[start] === 13 && buf[start + 1] === 10) start += 2;
    if (start > 0) {
      buf = buf.subarray(start);
      this.#buf = buf.length === 0 ? undefined : buf;
      this.#scanFrom = 0;
      if (this.#buf === undefined) return false;
    }
    const max = this.#server.maxHeaderSize;
    const end = buf.indexOf('\r\n\r\n', this.#scanFrom, 'latin1');
    if (end < 0) {
      if (buf.length > max) throw new ParseError(431, 'header block too large');
      this.#scanFrom = Math.max(0, buf.length - 3);
      return false;
    }
    if (end + 4 > max) throw new ParseError(431, 'header block too large');
    this.#scanFrom = 0;
    const lines = buf.toString('latin1', 0, end).split('\r\n');
    const rest = end + 4 === buf.length ? undefined : buf.subarray(end + 4);
    const line = REQUEST_LINE.exec(lines[0]!);
    if (line === null) throw new ParseError(400, 'malformed request line');
    const headers: HttpHeaders = {};
    let contentLength = -1;
    let transferEncoding: string | undefined;
    let connection = '';
    let expect: string | undefined;
    for (let i = 1; i < lines.length; i++) {
      const field = lines[i]!;
      const colon = field.indexOf(':');
      if (colon <= 0) throw new ParseError(400, 'malformed header field');
      const rawName = field.slice(0, colon);
      if (!TOKEN.test(rawName)) throw new ParseError(400, 'malformed header field name');
      const name = rawName.toLowerCase();
      const value = trimSpace(field, colon + 1);
      if (BAD_VALUE.test(value)) throw new ParseError(400, 'malformed header field value');
      switch (name) {
        case 'content-length':
          if (contentLength >= 0 || !/^[0-9]{1,16}$/.test(value)) throw new ParseError(400, 'invalid Content-Length');
          contentLength = Number(value);
          if (!Number.isSafeInteger(contentLength)) throw new ParseError(400, 'invalid Content-Length');
          break;
        case 'transfer-encoding':
          transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
          break;
        case 'connection':
          connection = connection === '' ? value : `${connection}, ${value}`;
          break;
        case 'expect':
          expect = value;
          break;
      }
      const prior = headers[name];
      if (prior === undefined) headers[name] = name === 'set-cookie' ? [value] : value;
      else if (name === 'set-cookie') (prior as string[]).push(value);
      else if (!SINGLE.has(name)) headers[name] = `${prior as string}, ${value}`;
    }
    const minor = line[3]!;
    if (transferEncoding !== undefined) {
      // Only `chunked` alone frames a request body; with Content-Length too it could be read two ways.
      if (contentLength >= 0 || minor === '0' || transferEncoding.toLowerCase() !== 'chunked') {
        throw new ParseError(400, 'unsupported Transfer-Encoding');
      }
    }
    const conn = connection.toLowerCase();
    const keepAlive = minor === '1' ? !/(^|,)\s*close\s*(,|$)/.test(conn) : /(^|,)\s*keep-alive\s*(,|$)/.test(conn);
    this.#buf = rest;
    const req = new H1Request(this, line[1]!, line[2]!, minor, headers);
    const res = new H1Response(this, req, keepAlive);
    this.#req = req;
    this.#res = res;
    if (transferEncoding !== undefined) {
      this.#bodyMode = 'chunked';
      this.#chunkState = 'size';
      this.#trailerBytes = 0;
      this.#state = 'body';
    } else {
      this.#bodyMode = 'length';
      this.#remaining = Math.max(0, contentLength);
      if (this.#remaining === 0) {
        req.end();
        this.#state = 'wait';
      } else this.#state = 'body';
    }
    if (expect !== undefined && minor === '1' && expect.toLowerCase() === '100-continue' && this.#state === 'body') {
      this.socket.write('HTTP/1.1 100 Continue\r\n\r\n', 'latin1');
    }
    this.#server.handler(req, res);
    return true;
  }

  /** Reads body bytes from the buffer; true once the body is complete, false when it needs more bytes. */
  #parseBody(): boolean {
    let buf = this.#buf!;
    const req = this.#req!;
    if (this.#bodyMode === 'length') {
      const n = Math.min(this.#remaining, buf.length);
      const piece = n === buf.length ? buf : buf.subarray(0, n);
      this.#buf = n === buf.length ? undefined : buf.subarray(n);
      this.#remaining -= n;
      if (!this.#dumping) req.push(piece);
      if (this.#remaining > 0) return false;
      this.#bodyDone();
      return true;
    }
    // Chunked (RFC 9112 §7.1).
    for (;;) {
      if (this.#chunkState === 'size') {
        const eol = buf.indexOf('\r\n', 0, 'latin1');
        if (eol < 0) {
          if (buf.length > MAX_CHUNK_LINE) throw new ParseError(400, 'chunk size line too long');
          break;
        }
        const text = buf.toString('latin1', 0, eol);
        const semi = text.indexOf(';');
        const size = trimSpace(semi < 0 ? text : text.slice(0, semi), 0);
        if (!HEX.test(size) || BAD_VALUE.test(text)) throw new ParseError(400, 'invalid chunk size');
        this.#remaining = parseInt(size, 16);
        buf = buf.subarray(eol + 2);
        this.#chunkState = this.#remaining === 0 ? 'trailers' : 'data';
      } else if (this.#chunkState === 'data') {
        if (buf.length === 0) break;
        const n = Math.min(this.#remaining, buf.length);
        const piece = buf.subarray(0, n);
        buf = buf.subarray(n);
        this.#remaining -= n;
        if (!this.#dumping) req.push(piece);
        if (this.#remaining === 0) this.#chunkState = 'data-crlf';
      } else if (this.#chunkState === 'data-crlf') {
        if (buf.length < 2) break;
        if (buf[0] !== 13 || buf[1] !== 10) throw new ParseError(400, 'malformed chunk');
        buf = buf.subarray(2);
        this.#chunkState = 'size';
      } else {
        // Trailer fields, read and dropped, up to an empty line.
        const eol = buf.indexOf('\r\n', 0, 'latin1');
        if (eol < 0) {
          if (this.#trailerBytes + buf.length > this.#server.maxHeaderSize) throw new ParseError(431, 'trailers too large');
          break;
        }
        this.#trailerBytes += eol + 2;
        if (this.#trailerBytes > this.#server.maxHeaderSize) throw new ParseError(431, 'trailers too large');
        const field = buf.toString('latin1', 0, eol);
        buf = buf.subarray(eol + 2);
        if (eol === 0) {
          this.#buf = buf.length === 0 ? undefined : buf;
          this.#bodyDone();
          return true;
        }
        if (field.indexOf(':') <= 0 || BAD_VALUE.test(field)) throw new ParseError(400, 'malformed trailer field');
      }
    }
    this.#buf = buf.length === 0 ? undefined : buf;
    return false;
  }

  #bodyDone(): void {
    if (this.#dumping) {
      this.#nextRequest();
      return;
    }
    this.#req!.end();
    this.#state = 'wait';
  }
}

/**
 * The HTTP/1.1 server: a `net.Server` whose connections speak HTTP/1.1 to `handler`. A handler
 * that throws ends its connection with a 500 and is reported as `handlerError`.
 */
export class H1Server extends NetServer {
  readonly options: H1ServerOptions;
  readonly handler: H1Handler;
  readonly maxHeaderSize: number;
  readonly #connections = new Set<H1Connection>();
  #sweep: NodeJS.Timeout | undefined;

  constructor(options: H1ServerOptions, handler: H1Handler) {
    // Half-open: the connection, not net, decides what a client's end means (H1Connection's
    // 'end' handler: the request is cancelled, and the connection closes once its writes are out).
    super({ noDelay: true, allowHalfOpen: true });
    this.options = options;
    this.handler = handler;
    this.maxHeaderSize = options.maxHeaderSize ?? DEFAULT_MAX_HEADER_SIZE;
    this.on('connection', (socket: Socket) => {
      const conn = new H1Connection(this, socket);
      this.#connections.add(conn);
      this.#startSweep();
    });
  }

  /** @internal */
  forget(conn: H1Connection): void {
    this.#connections.delete(conn);
  }

  /** Destroys every connection. */
  closeAllConnections(): void {
    for (const conn of [...this.#connections]) conn.destroy();
  }

  override close(callback?: (err?: Error) => void): this {
    if (this.#sweep !== undefined) clearInterval(this.#sweep);
    this.#sweep = undefined;
    return super.close(callback);
  }

  /** Connections open now. */
  get connectionCount(): number {
    return this.#connections.size;
  }

  #startSweep(): void {
    if (this.#sweep !== undefined) return;
    const { headersTimeout, requestTimeout, keepAliveTimeout } = this.options;
    const shortest = Math.min(...[headersTimeout, requestTimeout, keepAliveTimeout].filter((t) => t > 0), 4000);
    const interval = this.options.checkInterval ?? Math.min(1000, Math.max(10, Math.floor(shortest / 4)));
    this.#sweep = setInterval(() => this.#check(), interval);
    this.#sweep.unref();
  }

  /** Enforces the timeouts. */
  #check(): void {
    if (this.#connections.size === 0) {
      // Started again by the next connection.
      clearInterval(this.#sweep);
      this.#sweep = undefined;
      return;
    }
    const now = performance.now();
    const { headersTimeout, requestTimeout, keepAliveTimeout } = this.options;
    for (const conn of this.#connections) {
      if (conn.state === 'head' && conn.headStart === 0) {
        if (keepAliveTimeout > 0 && now - conn.idleSince > keepAliveTimeout) conn.destroy();
        continue;
      }
      if (!conn.receiving) continue;
      const held = now - conn.headStart;
      if ((conn.state === 'head' && headersTimeout > 0 && held > headersTimeout) || (requestTimeout > 0 && held > requestTimeout)) conn.fail(408);
    }
  }
}
