/**
 * Test support: fuzz properties of Nereid's HTTP/2 transport (frontends/grpc/h2): the HPACK
 * decoder, the HPACK encoder against it, and a connection's frame reader.
 *
 * The claims: whatever bytes a client sends, the HPACK decoder returns header fields or throws
 * HpackError, and never returns more than its input could describe; what the encoder writes, the
 * decoder reads back exactly, block after block, while the peer's table size changes; and a
 * connection fed any sequence of frames never throws, writes only whole, well-formed frames (its
 * SETTINGS first), and writes nothing more once it has gone away.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import fc from 'fast-check';
import { H2Session, type H2Stream } from '../frontends/grpc/h2/connection.js';
import { HpackDecoder, HpackEncoder, HpackError, huffmanDecode, huffmanEncode } from '../frontends/grpc/h2/hpack.js';
import { property, type FuzzProperty } from './check.js';

const hpackHostile = property(
  'hpack-hostile',
  'the HPACK decoder returns header fields or throws HpackError for any bytes, and decodes no more than the bytes and its table can hold',
  fc.array(fc.uint8Array({ maxLength: 64 }), { minLength: 1, maxLength: 4 }),
  (blocks) => {
    const decoder = new HpackDecoder();
    for (const block of blocks) {
      let fields: [string, string][];
      try {
        fields = decoder.decode(block);
      } catch (err) {
        if (!(err instanceof HpackError)) throw err;
        return; // the connection would end here
      }
      // Each field is a static or dynamic entry (at most 4096 bytes) or literal bytes (Huffman
      // expands at most 8/5).
      for (const [name, value] of fields) assert.ok(name.length + value.length <= 4096 + (block.length * 8) / 5);
    }
  },
);

/** Header names and values as peers send them: lower-case tokens, printable Latin-1 values. */
const headerName = fc.oneof(
  fc.constantFrom(':status', 'content-type', 'grpc-status', 'grpc-message', 'grpc-accept-encoding', 'grpc-encoding', 'x-custom-bin', 'te'),
  fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/),
);
const headerValue = fc.oneof(
  fc.constantFrom('0', '200', 'application/grpc+proto', 'identity,deflate,gzip', ''),
  fc.string({ maxLength: 80 }).map((s) => s.replace(/[^\x20-\xff]/g, 'x')),
);

const hpackRoundTrip = property(
  'hpack-round-trip',
  'header blocks the HPACK encoder writes decode to exactly the fields given, across blocks and table size changes; Huffman coding round-trips any Latin-1 string',
  fc.array(
    fc.record({ fields: fc.array(fc.tuple(headerName, headerValue), { maxLength: 8 }), limit: fc.option(fc.constantFrom(0, 64, 256, 4096, 65_536)) }),
    { minLength: 1, maxLength: 6 },
  ),
  (blocks) => {
    const encoder = new HpackEncoder();
    const decoder = new HpackDecoder();
    for (const { fields, limit } of blocks) {
      if (limit !== null) encoder.setLimit(limit);
      assert.deepEqual(decoder.decode(encoder.encode(fields)), fields);
      for (const [, value] of fields) {
        const coded = huffmanEncode(value);
        assert.equal(huffmanDecode(coded, 0, coded.length), value);
      }
    }
  },
);

/**
 * What a session uses of its socket, recording what it writes: the frame reader runs
 * synchronously on bytes handed to `receive`, without a network in between.
 */
class RecordingSocket extends EventEmitter {
  readonly written: Buffer[] = [];
  destroyed = false;
  ended = false;
  writableLength = 0;
  writableHighWaterMark = 16_384;
  setNoDelay(): this {
    return this;
  }
  cork(): void {}
  uncork(): void {}
  writtenAfterEnd = false;
  write(chunk: Buffer): boolean {
    if (this.ended || this.destroyed) this.writtenAfterEnd = true;
    this.written.push(Buffer.from(chunk));
    return true;
  }
  end(): this {
    this.ended = true;
    return this;
  }
  destroy(): this {
    this.destroyed = true;
    return this;
  }
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

function frameBytes(type: number, flags: number, id: number, payload: Uint8Array): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id >>> 0, 5);
  return Buffer.concat([h, payload]);
}

/** A request header block the client's own encoder makes (valid or missing pieces). */
const requestBlock = fc
  .record({ path: fc.constantFrom('/s/M', '', '/x'), method: fc.constantFrom('POST', 'GET'), extra: fc.array(fc.tuple(headerName, headerValue), { maxLength: 3 }) })
  .map(({ path, method, extra }) => {
    const fields: [string, string][] = [[':method', method], [':scheme', 'http']];
    if (path !== '') fields.push([':path', path]);
    return new HpackEncoder().encode([...fields, ...extra]);
  });

const frameArb = fc.record({
  type: fc.oneof(fc.integer({ min: 0, max: 9 }), fc.constantFrom(0xb, 0xff)),
  flags: fc.oneof(fc.constantFrom(0, 0x1, 0x4, 0x5, 0x8, 0x20, 0x25), fc.integer({ min: 0, max: 255 })),
  id: fc.constantFrom(0, 1, 2, 3, 5, 7, 0x7fffffff, 0x80000001),
  payload: fc.oneof(fc.uint8Array({ maxLength: 40 }), requestBlock, fc.constantFrom(Buffer.alloc(8), Buffer.alloc(4, 0xff), Buffer.from([0, 0, 0, 1]), Buffer.alloc(6))),
});

const framesHostile = property(
  'h2-frames-hostile',
  'an HTTP/2 connection fed any frames, split anywhere, never throws, writes only whole frames within the frame size (SETTINGS first), and nothing after it went away',
  fc.record({ frames: fc.array(frameArb, { maxLength: 12 }), split: fc.integer({ min: 1, max: 64 }), respond: fc.boolean() }),
  ({ frames, split, respond }) => {
    const socket = new RecordingSocket();
    const session = new H2Session(socket as unknown as Socket, { maxConcurrentStreams: 2, initialWindowSize: 1 << 20, connectionWindowSize: 1 << 22 });
    session.on('error', () => undefined);
    session.on('stream', (stream: H2Stream) => {
      stream.on('data', () => undefined);
      if (respond) {
        stream.respond({ ':status': 200 }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.write(Buffer.alloc(100, 1));
        stream.end();
      }
    });
    const bytes = Buffer.concat([PREFACE, frameBytes(4, 0, 0, Buffer.alloc(0)), ...frames.map((f) => frameBytes(f.type, f.flags, f.id, f.payload))]);
    for (let at = 0; at < bytes.length; at += split) session.receive(bytes.subarray(at, at + split));
    // The end-of-turn write, now: a property is synchronous.
    session.flushNow();
    assert.ok(!socket.writtenAfterEnd, 'a write after the connection ended');
    const out = Buffer.concat(socket.written);
    let at = 0;
    let first = true;
    while (at < out.length) {
      assert.ok(out.length - at >= 9, 'a partial frame header');
      const length = out.readUIntBE(at, 3);
      assert.ok(length <= 16_384, `a frame of ${length} bytes`);
      assert.ok(out.length - at - 9 >= length, 'a partial frame');
      if (first) assert.equal(out[at + 3], 4, 'the first frame is SETTINGS');
      first = false;
      at += 9 + length;
    }
  },
);

export const H2_PROPERTIES: readonly FuzzProperty[] = [hpackHostile, hpackRoundTrip, framesHostile];
