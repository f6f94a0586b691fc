/**
 * The benchmarks' HTTP load client (bench/lean-http.ts) against a real `node:http` server: what
 * it counts, what it refuses, and that it keeps to its connections.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { leanHttpPoster } from '../../bench/lean-http.js';

let server: Server;
let port: number;
/** Bodies received, per path. */
const received: { path: string; bytes: number; header: string | undefined }[] = [];
const sockets = new Set<unknown>();

function answer(req: IncomingMessage, res: ServerResponse, bytes: number): void {
  received.push({ path: req.url!, bytes, header: req.headers['x-test'] as string | undefined });
  sockets.add(req.socket);
  switch (req.url) {
    case '/ok':
      res.writeHead(200, { 'Content-Length': 3 * 1024 * 1024 }).end(Buffer.alloc(3 * 1024 * 1024, 7));
      return;
    case '/empty':
      res.writeHead(200, { 'Content-Length': 0 }).end();
      return;
    case '/missing':
      res.writeHead(400, { 'Content-Type': 'application/json', 'Content-Length': 25 }).end('{"error":"no such model"}');
      return;
    case '/chunked':
      res.writeHead(200);
      res.write('part');
      res.end('rest');
      return;
    case '/close':
      res.writeHead(200, { 'Content-Length': 2, Connection: 'close' }).end('ok');
      return;
    case '/slow':
      setTimeout(() => res.writeHead(200, { 'Content-Length': 1 }).end('x'), 30);
      return;
    default:
      res.writeHead(404, { 'Content-Length': 0 }).end();
  }
}

before(async () => {
  server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (c: Buffer) => (bytes += c.byteLength));
    req.on('end', () => answer(req, res, bytes));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

after(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('leanHttpPoster', () => {
  it("sends the body and headers, and resolves with a 200 response's body length, again and again on one connection", async () => {
    received.length = 0;
    sockets.clear();
    const body = Buffer.alloc(1 << 20, 1);
    const poster = leanHttpPoster(port, '/ok', body, { 'X-Test': 'yes' }, 1);
    for (let i = 0; i < 3; i++) assert.equal(await poster.post(), 3 * 1024 * 1024);
    poster.close();
    assert.deepEqual(received, Array.from({ length: 3 }, () => ({ path: '/ok', bytes: 1 << 20, header: 'yes' })));
    assert.equal(sockets.size, 1, 'keep-alive: one connection');
  });

  it('an empty 200 body resolves with 0', async () => {
    const poster = leanHttpPoster(port, '/empty', Buffer.from('{}'), {}, 1);
    assert.equal(await poster.post(), 0);
    poster.close();
  });

  it('a status other than 200 rejects with the status and the body, and the connection stays usable', async () => {
    const poster = leanHttpPoster(port, '/missing', Buffer.from('{}'), {}, 1);
    await assert.rejects(poster.post(), /HTTP 400: \{"error":"no such model"\}/);
    await assert.rejects(poster.post(), /HTTP 400/);
    poster.close();
  });

  it('a chunked response is refused: the client counts Content-Length bodies only', async () => {
    const poster = leanHttpPoster(port, '/chunked', Buffer.from('{}'), {}, 1);
    await assert.rejects(poster.post(), /Transfer-Encoding 'chunked'/);
    poster.close();
  });

  it('Connection: close makes the next request use a new connection', async () => {
    sockets.clear();
    const poster = leanHttpPoster(port, '/close', Buffer.from('{}'), {}, 1);
    assert.equal(await poster.post(), 2);
    assert.equal(await poster.post(), 2);
    poster.close();
    assert.equal(sockets.size, 2);
  });

  it('keeps at most `concurrency` requests in flight, one per connection', async () => {
    sockets.clear();
    const poster = leanHttpPoster(port, '/slow', Buffer.from('{}'), {}, 2);
    const started = performance.now();
    const lengths = await Promise.all(Array.from({ length: 6 }, () => poster.post()));
    const elapsed = performance.now() - started;
    poster.close();
    assert.deepEqual(lengths, [1, 1, 1, 1, 1, 1]);
    assert.equal(sockets.size, 2, 'two connections');
    assert.ok(elapsed >= 85, `six 30 ms requests two at a time take three rounds, took ${elapsed.toFixed(0)} ms`);
  });

  it('a server that is not there rejects', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const deadPort = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const poster = leanHttpPoster(deadPort, '/ok', Buffer.from('{}'), {}, 1);
    await assert.rejects(poster.post(), /ECONNREFUSED/);
    poster.close();
  });
});
