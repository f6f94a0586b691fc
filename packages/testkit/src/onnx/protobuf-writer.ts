/**
 * A small protobuf wire-format encoder (https://protobuf.dev/programming-guides/encoding/), enough
 * to write ONNX files: varints, fixed 32/64-bit values, length-delimited fields and packed
 * repeated scalars. Zigzag (sint32/sint64) is not needed by ONNX and is not provided.
 *
 * Integers: `int32`/`int64`/`uint64` fields all use plain varints. A negative value is written as
 * its 64-bit two's complement (10 bytes), which is what protobuf does for negative int32 and
 * int64. Values are JS numbers (safe integers) or bigints.
 *
 * Host byte order is assumed little-endian only where typed arrays are copied whole
 * (`packedFloatField` etc. with a typed array); scalar writes go through a DataView.
 */

/** Wire types (the low three bits of a field tag). */
export const WireType = {
  VARINT: 0,
  I64: 1,
  LEN: 2,
  I32: 5,
} as const;
export type WireType = (typeof WireType)[keyof typeof WireType];

const TWO_POW_32 = 0x1_0000_0000;

/** Appends protobuf wire data to a growable buffer; `finish()` returns the bytes written. */
export class ProtoWriter {
  #buf: Uint8Array;
  #view: DataView;
  #len = 0;

  constructor(initialCapacity = 256) {
    this.#buf = new Uint8Array(Math.max(16, initialCapacity));
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Bytes written so far. */
  get length(): number {
    return this.#len;
  }

  #reserve(n: number): void {
    const need = this.#len + n;
    if (need <= this.#buf.length) return;
    let cap = this.#buf.length * 2;
    while (cap < need) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.#buf.subarray(0, this.#len));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }

  /** A base-128 varint. Negative values are written as 64-bit two's complement. */
  varint(value: number | bigint): this {
    if (typeof value === 'number') {
      if (!Number.isSafeInteger(value)) {
        throw new RangeError(`varint value ${value} is not a safe integer (use a bigint)`);
      }
      if (value >= 0 && value < TWO_POW_32) {
        this.#reserve(5);
        let v = value >>> 0;
        while (v > 0x7f) {
          this.#buf[this.#len++] = (v & 0x7f) | 0x80;
          v >>>= 7;
        }
        this.#buf[this.#len++] = v;
        return this;
      }
      if (value >= 0) {
        this.#reserve(8);
        let v = value;
        while (v > 0x7f) {
          this.#buf[this.#len++] = (v % 128) | 0x80;
          v = Math.floor(v / 128);
        }
        this.#buf[this.#len++] = v;
        return this;
      }
      value = BigInt(value);
    }
    if (value < -(1n << 63n) || value >= 1n << 64n) {
      throw new RangeError(`varint value ${value} does not fit in 64 bits`);
    }
    let v = BigInt.asUintN(64, value);
    this.#reserve(10);
    while (v > 0x7fn) {
      this.#buf[this.#len++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.#buf[this.#len++] = Number(v);
    return this;
  }

  /** A field tag: `(field << 3) | wireType`. */
  tag(field: number, wireType: WireType): this {
    if (!Number.isInteger(field) || field < 1 || field > 0x1fffffff) {
      throw new RangeError(`invalid protobuf field number ${field}`);
    }
    return this.varint(field * 8 + wireType);
  }

  /** 4 bytes little-endian, unsigned (values 0 .. 2^32-1; negative int32 values are accepted too). */
  fixed32(value: number): this {
    this.#reserve(4);
    this.#view.setUint32(this.#len, value >>> 0, true);
    this.#len += 4;
    return this;
  }

  /** 8 bytes little-endian; a negative value is written as two's complement (sfixed64). */
  fixed64(value: number | bigint): this {
    this.#reserve(8);
    this.#view.setBigUint64(this.#len, BigInt.asUintN(64, BigInt(value)), true);
    this.#len += 8;
    return this;
  }

  /** IEEE 754 single, little-endian. */
  float(value: number): this {
    this.#reserve(4);
    this.#view.setFloat32(this.#len, value, true);
    this.#len += 4;
    return this;
  }

  /** IEEE 754 double, little-endian. */
  double(value: number): this {
    this.#reserve(8);
    this.#view.setFloat64(this.#len, value, true);
    this.#len += 8;
    return this;
  }

  /** Raw bytes, with no length prefix. */
  raw(bytes: Uint8Array): this {
    this.#reserve(bytes.length);
    this.#buf.set(bytes, this.#len);
    this.#len += bytes.length;
    return this;
  }

  // ---- whole fields --------------------------------------------------------------------------

  /** A varint field (int32, int64, uint32, uint64, enum). */
  varintField(field: number, value: number | bigint): this {
    return this.tag(field, WireType.VARINT).varint(value);
  }

  boolField(field: number, value: boolean): this {
    return this.tag(field, WireType.VARINT).varint(value ? 1 : 0);
  }

  fixed32Field(field: number, value: number): this {
    return this.tag(field, WireType.I32).fixed32(value);
  }

  fixed64Field(field: number, value: number | bigint): this {
    return this.tag(field, WireType.I64).fixed64(value);
  }

  floatField(field: number, value: number): this {
    return this.tag(field, WireType.I32).float(value);
  }

  doubleField(field: number, value: number): this {
    return this.tag(field, WireType.I64).double(value);
  }

  /** A length-delimited field holding `bytes` (a bytes field or an already encoded message). */
  bytesField(field: number, bytes: Uint8Array): this {
    return this.tag(field, WireType.LEN).varint(bytes.length).raw(bytes);
  }

  /** A length-delimited field holding `text` as UTF-8. */
  stringField(field: number, text: string): this {
    return this.bytesField(field, Buffer.from(text, 'utf8'));
  }

  /**
   * A nested message: `build` writes its fields into a fresh writer, whose bytes are then copied
   * in behind the tag and length.
   */
  messageField(field: number, build: (w: ProtoWriter) => void): this {
    const inner = new ProtoWriter();
    build(inner);
    return this.tag(field, WireType.LEN).varint(inner.#len).raw(inner.#buf.subarray(0, inner.#len));
  }

  /** A packed repeated varint field (repeated int32/int64/uint64/enum/bool). Empty lists write nothing. */
  packedVarintField(field: number, values: ArrayLike<number | bigint>): this {
    if (values.length === 0) return this;
    const inner = new ProtoWriter(values.length * 2);
    for (let i = 0; i < values.length; i++) inner.varint(values[i]!);
    return this.tag(field, WireType.LEN).varint(inner.#len).raw(inner.#buf.subarray(0, inner.#len));
  }

  /** A packed repeated float field. */
  packedFloatField(field: number, values: ArrayLike<number>): this {
    if (values.length === 0) return this;
    const data = values instanceof Float32Array ? values : Float32Array.from(values);
    return this.bytesField(field, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  /** A packed repeated double field. */
  packedDoubleField(field: number, values: ArrayLike<number>): this {
    if (values.length === 0) return this;
    const data = values instanceof Float64Array ? values : Float64Array.from(values);
    return this.bytesField(field, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  /** A packed repeated fixed32 field. */
  packedFixed32Field(field: number, values: ArrayLike<number>): this {
    if (values.length === 0) return this;
    this.tag(field, WireType.LEN).varint(values.length * 4);
    for (let i = 0; i < values.length; i++) this.fixed32(values[i]!);
    return this;
  }

  /** A packed repeated fixed64 field. */
  packedFixed64Field(field: number, values: ArrayLike<number | bigint>): this {
    if (values.length === 0) return this;
    this.tag(field, WireType.LEN).varint(values.length * 8);
    for (let i = 0; i < values.length; i++) this.fixed64(values[i]!);
    return this;
  }

  /** A copy of the bytes written so far. */
  finish(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}
