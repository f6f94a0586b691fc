/**
 * BYTES tensor element framing (protocol.md §2.3): each element is a 4-byte unsigned little-endian
 * length followed by that many bytes, concatenated with no terminator or padding. The same layout
 * serves HTTP binary blobs, gRPC raw contents and shared memory.
 */
import { NereidError } from './errors.js';

const MAX_ELEMENT_BYTES = 0xffffffff;

/**
 * Serializes elements to the §2.3 layout; strings are written as UTF-8. Returns a new Buffer the
 * caller owns (small results may share Node's allocation pool, as `Buffer.allocUnsafe` does).
 * Throws NereidError('INTERNAL') for an element longer than a 4-byte prefix can describe.
 */
export function encodeBytesElements(elements: readonly (Uint8Array | string)[]): Buffer {
  const n = elements.length;
  const lengths = new Float64Array(n);
  let total = 4 * n;
  for (let i = 0; i < n; i++) {
    const e = elements[i];
    const len = typeof e === 'string' ? Buffer.byteLength(e, 'utf8') : e.byteLength;
    if (len > MAX_ELEMENT_BYTES) {
      throw new NereidError('INTERNAL', `BYTES element ${i} is ${len} bytes, more than a 4-byte length prefix can describe`);
    }
    lengths[i] = len;
    total += len;
  }
  const out = Buffer.allocUnsafe(total);
  let off = 0;
  for (let i = 0; i < n; i++) {
    const e = elements[i];
    const len = lengths[i];
    out[off] = len;
    out[off + 1] = len >>> 8;
    out[off + 2] = len >>> 16;
    out[off + 3] = len >>> 24;
    off += 4;
    if (len > 0) {
      if (typeof e === 'string') out.write(e, off, len, 'utf8');
      else out.set(e, off);
      off += len;
    }
  }
  return out;
}

/**
 * Splits §2.3-framed data into its elements. Each element is a Buffer view over `data` (no copy):
 * it aliases the caller's memory and stays valid as long as that memory does.
 * Throws NereidError('INPUT_BYTES_ENCODING') naming `what` (e.g. "input 'INPUT0' of model
 * 'simple'"), the element index, its offset and the sizes when a length prefix is truncated or
 * overruns the data.
 */
export function decodeBytesElements(data: Uint8Array, what: string): Buffer[] {
  const buf = asBuffer(data);
  const end = buf.length;
  const out: Buffer[] = [];
  let off = 0;
  while (off < end) {
    const start = off + 4;
    const len = readLength(buf, off, end, out.length, what);
    out.push(buf.subarray(start, start + len));
    off = start + len;
  }
  return out;
}

/**
 * Number of elements in §2.3-framed data, validating the framing without allocating per element.
 * Throws exactly as `decodeBytesElements` does.
 */
export function countBytesElements(data: Uint8Array, what: string): number {
  const end = data.byteLength;
  let off = 0;
  let count = 0;
  while (off < end) {
    off += 4 + readLength(data, off, end, count, what);
    count++;
  }
  return count;
}

function readLength(data: Uint8Array, off: number, end: number, index: number, what: string): number {
  const left = end - off;
  if (left < 4) {
    throw new NereidError(
      'INPUT_BYTES_ENCODING',
      `${what}: BYTES element ${index} at offset ${off} has a truncated length prefix: ` +
        `${left} of its 4 bytes are present in the ${end}-byte data`,
    );
  }
  const len = (data[off] | (data[off + 1] << 8) | (data[off + 2] << 16)) + data[off + 3] * 0x1000000;
  if (len > left - 4) {
    throw new NereidError(
      'INPUT_BYTES_ENCODING',
      `${what}: BYTES element ${index} at offset ${off} declares ${len} bytes, ` +
        `but only ${left - 4} remain in the ${end}-byte data`,
    );
  }
  return len;
}

function asBuffer(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}
