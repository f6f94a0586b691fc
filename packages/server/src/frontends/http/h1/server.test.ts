/**
 * Nereid's HTTP/1.1 server transport over real sockets, byte by byte: request parsing and
 * framing, responses, keep-alive and pipelining, limits and timeouts, and the refusals of
 * malformed requests.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { connect, type Socket } from 'node:net';
import { H1Server, type H1Handler, type H1Request, type H1Response, type H1ServerOptions } from './server.js';

const servers: H1Server[] = [];
after(() => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

/** Reads a request's whole body. */
function body(req: H1Request): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('aborted', () => reject(new Error('aborted')));
  });
}

/** Echoes method, url, body length and chosen headers as JSON, once the body is read. */
const echo: H1Handler = (req, res) => {
  void body(req).then(
    (b) => {
      const text = JSON.stringify({ method: req.method, url: req.url, length: b.length, body: b.toString('latin1').slice(0, 64), headers: req.headers });
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
      res.end(text);
    },
    () => undefined,
  );
};

async function serve(handler: H1Handler = echo, options: Partial<H1ServerOptions> = {}): Promise<{ server: H1Server; port: number }> {
  const server = new H1Server({ headersTimeout: 10_000, requestTimeout: 30_000, keepAliveTimeout: 5_000, ...options }, handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port };
}

interface Client {
  socket: Socket;
  /** Everything received so far. */
  text(): string;
  /** Resolves once the received text matches `pattern`. */
  until(pattern: RegExp, ms?: number): Promise<string>;
  closed: Promise<void>;
}

function client(port: number): Promise<Client> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    const waiters: (() => void)[] = [];
    socket.on('data', (d) => {
      text += d.toString('latin1');
      for (const w of waiters.splice(0)) w();
    });
    socket.on('error', () => undefined);
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    const until = (pattern: RegExp, ms = 3000) =>
      new Promise<string>((res, rej) => {
        const timer = setTimeout(() => rej(new Error(`timed out waiting for ${pattern}; got ${JSON.stringify(text)}`)), ms);
        const check = () => {
          if (pattern.test(text)) {
            clearTimeout(timer);
            res(text);
          } else waiters.push(check);
        };
        check();
        void closed.then(() => {
          if (!pattern.test(text)) {
            clearTimeout(timer);
            rej(new Error(`closed waiting for ${pattern}; got ${JSON.stringify(text)}`));
          }
        });
      });
    socket.once('connect', () => resolve({ socket, text: () => text, until, closed }));
    socket.once('error', reject);
  });
}

/** Sends `bytes`, waits for the connection to close, returns what came back. */
async function exchange(port: number, bytes: string | Buffer): Promise<string> {
  const c = await client(port);
  c.socket.write(bytes);
  await c.closed;
  return c.text();
}

/** Splits a response text into its responses (Content-Length or chunked framing). */
function responses(text: string): { status: number; headers: Record<string, string>; body: string }[] {
  const out: { status: number; headers: Record<string, string>; body: string }[] = [];
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf('\r\n\r\n', at);
    assert.ok(end > 0, `a whole head at ${at}: ${JSON.stringify(text.slice(at, at + 200))}`);
    const [line, ...fields] = text.slice(at, end).split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(line!)?.[1]);
    assert.ok(status > 0, `a status line: ${line}`);
    const headers: Record<string, string> = {};
    for (const f of fields) headers[f.slice(0, f.indexOf(':')).toLowerCase()] = f.slice(f.indexOf(':') + 1).trim();
    at = end + 4;
    let bodyText = '';
    if (headers['content-length'] !== undefined) {
      bodyText = text.slice(at, at + Number(headers['content-length']));
      at += Number(headers['content-length']);
    } else if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const eol = text.indexOf('\r\n', at);
        const size = parseInt(text.slice(at, eol), 16);
        at = eol + 2;
        if (size === 0) {
          at += 2;
          break;
        }
        bodyText += text.slice(at, at + size);
        at += size + 2;
      }
    } else if (status >= 200) {
      bodyText = text.slice(at);
      at = text.length;
    }
    out.push({ status, headers, body: bodyText });
  }
  return out;
}

const GET = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`;

describe('requests and responses', () => {
  it('answers a GET with its length, Date and keep-alive fields, and serves the next request on the same connection', async () => {
    const { port } = await serve(echo, { keepAliveTimeout: 7_000 });
    const c = await client(port);
    c.socket.write(GET('/v2/health/live?x=1'));
    await c.until(/\}$/);
    c.socket.write(GET('/second'));
    const text = await c.until(/second.*\}$/s);
    const [a, b] = responses(text);
    assert.equal(a!.status, 200);
    assert.equal(a!.headers.connection, 'keep-alive');
    assert.equal(a!.headers['keep-alive'], 'timeout=7');
    assert.match(a!.headers.date!, /GMT$/);
    assert.deepEqual(JSON.parse(a!.body).url, '/v2/health/live?x=1');
    assert.equal(JSON.parse(b!.body).url, '/second');
    c.socket.destroy();
  });

  it("writes a response's head and body in one socket write", async () => {
    const { server, port } = await serve();
    const writes: number[] = [];
    server.on('connection', (socket: Socket) => {
      const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
      (socket as unknown as { write: (...args: unknown[]) => boolean }).write = (...args: unknown[]) => {
        writes.push(Buffer.byteLength(args[0] as Buffer));
        return write(...args);
      };
    });
    const c = await client(port);
    c.socket.write(`POST /infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello`);
    const text = await c.until(/\}$/);
    assert.deepEqual(writes, [text.length]);
    c.socket.destroy();
  });

  it('lower-cases field names, joins repeated fields, drops repeats of single fields and keeps set-cookie as a list', async () => {
    const { port } = await serve();
    const c = await client(port);
    c.socket.write(GET('/h', 'X-A: 1\r\nx-a: 2\r\nUser-Agent: one\r\nUser-Agent: two\r\nSet-Cookie: a\r\nSet-Cookie: b\r\nX-Space:   padded value \t\r\n'));
    const [r] = responses(await c.until(/\}$/));
    const { headers } = JSON.parse(r!.body) as { headers: Record<string, unknown> };
    assert.equal(headers['x-a'], '1, 2');
    assert.equal(headers['user-agent'], 'one');
    assert.deepEqual(headers['set-cookie'], ['a', 'b']);
    assert.equal(headers['x-space'], 'padded value');
    c.socket.destroy();
  });

  it('reads a Content-Length body that arrives a byte at a time', async () => {
    const { port } = await serve();
    const c = await client(port);
    const request = `POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world`;
    for (const ch of request) {
      c.socket.write(ch);
      await new Promise((r) => setImmediate(r));
    }
    const [r] = responses(await c.until(/\}$/));
    assert.equal(JSON.parse(r!.body).body, 'hello world');
    c.socket.destroy();
  });

  it('reads a chunked body with extensions and trailers, and the request after it', async () => {
    const { port } = await serve();
    const c = await client(port);
    c.socket.write(`POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n${GET('/after')}`);
    const text = await c.until(/after.*\}$/s);
    const [a, b] = responses(text);
    assert.equal(JSON.parse(a!.body).body, 'hello world');
    assert.equal(JSON.parse(b!.body).url, '/after');
    c.socket.destroy();
  });

  it('answers pipelined requests in order, parsing each once the response before it is written', async () => {
    const started: string[] = [];
    const { port } = await serve((req, res) => {
      started.push(req.url);
      const delay = req.url === '/slow' ? 60 : 0;
      setTimeout(() => res.end(req.url), delay);
    });
    const c = await client(port);
    c.socket.write(GET('/slow') + GET('/fast') + GET('/third'));
    const text = await c.until(/\/third$/);
    assert.deepEqual(responses(text).map((r) => r.body), ['/slow', '/fast', '/third']);
    assert.deepEqual(started, ['/slow', '/fast', '/third']);
    c.socket.destroy();
  });

  it('sends 100 Continue before reading the body of a request that expects it, and nothing for an empty Expect', async () => {
    const { port } = await serve();
    const c = await client(port);
    c.socket.write(`POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n`);
    await c.until(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    c.socket.write('abc');
    await c.until(/\}$/);
    assert.equal(JSON.parse(responses(c.text()).at(-1)!.body).body, 'abc');
    c.socket.write(`POST /e HTTP/1.1\r\nHost: x\r\nExpect:\r\nContent-Length: 1\r\n\r\nz`);
    await c.until(/"body":"z".*\}$/s);
    assert.equal(c.text().match(/100 Continue/g)!.length, 1);
    c.socket.destroy();
  });

  it('answers HEAD with the length of the body it leaves out', async () => {
    const { port } = await serve((_req, res) => res.end('0123456789'));
    const c = await client(port);
    c.socket.write(`HEAD / HTTP/1.1\r\nHost: x\r\n\r\n${GET('/')}`);
    const text = await c.until(/0123456789$/);
    const heads = text.split('HTTP/1.1 200 OK');
    assert.equal(heads.length, 3);
    assert.match(heads[1]!, /Content-Length: 10\r\n/);
    assert.ok(heads[1]!.endsWith('\r\n\r\n'), 'no body after the HEAD response');
    c.socket.destroy();
  });

  it('streams a response without a length as chunks, and ends an HTTP/1.0 one by closing', async () => {
    const handler: H1Handler = (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.write('data: 1\n\n');
      setTimeout(() => {
        res.write('data: 2\n\n');
        res.end();
      }, 20);
    };
    const { port } = await serve(handler);
    const c = await client(port);
    c.socket.write(GET('/s'));
    const text = await c.until(/0\r\n\r\n$/);
    assert.match(text, /Transfer-Encoding: chunked\r\n/);
    assert.match(text, /\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n$/);
    assert.equal(responses(text)[0]!.body, 'data: 1\n\ndata: 2\n\n');
    c.socket.destroy();
    const old = await exchange(port, 'GET /s HTTP/1.0\r\n\r\n');
    assert.match(old, /^HTTP\/1\.1 200 OK\r\n[^]*Connection: close\r\n\r\ndata: 1\n\ndata: 2\n\n$/);
    assert.doesNotMatch(old, /Transfer-Encoding/);
  });

  it('keeps an HTTP/1.0 connection only when asked, and closes after a request that says Connection: close', async () => {
    const { port } = await serve();
    const closedOld = await exchange(port, 'GET /a HTTP/1.0\r\n\r\n');
    assert.match(closedOld, /Connection: close\r\n/);
    const c = await client(port);
    c.socket.write('GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
    await c.until(/\}$/);
    assert.match(c.text(), /Connection: keep-alive\r\n/);
    c.socket.write(GET('/c', 'Connection: close\r\n'));
    await c.closed;
    const all = responses(c.text());
    assert.equal(all.length, 2);
    assert.equal(all[1]!.headers.connection, 'close');
  });

  it("a handler's Connection: close ends the connection after its response", async () => {
    const { port } = await serve((req, res) => {
      setTimeout(() => {
        if (req.url === '/bye') res.setHeader('Connection', 'close');
        res.end('done');
      }, 20);
    });
    const bye = await exchange(port, GET('/bye') + GET('/never'));
    const all = responses(bye);
    assert.equal(all.length, 1);
    assert.equal(all[0]!.headers.connection, 'close');
  });

  it("a client's half-close cancels its request and closes the connection, as node:http does", async () => {
    let closed = false;
    const { port } = await serve((_req, res) => {
      res.once('close', () => (closed = true));
      setTimeout(() => res.end('late'), 100);
    });
    const c = await client(port);
    c.socket.end(GET('/half'));
    await c.closed;
    assert.equal(c.text(), '');
    assert.ok(closed, "the response's close");
  });

  it('a response sent before its body was read: the rest of the body is dropped and the connection goes on', async () => {
    const { port } = await serve((req, res) => res.end(`answered ${req.url}`));
    const c = await client(port);
    c.socket.write(`POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234`);
    await c.until(/answered \/early$/);
    c.socket.write(`56789${GET('/next')}`);
    await c.until(/answered \/next$/);
    assert.deepEqual(responses(c.text()).map((r) => r.body), ['answered /early', 'answered /next']);
    c.socket.destroy();
  });

  it('holds a large body for a handler that reads late, and delivers it whole', async () => {
    let got = 0;
    const { port } = await serve((req, res) => {
      setTimeout(() => {
        void body(req).then((b) => {
          got = b.length;
          res.end(String(b.length));
        });
      }, 200);
    });
    const c = await client(port);
    const size = 24 * 1024 * 1024;
    c.socket.write(`POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n`);
    c.socket.write(Buffer.alloc(size, 7));
    await c.until(new RegExp(`${size}$`), 20_000);
    assert.equal(got, size);
    c.socket.destroy();
  });

  it('a client that goes away mid-body aborts the request and closes its response', async () => {
    let aborted = false;
    let closed = false;
    const seen = new Promise<void>((resolve) => {
      void serve((req, res: H1Response) => {
        req.on('data', () => undefined);
        req.on('aborted', () => (aborted = true));
        res.once('close', () => {
          closed = true;
          resolve();
        });
      }).then(async ({ port }) => {
        const c = await client(port);
        c.socket.write(`POST /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc`);
        setTimeout(() => c.socket.destroy(), 50);
      });
    });
    await seen;
    assert.ok(aborted && closed);
  });
});

describe('malformed requests and limits', () => {
  const refused: [what: string, bytes: string, status: number][] = [
    ['a request line with two spaces', 'GET  / HTTP/1.1\r\n\r\n', 400],
    ['an HTTP/2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 400],
    ['a field without a colon', 'GET / HTTP/1.1\r\nHost x\r\n\r\n', 400],
    ['whitespace before the colon', 'GET / HTTP/1.1\r\nHost : x\r\n\r\n', 400],
    ['obsolete line folding', 'GET / HTTP/1.1\r\nX-A: a\r\n  folded\r\n\r\n', 400],
    ['a control character in a value', 'GET / HTTP/1.1\r\nX-A: a\x01b\r\n\r\n', 400],
    ['Content-Length and Transfer-Encoding', 'POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
    ['two Content-Lengths, even equal', 'POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx', 400],
    ['a negative Content-Length', 'POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n', 400],
    ['a Content-Length past 2^53', 'POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n', 400],
    ['a coding other than chunked', 'POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n', 400],
    ['chunked in HTTP/1.0', 'POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
    ['a chunk size that is not hex', 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', 400],
    ['a chunk size of 2^64', 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n', 400],
    ['chunk data without its CRLF', 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxyz\r\n', 400],
    ['a header block over 16 KiB', `GET / HTTP/1.1\r\nX-Big: ${'a'.repeat(17_000)}\r\n\r\n`, 431],
    ['an unfinished header block over 16 KiB', `GET / HTTP/1.1\r\nX-Big: ${'a'.repeat(17_000)}`, 431],
  ];
  for (const [what, bytes, status] of refused) {
    it(`${what}: ${status} with Connection: close, and the server goes on`, async () => {
      const { port } = await serve();
      const text = await exchange(port, bytes);
      assert.match(text, new RegExp(`^HTTP/1\\.1 ${status} [^\\r]+\\r\\nConnection: close\\r\\nContent-Length: 0\\r\\n\\r\\n$`));
      const ok = await exchange(port, GET('/ok', 'Connection: close\r\n'));
      assert.equal(responses(ok)[0]!.status, 200);
    });
  }

  it('a handler that throws: 500 with Connection: close, reported as handlerError, and the server goes on', async () => {
    const reported: unknown[] = [];
    const { server, port } = await serve((req, res) => {
      if (req.url === '/throw') throw new Error('handler bug');
      res.end('fine');
    });
    server.on('handlerError', (err) => reported.push(err));
    const text = await exchange(port, GET('/throw'));
    assert.match(text, /^HTTP\/1\.1 500 Internal Server Error\r\nConnection: close\r\n/);
    assert.equal((reported[0] as Error).message, 'handler bug');
    assert.equal(responses(await exchange(port, GET('/ok', 'Connection: close\r\n')))[0]!.body, 'fine');
  });

  it('a header block never finished: 408 once the headers timeout passes', async () => {
    const { port } = await serve(echo, { headersTimeout: 150, checkInterval: 20 });
    const c = await client(port);
    const start = performance.now();
    c.socket.write('GET / HTTP/1.1\r\nX-Slow: ');
    await c.closed;
    const held = performance.now() - start;
    assert.match(c.text(), /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.ok(held >= 140 && held < 2000, `held ${held.toFixed(0)} ms`);
  });

  it('a body never finished: 408 once the request timeout passes', async () => {
    const { port } = await serve(echo, { headersTimeout: 5000, requestTimeout: 200, checkInterval: 20 });
    const c = await client(port);
    c.socket.write('POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nab');
    await c.closed;
    assert.match(c.text(), /^HTTP\/1\.1 408 /);
  });

  it('an idle keep-alive connection closes after the keep-alive timeout, a busy one does not', async () => {
    const { port } = await serve((_req, res) => setTimeout(() => res.end('late'), 300), { keepAliveTimeout: 150, checkInterval: 20 });
    const idle = await client(port);
    const start = performance.now();
    await idle.closed;
    assert.ok(performance.now() - start < 2000);
    const busy = await client(port);
    busy.socket.write(GET('/'));
    await busy.until(/late$/);
  });
});
