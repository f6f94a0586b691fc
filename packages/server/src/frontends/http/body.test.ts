import assert from 'node:assert/strict';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { BufferPool } from '../../core/buffer-pool.js';
import { nativeAddonMissing } from '../../core/native.js';
import { slabId } from '../../core/slabs.js';
import { BODY_ALIGNMENT, readBodyInto, type PooledBody } from './body.js';

const pool = new BufferPool({ shared: true, minBytes: 64 * 1024, maxBytes: 64 << 20 });
let server: Server;
let port: number;
/** What the server read for the last request. */
let last: { body: PooledBody; alignedOffset: number } | undefined;

before(async () => {
  server = createServer((req, res) => {
    const alignedOffset = Number(req.headers['x-aligned-offset'] ?? 0);
    readBodyInto(req, 1 << 30, pool, alignedOffset).then(
      (body) => {
        last = { body, alignedOffset };
        res.end('ok');
      },
      (err: Error) => res.writeHead(400).end(err.message),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

after(() => new Promise<void>((resolve) => server.close(() => resolve())));

function post(body: Buffer, alignedOffset: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', method: 'POST', headers: { 'Content-Length': body.byteLength, 'X-Aligned-Offset': alignedOffset } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(text));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function patterned(n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + 3) & 0xff;
  return b;
}

describe('readBodyInto', () => {
  for (const alignedOffset of [0, 1, 63, 64, 101, 1000]) {
    it(`places the body's byte ${alignedOffset} at a multiple of ${BODY_ALIGNMENT}, the bytes unchanged`, async () => {
      const sent = patterned(1 << 20);
      assert.equal(await post(sent, alignedOffset), 'ok');
      const { body } = last!;
      assert.equal((body.bytes.byteOffset + alignedOffset) % BODY_ALIGNMENT, 0);
      assert.ok(body.bytes.equals(sent), 'the body as sent');
      if (nativeAddonMissing() === undefined) assert.notEqual(slabId(body.bytes.buffer), undefined, 'a large body is read into a slab');
      body.release();
    });
  }

  it('an offset past the body leaves it at the start of its buffer', async () => {
    const sent = patterned(128 * 1024);
    assert.equal(await post(sent, 1 << 20), 'ok');
    assert.equal(last!.body.bytes.byteOffset, 0);
    assert.ok(last!.body.bytes.equals(sent));
    last!.body.release();
  });
});
