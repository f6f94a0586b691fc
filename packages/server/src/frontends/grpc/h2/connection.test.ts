import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { createServer, H2Error, type H2Headers, type H2Server, type H2Session, type H2Stream } from './connection.js';
import { HpackDecoder, HpackEncoder } from './hpack.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

interface Frame {
  type: number;
  flags: number;
  id: number;
  payload: Buffer;
}

function frame(type: number, flags: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id, 5);
  return Buffer.concat([h, payload]);
}

function settings(entries: [number, number][] = []): Buffer {
  const body = Buffer.alloc(entries.length * 6);
  entries.forEach(([k, v], i) => {
    body.writeUInt16BE(k, i * 6);
    body.writeUInt32BE(v, i * 6 + 2);
  });
  return frame(4, 0, 0, body);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** A raw HTTP/2 client: frames out as given, frames in as parsed, with their header blocks decoded. */
class RawClient {
  readonly socket: Socket;
  readonly frames: Frame[] = [];
  readonly encoder = new HpackEncoder();
  readonly decoder = new HpackDecoder();
  #buffer = Buffer.alloc(0);
  #waiters: (() => void)[] = [];
  closed = false;

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1');
    this.socket.on('data', (chunk: Buffer) => {
      this.#buffer = Buffer.concat([this.#buffer, chunk]);
      while (this.#buffer.length >= 9) {
        const length = this.#buffer.readUIntBE(0, 3);
        if (this.#buffer.length < 9 + length) break;
        this.frames.push({ type: this.#buffer[3]!, flags: this.#buffer[4]!, id: this.#buffer.readUInt32BE(5), payload: this.#buffer.subarray(9, 9 + length) });
        this.#buffer = this.#buffer.subarray(9 + length);
      }
      for (const w of this.#waiters.splice(0)) w();
    });
    this.socket.on('error', () => undefined);
    this.socket.on('close', () => {
      this.closed = true;
      for (const w of this.#waiters.splice(0)) w();
    });
  }

  async start(extra: [number, number][] = []): Promise<void> {
    await once(this.socket, 'connect');
    this.socket.write(Buffer.concat([PREFACE, settings(extra)]));
    await this.until((f) => f.type === 4 && (f.flags & 1) === 1);
  }

  /** The first frame that `match` accepts, once it came (within `timeoutMs`). */
  async until(match: (f: Frame) => boolean, timeoutMs = 5000): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined) return found;
      const frames = () => JSON.stringify(this.frames.slice(-20).map((f) => [f.type, f.flags, f.id]));
      if (this.closed) throw new Error(`connection closed; last frames: ${frames()}`);
      if (Date.now() >= deadline) throw new Error(`no such frame within ${timeoutMs} ms; last frames: ${frames()}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  async closedNow(): Promise<void> {
    while (!this.closed) await new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  headers(id: number, fields: [string, string][], flags = 0x4): void {
    this.socket.write(frame(1, flags, id, this.encoder.encode(fields)));
  }

  request(id: number, path = '/svc/Method', endStream = true): void {
    this.headers(
      id,
      [
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', path],
        [':authority', 'localhost'],
        ['content-type', 'application/grpc'],
        ['te', 'trailers'],
      ],
      0x4 | (endStream ? 1 : 0),
    );
  }

  decode(f: Frame): [string, string][] {
    return this.decoder.decode(f.payload);
  }

  close(): void {
    this.socket.destroy();
  }
}

describe("Nereid's HTTP/2 transport at the frame level", () => {
  let server: H2Server;
  let port: number;
  let onStream: (stream: H2Stream, headers: H2Headers) => void = () => undefined;
  const sessions: H2Session[] = [];

  before(async () => {
    server = createServer({ maxConcurrentStreams: 2, initialWindowSize: 1 << 20, connectionWindowSize: 1 << 24 });
    server.on('session', (s: H2Session) => sessions.push(s));
    server.on('stream', (stream: H2Stream, headers: H2Headers) => onStream(stream, headers));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
  });

  after(() => {
    for (const s of sessions) s.destroy();
    server.close();
  });

  it('announces its settings and window, acknowledges the client, and answers PING with the same payload', async () => {
    const c = new RawClient(port);
    try {
      await c.start();
      const s = await c.until((f) => f.type === 4 && f.flags === 0);
      const entries = new Map<number, number>();
      for (let i = 0; i < s.payload.length; i += 6) entries.set(s.payload.readUInt16BE(i), s.payload.readUInt32BE(i + 2));
      assert.equal(entries.get(3), 2, 'SETTINGS_MAX_CONCURRENT_STREAMS');
      assert.equal(entries.get(4), 1 << 20, 'SETTINGS_INITIAL_WINDOW_SIZE');
      const wu = await c.until((f) => f.type === 8 && f.id === 0);
      assert.equal(wu.payload.readUInt32BE(0), (1 << 24) - 65_535);
      const session = sessions.at(-1)!;
      const pinged = once(session, 'ping');
      c.socket.write(frame(6, 0, 0, Buffer.from('12345678')));
      const ack = await c.until((f) => f.type === 6 && f.flags === 1);
      assert.equal(ack.payload.toString(), '12345678');
      assert.equal(((await pinged)[0] as Buffer).toString(), '12345678');
      // The server's own ping: its callback runs when the ACK comes.
      const rtt = new Promise<number>((resolve, reject) => session.ping((err, ms) => (err ? reject(err) : resolve(ms))));
      const ping = await c.until((f) => f.type === 6 && f.flags === 0);
      c.socket.write(frame(6, 1, 0, ping.payload));
      assert.ok((await rtt) >= 0);
    } finally {
      c.close();
    }
  });

  it('sends a response, its data and its trailers in one write, and decodes the request the client sent', async () => {
    const c = new RawClient(port);
    let seen: H2Headers | undefined;
    let body = '';
    onStream = (stream, headers) => {
      seen = headers;
      stream.on('data', (d: Buffer) => (body += d.toString()));
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'fine' }));
        stream.write(Buffer.from('answer'));
        stream.end();
      });
    };
    try {
      await c.start();
      // Count the server's socket writes from here on: the answer must be one.
      const socket = sessions.at(-1)!.socket;
      const write = socket.write.bind(socket) as (chunk: Buffer) => boolean;
      let writes = 0;
      socket.write = ((chunk: Buffer) => {
        writes++;
        return write(chunk);
      }) as typeof socket.write;
      c.request(1, '/svc/Method', false);
      // Padded DATA: 3 bytes of padding after "hello".
      c.socket.write(frame(0, 0x8 | 0x1, 1, Buffer.concat([Buffer.from([3]), Buffer.from('hello'), Buffer.alloc(3)])));
      const trailers = await c.until((f) => f.type === 1 && (f.flags & 1) === 1);
      const headers = await c.until((f) => f.type === 1 && f.id === 1);
      const data = await c.until((f) => f.type === 0 && f.id === 1);
      assert.equal(seen?.[':path'], '/svc/Method');
      assert.equal(seen?.['te'], 'trailers');
      assert.equal(body, 'hello');
      assert.deepEqual(c.decode(headers), [[':status', '200'], ['content-type', 'application/grpc']]);
      assert.equal(data.payload.toString(), 'answer');
      assert.deepEqual(c.decode(trailers), [['grpc-status', '0'], ['grpc-message', 'fine']]);
      assert.equal(writes, 1, 'the headers, data and trailers left in one write');
    } finally {
      c.close();
    }
  });

  it("sends no more DATA than the client's windows allow, then the rest as WINDOW_UPDATEs come, trailers last", async () => {
    const c = new RawClient(port);
    onStream = (stream) => {
      stream.on('end', () => {
        stream.respond({ ':status': 200 }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.write(Buffer.alloc(25, 7));
        stream.end();
      });
    };
    try {
      await c.start([[4, 10]]); // SETTINGS_INITIAL_WINDOW_SIZE 10
      c.request(1);
      await c.until((f) => f.type === 0 && f.id === 1);
      await new Promise((r) => setTimeout(r, 50));
      const sent = () => c.frames.filter((f) => f.type === 0 && f.id === 1).reduce((n, f) => n + f.payload.length, 0);
      assert.equal(sent(), 10);
      assert.equal(c.frames.filter((f) => f.type === 1 && f.id === 1).length, 1, 'no trailers before the data');
      c.socket.write(frame(8, 0, 1, u32(10)));
      await c.until((f) => f.type === 0 && f.id === 1 && sent() >= 20);
      c.socket.write(frame(8, 0, 1, u32(100)));
      const trailers = await c.until((f) => f.type === 1 && (f.flags & 1) === 1);
      assert.equal(sent(), 25);
      assert.deepEqual(c.decode(c.frames.find((f) => f.type === 1)!), [[':status', '200']]);
      assert.deepEqual(c.decode(trailers), [['grpc-status', '0']]);
    } finally {
      c.close();
    }
  });

  it('reads a header block continued in CONTINUATION frames, and a request whose headers carry priority and padding', async () => {
    const c = new RawClient(port);
    const paths: string[] = [];
    const late: boolean[] = [];
    onStream = (stream, headers) => {
      paths.push(String(headers[':path']));
      stream.respond({ ':status': 200 }, { endStream: true });
      late.push(stream.write(Buffer.from('after the end')));
    };
    try {
      await c.start();
      const block = c.encoder.encode([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/long'],
        ['x-big', 'y'.repeat(40_000)],
      ]);
      c.socket.write(Buffer.concat([frame(1, 0x1, 1, block.subarray(0, 16_000)), frame(9, 0, 1, block.subarray(16_000, 32_000)), frame(9, 0x4, 1, block.subarray(32_000))]));
      await c.until((f) => f.type === 1 && f.id === 1);
      const small = c.encoder.encode([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/padded'],
      ]);
      const priority = Buffer.from([0, 0, 0, 0, 16]);
      c.socket.write(frame(1, 0x1 | 0x4 | 0x8 | 0x20, 3, Buffer.concat([Buffer.from([2]), priority, small, Buffer.alloc(2)])));
      await c.until((f) => f.type === 1 && f.id === 3);
      assert.deepEqual(paths, ['/long', '/padded']);
      assert.deepEqual(late, [false, false], 'a write after the stream ended is refused');
      assert.ok(!c.frames.some((f) => f.type === 0), 'no DATA after END_STREAM');
    } finally {
      c.close();
    }
  });

  it('resets a malformed request, one whose header list is too large, or one past the stream limit, and keeps the connection', async () => {
    const c = new RawClient(port);
    const open: H2Stream[] = [];
    onStream = (stream) => open.push(stream);
    try {
      await c.start();
      c.headers(1, [
        [':method', 'POST'],
        [':scheme', 'http'],
      ], 0x5); // no :path
      assert.equal((await c.until((f) => f.type === 3 && f.id === 1)).payload.readUInt32BE(0), H2Error.PROTOCOL_ERROR);
      c.headers(3, [
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/x'],
        ['connection', 'keep-alive'],
      ], 0x5);
      assert.equal((await c.until((f) => f.type === 3 && f.id === 3)).payload.readUInt32BE(0), H2Error.PROTOCOL_ERROR);
      // A header list past 64 KiB (the default limit) in one block split over CONTINUATIONs.
      const big = c.encoder.encode([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/big'],
        ['x-big', 'z'.repeat(70_000)],
      ]);
      const parts: Buffer[] = [];
      for (let at = 0; at < big.length; at += 16_384) {
        const first = at === 0;
        const last = at + 16_384 >= big.length;
        parts.push(frame(first ? 1 : 9, (first ? 0x1 : 0) | (last ? 0x4 : 0), 5, big.subarray(at, at + 16_384)));
      }
      c.socket.write(Buffer.concat(parts));
      assert.equal((await c.until((f) => f.type === 3 && f.id === 5)).payload.readUInt32BE(0), H2Error.ENHANCE_YOUR_CALM);
      c.request(7, '/a', false);
      c.request(9, '/b', false);
      c.request(11, '/c', false); // the third: past SETTINGS_MAX_CONCURRENT_STREAMS 2
      assert.equal((await c.until((f) => f.type === 3 && f.id === 11)).payload.readUInt32BE(0), H2Error.REFUSED_STREAM);
      assert.equal(open.length, 2);
      // The client resets one: it closes, 'aborted' first.
      const aborted = once(open[0]!, 'aborted');
      const closed = once(open[0]!, 'close');
      c.socket.write(frame(3, 0, 7, u32(H2Error.CANCEL)));
      await aborted;
      await closed;
      assert.equal(open[0]!.rstCode, H2Error.CANCEL);
      assert.ok(!c.closed);
    } finally {
      c.close();
    }
  });

  for (const [what, bytes, code] of [
    ['a frame larger than SETTINGS_MAX_FRAME_SIZE', frame(0, 0, 1, Buffer.alloc(16_385)), H2Error.FRAME_SIZE_ERROR],
    ['a broken header block', frame(1, 0x5, 1, Buffer.from([0x80])), H2Error.COMPRESSION_ERROR],
    ['a stream with an even number', frame(1, 0x5, 2, Buffer.from([0x83, 0x86, 0x84])), H2Error.PROTOCOL_ERROR],
    ['DATA on a stream never opened', frame(0, 0, 7, Buffer.from('x')), H2Error.PROTOCOL_ERROR],
    ['a PING of the wrong size', frame(6, 0, 0, Buffer.from('1234')), H2Error.FRAME_SIZE_ERROR],
    ['a WINDOW_UPDATE overflowing the connection window', frame(8, 0, 0, u32(0x7fffffff)), H2Error.FLOW_CONTROL_ERROR],
    ['HEADERS interrupted before its CONTINUATION', Buffer.concat([frame(1, 0x1, 1, Buffer.from([0x83])), frame(6, 0, 0, Buffer.alloc(8))]), H2Error.PROTOCOL_ERROR],
  ] as const) {
    it(`ends the connection with GOAWAY on ${what}`, async () => {
      const c = new RawClient(port);
      onStream = () => undefined;
      try {
        await c.start();
        c.socket.write(bytes);
        const goaway = await c.until((f) => f.type === 7);
        assert.equal(goaway.payload.readUInt32BE(4), code, goaway.payload.subarray(8).toString());
        await c.closedNow();
      } finally {
        c.close();
      }
    });
  }

  it('ends a connection whose client resets streams past the burst (rapid reset) with ENHANCE_YOUR_CALM, and keeps one under it', async () => {
    onStream = () => undefined;
    const resets = (c: RawClient, count: number) => {
      const frames: Buffer[] = [];
      const block = c.encoder.encode([
        [':method', 'POST'],
        [':scheme', 'http'],
        [':path', '/svc/Method'],
      ]);
      for (let i = 0; i < count; i++) frames.push(frame(1, 0x4, 2 * i + 1, block), frame(3, 0, 2 * i + 1, u32(H2Error.CANCEL)));
      c.socket.write(Buffer.concat(frames));
    };
    const calm = new RawClient(port);
    try {
      await calm.start();
      resets(calm, 900);
      calm.socket.write(frame(6, 0, 0, Buffer.from('still-up')));
      assert.equal((await calm.until((f) => f.type === 6 && f.flags === 1)).payload.toString(), 'still-up');
      assert.ok(!calm.frames.some((f) => f.type === 7), 'no GOAWAY under the burst');
    } finally {
      calm.close();
    }
    const flood = new RawClient(port);
    try {
      await flood.start();
      resets(flood, 1100);
      const goaway = await flood.until((f) => f.type === 7);
      assert.equal(goaway.payload.readUInt32BE(4), H2Error.ENHANCE_YOUR_CALM);
      assert.equal(goaway.payload.subarray(8).toString(), 'too many stream resets');
      await flood.closedNow();
    } finally {
      flood.close();
    }
  });

  it('stops reading from a client that sends and does not read, and catches up once it reads', async () => {
    // A client of its own: it counts the PING ACKs' bytes instead of keeping frames.
    const opened = once(server, 'session');
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    socket.write(Buffer.concat([PREFACE, settings()]));
    const [session] = (await opened) as [H2Session];
    const pings = 400_000; // 6.8 MB of PINGs, as many ACKs
    const ack = frame(6, 1, 0, Buffer.from('abcdefgh'));
    let received = 0;
    let acks = 0;
    let tail = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      // Count ACK frames by their 17 bytes, across chunk boundaries.
      const data = tail.length > 0 ? Buffer.concat([tail, chunk]) : chunk;
      let at = 0;
      while (data.length - at >= 9) {
        const length = data.readUIntBE(at, 3);
        if (data.length - at < 9 + length) break;
        if (data.subarray(at, at + 17).equals(ack)) acks++;
        at += 9 + length;
      }
      tail = Buffer.from(data.subarray(at));
      received += chunk.length;
    });
    socket.pause();
    try {
      const ping = frame(6, 0, 0, Buffer.from('abcdefgh'));
      socket.write(Buffer.concat(Array.from({ length: pings }, () => ping)));
      let most = 0;
      let paused = false;
      for (let i = 0; i < 100 && !paused; i++) {
        await new Promise((r) => setTimeout(r, 10));
        most = Math.max(most, session.socket.writableLength);
        paused = session.socket.isPaused();
      }
      for (let i = 0; i < 20; i++) {
        await new Promise((r) => setTimeout(r, 10));
        most = Math.max(most, session.socket.writableLength);
      }
      assert.ok(paused, 'the server kept reading');
      assert.ok(most < 6 * 1024 * 1024, `the server buffered ${most} bytes for a client that does not read`);
      socket.resume();
      while (acks < pings) await once(socket, 'data');
      assert.equal(acks, pings);
      assert.ok(received >= pings * 17);
    } finally {
      socket.destroy();
    }
  });

  it('closes a connection that does not start with the HTTP/2 preface', async () => {
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    socket.resume();
    await once(socket, 'close');
  });

  it('holds a paused stream’s data without widening its window, and delivers it on resume', async () => {
    const c = new RawClient(port);
    let stream: H2Stream | undefined;
    let got = 0;
    onStream = (s) => {
      stream = s;
      s.pause();
      s.on('data', (d: Buffer) => (got += d.length));
    };
    try {
      await c.start();
      c.request(1, '/p', false);
      for (let i = 0; i < 40; i++) c.socket.write(frame(0, 0, 1, Buffer.alloc(16_384)));
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(got, 0);
      assert.equal(c.frames.filter((f) => f.type === 8 && f.id === 1).length, 0, 'no stream WINDOW_UPDATE while paused');
      // A listener that pauses it again stops the delivery there.
      let chunks = 0;
      stream!.on('data', () => {
        if (++chunks === 10) stream!.pause();
      });
      stream!.resume();
      assert.equal(got, 10 * 16_384);
      stream!.resume();
      assert.equal(got, 40 * 16_384);
      await c.until((f) => f.type === 8 && f.id === 1);
    } finally {
      c.close();
    }
  });

  it("gives the connection's window back only as streams deliver: a paused stream's data holds it", async () => {
    const small = createServer({ initialWindowSize: 1 << 20, connectionWindowSize: 128 * 1024 });
    let stream: H2Stream | undefined;
    small.on('stream', (s: H2Stream) => {
      stream = s;
      s.pause();
      s.on('data', () => undefined);
    });
    await new Promise<void>((resolve) => small.listen(0, '127.0.0.1', resolve));
    const c = new RawClient((small.address() as { port: number }).port);
    try {
      await c.start();
      const updates = () => c.frames.filter((f) => f.type === 8 && f.id === 0).length;
      await c.until((f) => f.type === 8 && f.id === 0); // the connection window announced at the start
      c.request(1, '/p', false);
      for (let i = 0; i < 6; i++) c.socket.write(frame(0, 0, 1, Buffer.alloc(16_384)));
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(updates(), 1, 'the connection window came back while the stream held the data');
      stream!.resume();
      const update = await c.until((f) => f.type === 8 && f.id === 0 && f !== c.frames.find((g) => g.type === 8 && g.id === 0));
      // Given back once half the window was delivered.
      assert.equal(update.payload.readUInt32BE(0), 64 * 1024);
    } finally {
      c.close();
      small.close();
    }
  });

  it('closes gracefully (GOAWAY NO_ERROR, open streams finish) and at once (open streams reset with the code)', async () => {
    const c = new RawClient(port);
    let stream: H2Stream | undefined;
    onStream = (s) => (stream = s);
    try {
      await c.start();
      c.request(1, '/slow', false);
      await new Promise((r) => setTimeout(r, 20));
      const session = sessions.at(-1)!;
      session.close();
      const goaway = await c.until((f) => f.type === 7);
      assert.equal(goaway.payload.readUInt32BE(4), H2Error.NO_ERROR);
      assert.equal(goaway.payload.readUInt32BE(0), 1, 'the last stream processed');
      c.request(3, '/late');
      assert.equal((await c.until((f) => f.type === 3 && f.id === 3)).payload.readUInt32BE(0), H2Error.REFUSED_STREAM);
      stream!.respond({ ':status': 200 }, { endStream: true });
      c.socket.write(frame(0, 1, 1));
      await c.closedNow();
    } finally {
      c.close();
    }
    const d = new RawClient(port);
    try {
      await d.start();
      d.request(1, '/open', false);
      await new Promise((r) => setTimeout(r, 20));
      sessions.at(-1)!.destroy(H2Error.CANCEL);
      assert.equal((await d.until((f) => f.type === 3 && f.id === 1)).payload.readUInt32BE(0), H2Error.CANCEL);
      assert.equal((await d.until((f) => f.type === 7)).payload.readUInt32BE(4), H2Error.CANCEL);
      await d.closedNow();
    } finally {
      d.close();
    }
  });
});
