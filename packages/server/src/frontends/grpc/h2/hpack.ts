/**
 * HPACK (RFC 7541): header compression for the HTTP/2 transport (connection.ts).
 *
 * The decoder reads every representation a peer may send: indexed fields, literals with and
 * without indexing and never-indexed ones, dynamic table size updates, Huffman-coded strings.
 * The encoder writes what a gRPC server sends: indexed fields where the static or dynamic table
 * has them, literals with incremental indexing for the few fields that repeat on every call
 * (`content-type`, `grpc-accept-encoding`, `grpc-status: 0`, …), and plain literals for the
 * rest (never Huffman-coded: the values are short, and encoding costs more than the bytes saved).
 */

/** A broken header block: the connection ends with COMPRESSION_ERROR (RFC 9113 §4.3). */
export class HpackError extends Error {}

/** The static table (RFC 7541 Appendix A), index 1 first. */
const STATIC: readonly (readonly [string, string])[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC.length;

/** Static index of each name (its first entry) and of each name and value pair. */
const STATIC_NAME = new Map<string, number>();
const STATIC_PAIR = new Map<string, number>();
STATIC.forEach(([name, value], i) => {
  if (!STATIC_NAME.has(name)) STATIC_NAME.set(name, i + 1);
  STATIC_PAIR.set(`${name}\0${value}`, i + 1);
});

/**
 * The Huffman code's length in bits of each octet (RFC 7541 Appendix B); the code is canonical
 * (codes of one length are consecutive, in symbol order, each length's first code following the
 * last of the shorter ones), so the lengths determine it. EOS, symbol 256, is 30 ones.
 */
const HUFFMAN_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
];

/** Canonical decoding tables: per code length, its first code, how many codes, and where its symbols start in SORTED. */
const MAX_CODE = 30;
const FIRST = new Int32Array(MAX_CODE + 1);
const COUNT = new Int32Array(MAX_CODE + 1);
const OFFSET = new Int32Array(MAX_CODE + 1);
const SORTED = new Uint8Array(256);
{
  const order = [...HUFFMAN_LENGTHS.keys()].sort((a, b) => HUFFMAN_LENGTHS[a]! - HUFFMAN_LENGTHS[b]! || a - b);
  order.forEach((symbol, i) => (SORTED[i] = symbol));
  for (const length of HUFFMAN_LENGTHS) COUNT[length]!++;
  let code = 0;
  let offset = 0;
  for (let length = 1; length <= MAX_CODE; length++) {
    FIRST[length] = code;
    OFFSET[length] = offset;
    code = (code + COUNT[length]!) << 1;
    offset += COUNT[length]!;
  }
}

/** Decodes Huffman-coded octets (`buf[start..end)`) as a Latin-1 string. */
export function huffmanDecode(buf: Uint8Array, start: number, end: number): string {
  const out = Buffer.allocUnsafe(Math.ceil(((end - start) * 8) / 5));
  let n = 0;
  let code = 0;
  let length = 0;
  for (let i = start; i < end; i++) {
    const byte = buf[i]!;
    for (let bit = 7; bit >= 0; bit--) {
      code = (code << 1) | ((byte >> bit) & 1);
      length++;
      if (length >= 5) {
        const d = code - FIRST[length]!;
        if (d < COUNT[length]!) {
          out[n++] = SORTED[OFFSET[length]! + d]!;
          code = 0;
          length = 0;
        } else if (length >= MAX_CODE) {
          // EOS, or no code at all: an error in a string (RFC 7541 §5.2).
          throw new HpackError('a Huffman-coded string holds EOS or an invalid code');
        }
      }
    }
  }
  // Padding: fewer than 8 bits, the most significant bits of EOS (all ones).
  if (length > 7 || code !== (1 << length) - 1) throw new HpackError('a Huffman-coded string ends in invalid padding');
  return out.toString('latin1', 0, n);
}

/** The Huffman-coded form of a Latin-1 string (tests, and peers that want it). */
export function huffmanEncode(text: string): Buffer {
  const bytes = Buffer.from(text, 'latin1');
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    const length = HUFFMAN_LENGTHS[b]!;
    let code = FIRST[length]!;
    // The symbol's rank among the codes of its length.
    for (let i = OFFSET[length]!; SORTED[i] !== b; i++) code++;
    for (let bit = length - 1; bit >= 0; bit--) {
      acc = (acc << 1) | ((code >>> bit) & 1);
      if (++bits === 8) {
        out.push(acc);
        acc = 0;
        bits = 0;
      }
    }
  }
  if (bits > 0) out.push(((acc << (8 - bits)) | ((1 << (8 - bits)) - 1)) & 0xff);
  return Buffer.from(out);
}

/** An entry's size as RFC 7541 §4.1 counts it: its octets (Latin-1: one per character) and 32. */
function entrySize(name: string, value: string): number {
  return 32 + name.length + value.length;
}

/** The dynamic table: entries newest last. */
class DynamicTable {
  readonly entries: [string, string][] = [];
  size = 0;
  constructor(public maxSize: number) {}

  add(name: string, value: string): void {
    const size = entrySize(name, value);
    if (size > this.maxSize) {
      // Larger than the table: it empties (§4.4).
      this.entries.length = 0;
      this.size = 0;
      return;
    }
    this.size += size;
    this.entries.push([name, value]);
    this.evict();
  }

  resize(maxSize: number): void {
    this.maxSize = maxSize;
    this.evict();
  }

  evict(): void {
    let drop = 0;
    while (this.size > this.maxSize) {
      const [name, value] = this.entries[drop++]!;
      this.size -= entrySize(name, value);
    }
    if (drop > 0) this.entries.splice(0, drop);
  }

  /** Dynamic index `i` (1: the newest). */
  get(i: number): [string, string] | undefined {
    return this.entries[this.entries.length - i];
  }
}

/** Decodes header blocks of one connection (its dynamic table lives across blocks). */
export class HpackDecoder {
  readonly #table: DynamicTable;
  /** The largest table size the peer may ask for: our SETTINGS_HEADER_TABLE_SIZE. */
  readonly #limit: number;

  constructor(limit = 4096) {
    this.#limit = limit;
    this.#table = new DynamicTable(limit);
  }

  /**
   * The header fields of a complete block, in order. Throws HpackError on anything malformed; the
   * caller then ends the connection, whose decoding state can no longer be trusted.
   */
  decode(block: Uint8Array): [string, string][] {
    const fields: [string, string][] = [];
    let pos = 0;
    const end = block.length;
    const int = (prefixBits: number): number => {
      const max = (1 << prefixBits) - 1;
      let value = block[pos++]! & max;
      if (value < max) return value;
      let shift = 0;
      for (;;) {
        if (pos >= end) throw new HpackError('a header block ends inside an integer');
        const b = block[pos++]!;
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if ((b & 0x80) === 0) break;
        if (shift > 28) throw new HpackError('an integer in a header block is too large');
      }
      if (value > 0x7fffffff) throw new HpackError('an integer in a header block is too large');
      return value;
    };
    const string = (): string => {
      if (pos >= end) throw new HpackError('a header block ends before a string');
      const huffman = (block[pos]! & 0x80) !== 0;
      const length = int(7);
      if (pos + length > end) throw new HpackError('a string runs past the end of its header block');
      const start = pos;
      pos += length;
      return huffman ? huffmanDecode(block, start, pos) : Buffer.from(block.buffer, block.byteOffset + start, length).toString('latin1');
    };
    const entry = (index: number): [string, string] => {
      if (index === 0) throw new HpackError('a header field refers to index 0');
      const e = index <= STATIC_COUNT ? STATIC[index - 1] : this.#table.get(index - STATIC_COUNT);
      if (e === undefined) throw new HpackError(`a header field refers to index ${index}, past the end of the table`);
      return e as [string, string];
    };
    while (pos < end) {
      const b = block[pos]!;
      if (b & 0x80) {
        const [name, value] = entry(int(7));
        fields.push([name, value]);
      } else if (b & 0x40) {
        const index = int(6);
        const name = index === 0 ? string() : entry(index)[0];
        const value = string();
        this.#table.add(name, value);
        fields.push([name, value]);
      } else if (b & 0x20) {
        // A size update may only open a block (§4.2).
        if (fields.length > 0) throw new HpackError('a dynamic table size update follows a header field');
        const size = int(5);
        if (size > this.#limit) throw new HpackError(`a dynamic table size update to ${size} exceeds the limit of ${this.#limit}`);
        this.#table.resize(size);
      } else {
        // Literal without indexing (0000) or never indexed (0001).
        const index = int(4);
        const name = index === 0 ? string() : entry(index)[0];
        fields.push([name, string()]);
      }
    }
    return fields;
  }
}

/** Header fields worth a place in the peer's dynamic table: the same on every call. */
const INDEXED_NAMES = new Set(['content-type', 'grpc-accept-encoding', 'grpc-encoding', 'grpc-status']);
/** A `grpc-status` other than 0 is rare; indexing it would only push out the ones that repeat. */
const INDEXED_VALUE_MAX = 64;

/** Encodes header blocks of one connection for the peer's decoder. */
export class HpackEncoder {
  readonly #table = new DynamicTable(4096);
  /** The smallest and the last size the peer allowed since the last block, to announce (§4.2). */
  #pendingMin = -1;
  #pendingLast = -1;

  /** The peer's SETTINGS_HEADER_TABLE_SIZE. Our table never grows past 4096. */
  setLimit(limit: number): void {
    const size = Math.min(limit, 4096);
    if (size === this.#table.maxSize && this.#pendingLast < 0) return;
    this.#pendingMin = this.#pendingMin < 0 ? size : Math.min(this.#pendingMin, size);
    this.#pendingLast = size;
    this.#table.resize(size);
  }

  /** One header block. Names must be lower-case; pseudo-header fields come first. */
  encode(fields: Iterable<readonly [string, string]>): Buffer {
    const out: number[] = [];
    const int = (value: number, prefixBits: number, first: number) => {
      const max = (1 << prefixBits) - 1;
      if (value < max) {
        out.push(first | value);
        return;
      }
      out.push(first | max);
      value -= max;
      while (value >= 0x80) {
        out.push((value & 0x7f) | 0x80);
        value = Math.floor(value / 128);
      }
      out.push(value);
    };
    const string = (text: string) => {
      int(Buffer.byteLength(text, 'latin1'), 7, 0);
      for (let i = 0; i < text.length; i++) out.push(text.charCodeAt(i) & 0xff);
    };
    if (this.#pendingLast >= 0) {
      if (this.#pendingMin < this.#pendingLast) int(this.#pendingMin, 5, 0x20);
      int(this.#pendingLast, 5, 0x20);
      this.#pendingMin = this.#pendingLast = -1;
    }
    const table = this.#table.entries;
    for (const [name, value] of fields) {
      const exact = STATIC_PAIR.get(`${name}\0${value}`);
      if (exact !== undefined) {
        int(exact, 7, 0x80);
        continue;
      }
      let dynamicIndex = 0;
      let nameIndex = STATIC_NAME.get(name) ?? 0;
      for (let i = table.length - 1; i >= 0; i--) {
        const e = table[i]!;
        if (e[0] !== name) continue;
        if (e[1] === value) {
          dynamicIndex = STATIC_COUNT + table.length - i;
          break;
        }
        if (nameIndex === 0) nameIndex = STATIC_COUNT + table.length - i;
      }
      if (dynamicIndex !== 0) {
        int(dynamicIndex, 7, 0x80);
        continue;
      }
      const indexed = INDEXED_NAMES.has(name) && value.length <= INDEXED_VALUE_MAX;
      int(nameIndex, indexed ? 6 : 4, indexed ? 0x40 : 0);
      if (nameIndex === 0) string(name);
      string(value);
      if (indexed) this.#table.add(name, value);
    }
    return Buffer.from(out);
  }
}
