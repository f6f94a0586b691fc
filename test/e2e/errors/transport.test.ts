/**
 * Transport-level failures of inference requests (protocol.md §3.1, §3.10): truncated bodies and
 * clients that vanish, garbage on the socket, bodies over `--http-max-input-size` (declared,
 * chunked, or a compression bomb). The server keeps serving after each. Every case runs on both
 * HTTP/1.1 transports (`--http-server=nereid`, the default, and `node`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { deflateSync, gzipSync } from 'node:zlib';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { nodeRequest, postInfer, rawExchange, type HttpResult } from '../../helpers/http.js';

const LIMIT = 4096;

let repo: string;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
});

after(async () => {
  if (repo) await removeDir(repo);
});

const A = Array.from({ length: 16 }, (_, i) => i);
const GOOD = JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: A },
  ],
});

async function assertGood(server: RunningServer): Promise<void> {
  const res = await postInfer(server.url, 'simple', GOOD);
  assert.equal(res.status, 200, res.body.toString());
  assert.deepEqual((JSON.parse(res.body.toString()) as { outputs: { data: number[] }[] }).outputs[0]!.data, A.map((v) => 2 * v));
}

function errorOf(res: HttpResult, status: number): string {
  assert.equal(res.status, status, res.body.toString());
  assert.equal(res.headers['content-type'], 'application/json');
  return (JSON.parse(res.body.toString()) as { error: string }).error;
}

function requestHead(length: number | 'chunked', extra = ''): string {
  const framing = length === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${length}`;
  return `POST /v2/models/simple/infer HTTP/1.1\r\nHost: localhost\r\n${framing}\r\n${extra}\r\n`;
}

for (const kind of ['nereid', 'node'] as const) {
  describe(`--http-server=${kind}`, () => {
    let srv: RunningServer;
    let small: RunningServer;

    before(async () => {
      srv = await startServer({ modelRepositories: [repo] }, { server: kind });
      small = await startServer({ modelRepositories: [repo] }, { maxInputSize: LIMIT, server: kind });
    });

    after(async () => {
      await srv?.stop();
      await small?.stop();
    });

    describe('broken transfers', () => {
      test('Content-Length larger than what is sent, then the socket closes: the server keeps serving', async () => {
        for (let i = 0; i < 5; i++) {
          await rawExchange(srv.port, requestHead(1000) + GOOD.slice(0, 100), { destroyAfterWrite: true });
        }
        await assertGood(srv);
      });

      test('a truncated body followed by a half-close gets no 200 and breaks nothing', async () => {
        const reply = await rawExchange(srv.port, requestHead(GOOD.length + 50) + GOOD, { endAfterWrite: true, settleMs: 100 });
        assert.ok(!reply.startsWith('HTTP/1.1 200'), reply);
        await assertGood(srv);
      });

      test('a chunked body that stops mid-chunk, then the socket closes', async () => {
        await rawExchange(srv.port, requestHead('chunked') + `${(GOOD.length).toString(16)}\r\n${GOOD.slice(0, 50)}`, { destroyAfterWrite: true });
        await assertGood(srv);
      });

      test('a chunked body is accepted', async () => {
        const half = Math.floor(GOOD.length / 2);
        const body = `${half.toString(16)}\r\n${GOOD.slice(0, half)}\r\n${(GOOD.length - half).toString(16)}\r\n${GOOD.slice(half)}\r\n0\r\n\r\n`;
        const reply = await rawExchange(srv.port, requestHead('chunked', 'Connection: close\r\n') + body);
        assert.match(reply, /^HTTP\/1\.1 200 OK/);
        assert.match(reply, /"data":\[0,2,4,6,/);
      });

      test('a client that disconnects right after sending a whole request', async () => {
        for (let i = 0; i < 5; i++) {
          await rawExchange(srv.port, requestHead(GOOD.length) + GOOD, { destroyAfterWrite: true });
        }
        await assertGood(srv);
      });

      test('bytes that are not HTTP get 400 from the parser and break nothing', async () => {
        const reply = await rawExchange(srv.port, 'HELLO THERE\r\n\r\n');
        assert.match(reply, /^HTTP\/1\.1 400/);
        await assertGood(srv);
      });
    });

    describe('--http-max-input-size', () => {
      test('a good request under the limit works', async () => {
        await assertGood(small);
      });

      test('a declared body over the limit is 400 mentioning --http-max-input-size', async () => {
        const big = JSON.stringify({ inputs: [], pad: 'x'.repeat(LIMIT) });
        const res = await postInfer(small.url, 'simple', big);
        assert.match(errorOf(res, 400), /--http-max-input-size/);
        await assertGood(small);
      });

      test('a large declared body (1 MiB) is refused cleanly while the client is still sending', async () => {
        for (let i = 0; i < 3; i++) {
          const res = await postInfer(small.url, 'simple', Buffer.alloc(1 << 20, 0x20));
          assert.match(errorOf(res, 400), /exceeds the maximum input size of 4096 bytes.*--http-max-input-size/);
        }
        await assertGood(small);
      });

      test('a chunked body over the limit is 400 mentioning --http-max-input-size', async () => {
        const big = JSON.stringify({ inputs: [], pad: 'x'.repeat(2 * LIMIT) });
        const reply = await rawExchange(small.port, requestHead('chunked', 'Connection: close\r\n') + `${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n`);
        assert.match(reply, /^HTTP\/1\.1 400/);
        assert.match(reply, /--http-max-input-size/);
        await assertGood(small);
      });

      for (const [coding, compress] of [['gzip', gzipSync], ['deflate', deflateSync]] as const) {
        test(`a ${coding} bomb whose decompressed size exceeds the limit is 400`, async () => {
          const bomb = compress(Buffer.alloc(1 << 20, 0x20));
          assert.ok(bomb.byteLength < LIMIT);
          const res = await postInfer(small.url, 'simple', bomb, { 'Content-Encoding': coding });
          const message = errorOf(res, 400);
          assert.match(message, /--http-max-input-size/);
          assert.match(message, /decompressed/);
          await assertGood(small);
        });
      }

      test('a compressed request that fits once decompressed works', async () => {
        const res = await postInfer(small.url, 'simple', gzipSync(GOOD), { 'Content-Encoding': 'gzip' });
        assert.equal(res.status, 200, res.body.toString());
      });

      test('the default server accepts the same body the small one refuses', async () => {
        const padded = JSON.stringify({ id: 'x'.repeat(2 * LIMIT), ...JSON.parse(GOOD) });
        assert.equal((await postInfer(srv.url, 'simple', padded)).status, 200);
        assert.equal((await postInfer(small.url, 'simple', padded)).status, 400);
      });
    });

    describe('no crash on odd methods and paths', () => {
      test('HEAD, OPTIONS and DELETE on infer are 405; the server keeps serving', async () => {
        for (const method of ['OPTIONS', 'DELETE', 'PUT', 'PATCH']) {
          const res = await nodeRequest(srv.url, '/v2/models/simple/infer', { method });
          assert.equal(res.status, 405, method);
        }
        await assertGood(srv);
      });
    });
  });
}
