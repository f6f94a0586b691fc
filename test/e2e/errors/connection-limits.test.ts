/**
 * HTTP connection limits (`--http-headers-timeout`, `--http-max-connections`): a client that
 * never finishes its header block loses its connection once the timeout passes (Node's defaults
 * held it for a minute or more), and connections beyond the limit are closed at once while the
 * others keep being served.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';

let repo: string;

before(async () => {
  repo = await makeRepository({});
});

after(async () => {
  await removeDir(repo);
});

/** A connected socket whose received bytes and close are recorded. */
function open(port: number): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (text += d));
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve({ socket, received: () => text, closed }));
    socket.once('error', reject);
  });
}

for (const kind of ['nereid', 'node'] as const) {
  describe(`HTTP connection limits, --http-server=${kind}`, () => {
    let srv: RunningServer;
    after(async () => srv?.stop());

    it('a header block never finished: answered 408 and closed once --http-headers-timeout passes', async () => {
      srv = await startServer({ modelRepositories: [repo] }, { headersTimeoutMs: 500, server: kind });
      const c = await open(srv.port);
      const start = performance.now();
      c.socket.write('GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
      await c.closed;
      const held = performance.now() - start;
      // Generous: Node's defaults held such a connection 60 s or more.
      assert.ok(held < 15_000, `held ${held.toFixed(0)} ms`);
      assert.match(c.received(), /^HTTP\/1\.1 408 /);
      // An ordinary request is still served.
      assert.equal((await fetch(`${srv.url}/v2/health/live`)).status, 200);
      await srv.stop();
    });

    it('connections beyond --http-max-connections are closed at once; the others are served', async () => {
      srv = await startServer({ modelRepositories: [repo] }, { maxConnections: 2, server: kind });
      const a = await open(srv.port);
      const b = await open(srv.port);
      const extra = await open(srv.port);
      await extra.closed;
      assert.equal(extra.received(), '', 'closed without an answer');
      for (const c of [a, b]) {
        c.socket.write('GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
        await c.closed;
        assert.match(c.received(), /^HTTP\/1\.1 200 /);
      }
      // Once those closed, there is room again.
      assert.equal((await fetch(`${srv.url}/v2/health/live`)).status, 200);
      await srv.stop();
    });
  });
}
