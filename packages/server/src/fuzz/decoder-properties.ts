/**
 * Test support: fuzz properties of the request decoders — the HTTP JSON inference header with
 * its tensors and parameters, the binary-data framing, the gRPC ModelInferRequest → facade request
 * conversion, request validation behind both, and the shared-memory register bodies and keys.
 *
 * The claims: whatever the bytes, a decoder returns or throws a NereidError of a client-error kind
 * (never a TypeError, a RangeError from an allocation, or an internal error, except the one Triton
 * itself reports as internal); what it decodes never holds more bytes than the request could
 * describe; and valid requests come back exactly as they were sent.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  DATATYPES,
  elementSize,
  encodeBytesElements,
  pb,
  splitInferenceBody,
  type DataType,
} from '@nereid/protocol';
import { shmKeyPath } from '../core/shared-memory.js';
import { interpretParameters } from '../core/request-parameters.js';
import { validateRequest, type ModelIOSpec, type TensorSpec } from '../core/request-validation.js';
import type { InferInput, InferRequest, SharedMemoryInput } from '../core/types.js';
import { decodeInferRequest } from '../frontends/grpc/infer-codec.js';
import { decodeJsonInferRequest } from '../frontends/http/infer-codec.js';
import { decodeCudaRegister, decodeSystemRegister } from '../frontends/http/shared-memory-codec.js';
import { holds, onlyTypedErrors, property, type FuzzProperty } from './check.js';

// ---------------------------------------------------------------------------------------------
// Shared arbitraries

/** Numbers a hostile client would try: boundaries, huge, negative, fractional, non-finite. */
const hostileNumber: fc.Arbitrary<number> = fc.oneof(
  fc.integer({ min: -4, max: 64 }),
  fc.constantFrom(-1, 0, 1, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 53 - 1, 2 ** 53, 2 ** 53 + 2, 2 ** 64, -0, 0.5, 1.5, 1e308, -1e308),
  fc.double(),
);

/** JSON text of a leaf: numbers (exact 64-bit integers beyond doubles too), strings, bools, null. */
const hostileLeafText: fc.Arbitrary<string> = fc.oneof(
  hostileNumber.map((n) => (Number.isFinite(n) ? JSON.stringify(n) : 'null')),
  fc.bigInt({ min: -(1n << 70n), max: 1n << 70n }).map(String),
  fc.constantFrom('18446744073709551615', '18446744073709551616', '-9223372036854775809', '1e999', '-0', '0.0', '1E2'),
  fc.string({ maxLength: 8 }).map((s) => JSON.stringify(s)),
  fc.constantFrom('true', 'false', 'null', '{}', '[]'),
);

/** JSON text of nested arrays of leaves. */
const hostileDataText: fc.Arbitrary<string> = fc.letrec<{ node: string }>((tie) => ({
  node: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    hostileLeafText,
    fc.array(tie('node'), { maxLength: 6 }).map((items) => `[${items.join(',')}]`),
  ),
})).node;

/** JSON text of an object whose listed keys (some present, some not) take `value` texts. */
function objectText(keys: readonly string[], value: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc
    .array(fc.tuple(fc.oneof(fc.constantFrom(...keys), fc.string({ maxLength: 6 })), value), { maxLength: keys.length + 1 })
    .map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`);
}

const datatypeText = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...DATATYPES) }, { weight: 1, arbitrary: fc.string({ maxLength: 5 }) }).map((d) => JSON.stringify(d));
const nameText = fc.oneof({ weight: 4, arbitrary: fc.constantFrom('INPUT0', 'INPUT1', 'OUTPUT0', 'OUTPUT1') }, { weight: 1, arbitrary: fc.string({ maxLength: 6 }) }).map((n) => JSON.stringify(n));
const shapeText = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.nat(20), { maxLength: 4 }).map((dims) => JSON.stringify(dims)) },
  { weight: 2, arbitrary: fc.array(hostileLeafText, { maxLength: 5 }).map((dims) => `[${dims.join(',')}]`) },
  { weight: 1, arbitrary: hostileLeafText },
);
const paramValueText = fc.oneof(hostileLeafText, fc.constantFrom('"region0"', '"no_such_region"'));
const inputParamsText = objectText(['binary_data_size', 'shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset'], paramValueText);
const outputParamsText = objectText(['binary_data', 'classification', 'shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset'], paramValueText);
const requestParamsText = objectText(['priority', 'timeout', 'sequence_id', 'sequence_start', 'sequence_end', 'binary_data_output', 'triton_x', 'custom'], hostileLeafText);

const inputText = fc
  .record(
    { name: nameText, datatype: datatypeText, shape: shapeText, data: hostileDataText, parameters: fc.oneof(inputParamsText, hostileLeafText) },
    { requiredKeys: [] },
  )
  .map((fields) => `{${Object.entries(fields).map(([k, v]) => `"${k}":${v}`).join(',')}}`);
const outputText = fc
  .record({ name: nameText, parameters: fc.oneof(outputParamsText, hostileLeafText) }, { requiredKeys: [] })
  .map((fields) => `{${Object.entries(fields).map(([k, v]) => `"${k}":${v}`).join(',')}}`);

/** A JSON inference header: mostly request-shaped, sometimes cut short or not JSON at all. */
const headerText: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .record(
        {
          id: fc.oneof(fc.string({ maxLength: 6 }).map((s) => JSON.stringify(s)), hostileLeafText),
          inputs: fc.oneof({ weight: 5, arbitrary: fc.array(inputText, { maxLength: 4 }).map((xs) => `[${xs.join(',')}]`) }, { weight: 1, arbitrary: hostileLeafText }),
          outputs: fc.oneof(fc.array(outputText, { maxLength: 3 }).map((xs) => `[${xs.join(',')}]`), hostileLeafText),
          parameters: fc.oneof(requestParamsText, hostileLeafText),
        },
        { requiredKeys: [] },
      )
      .map((fields) => `{${Object.entries(fields).map(([k, v]) => `"${k}":${v}`).join(',')}}`),
  },
  { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 60 }), fc.nat()).map(([s, cut]) => `{"inputs":[${s}`.slice(0, 10 + (cut % 60))) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)) },
);

/** Request validation specs the decoded requests are checked against, as the server would. */
function tensor(name: string, datatype: DataType, dims: number[]): TensorSpec {
  return { name, datatype, dims, reshape: undefined, optional: false };
}
const SPECS: readonly ModelIOSpec[] = [
  {
    model: 'simple',
    version: 1,
    maxBatchSize: 8,
    inputs: new Map([['INPUT0', tensor('INPUT0', 'INT32', [16])], ['INPUT1', tensor('INPUT1', 'INT32', [16])]]),
    requiredInputs: ['INPUT0', 'INPUT1'],
    outputs: new Map([['OUTPUT0', tensor('OUTPUT0', 'INT32', [16])], ['OUTPUT1', tensor('OUTPUT1', 'INT32', [16])]]),
    outputOrder: ['OUTPUT0', 'OUTPUT1'],
  },
  {
    model: 'variable',
    version: 1,
    maxBatchSize: 0,
    inputs: new Map([['INPUT0', tensor('INPUT0', 'FP32', [-1, -1])]]),
    requiredInputs: ['INPUT0'],
    outputs: new Map([['OUTPUT0', tensor('OUTPUT0', 'FP32', [-1, -1])]]),
    outputOrder: ['OUTPUT0'],
  },
  {
    model: 'strings',
    version: 1,
    maxBatchSize: 4,
    inputs: new Map([['INPUT0', tensor('INPUT0', 'BYTES', [-1])]]),
    requiredInputs: ['INPUT0'],
    outputs: new Map([['OUTPUT0', tensor('OUTPUT0', 'BYTES', [-1])]]),
    outputOrder: ['OUTPUT0'],
  },
];

const isShared = (input: InferInput | SharedMemoryInput): input is SharedMemoryInput => 'sharedMemory' in input;

/**
 * A decoded input is the tensor that was sent: name, datatype, shape and bytes. With `viewOf`,
 * its bytes must be a view of that buffer (the request's), not a copy.
 */
function assertDecodedAs(
  input: InferInput | SharedMemoryInput,
  sent: { name: string; datatype: string; shape: readonly number[]; bytes: Buffer },
  what: string,
  viewOf: ArrayBufferLike | undefined,
): void {
  assert.ok(!isShared(input));
  assert.equal(input.name, sent.name);
  assert.equal(input.datatype, sent.datatype);
  assert.deepEqual(input.shape, sent.shape);
  const data = input.data as Uint8Array;
  assert.ok(Buffer.from(data.buffer, data.byteOffset, data.byteLength).equals(sent.bytes), `${what} bytes differ`);
  if (viewOf !== undefined && sent.bytes.byteLength > 0) assert.equal(data.buffer, viewOf, `${what} was copied`);
}

function byteLengthOf(input: InferInput): number {
  const data = input.data;
  if (ArrayBuffer.isView(data)) return data.byteLength;
  return encodeBytesElements(data as readonly (string | Uint8Array)[]).byteLength;
}

/** What the server does with a decoded request before it queues it: parameters, then validation. */
function validateAsServer(request: InferRequest, spec: ModelIOSpec): void {
  interpretParameters(request.parameters, spec.model);
  if (request.inputs.some(isShared)) return;
  validateRequest(spec, request.inputs as InferInput[], request.outputs);
}

// ---------------------------------------------------------------------------------------------
// HTTP

/** A JSON text fragment written as it is (a hostile value, or an exact integer beyond doubles). */
class Raw {
  constructor(readonly text: string) {}
}

function jsonText(value: unknown): string {
  if (value instanceof Raw) return value.text;
  if (Array.isArray(value)) return `[${value.map(jsonText).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value as Record<string, unknown>).map(([k, v]) => `${JSON.stringify(k)}:${jsonText(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}


/** One edit a hostile client makes to a good request. */
interface HttpEdit {
  op: number;
  i: number;
  j: number;
  key: string;
  value: string;
}

const httpEdit: fc.Arbitrary<HttpEdit> = fc.record({
  op: fc.nat(10),
  i: fc.nat(3),
  j: fc.nat(3),
  key: fc.constantFrom('name', 'datatype', 'shape', 'data', 'parameters', 'binary_data_size', 'shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset', 'priority', 'timeout', 'sequence_id', 'sequence_start', 'binary_data_output', 'triton_x', 'custom', 'classification', 'binary_data', 'id', 'inputs', 'outputs'),
  value: fc.oneof(hostileLeafText, hostileDataText, fc.constantFrom('"region0"', '"INPUT0"', '"INT32"', '"BYTES"', '"FP16"', '[1,16]', '[2,16]', '[0]')),
});

/** A good request for `spec` (each input as JSON data or a binary blob), then `edits` applied. */
function nearValidHttp(spec: ModelIOSpec, rows: number, asBinary: boolean[], edits: readonly HttpEdit[]): { header: Buffer; binary: Buffer } {
  const blobs: Buffer[] = [];
  const inputs = [...spec.inputs.values()].map((t, k) => {
    const dims = t.dims.map((d, n) => (d === -1 ? (n + rows) % 3 : d));
    const shape = spec.maxBatchSize > 0 ? [rows, ...dims] : dims;
    const count = shape.reduce((a, b) => a * b, 1);
    const values = Array.from({ length: count }, (_, n) => (t.datatype === 'BYTES' ? `s${n}` : n));
    const input: Record<string, unknown> = { name: t.name, datatype: t.datatype, shape };
    if (asBinary[k]) {
      const blob = t.datatype === 'BYTES' ? encodeBytesElements(values as string[]) : t.datatype === 'FP32' ? Buffer.from(Float32Array.from(values as number[]).buffer) : Buffer.from(Int32Array.from(values as number[]).buffer);
      blobs.push(blob);
      input.parameters = { binary_data_size: blob.byteLength };
    } else {
      input.data = values;
    }
    return input;
  });
  const doc: Record<string, unknown> = {};
  let list = inputs;
  let extra = 0;
  let cut = 0;
  for (const e of edits) {
    const input = list.length === 0 ? undefined : list[e.i % list.length];
    const value = new Raw(e.value);
    switch (e.op) {
      case 0: // an input field
        if (input) input[e.key] = value;
        break;
      case 1: // a dimension
        if (input && Array.isArray(input.shape)) {
          const shape = [...(input.shape as unknown[])];
          shape[e.j % Math.max(1, shape.length)] = value;
          input.shape = shape;
        }
        break;
      case 2: // an input parameter
        if (input) input.parameters = { ...(input.parameters instanceof Raw || typeof input.parameters !== 'object' ? {} : input.parameters), [e.key]: value };
        break;
      case 3: // a request parameter
        doc.parameters = { ...(doc.parameters instanceof Raw ? {} : (doc.parameters as object | undefined)), [e.key]: value };
        break;
      case 4: // a requested output
        doc.outputs = [...(Array.isArray(doc.outputs) ? (doc.outputs as unknown[]) : []), { name: e.j % 2 === 0 ? 'OUTPUT0' : 'NOPE', parameters: { [e.key]: value } }];
        break;
      case 5: // a top-level field
        doc[e.key] = value;
        break;
      case 6: // an input dropped
        list = list.filter((_, n) => n !== e.i % Math.max(1, list.length));
        break;
      case 7: // an input twice
        if (input) list = [...list, { ...input }];
        break;
      case 8: // the binary data longer or shorter
        if (e.j % 2 === 0) extra += e.i + 1;
        else cut += e.i + 1;
        break;
      case 9: // a data element replaced
        if (input && Array.isArray(input.data) && input.data.length > 0) {
          const data = [...(input.data as unknown[])];
          data[e.j % data.length] = value;
          input.data = data;
        }
        break;
      default: // the data nested one level deeper
        if (input && input.data !== undefined) input.data = [input.data];
    }
  }
  if (doc.inputs === undefined) doc.inputs = list;
  const binary = Buffer.concat([...blobs, Buffer.alloc(extra, 7)]);
  return { header: Buffer.from(jsonText(doc)), binary: binary.subarray(0, Math.max(0, binary.byteLength - cut)) };
}

const httpRequestBytes: fc.Arbitrary<{ header: Buffer; binary: Buffer; spec: ModelIOSpec }> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .tuple(fc.constantFrom(...SPECS), fc.integer({ min: 0, max: 2 }), fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }), fc.array(httpEdit, { maxLength: 3 }))
      .map(([spec, rows, asBinary, edits]) => ({ ...nearValidHttp(spec, rows, asBinary, edits), spec })),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(headerText, fc.uint8Array({ maxLength: 96 }), fc.constantFrom(...SPECS)).map(([text, binary, spec]) => ({ header: Buffer.from(text), binary: Buffer.from(binary), spec })),
  },
);

const httpHostile = property(
  'http-json-request',
  'a JSON inference header and binary data, however malformed, decode or fail with a client-error NereidError; decoded tensors hold at most 8 bytes per header byte plus the binary bytes, blobs are views of the body; validation behind it fails the same way',
  httpRequestBytes,
  ({ header, binary, spec }) => {
    onlyTypedErrors(() => {
      const decoded = decodeJsonInferRequest(header, binary, spec.model, undefined);
      let bytes = 0;
      for (const input of decoded.request.inputs) {
        if (isShared(input)) {
          holds(Number.isSafeInteger(input.sharedMemory.byteSize) && input.sharedMemory.byteSize >= 0, () => `shared-memory byte size ${input.sharedMemory.byteSize}`);
          holds(Number.isSafeInteger(input.sharedMemory.offset ?? 0) && (input.sharedMemory.offset ?? 0) >= 0, () => `shared-memory offset ${input.sharedMemory.offset}`);
          continue;
        }
        for (const d of input.shape) holds(Number.isSafeInteger(d) && d >= 0, () => `input '${input.name}' decoded with dimension ${d}`);
        bytes += byteLengthOf(input);
      }
      holds(bytes <= 8 * header.byteLength + binary.byteLength, () => `decoded ${bytes} bytes of tensors from a ${header.byteLength}-byte header and ${binary.byteLength} binary bytes`);
      validateAsServer(decoded.request, spec);
    }, ['REQUEST_JSON_DATA']);
  },
);

/** A tensor that fits its datatype, with its exact bytes and JSON text. */
interface ValidTensor {
  name: string;
  datatype: DataType;
  shape: number[];
  bytes: Buffer;
  json: string;
}

const JSON_DATATYPES = ['BOOL', 'INT8', 'INT16', 'INT32', 'INT64', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'FP32', 'FP64', 'BYTES'] as const;

function validTensor(name: string): fc.Arbitrary<ValidTensor> {
  return fc
    .tuple(fc.constantFrom(...JSON_DATATYPES), fc.array(fc.nat(3), { minLength: 0, maxLength: 3 }))
    .chain(([datatype, shape]) => {
      const count = shape.reduce((a, b) => a * b, 1);
      return elementsOf(datatype, count).map(({ bytes, json }) => ({ name, datatype, shape, bytes, json }));
    });
}

function fixedLeaves<T>(count: number, leaf: fc.Arbitrary<T>, write: (values: T[]) => Buffer, text: (v: T) => string): fc.Arbitrary<{ bytes: Buffer; json: string }> {
  return fc.array(leaf, { minLength: count, maxLength: count }).map((values) => ({ bytes: write(values), json: `[${values.map(text).join(',')}]` }));
}

function elementsOf(datatype: (typeof JSON_DATATYPES)[number], count: number): fc.Arbitrary<{ bytes: Buffer; json: string }> {
  const view = (a: ArrayBufferView): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  const int = (min: number, max: number, Ctor: { from(values: number[]): ArrayBufferView }) =>
    fixedLeaves(count, fc.integer({ min, max }), (v) => view(Ctor.from(v)), String);
  switch (datatype) {
    case 'BOOL':
      return fixedLeaves(count, fc.boolean(), (v) => Buffer.from(v.map((b) => (b ? 1 : 0))), String);
    case 'INT8':
      return int(-128, 127, Int8Array);
    case 'INT16':
      return int(-32768, 32767, Int16Array);
    case 'INT32':
      return int(-(2 ** 31), 2 ** 31 - 1, Int32Array);
    case 'UINT8':
      return int(0, 255, Uint8Array);
    case 'UINT16':
      return int(0, 65535, Uint16Array);
    case 'UINT32':
      return int(0, 2 ** 32 - 1, Uint32Array);
    case 'INT64':
      return fixedLeaves(count, fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }), (v) => view(BigInt64Array.from(v)), String);
    case 'UINT64':
      return fixedLeaves(count, fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (v) => view(BigUint64Array.from(v)), String);
    case 'FP32':
      return fixedLeaves(count, fc.float({ noNaN: true, noDefaultInfinity: true }).map((x) => (x === 0 ? 0 : x)), (v) => view(Float32Array.from(v)), (x) => JSON.stringify(x));
    case 'FP64':
      return fixedLeaves(count, fc.double({ noNaN: true, noDefaultInfinity: true }).map((x) => (x === 0 ? 0 : x)), (v) => view(Float64Array.from(v)), (x) => JSON.stringify(x));
    case 'BYTES':
      return fixedLeaves(count, fc.string({ maxLength: 6 }), (v) => encodeBytesElements(v), (s) => JSON.stringify(s));
  }
}

const httpRoundTrip = property(
  'http-json-round-trip',
  'valid tensors sent as JSON data or binary blobs (any mix), with request parameters, decode to exactly their names, datatypes, shapes, bytes and parameters; blobs stay views of the body',
  fc.tuple(
    fc.array(fc.tuple(validTensor('T'), fc.boolean()), { minLength: 1, maxLength: 4 }),
    fc.record({ priority: fc.nat(), timeout: fc.nat(), custom: fc.string({ maxLength: 5 }), flag: fc.boolean() }, { requiredKeys: [] }),
  ),
  ([tensors, parameters]) => {
    const named = tensors.map(([t, binary], i) => ({ ...t, name: `IN${i}`, binary }));
    const inputs = named.map((t) =>
      t.binary
        ? `{"name":"${t.name}","datatype":"${t.datatype}","shape":${JSON.stringify(t.shape)},"parameters":{"binary_data_size":${t.bytes.byteLength}}}`
        : `{"name":"${t.name}","datatype":"${t.datatype}","shape":${JSON.stringify(t.shape)},"data":${t.json}}`,
    );
    const header = Buffer.from(`{"id":"r","parameters":${JSON.stringify(parameters)},"inputs":[${inputs.join(',')}]}`);
    const body = Buffer.concat([header, ...named.filter((t) => t.binary).map((t) => t.bytes)]);
    const parts = splitInferenceBody(body, String(header.byteLength));
    const { request } = decodeJsonInferRequest(parts.header, parts.binary, 'm', '3');
    assert.equal(request.model, 'm');
    assert.equal(request.version, '3');
    assert.equal(request.id, 'r');
    assert.deepEqual(request.parameters ?? {}, parameters);
    assert.equal(request.inputs.length, named.length);
    request.inputs.forEach((input, i) => {
      const t = named[i]!;
      assertDecodedAs(input, t, `input ${t.name} (${t.datatype})`, t.binary ? body.buffer : undefined);
    });
  },
);

const framing = property(
  'binary-data-framing',
  'any Inference-Header-Content-Length value splits a body into header and binary parts that are views and add up to the body, or fails with a client-error NereidError',
  fc.tuple(fc.uint8Array({ maxLength: 64 }), fc.oneof(fc.nat(80).map(String), fc.string({ maxLength: 24 }), fc.constantFrom('-1', ' 5', '5 ', '0x10', '1e1', '18446744073709551616', '')),
  ),
  ([body, value]) => {
    onlyTypedErrors(() => {
      const parts = splitInferenceBody(body, value);
      holds(parts.header.byteLength + parts.binary.byteLength === body.byteLength, () => 'the parts do not add up to the body');
      holds(parts.header.buffer === body.buffer && parts.binary.buffer === body.buffer, () => 'a part was copied');
      holds(parts.rawBinary === (parts.header.byteLength === 0 && Number(value.trim()) === 0), () => 'raw binary mode set wrongly');
    });
  },
);

// ---------------------------------------------------------------------------------------------
// gRPC

const int64Dim = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 20n }) },
  { weight: 1, arbitrary: fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }) },
  { weight: 1, arbitrary: fc.constantFrom(-1n, 1n << 31n, 1n << 40n, 1n << 53n, (1n << 53n) - 1n, (1n << 63n) - 1n) },
);

const inferParameter: fc.Arbitrary<pb.InferParameter> = fc.oneof(
  fc.boolean().map((bool_param) => ({ bool_param })),
  fc.oneof(int64Dim, fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n })).map((int64_param) => ({ int64_param })),
  fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom('region0', 'no_such_region')).map((string_param) => ({ string_param })),
  fc.double().map((double_param) => ({ double_param })),
  fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }).map((uint64_param) => ({ uint64_param })),
  fc.constant({}),
);

function parameterMap(keys: readonly string[]): fc.Arbitrary<Record<string, pb.InferParameter>> {
  return fc.dictionary(fc.oneof(fc.constantFrom(...keys), fc.string({ maxLength: 5 })), inferParameter, { maxKeys: keys.length });
}

const contents: fc.Arbitrary<pb.InferTensorContents> = fc.record({
  bool_contents: fc.array(fc.boolean(), { maxLength: 20 }),
  int_contents: fc.array(fc.integer(), { maxLength: 20 }),
  int64_contents: fc.array(fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }), { maxLength: 20 }),
  uint_contents: fc.array(fc.nat(), { maxLength: 20 }),
  uint64_contents: fc.array(fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), { maxLength: 20 }),
  fp32_contents: fc.array(fc.float(), { maxLength: 20 }),
  fp64_contents: fc.array(fc.double(), { maxLength: 20 }),
  bytes_contents: fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 20 }),
}).chain((all) =>
  // Mostly one list set (as a client would), sometimes several.
  fc.subarray(Object.keys(all) as (keyof pb.InferTensorContents)[], { maxLength: 2 }).map((keep) => {
    const out: pb.InferTensorContents = { bool_contents: [], int_contents: [], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [] };
    for (const k of keep) (out as unknown as Record<string, unknown>)[k] = all[k];
    return out;
  }),
);

const grpcInput: fc.Arbitrary<pb.ModelInferRequest_InferInputTensor> = fc
  .record(
    {
      name: fc.oneof(fc.constantFrom('INPUT0', 'INPUT1'), fc.string({ maxLength: 5 })),
      datatype: fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...DATATYPES) }, { weight: 1, arbitrary: fc.string({ maxLength: 5 }) }),
      shape: fc.array(int64Dim, { maxLength: 4 }),
      parameters: fc.oneof(fc.constant({}), parameterMap(['shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset'])),
      contents: fc.option(contents, { nil: undefined }),
    },
    { requiredKeys: ['name', 'datatype', 'shape', 'parameters'] },
  );


/** One edit a hostile client makes to a good ModelInferRequest. */
interface GrpcEdit {
  op: number;
  i: number;
  j: number;
  key: string;
  dim: bigint;
  parameter: pb.InferParameter;
  datatype: string;
  contents: pb.InferTensorContents;
  raw: Uint8Array;
}

const grpcEdit: fc.Arbitrary<GrpcEdit> = fc.record({
  op: fc.nat(9),
  i: fc.nat(3),
  j: fc.nat(3),
  key: fc.constantFrom('shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset', 'priority', 'timeout', 'sequence_id', 'sequence_start', 'sequence_end', 'triton_x', 'custom', 'classification'),
  dim: int64Dim,
  parameter: inferParameter,
  datatype: fc.oneof(fc.constantFrom(...DATATYPES), fc.string({ maxLength: 4 })),
  contents,
  raw: fc.uint8Array({ maxLength: 80 }),
});

/** A good request for `spec` (raw or typed contents), then `edits` applied. */
function nearValidGrpc(spec: ModelIOSpec, rows: number, typed: boolean, edits: readonly GrpcEdit[]): pb.ModelInferRequest {
  const raw: Uint8Array[] = [];
  const inputs = [...spec.inputs.values()].map((t): pb.ModelInferRequest_InferInputTensor => {
    const dims = t.dims.map((d, n) => (d === -1 ? (n + rows) % 3 : d));
    const shape = spec.maxBatchSize > 0 ? [rows, ...dims] : dims;
    const count = shape.reduce((a, b) => a * b, 1);
    const input: pb.ModelInferRequest_InferInputTensor = { name: t.name, datatype: t.datatype, shape: shape.map(BigInt), parameters: {} };
    const values = Array.from({ length: count }, (_, n) => n);
    const empty: pb.InferTensorContents = { bool_contents: [], int_contents: [], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [] };
    if (typed) {
      input.contents =
        t.datatype === 'BYTES' ? { ...empty, bytes_contents: values.map((n) => Buffer.from(`s${n}`)) } : t.datatype === 'FP32' ? { ...empty, fp32_contents: values } : { ...empty, int_contents: values };
    } else {
      raw.push(t.datatype === 'BYTES' ? encodeBytesElements(values.map((n) => `s${n}`)) : t.datatype === 'FP32' ? new Uint8Array(Float32Array.from(values).buffer) : new Uint8Array(Int32Array.from(values).buffer));
    }
    return input;
  });
  const m: pb.ModelInferRequest = { model_name: spec.model, model_version: '', id: '', parameters: {}, inputs, outputs: [], raw_input_contents: raw };
  for (const e of edits) {
    const input = m.inputs.length === 0 ? undefined : m.inputs[e.i % m.inputs.length];
    switch (e.op) {
      case 0:
        if (input) input.shape = input.shape.map((d, n) => (n === e.j % input.shape.length ? e.dim : d));
        break;
      case 1:
        if (input) input.shape = [...input.shape, e.dim];
        break;
      case 2:
        if (input) input.datatype = e.datatype;
        break;
      case 3:
        if (input) input.contents = e.contents;
        break;
      case 4:
        if (input) input.parameters = { ...input.parameters, [e.key]: e.parameter };
        break;
      case 5:
        m.parameters = { ...m.parameters, [e.key]: e.parameter };
        break;
      case 6:
        m.outputs = [...m.outputs, { name: e.j % 2 === 0 ? 'OUTPUT0' : 'NOPE', parameters: { [e.key]: e.parameter } }];
        break;
      case 7:
        if (m.raw_input_contents.length > 0 && e.j % 2 === 0) m.raw_input_contents = m.raw_input_contents.map((r, n) => (n === e.i % m.raw_input_contents.length ? e.raw : r));
        else m.raw_input_contents = [...m.raw_input_contents, e.raw];
        break;
      case 8:
        m.inputs = e.j % 2 === 0 ? m.inputs.filter((_, n) => n !== e.i % m.inputs.length) : [...m.inputs, ...(input ? [{ ...input }] : [])];
        break;
      default:
        m.model_version = e.j % 2 === 0 ? '-1' : String(e.dim);
    }
  }
  return m;
}

const randomGrpcRequest: fc.Arbitrary<pb.ModelInferRequest> = fc.record({
  model_name: fc.constantFrom(...SPECS.map((s) => s.model)),
  model_version: fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.constantFrom('1', '-1', 'abc', '99999999999999999999') }),
  id: fc.string({ maxLength: 4 }),
  parameters: parameterMap(['priority', 'timeout', 'sequence_id', 'sequence_start', 'sequence_end', 'triton_enable_empty_final_response', 'triton_x']),
  inputs: fc.array(grpcInput, { maxLength: 4 }),
  outputs: fc.array(
    fc.record({ name: fc.constantFrom('OUTPUT0', 'OUTPUT1', 'NOPE'), parameters: parameterMap(['classification', 'shared_memory_region', 'shared_memory_byte_size', 'shared_memory_offset']) }),
    { maxLength: 3 },
  ),
  raw_input_contents: fc.array(fc.uint8Array({ maxLength: 80 }), { maxLength: 4 }),
});

const grpcRequest: fc.Arbitrary<pb.ModelInferRequest> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .tuple(fc.constantFrom(...SPECS), fc.integer({ min: 0, max: 2 }), fc.boolean(), fc.array(grpcEdit, { maxLength: 3 }))
      .map(([spec, rows, typed, edits]) => nearValidGrpc(spec, rows, typed, edits)),
  },
  { weight: 1, arbitrary: randomGrpcRequest },
);

function checkGrpcDecoded(message: pb.ModelInferRequest, encodedSize: number): void {
  const spec = SPECS.find((s) => s.model === message.model_name);
  const request = decodeInferRequest(message);
  let bytes = 0;
  for (const input of request.inputs) {
    for (const d of input.shape) holds(Number.isSafeInteger(d) && d >= 0, () => `input '${input.name}' decoded with dimension ${d}`);
    if (!isShared(input)) bytes += byteLengthOf(input);
  }
  holds(bytes <= 8 * encodedSize, () => `decoded ${bytes} bytes of tensors from a ${encodedSize}-byte message`);
  if (spec !== undefined) validateAsServer(request, spec);
}

const grpcHostile = property(
  'grpc-infer-request',
  'a ModelInferRequest with any shapes, datatypes, contents, raw contents and parameters converts to a facade request, or fails with a client-error NereidError; decoded tensors hold at most 8 bytes per message byte; validation behind it fails the same way',
  grpcRequest,
  (message) => {
    const encoded = pb.ModelInferRequest.encode(message).finish();
    // Through the wire format too, as grpc-js hands it over: bytes fields become views.
    const decoded = pb.ModelInferRequest.decode(encoded);
    onlyTypedErrors(() => checkGrpcDecoded(decoded, encoded.byteLength));
  },
);

const grpcBytes = property(
  'grpc-infer-bytes',
  'any bytes that protobuf decodes as a ModelInferRequest convert or fail with a client-error NereidError (bytes protobuf refuses are refused by grpc-js before the frontend sees them)',
  fc.oneof(
    fc.uint8Array({ maxLength: 200 }),
    // A real message with a few bytes overwritten or cut.
    fc.tuple(grpcRequest, fc.array(fc.tuple(fc.nat(), fc.nat(255)), { maxLength: 4 }), fc.nat()).map(([m, edits, cut]) => {
      const bytes = Uint8Array.from(pb.ModelInferRequest.encode(m).finish());
      for (const [at, value] of edits) if (bytes.length > 0) bytes[at % bytes.length] = value;
      return bytes.subarray(0, bytes.length - (cut % 4));
    }),
  ),
  (bytes) => {
    let message: pb.ModelInferRequest;
    try {
      message = pb.ModelInferRequest.decode(bytes);
    } catch {
      return;
    }
    onlyTypedErrors(() => checkGrpcDecoded(message, bytes.byteLength));
  },
);

const grpcRoundTrip = property(
  'grpc-round-trip',
  'valid inputs sent as raw contents or typed contents, through the wire format, convert to exactly their names, datatypes, shapes and bytes, raw ones as views of the message',
  fc.array(fc.tuple(validTensor('T').filter((t) => t.datatype !== 'BOOL' || t.bytes.every((b) => b <= 1)), fc.boolean()), { minLength: 1, maxLength: 4 }),
  (tensors) => {
    const named = tensors.map(([t, raw], i) => ({ ...t, name: `IN${i}`, raw }));
    const typed = (t: ValidTensor): pb.InferTensorContents => {
      const c: pb.InferTensorContents = { bool_contents: [], int_contents: [], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [] };
      const b = t.bytes;
      const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
      switch (t.datatype) {
        case 'BOOL': c.bool_contents = [...b].map((x) => x !== 0); break;
        case 'INT8': c.int_contents = [...new Int8Array(ab)]; break;
        case 'INT16': c.int_contents = [...new Int16Array(ab)]; break;
        case 'INT32': c.int_contents = [...new Int32Array(ab)]; break;
        case 'UINT8': c.uint_contents = [...new Uint8Array(ab)]; break;
        case 'UINT16': c.uint_contents = [...new Uint16Array(ab)]; break;
        case 'UINT32': c.uint_contents = [...new Uint32Array(ab)]; break;
        case 'INT64': c.int64_contents = [...new BigInt64Array(ab)]; break;
        case 'UINT64': c.uint64_contents = [...new BigUint64Array(ab)]; break;
        case 'FP32': c.fp32_contents = [...new Float32Array(ab)]; break;
        case 'FP64': c.fp64_contents = [...new Float64Array(ab)]; break;
        case 'BYTES': {
          const out: Uint8Array[] = [];
          for (let p = 0; p < b.byteLength; ) {
            const n = b.readUInt32LE(p);
            out.push(b.subarray(p + 4, p + 4 + n));
            p += 4 + n;
          }
          c.bytes_contents = out;
          break;
        }
      }
      return c;
    };
    const message: pb.ModelInferRequest = {
      model_name: 'm',
      model_version: '',
      id: '',
      parameters: {},
      outputs: [],
      inputs: named.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(BigInt), parameters: {}, ...(t.raw ? {} : { contents: typed(t) }) })),
      raw_input_contents: named.filter((t) => t.raw).map((t) => t.bytes),
    };
    // Raw contents and typed contents cannot be mixed in one request (protocol.md §4.6).
    if (named.some((t) => t.raw) && named.some((t) => !t.raw)) {
      assert.throws(() => decodeInferRequest(pb.ModelInferRequest.decode(pb.ModelInferRequest.encode(message).finish())), /contents field must not be specified/);
      return;
    }
    const wire = pb.ModelInferRequest.encode(message).finish();
    const request = decodeInferRequest(pb.ModelInferRequest.decode(wire));
    request.inputs.forEach((input, i) => {
      const t = named[i]!;
      assertDecodedAs(input, t, `input ${t.name} (${t.datatype}, ${t.raw ? 'raw' : 'typed'})`, t.raw ? (wire as Uint8Array).buffer : undefined);
    });
    // Element sizes agree with the shapes for the fixed-size types.
    for (const t of named) if (t.datatype !== 'BYTES') assert.equal(t.bytes.byteLength, elementSize(t.datatype) * t.shape.reduce((a, b) => a * b, 1));
  },
);

// ---------------------------------------------------------------------------------------------
// Shared memory

const shmRegisterBodies = property(
  'shm-register-body',
  'system and CUDA shared-memory register bodies, however malformed, decode to non-negative safe integers and a string key, or fail with a client-error NereidError',
  fc.tuple(
    fc.oneof(
      fc
        .tuple(fc.constantFrom('"/x"', '"/../etc"', '"x"', '5'), hostileLeafText, hostileLeafText, fc.constantFrom('{"b64":"AAAA"}', '{"b64":5}', '{}'), hostileLeafText)
        .map(([key, offset, size, handle, device]) => `{"key":${key},"offset":${offset},"byte_size":${size},"raw_handle":${handle},"device_id":${device}}`),
      objectText(['key', 'offset', 'byte_size', 'raw_handle', 'device_id'], fc.oneof(hostileLeafText, fc.constantFrom('{"b64":"AAAA"}', '{"b64":5}', '"/x"', '"/../etc"'))),
      fc.string({ maxLength: 30 }),
    ),
    fc.boolean(),
  ),
  ([text, cuda]) => {
    const body = Buffer.from(text);
    onlyTypedErrors(() => {
      const r = cuda ? decodeCudaRegister(body, 'r') : decodeSystemRegister(body, 'r');
      const numbers = 'key' in r ? [r.offset, r.byteSize] : [r.deviceId, r.byteSize];
      for (const n of numbers) holds(Number.isSafeInteger(n) && n >= 0, () => `decoded ${n}`);
    });
  },
);

const shmKeys = property(
  'shm-key',
  'a shared-memory key is accepted only as a name directly under /dev/shm (no further /, not . or .., no NUL); anything else fails with a client-error NereidError',
  fc.oneof(
    fc.string({ maxLength: 12 }),
    fc.array(fc.constantFrom('/', '.', '..', 'a', '\0', '%2e', '\\', 'shm', ' '), { maxLength: 6 }).map((parts) => parts.join('')),
  ),
  (key) => {
    onlyTypedErrors(() => {
      const path = shmKeyPath(key, 'r');
      const name = path.slice('/dev/shm/'.length);
      holds(path.startsWith('/dev/shm/') && name !== '' && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0'), () => `key ${JSON.stringify(key)} maps to ${JSON.stringify(path)}`);
    });
  },
);

/** The decoder properties, in the order they run. */
export const DECODER_PROPERTIES: readonly FuzzProperty[] = [httpHostile, httpRoundTrip, framing, grpcHostile, grpcBytes, grpcRoundTrip, shmRegisterBodies, shmKeys];
