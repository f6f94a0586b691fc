/**
 * An ONNX `ModelProto` writer with a graph-builder API. Field numbers follow onnx/onnx.proto;
 * fields are written in field-number order, as the reference (Python protobuf) serializer does,
 * so initializers (GraphProto field 5) come before the graph inputs and outputs (11, 12).
 *
 * proto2 `repeated` scalars without `[packed = true]` (TensorProto.dims, AttributeProto.ints and
 * floats) are written unpacked, as the reference does; the `*_data` fields are packed.
 *
 * Tensor data: a typed array is the element storage (FLOAT16 as a Uint16Array of bits, BOOL as a
 * Uint8Array of 0/1) and is written little-endian as `raw_data`; a plain JS array holds values
 * and is converted. STRING tensors take an array of strings or byte arrays (`string_data`).
 * An initializer marked `external` has its raw data written to a side file instead, described by
 * `location`/`offset`/`length` entries, so a model can be a `model.onnx` directory holding
 * `model.onnx` and that file (models-and-scheduling.md §1.3).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ProtoWriter } from './protobuf-writer.js';
import { type ElemTypeLike, OnnxElemType, onnxElemSize, onnxElemType, onnxElemTypeName, toFloat16Bits } from './onnx-types.js';

/** One dimension: a size (`dim_value`), a symbolic name (`dim_param`), or null for unknown (neither). */
export type Dim = number | string | null;

/** A tensor shape; null (or omitted) writes no `shape` at all (unknown rank). `[]` is a scalar. */
export type Shape = readonly Dim[] | null;

/** A graph input, output or value_info entry. */
export interface ValueInfoSpec {
  readonly name: string;
  readonly elemType: ElemTypeLike;
  readonly shape?: Shape;
  /** `'sequence'` writes `sequence_type { elem_type { tensor_type ... } }` (for reader tests). */
  readonly kind?: 'tensor' | 'sequence';
  readonly docString?: string;
}

/** Element data of a tensor: see the file comment for how each form is written. */
export type TensorData =
  | ArrayBufferView
  | readonly number[]
  | readonly bigint[]
  | readonly boolean[]
  | readonly (string | Uint8Array)[];

export interface TensorSpec {
  readonly name?: string;
  readonly elemType: ElemTypeLike;
  readonly dims: readonly number[];
  readonly data: TensorData;
  /** Write the raw data into the model's external data file (not for STRING tensors). */
  readonly external?: boolean;
}

export type AttributeValue =
  | { readonly type: 'float'; readonly value: number }
  | { readonly type: 'int'; readonly value: number | bigint }
  | { readonly type: 'string'; readonly value: string | Uint8Array }
  | { readonly type: 'tensor'; readonly value: TensorSpec }
  | { readonly type: 'floats'; readonly value: readonly number[] }
  | { readonly type: 'ints'; readonly value: readonly (number | bigint)[] }
  | { readonly type: 'strings'; readonly value: readonly (string | Uint8Array)[] };

/** Attribute value constructors: `attr.int(1)`, `attr.float(0.5)`, `attr.tensor({...})`. */
export const attr = {
  float: (value: number): AttributeValue => ({ type: 'float', value }),
  int: (value: number | bigint): AttributeValue => ({ type: 'int', value }),
  string: (value: string | Uint8Array): AttributeValue => ({ type: 'string', value }),
  tensor: (value: TensorSpec): AttributeValue => ({ type: 'tensor', value }),
  floats: (value: readonly number[]): AttributeValue => ({ type: 'floats', value }),
  ints: (value: readonly (number | bigint)[]): AttributeValue => ({ type: 'ints', value }),
  strings: (value: readonly (string | Uint8Array)[]): AttributeValue => ({ type: 'strings', value }),
} as const;

export interface NodeSpec {
  readonly opType: string;
  readonly inputs: readonly string[];
  readonly outputs: readonly string[];
  readonly attributes?: Readonly<Record<string, AttributeValue>>;
  readonly name?: string;
  readonly domain?: string;
}

export interface OpsetImport {
  /** '' (the default) is the ONNX operator set. */
  readonly domain?: string;
  readonly version: number;
}

export interface ModelOptions {
  /** Default 8 (ONNX 1.10), which every ONNX Runtime since 1.10 loads. */
  readonly irVersion?: number;
  /** Default `[{ domain: '', version: 13 }]`. */
  readonly opsets?: readonly OpsetImport[];
  readonly producerName?: string;
  readonly producerVersion?: string;
  readonly domain?: string;
  readonly modelVersion?: number;
  readonly docString?: string;
  readonly metadata?: Readonly<Record<string, string>>;
  /** Name of the external data file, relative to the model file. Default `model.onnx.data`. */
  readonly externalDataLocation?: string;
  /** Alignment of each tensor's offset in the external data file. Default 64. */
  readonly externalDataAlignment?: number;
}

/** A side file holding external tensor data. */
export interface ExternalDataFile {
  /** Path relative to the directory of the model file. */
  readonly location: string;
  readonly bytes: Uint8Array;
}

/** An encoded model: the ModelProto bytes and, when some initializer is external, its data file. */
export interface EncodedModel {
  readonly bytes: Uint8Array;
  readonly externalData: ExternalDataFile | null;
}

/** ONNX field numbers used below (onnx/onnx.proto). */
const F = {
  model: { irVersion: 1, producerName: 2, producerVersion: 3, domain: 4, modelVersion: 5, docString: 6, graph: 7, opsetImport: 8, metadataProps: 14 },
  opset: { domain: 1, version: 2 },
  entry: { key: 1, value: 2 },
  graph: { node: 1, name: 2, initializer: 5, docString: 10, input: 11, output: 12, valueInfo: 13 },
  node: { input: 1, output: 2, name: 3, opType: 4, attribute: 5, domain: 7 },
  attr: { name: 1, f: 2, i: 3, s: 4, t: 5, floats: 7, ints: 8, strings: 9, type: 20 },
  attrType: { float: 1, int: 2, string: 3, tensor: 4, floats: 6, ints: 7, strings: 8 },
  valueInfo: { name: 1, type: 2, docString: 3 },
  type: { tensorType: 1, sequenceType: 4 },
  tensorType: { elemType: 1, shape: 2 },
  sequenceType: { elemType: 1 },
  shape: { dim: 1 },
  dim: { value: 1, param: 2 },
  tensor: { dims: 1, dataType: 2, stringData: 6, name: 8, rawData: 9, externalData: 13, dataLocation: 14 },
} as const;

const DATA_LOCATION_EXTERNAL = 1;

/**
 * Collects a graph's inputs, outputs, initializers and nodes. Methods return `this` so a graph
 * can be declared in one expression. Nothing is validated beyond what encoding needs; ONNX
 * Runtime's own checker is the judge of a graph's meaning.
 */
export class OnnxGraphBuilder {
  readonly name: string;
  readonly docString: string | undefined;
  readonly inputs: ValueInfoSpec[] = [];
  readonly outputs: ValueInfoSpec[] = [];
  readonly valueInfos: ValueInfoSpec[] = [];
  readonly initializers: TensorSpec[] = [];
  readonly nodes: NodeSpec[] = [];

  constructor(name = 'graph', docString?: string) {
    this.name = name;
    this.docString = docString;
  }

  input(name: string, elemType: ElemTypeLike, shape: Shape = null): this {
    this.inputs.push({ name, elemType, shape });
    return this;
  }

  output(name: string, elemType: ElemTypeLike, shape: Shape = null): this {
    this.outputs.push({ name, elemType, shape });
    return this;
  }

  /** Adds a fully specified input (for example a sequence-typed one). */
  inputSpec(spec: ValueInfoSpec): this {
    this.inputs.push(spec);
    return this;
  }

  outputSpec(spec: ValueInfoSpec): this {
    this.outputs.push(spec);
    return this;
  }

  valueInfo(name: string, elemType: ElemTypeLike, shape: Shape = null): this {
    this.valueInfos.push({ name, elemType, shape });
    return this;
  }

  initializer(
    name: string,
    elemType: ElemTypeLike,
    dims: readonly number[],
    data: TensorData,
    options: { external?: boolean } = {},
  ): this {
    this.initializers.push({ name, elemType, dims, data, external: options.external ?? false });
    return this;
  }

  node(
    opType: string,
    inputs: readonly string[],
    outputs: readonly string[],
    attributes?: Readonly<Record<string, AttributeValue>>,
    options: { name?: string; domain?: string } = {},
  ): this {
    this.nodes.push({ opType, inputs, outputs, attributes, ...options });
    return this;
  }
}

/** Encodes a graph as a complete ModelProto (and its external data file, if any). */
export function encodeModel(graph: OnnxGraphBuilder, options: ModelOptions = {}): EncodedModel {
  const external = new ExternalDataCollector(
    options.externalDataLocation ?? 'model.onnx.data',
    options.externalDataAlignment ?? 64,
  );
  const w = new ProtoWriter(1024);
  const f = F.model;
  w.varintField(f.irVersion, options.irVersion ?? 8);
  w.stringField(f.producerName, options.producerName ?? 'nereid-testkit');
  if (options.producerVersion !== undefined) w.stringField(f.producerVersion, options.producerVersion);
  if (options.domain !== undefined) w.stringField(f.domain, options.domain);
  if (options.modelVersion !== undefined) w.varintField(f.modelVersion, options.modelVersion);
  if (options.docString !== undefined) w.stringField(f.docString, options.docString);
  w.messageField(f.graph, (g) => writeGraph(g, graph, external));
  for (const opset of options.opsets ?? [{ domain: '', version: 13 }]) {
    w.messageField(f.opsetImport, (o) => {
      o.stringField(F.opset.domain, opset.domain ?? '');
      o.varintField(F.opset.version, opset.version);
    });
  }
  for (const [key, value] of Object.entries(options.metadata ?? {})) {
    w.messageField(f.metadataProps, (e) => writeEntry(e, key, value));
  }
  return { bytes: w.finish(), externalData: external.finish() };
}

/**
 * Writes `model` to `path` (creating parent directories) and its external data file, if any,
 * beside it. For a `model.onnx` directory model pass `<version dir>/model.onnx/model.onnx`.
 */
export async function writeOnnxModel(path: string, model: EncodedModel): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, model.bytes);
  if (model.externalData) await writeFile(join(dirname(path), model.externalData.location), model.externalData.bytes);
}

function writeEntry(w: ProtoWriter, key: string, value: string): void {
  w.stringField(F.entry.key, key);
  w.stringField(F.entry.value, value);
}

function writeGraph(w: ProtoWriter, graph: OnnxGraphBuilder, external: ExternalDataCollector): void {
  const f = F.graph;
  for (const node of graph.nodes) w.messageField(f.node, (n) => writeNode(n, node));
  w.stringField(f.name, graph.name);
  for (const init of graph.initializers) {
    if (init.name === undefined) throw new TypeError('an initializer needs a name');
    w.messageField(f.initializer, (t) => writeTensor(t, init, external));
  }
  if (graph.docString !== undefined) w.stringField(f.docString, graph.docString);
  for (const v of graph.inputs) w.messageField(f.input, (m) => writeValueInfo(m, v));
  for (const v of graph.outputs) w.messageField(f.output, (m) => writeValueInfo(m, v));
  for (const v of graph.valueInfos) w.messageField(f.valueInfo, (m) => writeValueInfo(m, v));
}

function writeNode(w: ProtoWriter, node: NodeSpec): void {
  const f = F.node;
  for (const name of node.inputs) w.stringField(f.input, name);
  for (const name of node.outputs) w.stringField(f.output, name);
  if (node.name !== undefined) w.stringField(f.name, node.name);
  w.stringField(f.opType, node.opType);
  for (const [name, value] of Object.entries(node.attributes ?? {})) {
    w.messageField(f.attribute, (a) => writeAttribute(a, name, value));
  }
  if (node.domain !== undefined) w.stringField(f.domain, node.domain);
}

function writeAttribute(w: ProtoWriter, name: string, a: AttributeValue): void {
  const f = F.attr;
  w.stringField(f.name, name);
  switch (a.type) {
    case 'float':
      w.floatField(f.f, a.value);
      break;
    case 'int':
      w.varintField(f.i, a.value);
      break;
    case 'string':
      w.bytesField(f.s, toBytes(a.value));
      break;
    case 'tensor':
      w.messageField(f.t, (t) => writeTensor(t, a.value, null));
      break;
    case 'floats':
      for (const v of a.value) w.floatField(f.floats, v);
      break;
    case 'ints':
      for (const v of a.value) w.varintField(f.ints, v);
      break;
    case 'strings':
      for (const v of a.value) w.bytesField(f.strings, toBytes(v));
      break;
  }
  w.varintField(f.type, F.attrType[a.type]);
}

function writeValueInfo(w: ProtoWriter, v: ValueInfoSpec): void {
  w.stringField(F.valueInfo.name, v.name);
  const tensorType = (t: ProtoWriter): void => {
    t.varintField(F.tensorType.elemType, onnxElemType(v.elemType));
    const shape = v.shape ?? null;
    if (shape !== null) {
      t.messageField(F.tensorType.shape, (s) => {
        for (const d of shape) {
          s.messageField(F.shape.dim, (dim) => {
            if (typeof d === 'number') {
              if (!Number.isSafeInteger(d) || d < 0) {
                throw new RangeError(`dimension ${d} of '${v.name}' must be a non-negative integer, a name or null`);
              }
              dim.varintField(F.dim.value, d);
            } else if (typeof d === 'string') {
              dim.stringField(F.dim.param, d);
            }
          });
        }
      });
    }
  };
  w.messageField(F.valueInfo.type, (type) => {
    if (v.kind === 'sequence') {
      type.messageField(F.type.sequenceType, (seq) =>
        seq.messageField(F.sequenceType.elemType, (inner) => inner.messageField(F.type.tensorType, tensorType)),
      );
    } else {
      type.messageField(F.type.tensorType, tensorType);
    }
  });
  if (v.docString !== undefined) w.stringField(F.valueInfo.docString, v.docString);
}

function writeTensor(w: ProtoWriter, t: TensorSpec, external: ExternalDataCollector | null): void {
  const f = F.tensor;
  const type = onnxElemType(t.elemType);
  const count = t.dims.reduce((n, d) => n * d, 1);
  for (const d of t.dims) w.varintField(f.dims, d);
  w.varintField(f.dataType, type);
  if (type === OnnxElemType.STRING) {
    const data = t.data as readonly unknown[];
    if (ArrayBuffer.isView(t.data) || data.length !== count) {
      throw new TypeError(`STRING tensor '${t.name ?? ''}' needs an array of ${count} strings or byte arrays`);
    }
    if (t.external) throw new TypeError(`STRING tensor '${t.name ?? ''}' cannot be external data`);
    for (const s of data) w.bytesField(f.stringData, toBytes(s as string | Uint8Array));
    if (t.name !== undefined) w.stringField(f.name, t.name);
    return;
  }
  const raw = rawTensorBytes(type, t.data, count, t.name ?? '');
  if (t.name !== undefined) w.stringField(f.name, t.name);
  if (t.external) {
    if (!external) throw new TypeError(`tensor '${t.name ?? ''}' inside an attribute cannot be external data`);
    const offset = external.add(raw);
    w.messageField(f.externalData, (e) => writeEntry(e, 'location', external.location));
    w.messageField(f.externalData, (e) => writeEntry(e, 'offset', String(offset)));
    w.messageField(f.externalData, (e) => writeEntry(e, 'length', String(raw.length)));
    w.varintField(f.dataLocation, DATA_LOCATION_EXTERNAL);
  } else {
    w.bytesField(f.rawData, raw);
  }
}

/** Little-endian element bytes of a fixed-size tensor (see the file comment for accepted forms). */
function rawTensorBytes(type: number, data: TensorData, count: number, name: string): Uint8Array {
  const size = onnxElemSize(type);
  if (size === undefined) throw new TypeError(`tensor '${name}': element type ${onnxElemTypeName(type)} has no raw form here`);
  let bytes: Uint8Array;
  if (ArrayBuffer.isView(data)) {
    bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  } else {
    bytes = valuesToBytes(type, data as readonly unknown[], name);
  }
  if (bytes.length !== count * size) {
    throw new RangeError(
      `tensor '${name}': ${bytes.length} bytes of data for ${count} elements of ${onnxElemTypeName(type)} (${count * size} expected)`,
    );
  }
  return bytes;
}

function valuesToBytes(type: number, values: readonly unknown[], name: string): Uint8Array {
  const asNumbers = (): number[] => values.map((v) => Number(v));
  const asBigints = (): bigint[] => values.map((v) => BigInt(v as number | bigint));
  let view: ArrayBufferView;
  switch (type) {
    case OnnxElemType.FLOAT: view = Float32Array.from(asNumbers()); break;
    case OnnxElemType.DOUBLE: view = Float64Array.from(asNumbers()); break;
    case OnnxElemType.FLOAT16: view = Uint16Array.from(asNumbers(), toFloat16Bits); break;
    case OnnxElemType.INT8: view = Int8Array.from(asNumbers()); break;
    case OnnxElemType.UINT8: view = Uint8Array.from(asNumbers()); break;
    case OnnxElemType.INT16: view = Int16Array.from(asNumbers()); break;
    case OnnxElemType.UINT16: view = Uint16Array.from(asNumbers()); break;
    case OnnxElemType.INT32: view = Int32Array.from(asNumbers()); break;
    case OnnxElemType.UINT32: view = Uint32Array.from(asNumbers()); break;
    case OnnxElemType.INT64: view = BigInt64Array.from(asBigints()); break;
    case OnnxElemType.UINT64: view = BigUint64Array.from(asBigints()); break;
    case OnnxElemType.BOOL: view = Uint8Array.from(values, (v) => (v ? 1 : 0)); break;
    default:
      throw new TypeError(`tensor '${name}': pass ${onnxElemTypeName(type)} data as a typed array of its raw bytes`);
  }
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function toBytes(value: string | Uint8Array): Uint8Array {
  return typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
}

/** Lays out external tensor data in one side file, each tensor at an aligned offset. */
class ExternalDataCollector {
  readonly location: string;
  readonly #alignment: number;
  readonly #chunks: { offset: number; bytes: Uint8Array }[] = [];
  #size = 0;

  constructor(location: string, alignment: number) {
    this.location = location;
    this.#alignment = Math.max(1, alignment);
  }

  add(bytes: Uint8Array): number {
    const offset = Math.ceil(this.#size / this.#alignment) * this.#alignment;
    this.#chunks.push({ offset, bytes });
    this.#size = offset + bytes.length;
    return offset;
  }

  finish(): ExternalDataFile | null {
    if (this.#chunks.length === 0) return null;
    const out = new Uint8Array(this.#size);
    for (const c of this.#chunks) out.set(c.bytes, c.offset);
    return { location: this.location, bytes: out };
  }
}
