/**
 * Nereid's HTTP/2 server transport (RFC 9113, cleartext with prior knowledge) for the gRPC server
 * (h2-server.ts): frames, HPACK (hpack.ts), flow control and stream states, behind the small part
 * of node:http2's server API that the gRPC server uses (`createServer`, sessions with `ping`,
 * `goaway`, `close`, `destroy`, streams with `respond`, `write`, `end`, `sendTrailers`, `close`,
 * `pause`, `resume` and their events).
 *
 * Why not node:http2: it sends what a call writes in one turn of the event loop in two writes a
 * turn apart (a response's trailers wait for the data callback, then for the next scheduled
 * write), so a unary answer reaches the client as two packets, each waking it. Here every frame a
 * turn produces (a response's HEADERS, DATA and trailers; many calls' answers) leaves in one write
 * at the end of the turn, and a stream is plain JavaScript state with nothing native behind it.
 *
 * Errors follow RFC 9113 §5.4: a malformed frame or a broken header block ends the connection
 * (GOAWAY with the code, then close); a malformed request or a stream-level violation resets only
 * its stream (RST_STREAM). No input makes this throw to the caller.
 */
import { EventEmitter } from 'node:events';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { HpackDecoder, HpackEncoder, HpackError } from './hpack.js';

/** HTTP/2 error codes (RFC 9113 §7). */
export const H2Error = {
  NO_ERROR: 0,
  PROTOCOL_ERROR: 1,
  INTERNAL_ERROR: 2,
  FLOW_CONTROL_ERROR: 3,
  STREAM_CLOSED: 5,
  FRAME_SIZE_ERROR: 6,
  REFUSED_STREAM: 7,
  CANCEL: 8,
  COMPRESSION_ERROR: 9,
  ENHANCE_YOUR_CALM: 11,
} as const;

const DATA = 0;
const HEADERS = 1;
const PRIORITY = 2;
const RST_STREAM = 3;
const SETTINGS = 4;
const PUSH_PROMISE = 5;
const PING = 6;
const GOAWAY = 7;
const WINDOW_UPDATE = 8;
const CONTINUATION = 9;

const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY_FLAG = 0x20;

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 0x7fffffff;
/** The largest frame we accept: SETTINGS_MAX_FRAME_SIZE's initial value, which we keep. */
const MAX_FRAME = 16_384;
/** A header block (HEADERS and its CONTINUATIONs) larger than this ends the connection. */
const MAX_HEADER_BLOCK = 256 * 1024;
/** Bytes a stream buffers for the peer before `write` answers false (then 'drain'). */
const HIGH_WATER_MARK = 64 * 1024;
/** Bytes in the socket's buffer past which DATA waits for its 'drain'. */
const SOCKET_HIGH_WATER_MARK = 1024 * 1024;
/**
 * Bytes waiting in the socket past which the connection stops reading: a client that sends and
 * does not read (a flood of PINGs, SETTINGS or resets, each of which we answer) cannot make the
 * server buffer more.
 */
const READ_PAUSE_BYTES = 4 * 1024 * 1024;
/**
 * The client's stream resets allowed (a token bucket: so many at once, refilled at a rate per
 * second), node:http2's (nghttp2's) defaults: past them the connection ends with GOAWAY
 * ENHANCE_YOUR_CALM, which stops a client that opens and resets streams without end ("rapid
 * reset", CVE-2023-44487) from making the server start work it never finishes.
 */
const RESET_BURST = 1000;
const RESET_RATE_PER_SECOND = 33;
/** A turn's frames up to this size are joined into one buffer; larger ones go out as one writev. */
const COPY_BELOW_BYTES = 64 * 1024;
/** How long a closing connection waits for its peer to close before the socket is destroyed. */
const CLOSE_TIMEOUT_MS = 1000;

export type H2Headers = Record<string, string | string[] | undefined>;
export type OutgoingHeaders = Record<string, string | number | readonly string[] | undefined>;

export interface H2ServerSettings {
  /** SETTINGS_MAX_CONCURRENT_STREAMS announced and enforced; 0: none announced. */
  maxConcurrentStreams?: number | undefined;
  /** Our receive window per stream (SETTINGS_INITIAL_WINDOW_SIZE). */
  initialWindowSize?: number | undefined;
  /** Our receive window for the connection. */
  connectionWindowSize?: number | undefined;
  /** Largest decoded header list of a request (names, values and 32 per field); larger ones are reset. */
  maxHeaderListSize?: number | undefined;
}

function frameHeader(length: number, type: number, flags: number, streamId: number): Buffer {
  const h = Buffer.allocUnsafe(9);
  h[0] = length >>> 16;
  h[1] = (length >>> 8) & 0xff;
  h[2] = length & 0xff;
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(streamId, 5);
  return h;
}

/** A connection error: GOAWAY with `code`, then the connection closes. */
class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** Connection-specific header fields, malformed in HTTP/2 (RFC 9113 §8.2.2). */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
const REQUEST_PSEUDO = new Set([':method', ':scheme', ':path', ':authority']);

/**
 * One request stream. Events: 'data' (Buffer), 'end' (the client half-closed), 'wantTrailers'
 * (after `end()` on a response opened with `waitForTrailers`), 'drain', 'close' (once, when the
 * stream is over: both sides ended, or reset, or the connection went), 'aborted' (the client
 * reset it). 'error' is never emitted.
 */
export class H2Stream extends EventEmitter {
  readonly id: number;
  readonly session: H2Session;
  /** Both sides ended, or it was reset or its connection went. */
  closed = false;
  destroyed = false;
  /** The client ended its side and every byte it sent was delivered. */
  readableEnded = false;
  /** The RST_STREAM code that ended it, when one did. */
  rstCode: number | undefined;
  /** The response headers are out. */
  headersSent = false;

  /** Our receive window, and bytes delivered since it was last widened. */
  recvWindow: number;
  #consumed = 0;
  /** Data received while paused, delivered on `resume`. */
  #held: Buffer[] | undefined;
  #paused = false;
  /** The client's END_STREAM came (delivered as 'end' once nothing is held). */
  #remoteEnded = false;
  /** We sent END_STREAM. */
  #localEnded = false;

  /** The peer's window for this stream. */
  sendWindow: number;
  /** DATA waiting for window: chunks, their bytes, and whether END_STREAM or trailers follow. */
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #ending = false;
  /** Trailer fields (encoded when they are framed: HPACK blocks must go out in the order they were encoded). */
  #trailers: [string, string][] | undefined;
  /** A reset asked for while data was still queued: sent after it. */
  #closeAfter: number | undefined;
  #waitForTrailers = false;
  #needDrain = false;

  constructor(session: H2Session, id: number, recvWindow: number, sendWindow: number) {
    super();
    this.session = session;
    this.id = id;
    this.recvWindow = recvWindow;
    this.sendWindow = sendWindow;
  }

  /** Sends the response headers; `endStream` ends the stream with them (a trailers-only answer). */
  respond(headers: OutgoingHeaders, options: { endStream?: boolean; waitForTrailers?: boolean } = {}): void {
    if (this.closed || this.headersSent) return;
    this.headersSent = true;
    const end = options.endStream === true;
    this.#waitForTrailers = options.waitForTrailers === true;
    this.session.sendHeaders(this.id, fieldsOf(headers), end);
    if (end) this.#endLocal();
  }

  /** Queues response bytes; false once the queue is past its high-water mark (then 'drain'). */
  write(chunk: Buffer): boolean {
    if (this.closed || this.#ending || this.#localEnded) return false;
    if (chunk.byteLength > 0) {
      this.#pending.push(chunk);
      this.#pendingBytes += chunk.byteLength;
      this.session.flushStream(this);
    }
    if (this.#pendingBytes >= HIGH_WATER_MARK) {
      this.#needDrain = true;
      return false;
    }
    return true;
  }

  /** Ends the response body: trailers follow ('wantTrailers') when the response asked for them. */
  end(): void {
    if (this.closed || this.#ending || this.#localEnded) return;
    this.#ending = true;
    if (this.#waitForTrailers) {
      this.emit('wantTrailers');
      // Nobody sent trailers: end the stream with an empty DATA frame, as node:http2 does.
      if (this.#trailers === undefined && !this.closed) this.#trailers = [];
    }
    this.session.flushStream(this);
  }

  /** The trailers, sent once the data queued before them is out. */
  sendTrailers(headers: OutgoingHeaders): void {
    if (this.closed || this.#trailers !== undefined) return;
    this.#trailers = fieldsOf(headers);
  }

  /** Resets the stream with `code` (RST_STREAM after whatever was queued before it). */
  close(code: number = H2Error.NO_ERROR): void {
    if (this.closed) return;
    if (code === H2Error.NO_ERROR && this.#localEnded === false && this.#ending) {
      // The response's end is still queued behind flow control: the reset follows it.
      this.#closeAfter = code;
      return;
    }
    this.session.sendRst(this.id, code);
    this.onClosed(code);
  }

  /** Resets the stream (INTERNAL_ERROR). */
  destroy(): void {
    this.close(H2Error.INTERNAL_ERROR);
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    // A listener may pause it again: the rest stays held.
    while (!this.#paused && this.#held !== undefined) {
      const chunk = this.#held.shift()!;
      if (this.#held.length === 0) this.#held = undefined;
      this.#deliver(chunk);
    }
    if (!this.#paused && this.#held === undefined && this.#remoteEnded && !this.readableEnded) this.#emitEnd();
  }

  /** DATA from the client (after the connection checked its windows). */
  onData(chunk: Buffer, flowBytes: number, endStream: boolean): void {
    this.recvWindow -= flowBytes;
    // Padding counts against the window but is never delivered: credit it at once.
    this.#credit(flowBytes - chunk.byteLength);
    if (chunk.byteLength > 0) {
      if (this.#paused) (this.#held ??= []).push(chunk);
      else this.#deliver(chunk);
    }
    if (endStream) this.onRemoteEnd();
  }

  onRemoteEnd(): void {
    this.#remoteEnded = true;
    if (!this.#paused && this.#held === undefined) this.#emitEnd();
    if (this.#localEnded) this.onClosed(undefined);
  }

  get remoteEnded(): boolean {
    return this.#remoteEnded;
  }

  #deliver(chunk: Buffer): void {
    if (this.closed) {
      this.session.consumed(chunk.byteLength);
      return;
    }
    this.emit('data', chunk);
    this.#credit(chunk.byteLength);
  }

  /** Bytes delivered (or dropped padding): the connection's window, and the stream's while it reads. */
  #credit(bytes: number): void {
    if (bytes <= 0) return;
    this.session.consumed(bytes);
    if (this.#remoteEnded || this.closed) return;
    this.#consumed += bytes;
    if (this.#consumed >= this.session.streamWindow / 2) {
      this.session.sendWindowUpdate(this.id, this.#consumed);
      this.recvWindow += this.#consumed;
      this.#consumed = 0;
    }
  }

  #emitEnd(): void {
    if (this.readableEnded || this.closed) return;
    this.readableEnded = true;
    this.emit('end');
  }

  #endLocal(): void {
    this.#localEnded = true;
    if (this.#remoteEnded) this.onClosed(undefined);
  }

  /**
   * Frames what the windows allow (`window`: the connection's send window); returns the bytes
   * framed. Trailers or END_STREAM follow the last of the data.
   */
  flush(out: Buffer[], window: number, maxFrame: number): number {
    let sent = 0;
    while (this.#pendingBytes > 0) {
      const allowed = Math.min(this.sendWindow, window - sent, maxFrame);
      if (allowed <= 0) break;
      const head = this.#pending[0]!;
      const n = Math.min(allowed, head.byteLength);
      const chunk = n === head.byteLength ? head : head.subarray(0, n);
      if (n === head.byteLength) this.#pending.shift();
      else this.#pending[0] = head.subarray(n);
      this.#pendingBytes -= n;
      this.sendWindow -= n;
      sent += n;
      const last = this.#pendingBytes === 0 && this.#ending && this.#trailers === undefined && !this.#waitForTrailers;
      out.push(frameHeader(n, DATA, last ? END_STREAM : 0, this.id), chunk);
      if (last) this.#endLocal();
    }
    if (this.#pendingBytes === 0 && this.#ending && !this.#localEnded) {
      if (this.#trailers !== undefined && this.#trailers.length > 0) {
        this.session.pushHeaderBlock(out, this.id, this.session.encodeHeaders(this.#trailers), true);
        this.#endLocal();
      } else if (this.#trailers !== undefined || !this.#waitForTrailers) {
        out.push(frameHeader(0, DATA, END_STREAM, this.id));
        this.#endLocal();
      }
      if (this.#localEnded && this.#closeAfter !== undefined && !this.closed) {
        const body = Buffer.allocUnsafe(4);
        body.writeUInt32BE(this.#closeAfter, 0);
        out.push(frameHeader(4, RST_STREAM, 0, this.id), body);
        this.onClosed(this.#closeAfter);
      }
    }
    if (this.#needDrain && this.#pendingBytes < HIGH_WATER_MARK && !this.closed) {
      this.#needDrain = false;
      process.nextTick(() => this.emit('drain'));
    }
    return sent;
  }

  get blocked(): boolean {
    return this.#pendingBytes > 0 || (this.#ending && !this.#localEnded && !this.closed);
  }

  /** The stream is over (`code`: the RST_STREAM code, when reset). */
  onClosed(code: number | undefined): void {
    if (this.closed) return;
    this.closed = true;
    // As node:http2's: a stream that is over is destroyed too.
    this.destroyed = true;
    this.rstCode = code;
    this.#pending = [];
    this.#pendingBytes = 0;
    // What it held, never to be read, goes back to the connection's window.
    if (this.#held !== undefined) this.session.consumed(this.#held.reduce((n, b) => n + b.byteLength, 0));
    this.#held = undefined;
    this.session.forget(this);
    process.nextTick(() => this.emit('close'));
  }
}

/** Header fields of an outgoing header object: pseudo-header fields first, values as strings. */
function fieldsOf(headers: OutgoingHeaders): [string, string][] {
  const pseudo: [string, string][] = [];
  const regular: [string, string][] = [];
  for (const key of Object.keys(headers)) {
    const value = headers[key];
    if (value === undefined) continue;
    const name = key.toLowerCase();
    const list = name.startsWith(':') ? pseudo : regular;
    if (Array.isArray(value)) for (const v of value) list.push([name, String(v)]);
    else list.push([name, String(value)]);
  }
  return pseudo.length === 0 ? regular : [...pseudo, ...regular];
}

/**
 * One client connection. Events: 'stream' (stream, headers), 'ping' (payload) for each PING the
 * client sends, 'goaway' (code, lastStreamId, debug data), 'error' (never for protocol errors),
 * 'close' once the connection is gone.
 */
export class H2Session extends EventEmitter {
  readonly socket: Socket;
  closed = false;
  destroyed = false;
  /** Our receive window per stream. */
  readonly streamWindow: number;

  readonly #settings: H2ServerSettings;
  readonly #streams = new Map<number, H2Stream>();
  readonly #decoder = new HpackDecoder();
  readonly #encoder = new HpackEncoder();
  /** Bytes read and not yet parsed. */
  #buffer: Buffer | undefined;
  #prefaceDone = false;
  #settingsSeen = false;
  /** The stream whose header block continues in CONTINUATION frames, and the block so far. */
  #continuing: { id: number; flags: number; chunks: Buffer[]; bytes: number } | undefined;
  #lastStreamId = 0;
  /** The last stream id a GOAWAY of ours allows (new streams above it are refused). */
  #goawaySent = false;

  /** The peer's settings that matter for sending. */
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrame = MAX_FRAME;
  /** The connection's send window and our receive window with its consumed bytes. */
  #sendWindow = DEFAULT_WINDOW;
  #recvWindow: number;
  #recvConsumed = 0;
  readonly #connectionWindow: number;
  /** Streams with DATA or an end waiting for window or for the socket. */
  readonly #blocked = new Set<H2Stream>();

  /** Frames of this turn, written together at its end. */
  #out: Buffer[] = [];
  #flushScheduled = false;
  #socketBlocked = false;
  /** Our PINGs awaiting their ACK: payload key → callbacks, oldest first. */
  readonly #pings: { key: string; at: number; callback: (err: Error | null, durationMs: number, payload: Buffer) => void }[] = [];
  #pingCounter = 0;
  #closeTimer: NodeJS.Timeout | undefined;
  /** Reading stopped until the socket drains (READ_PAUSE_BYTES). */
  #readPaused = false;
  /** The reset token bucket: tokens left, and when it was last refilled (performance.now()). */
  #resetTokens = RESET_BURST;
  #resetRefilledAt = performance.now();

  constructor(socket: Socket, settings: H2ServerSettings) {
    super();
    this.socket = socket;
    this.#settings = settings;
    this.streamWindow = Math.min(MAX_WINDOW, Math.max(DEFAULT_WINDOW, settings.initialWindowSize ?? DEFAULT_WINDOW));
    this.#connectionWindow = Math.min(MAX_WINDOW, Math.max(DEFAULT_WINDOW, settings.connectionWindowSize ?? DEFAULT_WINDOW));
    this.#recvWindow = this.#connectionWindow;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('drain', () => {
      this.#socketBlocked = false;
      if (this.#readPaused) {
        this.#readPaused = false;
        socket.resume();
      }
      this.#flushBlocked();
    });
    socket.on('error', () => this.#gone());
    socket.on('close', () => this.#gone());
    socket.on('end', () => this.#gone());

    // Our SETTINGS, then the connection window.
    const entries: [number, number][] = [];
    if ((settings.maxConcurrentStreams ?? 0) > 0) entries.push([0x3, settings.maxConcurrentStreams!]);
    if (this.streamWindow !== DEFAULT_WINDOW) entries.push([0x4, this.streamWindow]);
    const body = Buffer.allocUnsafe(entries.length * 6);
    entries.forEach(([id, value], i) => {
      body.writeUInt16BE(id, i * 6);
      body.writeUInt32BE(value, i * 6 + 2);
    });
    this.#queue(frameHeader(body.byteLength, SETTINGS, 0, 0), body);
    if (this.#connectionWindow > DEFAULT_WINDOW) this.sendWindowUpdate(0, this.#connectionWindow - DEFAULT_WINDOW);
  }

  // ---- the API the gRPC server uses ------------------------------------------------------

  /** Sends a PING; `callback` gets its round-trip time, or an error if the connection goes first. */
  ping(callback: (err: Error | null, durationMs: number, payload: Buffer) => void): boolean {
    if (this.closed) {
      process.nextTick(() => callback(new Error('the HTTP/2 session is closed'), 0, Buffer.alloc(8)));
      return false;
    }
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(++this.#pingCounter >>> 0, 4);
    payload.writeUInt32BE(0x6e657265, 0);
    this.#pings.push({ key: payload.toString('latin1'), at: performance.now(), callback });
    this.#queue(frameHeader(8, PING, 0, 0), payload);
    return true;
  }

  /** Sends a GOAWAY: streams above `lastStreamId` (default: the newest) are refused from now on. */
  goaway(code: number = H2Error.NO_ERROR, lastStreamId: number = this.#lastStreamId, data?: Buffer): void {
    if (this.destroyed) return;
    this.#goawaySent = true;
    const debug = data ?? Buffer.alloc(0);
    const body = Buffer.allocUnsafe(8 + debug.byteLength);
    body.writeUInt32BE(lastStreamId & 0x7fffffff, 0);
    body.writeUInt32BE(code, 4);
    debug.copy(body, 8);
    this.#queue(frameHeader(body.byteLength, GOAWAY, 0, 0), body);
  }

  /** Closes gracefully: GOAWAY, then the connection ends once its streams are done. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.goaway(H2Error.NO_ERROR);
    this.#maybeEnd();
  }

  /**
   * Closes now. With an error `code`, open streams are reset with it first (RST_STREAM, then
   * GOAWAY with the code): a client reports its open calls with the code (CANCEL: cancelled).
   */
  destroy(code?: number): void {
    if (this.destroyed) return;
    const c = typeof code === 'number' ? code : H2Error.NO_ERROR;
    if (c !== H2Error.NO_ERROR) for (const stream of this.#streams.values()) this.sendRst(stream.id, c);
    this.goaway(c);
    this.closed = true;
    this.destroyed = true;
    this.#flush();
    for (const stream of [...this.#streams.values()]) stream.onClosed(c);
    this.socket.end();
    this.#armCloseTimer();
  }

  // ---- used by streams --------------------------------------------------------------------

  encodeHeaders(fields: [string, string][]): Buffer {
    return this.#encoder.encode(fields);
  }

  sendHeaders(id: number, fields: [string, string][], endStream: boolean): void {
    const out: Buffer[] = [];
    this.pushHeaderBlock(out, id, this.#encoder.encode(fields), endStream);
    this.#queue(...out);
  }

  /** HEADERS (and CONTINUATIONs when the block is larger than the peer's frame size). */
  pushHeaderBlock(out: Buffer[], id: number, block: Buffer, endStream: boolean): void {
    const max = this.#peerMaxFrame;
    const flags = endStream ? END_STREAM : 0;
    if (block.byteLength <= max) {
      out.push(frameHeader(block.byteLength, HEADERS, flags | END_HEADERS, id), block);
      return;
    }
    out.push(frameHeader(max, HEADERS, flags, id), block.subarray(0, max));
    for (let at = max; at < block.byteLength; at += max) {
      const part = block.subarray(at, Math.min(block.byteLength, at + max));
      out.push(frameHeader(part.byteLength, CONTINUATION, at + max >= block.byteLength ? END_HEADERS : 0, id), part);
    }
  }

  sendRst(id: number, code: number): void {
    const body = Buffer.allocUnsafe(4);
    body.writeUInt32BE(code, 0);
    this.#queue(frameHeader(4, RST_STREAM, 0, id), body);
  }

  sendWindowUpdate(id: number, increment: number): void {
    const body = Buffer.allocUnsafe(4);
    body.writeUInt32BE(increment, 0);
    this.#queue(frameHeader(4, WINDOW_UPDATE, 0, id), body);
  }

  /** Frames what a stream has queued, as far as the windows allow. */
  flushStream(stream: H2Stream): void {
    if (this.destroyed) return;
    if (this.#socketBlocked) {
      this.#blocked.add(stream);
      return;
    }
    const out: Buffer[] = [];
    this.#sendWindow -= stream.flush(out, this.#sendWindow, this.#peerMaxFrame);
    if (out.length > 0) this.#queue(...out);
    if (stream.blocked) this.#blocked.add(stream);
    else this.#blocked.delete(stream);
  }

  /** Received bytes delivered or dropped: the connection's window widens again past half of it. */
  consumed(bytes: number): void {
    this.#recvConsumed += bytes;
    if (this.#recvConsumed >= this.#connectionWindow / 2 && !this.destroyed) {
      this.sendWindowUpdate(0, this.#recvConsumed);
      this.#recvWindow += this.#recvConsumed;
      this.#recvConsumed = 0;
    }
  }

  forget(stream: H2Stream): void {
    this.#streams.delete(stream.id);
    this.#blocked.delete(stream);
    if (this.closed) this.#maybeEnd();
  }

  // ---- output ------------------------------------------------------------------------------

  #queue(...buffers: Buffer[]): void {
    if (this.destroyed) return;
    for (const b of buffers) this.#out.push(b);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      process.nextTick(() => this.#flush());
    }
  }

  /** Writes the frames queued this turn now instead of at its end (the fuzz properties). */
  flushNow(): void {
    this.#flush();
  }

  #flush(): void {
    this.#flushScheduled = false;
    const out = this.#out;
    if (out.length === 0 || this.socket.destroyed) {
      this.#out = [];
      return;
    }
    this.#out = [];
    let bytes = 0;
    for (const b of out) bytes += b.byteLength;
    let ok: boolean;
    if (out.length === 1 || bytes <= COPY_BELOW_BYTES) {
      ok = this.socket.write(out.length === 1 ? out[0]! : Buffer.concat(out, bytes));
    } else {
      // Large payloads are not copied: one writev of all the pieces.
      this.socket.cork();
      for (const b of out) this.socket.write(b);
      this.socket.uncork();
      ok = this.socket.writableLength <= this.socket.writableHighWaterMark;
    }
    if (!ok && this.socket.writableLength > SOCKET_HIGH_WATER_MARK) this.#socketBlocked = true;
    if (!ok && this.socket.writableLength > READ_PAUSE_BYTES && !this.#readPaused) {
      this.#readPaused = true;
      this.socket.pause();
    }
  }

  #flushBlocked(): void {
    for (const stream of [...this.#blocked]) {
      if (this.#sendWindow <= 0 || this.#socketBlocked) break;
      this.flushStream(stream);
    }
  }

  // ---- input -------------------------------------------------------------------------------

  /** Bytes from the client, in any split (the socket's 'data'; the fuzz properties call it directly). */
  receive(chunk: Buffer): void {
    if (this.destroyed) return;
    let buf = this.#buffer === undefined ? chunk : Buffer.concat([this.#buffer, chunk]);
    this.#buffer = undefined;
    try {
      if (!this.#prefaceDone) {
        const n = Math.min(buf.byteLength, PREFACE.byteLength);
        if (!buf.subarray(0, n).equals(PREFACE.subarray(0, n))) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'the client did not send the HTTP/2 connection preface');
        if (buf.byteLength < PREFACE.byteLength) {
          this.#buffer = buf;
          return;
        }
        buf = buf.subarray(PREFACE.byteLength);
        this.#prefaceDone = true;
      }
      let at = 0;
      while (buf.byteLength - at >= 9 && !this.destroyed) {
        const length = (buf[at]! << 16) | (buf[at + 1]! << 8) | buf[at + 2]!;
        if (length > MAX_FRAME) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, `a frame of ${length} bytes exceeds SETTINGS_MAX_FRAME_SIZE`);
        if (buf.byteLength - at < 9 + length) break;
        const type = buf[at + 3]!;
        const flags = buf[at + 4]!;
        const id = buf.readUInt32BE(at + 5) & 0x7fffffff;
        const payload = buf.subarray(at + 9, at + 9 + length);
        at += 9 + length;
        this.#frame(type, flags, id, payload);
      }
      if (at < buf.byteLength && !this.destroyed) this.#buffer = buf.subarray(at);
    } catch (err) {
      if (err instanceof ConnectionError) this.#connectionError(err.code, err.message);
      else if (err instanceof HpackError) this.#connectionError(H2Error.COMPRESSION_ERROR, err.message);
      else {
        // A listener threw: the connection cannot continue in a known state.
        this.#connectionError(H2Error.INTERNAL_ERROR, 'internal error');
        this.emit('error', err);
      }
    }
  }

  #frame(type: number, flags: number, id: number, payload: Buffer): void {
    if (!this.#settingsSeen) {
      if (type !== SETTINGS || (flags & ACK) !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'the connection preface must be followed by SETTINGS');
      this.#settingsSeen = true;
    }
    if (this.#continuing !== undefined && type !== CONTINUATION) {
      throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'a header block was interrupted by another frame');
    }
    switch (type) {
      case DATA:
        this.#onDataFrame(flags, id, payload);
        return;
      case HEADERS:
        this.#onHeaders(flags, id, payload);
        return;
      case CONTINUATION:
        this.#onContinuation(flags, id, payload);
        return;
      case PRIORITY:
        if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (payload.byteLength !== 5) this.#streamError(id, H2Error.FRAME_SIZE_ERROR);
        return;
      case RST_STREAM:
        this.#onRst(id, payload);
        return;
      case SETTINGS:
        this.#onSettings(flags, id, payload);
        return;
      case PUSH_PROMISE:
        throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'a client may not send PUSH_PROMISE');
      case PING:
        this.#onPing(flags, id, payload);
        return;
      case GOAWAY:
        if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (payload.byteLength < 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'GOAWAY shorter than 8 bytes');
        this.emit('goaway', payload.readUInt32BE(4), payload.readUInt32BE(0) & 0x7fffffff, payload.subarray(8));
        this.close();
        return;
      case WINDOW_UPDATE:
        this.#onWindowUpdate(id, payload);
        return;
      default:
        // Unknown frame types are ignored (RFC 9113 §4.1).
        return;
    }
  }

  /** The payload of a DATA or HEADERS frame without its padding. */
  #unpad(flags: number, payload: Buffer): Buffer {
    if ((flags & PADDED) === 0) return payload;
    if (payload.byteLength < 1) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'a padded frame without its pad length');
    const pad = payload[0]!;
    if (pad >= payload.byteLength) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'padding as long as the frame');
    return payload.subarray(1, payload.byteLength - pad);
  }

  #onDataFrame(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'DATA on stream 0');
    if (id > this.#lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, `DATA on idle stream ${id}`);
    const flowBytes = payload.byteLength;
    if (flowBytes > this.#recvWindow) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
    this.#recvWindow -= flowBytes;
    // The connection's window is given back as streams deliver what they received: paused
    // streams hold at most the connection window of a client's data, whatever their number.
    const data = this.#unpad(flags, payload);
    const stream = this.#streams.get(id);
    if (stream === undefined) {
      // A stream we reset or answered: its client's frames in flight are dropped.
      this.consumed(flowBytes);
      return;
    }
    if (stream.remoteEnded) {
      this.consumed(flowBytes);
      this.#streamError(id, H2Error.STREAM_CLOSED);
      return;
    }
    if (flowBytes > stream.recvWindow) {
      this.consumed(flowBytes);
      this.#streamError(id, H2Error.FLOW_CONTROL_ERROR);
      return;
    }
    stream.onData(data, flowBytes, (flags & END_STREAM) !== 0);
  }

  #onHeaders(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'HEADERS on stream 0');
    let block = this.#unpad(flags, payload);
    if (flags & PRIORITY_FLAG) {
      if (block.byteLength < 5) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'HEADERS too short for its priority');
      block = block.subarray(5);
    }
    if (flags & END_HEADERS) {
      this.#headerBlock(id, flags, block);
      return;
    }
    this.#continuing = { id, flags, chunks: [Buffer.from(block)], bytes: block.byteLength };
  }

  #onContinuation(flags: number, id: number, payload: Buffer): void {
    const c = this.#continuing;
    if (c === undefined || c.id !== id) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'CONTINUATION without the HEADERS it continues');
    c.bytes += payload.byteLength;
    if (c.bytes > MAX_HEADER_BLOCK) throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'a header block too large');
    c.chunks.push(Buffer.from(payload));
    if (flags & END_HEADERS) {
      this.#continuing = undefined;
      this.#headerBlock(id, c.flags, Buffer.concat(c.chunks));
    }
  }

  /** A complete header block: a new request, or trailers of an open one. */
  #headerBlock(id: number, flags: number, block: Buffer): void {
    const fields = this.#decoder.decode(block);
    const endStream = (flags & END_STREAM) !== 0;
    const existing = this.#streams.get(id);
    if (existing !== undefined || id <= this.#lastStreamId) {
      // Trailers: they must end the stream and carry no pseudo-header field.
      if (existing === undefined) return;
      if (existing.remoteEnded) {
        this.#streamError(id, H2Error.STREAM_CLOSED);
        return;
      }
      if (!endStream || fields.some(([name]) => name.startsWith(':'))) {
        this.#streamError(id, H2Error.PROTOCOL_ERROR);
        return;
      }
      existing.onRemoteEnd();
      return;
    }
    if ((id & 1) === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, `a client opened even stream ${id}`);
    this.#lastStreamId = id;
    if (this.#goawaySent || this.closed) {
      this.sendRst(id, H2Error.REFUSED_STREAM);
      return;
    }
    const max = this.#settings.maxConcurrentStreams ?? 0;
    if (max > 0 && this.#streams.size >= max) {
      this.sendRst(id, H2Error.REFUSED_STREAM);
      return;
    }
    const headers = requestHeaders(fields, this.#settings.maxHeaderListSize ?? 64 * 1024);
    if (typeof headers === 'number') {
      this.sendRst(id, headers);
      return;
    }
    const stream = new H2Stream(this, id, this.streamWindow, this.#peerInitialWindow);
    this.#streams.set(id, stream);
    this.emit('stream', stream, headers);
    if (endStream) stream.onRemoteEnd();
  }

  #onRst(id: number, payload: Buffer): void {
    if (id === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
    if (payload.byteLength !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
    if (id > this.#lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, `RST_STREAM on idle stream ${id}`);
    const now = performance.now();
    this.#resetTokens = Math.min(RESET_BURST, this.#resetTokens + ((now - this.#resetRefilledAt) / 1000) * RESET_RATE_PER_SECOND);
    this.#resetRefilledAt = now;
    if (this.#resetTokens < 1) throw new ConnectionError(H2Error.ENHANCE_YOUR_CALM, 'too many stream resets');
    this.#resetTokens -= 1;
    const stream = this.#streams.get(id);
    if (stream === undefined) return;
    stream.emit('aborted');
    stream.onClosed(payload.readUInt32BE(0));
  }

  #onSettings(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & ACK) {
      if (payload.byteLength !== 0) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'a SETTINGS ACK with a payload');
      return;
    }
    if (payload.byteLength % 6 !== 0) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'SETTINGS not a multiple of 6 bytes');
    for (let at = 0; at < payload.byteLength; at += 6) {
      const key = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      switch (key) {
        case 0x1:
          this.#encoder.setLimit(value);
          break;
        case 0x2:
          if (value > 1) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH other than 0 or 1');
          break;
        case 0x4: {
          if (value > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1');
          const delta = value - this.#peerInitialWindow;
          this.#peerInitialWindow = value;
          for (const stream of this.#streams.values()) {
            stream.sendWindow += delta;
            if (stream.sendWindow > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'a stream window above 2^31-1');
          }
          break;
        }
        case 0x5:
          if (value < MAX_FRAME || value > 16_777_215) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE out of range');
          this.#peerMaxFrame = value;
          break;
        default:
          break;
      }
    }
    this.#queue(frameHeader(0, SETTINGS, ACK, 0));
    this.#flushBlocked();
  }

  #onPing(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'PING on a stream');
    if (payload.byteLength !== 8) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'PING not 8 bytes');
    if (flags & ACK) {
      const key = payload.toString('latin1');
      const i = this.#pings.findIndex((p) => p.key === key);
      if (i < 0) return;
      const [p] = this.#pings.splice(i, 1);
      p!.callback(null, performance.now() - p!.at, Buffer.from(payload));
      return;
    }
    this.#queue(frameHeader(8, PING, ACK, 0), Buffer.from(payload));
    this.emit('ping', Buffer.from(payload));
  }

  #onWindowUpdate(id: number, payload: Buffer): void {
    if (payload.byteLength !== 4) throw new ConnectionError(H2Error.FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw new ConnectionError(H2Error.PROTOCOL_ERROR, 'a WINDOW_UPDATE of 0');
      this.#sendWindow += increment;
      if (this.#sendWindow > MAX_WINDOW) throw new ConnectionError(H2Error.FLOW_CONTROL_ERROR, 'the connection window above 2^31-1');
      this.#flushBlocked();
      return;
    }
    if (id > this.#lastStreamId) throw new ConnectionError(H2Error.PROTOCOL_ERROR, `WINDOW_UPDATE on idle stream ${id}`);
    const stream = this.#streams.get(id);
    if (stream === undefined) return;
    if (increment === 0) {
      this.#streamError(id, H2Error.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.#streamError(id, H2Error.FLOW_CONTROL_ERROR);
      return;
    }
    this.flushStream(stream);
  }

  // ---- ends --------------------------------------------------------------------------------

  #streamError(id: number, code: number): void {
    const stream = this.#streams.get(id);
    this.sendRst(id, code);
    stream?.onClosed(code);
  }

  #connectionError(code: number, message: string): void {
    if (this.destroyed) return;
    this.goaway(code, this.#lastStreamId, Buffer.from(message));
    this.destroy();
  }

  /** A closing connection ends once its last stream is done. */
  #maybeEnd(): void {
    if (this.#streams.size > 0 || this.destroyed) return;
    this.destroyed = true;
    this.#flush();
    this.socket.end();
    this.#armCloseTimer();
  }

  #armCloseTimer(): void {
    if (this.#closeTimer !== undefined) return;
    this.#closeTimer = setTimeout(() => this.socket.destroy(), CLOSE_TIMEOUT_MS);
    this.#closeTimer.unref();
  }

  /** The socket is gone (or going): every stream closes, pings fail, then 'close' once. */
  #gone(): void {
    this.closed = true;
    this.destroyed = true;
    for (const stream of [...this.#streams.values()]) stream.onClosed(H2Error.CANCEL);
    for (const p of this.#pings.splice(0)) p.callback(new Error('the HTTP/2 session closed'), 0, Buffer.alloc(8));
    if (!this.socket.destroyed) {
      // 'close' follows, and comes back here.
      this.socket.destroy();
      return;
    }
    if (this.#closeEmitted) return;
    this.#closeEmitted = true;
    if (this.#closeTimer !== undefined) clearTimeout(this.#closeTimer);
    this.emit('close');
  }

  #closeEmitted = false;
}

/**
 * The header object of a request, or the RST_STREAM code of a malformed one (RFC 9113 §8.3):
 * names in lower case, pseudo-header fields first and each once, the three a request needs,
 * no connection-specific field, `te` only "trailers". Repeated fields join with ", ".
 */
function requestHeaders(fields: [string, string][], maxListSize: number): H2Headers | number {
  const headers: H2Headers = Object.create(null) as H2Headers;
  let regular = false;
  let size = 0;
  for (const [name, value] of fields) {
    size += name.length + value.length + 32;
    if (name.startsWith(':')) {
      if (regular || !REQUEST_PSEUDO.has(name) || headers[name] !== undefined) return H2Error.PROTOCOL_ERROR;
      headers[name] = value;
      continue;
    }
    regular = true;
    if (name !== name.toLowerCase() || CONNECTION_HEADERS.has(name) || (name === 'te' && value !== 'trailers')) return H2Error.PROTOCOL_ERROR;
    const previous = headers[name];
    headers[name] = previous === undefined ? value : `${previous as string}, ${value}`;
  }
  if (size > maxListSize) return H2Error.ENHANCE_YOUR_CALM;
  if (headers[':method'] === undefined || headers[':scheme'] === undefined || headers[':path'] === undefined || headers[':path'] === '') {
    return H2Error.PROTOCOL_ERROR;
  }
  return headers;
}

/**
 * The listening side: `createServer(settings)` like node:http2's. Events: 'session' (each new
 * connection), 'stream' (stream, headers) for every session, 'sessionError' (never: protocol
 * errors end their connection quietly), 'error' (listening failed).
 */
export class H2Server extends EventEmitter {
  readonly #net: NetServer;
  readonly #sessions = new Set<H2Session>();

  constructor(settings: H2ServerSettings = {}) {
    super();
    this.#net = createNetServer({ noDelay: true }, (socket) => {
      const session = new H2Session(socket, settings);
      this.#sessions.add(session);
      session.once('close', () => this.#sessions.delete(session));
      session.on('error', () => undefined);
      session.on('stream', (stream: H2Stream, headers: H2Headers) => this.emit('stream', stream, headers));
      this.emit('session', session);
    });
    this.#net.on('error', (err) => this.emit('error', err));
  }

  listen(port: number, host: string, callback: () => void): this {
    this.#net.listen(port, host, callback);
    return this;
  }

  address(): AddressInfo | string | null {
    return this.#net.address();
  }

  /** Stops accepting connections; `callback` once every connection has closed. */
  close(callback?: (err?: Error) => void): this {
    this.#net.close(callback);
    return this;
  }
}

export function createServer(settings: H2ServerSettings = {}): H2Server {
  return new H2Server(settings);
}
