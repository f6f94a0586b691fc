import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HpackDecoder, HpackEncoder, HpackError, huffmanDecode, huffmanEncode } from './hpack.js';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('HPACK decoding (RFC 7541 Appendix C)', () => {
  it('C.2.1: a literal with indexing enters the dynamic table, and later blocks refer to it', () => {
    const d = new HpackDecoder();
    assert.deepEqual(d.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572')), [['custom-key', 'custom-header']]);
    // Index 62: the newest dynamic entry.
    assert.deepEqual(d.decode(hex('be')), [['custom-key', 'custom-header']]);
  });

  it('C.3: three requests without Huffman coding, sharing one dynamic table', () => {
    const d = new HpackDecoder();
    assert.deepEqual(d.decode(hex('8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d')), [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
    ]);
    assert.deepEqual(d.decode(hex('8286 84be 5808 6e6f 2d63 6163 6865')), [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ]);
    assert.deepEqual(d.decode(hex('8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65')), [
      [':method', 'GET'],
      [':scheme', 'https'],
      [':path', '/index.html'],
      [':authority', 'www.example.com'],
      ['custom-key', 'custom-value'],
    ]);
  });

  it('C.4: the same requests with Huffman-coded strings', () => {
    const d = new HpackDecoder();
    assert.deepEqual(d.decode(hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff')).at(-1), [':authority', 'www.example.com']);
    assert.deepEqual(d.decode(hex('8286 84be 5886 a8eb 1064 9cbf')).at(-1), ['cache-control', 'no-cache']);
    assert.deepEqual(d.decode(hex('8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf')).at(-1), ['custom-key', 'custom-value']);
  });

  it('reads never-indexed literals and keeps them out of the table', () => {
    const d = new HpackDecoder();
    // 0x10: never indexed, new name "password", value "secret".
    assert.deepEqual(d.decode(hex('1008 7061 7373 776f 7264 0673 6563 7265 74')), [['password', 'secret']]);
    assert.throws(() => d.decode(hex('be')), /index 62, past the end of the table/);
  });

  it('refuses index 0, indexes past the table, a size update above the limit or after a field, and truncated input', () => {
    const d = new HpackDecoder(4096);
    assert.throws(() => d.decode(hex('80')), HpackError);
    assert.throws(() => d.decode(hex('ff00')), /past the end of the table/);
    assert.throws(() => d.decode(hex('3fe21f')), /exceeds the limit of 4096/); // 31 + 4066 + ... > 4096
    assert.throws(() => d.decode(hex('82 20')), /size update follows a header field/);
    assert.throws(() => d.decode(hex('400a 6375 73')), /runs past the end/);
    assert.throws(() => d.decode(hex('7f')), /ends inside an integer/);
    assert.throws(() => d.decode(hex('7fffffffffff0f')), /too large/);
  });

  it('a size update evicts: entries past the new size are gone', () => {
    const d = new HpackDecoder();
    d.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'));
    assert.deepEqual(d.decode(hex('20 3f e1 1f')), []); // to 0, then back to 4096
    assert.throws(() => d.decode(hex('be')), /past the end of the table/);
  });
});

describe('Huffman coding (RFC 7541 Appendix B)', () => {
  it('round-trips every octet', () => {
    const all = String.fromCharCode(...Array.from({ length: 256 }, (_, i) => i));
    const coded = huffmanEncode(all);
    assert.equal(huffmanDecode(coded, 0, coded.length), all);
    assert.deepEqual(huffmanEncode('www.example.com'), hex('f1e3 c2e5 f23a 6ba0 ab90 f4ff'));
  });

  it('refuses padding longer than 7 bits, padding that is not all ones, and EOS', () => {
    // "a" is 00011 (5 bits); padded with 3 ones: 0x1f.
    assert.equal(huffmanDecode(hex('1f'), 0, 1), 'a');
    assert.throws(() => huffmanDecode(hex('18'), 0, 1), /invalid padding/);
    assert.throws(() => huffmanDecode(hex('1fff'), 0, 2), /invalid padding/);
    assert.throws(() => huffmanDecode(hex('ffff fffc'), 0, 4), /EOS or an invalid code/);
  });
});

describe('HPACK encoding', () => {
  it('round-trips through a decoder, indexing the fields that repeat and announcing size changes', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    const response: [string, string][] = [
      [':status', '200'],
      ['content-type', 'application/grpc+proto'],
      ['grpc-accept-encoding', 'identity,deflate,gzip'],
    ];
    const first = e.encode(response);
    assert.deepEqual(d.decode(first), response);
    const second = e.encode(response);
    assert.equal(second.length, 3, 'the repeated fields are one byte each');
    assert.deepEqual(d.decode(second), response);
    const trailers: [string, string][] = [
      ['grpc-status', '13'],
      ['grpc-message', 'a long message that changes %25 from call to call'],
      ['x-custom', 'v'],
    ];
    assert.deepEqual(d.decode(e.encode(trailers)), trailers);
    // The peer shrinks its table to 0: the next block opens with a size update and indexes nothing.
    e.setLimit(0);
    const afterShrink = e.encode(response);
    assert.equal(afterShrink[0], 0x20);
    assert.deepEqual(d.decode(afterShrink), response);
  });

  it('writes integers past their prefix and long strings', () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    const fields: [string, string][] = [['x-long', 'v'.repeat(5000)]];
    assert.deepEqual(d.decode(e.encode(fields)), fields);
  });
});
