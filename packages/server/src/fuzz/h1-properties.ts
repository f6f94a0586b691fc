/**
 * Test support: a fuzz property of Nereid's HTTP/1.1 transport (frontends/http/h1): a connection
 * fed any bytes.
 *
 * The claim: whatever a client sends, split at any byte — well-formed requests, pipelined ones,
 * chunked bodies, garbage, hostile header lines — the connection never throws; what it writes is
 * a sequence of whole responses (an interim 100 Continue, or a status line, fields, and a body
 * framed by its Content-Length or by chunks), one per request its handler was given and in the
 * same order, a refusal (400, 408, 431) only as the last; nothing follows a response that said
 * `Connection: close`, and nothing is written once the connection has ended.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import fc from 'fast-check';
import { H1Server, type H1Request, type H1Response } from '../frontends/http/h1/server.js';
import { property, type FuzzProperty } from './check.js';

/** What a connection uses of its socket, recording what it writes; bytes come in by `emit('data')`. */
class RecordingSocket extends EventEmitter {
  readonly written: Buffer[] = [];
  destroyed = false;
  writableEnded = false;
  writtenAfterEnd = false;
  setNoDelay(): this {
    return this;
  }
  pause(): this {
    return this;
  }
  resume(): this {
    return this;
  }
  cork(): void {}
  uncork(): void {}
  write(chunk: Buffer | string, encoding?: unknown): boolean {
    if (this.writableEnded || this.destroyed) this.writtenAfterEnd = true;
    this.written.push(typeof chunk === 'string' ? Buffer.from(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8') : Buffer.from(chunk));
    return true;
  }
  end(chunk?: Buffer | string, encoding?: unknown): this {
    if (chunk !== undefined) this.write(chunk, encoding);
    this.writableEnded = true;
    return this;
  }
  destroy(): this {
    this.destroyed = true;
    return this;
  }
}

type Answer = 'length' | 'stream' | 'close' | 'none';

/** Requests as clients send them, and pieces no client should. */
const piece = fc.oneof(
  fc.record({ method: fc.constantFrom('GET', 'POST', 'HEAD', 'PUT'), path: fc.constantFrom('/', '/v2/models/m/infer', '/a?b=c', '*'), minor: fc.constantFrom('1', '1', '0') }).map(
    ({ method, path, minor }) => `${method} ${path} HTTP/1.${minor}\r\nHost: x\r\n\r\n`,
  ),
  fc.string({ maxLength: 40 }).map((body) => `POST /p HTTP/1.1\r\nContent-Length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n${body}`),
  fc.array(fc.string({ minLength: 1, maxLength: 20 }), { maxLength: 3 }).map(
    (chunks) => `POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n${chunks.map((c) => `${Buffer.byteLength(c, 'latin1').toString(16)}\r\n${c}\r\n`).join('')}0\r\n\r\n`,
  ),
  fc.constantFrom(
    'POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok',
    'GET / HTTP/1.1\r\nConnection: close\r\n\r\n',
    'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n',
    'POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n',
    'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n',
    'GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n',
    'GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx',
    '\r\n',
    '\r\n\r\n',
    'X-Header: value\r\n',
    'GET',
  ),
  fc.string({ maxLength: 30 }),
  fc.uint8Array({ maxLength: 30 }).map((b) => Buffer.from(b).toString('latin1')),
);

/** One server for every case: its connections are made on fake sockets. */
let server: H1Server | undefined;
let current: { answer: Answer; methods: string[] } = { answer: 'length', methods: [] };

function connection(): RecordingSocket {
  server ??= new H1Server({ headersTimeout: 0, requestTimeout: 0, keepAliveTimeout: 0 }, (req: H1Request, res: H1Response) => {
    current.methods.push(req.method);
    switch (current.answer) {
      case 'length':
        res.end(`answer to ${req.url}`);
        break;
      case 'stream':
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.write('part one;');
        res.end('part two');
        break;
      case 'close':
        res.setHeader('Connection', 'close');
        res.end('bye');
        break;
      case 'none':
        // Not answered in this case: nothing may be written for it, nor after it.
        break;
    }
  });
  const socket = new RecordingSocket();
  server.emit('connection', socket as unknown as Socket);
  return socket;
}

/** Reads the responses `out` holds; returns their statuses. */
function readResponses(out: string, methods: readonly string[]): number[] {
  const statuses: number[] = [];
  let at = 0;
  let closed = false;
  while (at < out.length) {
    assert.ok(!closed, `bytes after a response that said Connection: close: ${JSON.stringify(out.slice(at, at + 80))}`);
    if (out.startsWith('HTTP/1.1 100 Continue\r\n\r\n', at)) {
      at += 25;
      continue;
    }
    const end = out.indexOf('\r\n\r\n', at);
    assert.ok(end > at, `a whole response head: ${JSON.stringify(out.slice(at, at + 120))}`);
    const [line, ...fields] = out.slice(at, end).split('\r\n');
    const status = /^HTTP\/1\.1 (\d{3}) [^\r\n]+$/.exec(line!);
    assert.ok(status !== null, `a status line: ${JSON.stringify(line)}`);
    const headers = new Map(fields.map((f) => [f.slice(0, f.indexOf(':')).toLowerCase(), f.slice(f.indexOf(':') + 2)]));
    at = end + 4;
    const head = methods[statuses.length] === 'HEAD' && Number(status[1]) < 400;
    if (head) {
      // A HEAD response has no body, whatever its framing fields say.
    } else if (headers.get('transfer-encoding') === 'chunked') {
      for (;;) {
        const eol = out.indexOf('\r\n', at);
        assert.ok(eol > at, 'a whole chunk size line');
        const size = parseInt(out.slice(at, eol), 16);
        assert.ok(Number.isInteger(size) && size >= 0, `a chunk size: ${out.slice(at, eol)}`);
        at = eol + 2 + size;
        assert.equal(out.slice(at, at + 2), '\r\n', 'a chunk ends with CRLF');
        at += 2;
        if (size === 0) break;
      }
    } else if (!headers.has('content-length')) {
      // Close-delimited (an HTTP/1.0 client's streamed response): the body is the rest.
      assert.equal(headers.get('connection'), 'close', 'a body without length or chunks ends the connection');
      at = out.length;
    } else {
      const length = Number(headers.get('content-length'));
      assert.ok(Number.isSafeInteger(length), `a Content-Length: ${headers.get('content-length')}`);
      at += length;
      assert.ok(at <= out.length, 'a whole body');
    }
    statuses.push(Number(status[1]));
    if (headers.get('connection') === 'close') closed = true;
  }
  return statuses;
}

const requestsHostile = property(
  'h1-requests-hostile',
  'an HTTP/1.1 connection fed any bytes, split anywhere, never throws; it writes whole responses, one per request handled and in order, a refusal only last, nothing after Connection: close or once ended',
  fc.record({ pieces: fc.array(piece, { minLength: 1, maxLength: 8 }), split: fc.integer({ min: 1, max: 64 }), answer: fc.constantFrom<Answer>('length', 'length', 'stream', 'close', 'none') }),
  ({ pieces, split, answer }) => {
    current = { answer, methods: [] };
    const socket = connection();
    const bytes = Buffer.from(pieces.join(''), 'latin1');
    for (let at = 0; at < bytes.length && !socket.destroyed; at += split) socket.emit('data', bytes.subarray(at, at + split));
    assert.ok(!socket.writtenAfterEnd, 'a write after the connection ended');
    const statuses = readResponses(Buffer.concat(socket.written).toString('latin1'), current.methods);
    const handled = current.methods.length;
    const refusals = statuses.filter((s) => s === 400 || s === 408 || s === 431).length;
    assert.ok(refusals <= 1, `${refusals} refusals`);
    if (refusals === 1) assert.ok([400, 408, 431].includes(statuses.at(-1)!), 'the refusal is the last response');
    const answered = statuses.length - refusals;
    // Every handled request is answered in order, except that an unanswered one holds the rest.
    if (answer === 'none') assert.equal(answered, 0);
    else assert.ok(answered === handled, `${handled} requests handled, ${answered} answered`);
    socket.emit('close');
  },
);

export const H1_PROPERTIES: readonly FuzzProperty[] = [requestsHostile];
