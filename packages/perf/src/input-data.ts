/**
 * The requests `nereid perf` sends: input shapes from the model's metadata and `--shape`, and data
 * that is random, zero, read from a data directory or from JSON files in perf_analyzer's format
 * (perf-and-analyzer.md §1.4). Everything is prepared before the first request; problems are NereidError
 * PERF_INPUT_DATA naming the model, the input and the fix.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  NereidError,
  elementCount,
  elementSize,
  encodeBytesElements,
  fixedByteSize,
  jsonToTensorData,
  parseJson,
  type DataType,
} from '@nereid/protocol';
import type { ClientInput } from '@nereid/client';
import type { PerfOptions } from './options.js';

/** What the load generator needs to know of the model (from metadata and configuration). */
export interface ModelInfo {
  name: string;
  inputs: { name: string; datatype: DataType; shape: number[] }[];
  /** 0: the model does not batch, and its metadata shapes have no batch dimension. */
  maxBatchSize: number;
  decoupled: boolean;
  /** The model has a sequence batcher: requests need correlation ids and start/end flags. */
  sequence: boolean;
  /** Outputs from the metadata (shapes as there, -1 for variable dimensions). */
  outputs: { name: string; datatype: DataType; shape: number[] }[];
  /** An ensemble's composing models (its steps' `model_name`s, each once, in step order). */
  composing: string[];
}

/** The requests to send, used round-robin, and a sequence model's JSON streams (one sequence each, §1.4). */
export interface PreparedData {
  requests: ClientInput[][];
  streams?: ClientInput[][][];
}

export interface DataOptions {
  batchSize: number;
  inputData: readonly string[];
  shapes: ReadonlyMap<string, readonly number[]>;
  stringLength: number;
  stringData?: string;
  /** HTTP: send inputs as JSON `data`. */
  json: boolean;
}

/** The data options a run's command line gives. */
export function dataOptionsOf(options: PerfOptions): DataOptions {
  return {
    batchSize: options.batchSize,
    inputData: options.inputData,
    shapes: options.shapes,
    stringLength: options.stringLength,
    stringData: options.stringData,
    json: options.inputTensorFormat === 'json',
  };
}

function dataError(message: string): NereidError {
  return new NereidError('PERF_INPUT_DATA', message);
}

/** One batch-1 sample of one input: its shape (without the batch dimension) and bytes. */
interface Sample {
  shape: number[];
  bytes: Uint8Array;
}

/** The shape of a batch-1 sample: the metadata's dims without the batch dimension, `--shape` filling variable ones. */
function sampleShape(model: ModelInfo, input: ModelInfo['inputs'][number], given: readonly number[] | undefined, where: string): number[] {
  const dims = model.maxBatchSize > 0 ? input.shape.slice(1) : input.shape.slice();
  if (given === undefined) {
    if (dims.some((d) => d < 0)) {
      throw dataError(
        `input '${input.name}' of model '${model.name}' has a variable dimension (shape [${dims.join(',')}] without the batch dimension)${where}; ` +
          `give its shape with --shape ${input.name}:${dims.map((d) => (d < 0 ? 1 : d)).join(',')} or a "shape" in the --input-data file`,
      );
    }
    return dims;
  }
  const fits = given.length === dims.length && dims.every((d, i) => d < 0 || d === given[i]);
  if (!fits) {
    throw dataError(
      `shape [${given.join(',')}] for input '${input.name}' of model '${model.name}'${where} does not fit the model's [${dims.join(',')}] ` +
        `(without the batch dimension); only variable (-1) dimensions can be chosen`,
    );
  }
  return [...given];
}

function syntheticSample(kind: 'random' | 'zero', datatype: DataType, shape: number[], options: DataOptions): Uint8Array {
  const count = elementCount(shape);
  if (datatype === 'BYTES') {
    const element =
      options.stringData ??
      (kind === 'zero'
        ? ''
        : Array.from(randomBytes(options.stringLength), (b) => String.fromCharCode(97 + (b % 26))).join(''));
    return encodeBytesElements(new Array<string>(count).fill(element));
  }
  const bytes = new Uint8Array(count * elementSize(datatype));
  if (kind === 'zero') return bytes;
  switch (datatype) {
    case 'FP32':
      new Float32Array(bytes.buffer).forEach((_, i, a) => (a[i] = Math.random()));
      return bytes;
    case 'FP64':
      new Float64Array(bytes.buffer).forEach((_, i, a) => (a[i] = Math.random()));
      return bytes;
    case 'FP16':
    case 'BF16':
      // Random mantissas with a small fixed exponent: finite values in [1, 2).
      for (let i = 0; i < bytes.length; i += 2) {
        bytes[i] = Math.floor(Math.random() * 256);
        bytes[i + 1] = datatype === 'FP16' ? 0x3c : 0x3f;
      }
      return bytes;
    case 'BOOL':
      bytes.forEach((_, i) => (bytes[i] = Math.random() < 0.5 ? 0 : 1));
      return bytes;
    default:
      // Integers: small non-negative values, so index-like inputs stay in range more often.
      for (let i = 0; i < bytes.length; i += elementSize(datatype)) bytes[i] = Math.floor(Math.random() * 100);
      return bytes;
  }
}

function flatten(value: unknown): unknown[] {
  return Array.isArray(value) ? value.flatMap((v) => flatten(v)) : [value];
}

/** One tensor of a JSON data entry: a plain array, `{b64}` or `{content, shape}` (§1.4). */
function jsonSample(model: ModelInfo, input: ModelInfo['inputs'][number], value: unknown, options: DataOptions, where: string): Sample {
  let content: unknown = value;
  let shape: number[] | undefined;
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    if (obj.shape !== undefined) {
      if (!Array.isArray(obj.shape) || !obj.shape.every((d) => Number.isInteger(Number(d)) && Number(d) >= 0)) {
        throw dataError(`"shape" of input '${input.name}'${where} must be an array of whole numbers`);
      }
      shape = obj.shape.map(Number);
    }
    if (typeof obj.b64 === 'string') {
      const s = sampleShape(model, input, shape ?? options.shapes.get(input.name), where);
      const bytes = Buffer.from(obj.b64, 'base64');
      const expected = fixedByteSize(input.datatype, s);
      if (expected !== undefined && bytes.length !== expected) {
        throw dataError(
          `"b64" of input '${input.name}'${where} holds ${bytes.length} bytes; ${input.datatype} shape [${s.join(',')}] needs ${expected}`,
        );
      }
      return { shape: s, bytes };
    }
    if (!('content' in obj)) throw dataError(`input '${input.name}'${where} is an object without "content" or "b64"`);
    content = obj.content;
  }
  const elements = flatten(content);
  const s = sampleShape(model, input, shape ?? options.shapes.get(input.name), where);
  const count = elementCount(s);
  if (elements.length !== count) {
    throw dataError(
      `input '${input.name}'${where} has ${elements.length} elements; shape [${s.join(',')}] needs ${count} ` +
        `(give the right shape with --shape or a "shape" next to "content")`,
    );
  }
  if (input.datatype === 'BYTES') {
    if (!elements.every((e) => typeof e === 'string')) throw dataError(`input '${input.name}'${where}: BYTES content must be strings`);
    return { shape: s, bytes: encodeBytesElements(elements as string[]) };
  }
  try {
    return { shape: s, bytes: jsonToTensorData(input.datatype, elements, count, `input '${input.name}'${where}`) };
  } catch (err) {
    throw dataError(`${err instanceof Error ? err.message : String(err)} (model '${model.name}')`);
  }
}

/**
 * A data directory (§1.4): one file per input named after it, batch-1 sized; raw little-endian
 * row-major bytes, or for BYTES inputs text with one element per line.
 */
async function directoryEntry(dir: string, model: ModelInfo, options: DataOptions): Promise<Map<string, Sample>> {
  const samples = new Map<string, Sample>();
  for (const input of model.inputs) {
    const where = ` (file ${join(dir, input.name)})`;
    const shape = sampleShape(model, input, options.shapes.get(input.name), where);
    let bytes: Buffer;
    try {
      bytes = await readFile(join(dir, input.name));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw dataError(
        `--input-data ${dir}: no readable file '${input.name}' for input '${input.name}' of model '${model.name}' (${code ?? String(err)}); ` +
          `a data directory holds one file per input, named after it`,
      );
    }
    if (input.datatype === 'BYTES') {
      const lines = bytes.toString('utf8').split('\n');
      if (lines[lines.length - 1] === '') lines.pop();
      const count = elementCount(shape);
      if (lines.length !== count) {
        throw dataError(`input '${input.name}'${where} has ${lines.length} lines; BYTES shape [${shape.join(',')}] needs ${count}, one element per line`);
      }
      samples.set(input.name, { shape, bytes: encodeBytesElements(lines) });
      continue;
    }
    const expected = fixedByteSize(input.datatype, shape)!;
    if (bytes.length !== expected) {
      throw dataError(
        `input '${input.name}'${where} holds ${bytes.length} bytes; ${input.datatype} shape [${shape.join(',')}] needs ${expected} ` +
          `(raw little-endian row-major data for one batch-1 sample; --shape sets variable dimensions)`,
      );
    }
    samples.set(input.name, { shape, bytes: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) });
  }
  return samples;
}

/** One JSON entry `{input: tensor}` of every input; `where` names it in errors. */
function jsonEntry(entry: unknown, path: string, label: string, model: ModelInfo, options: DataOptions): Map<string, Sample> {
  const where = ` in ${label} of ${path}`;
  if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) throw dataError(`--input-data ${path}: ${label} must be an object of input name → tensor`);
  const obj = entry as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if (!model.inputs.some((i) => i.name === key)) {
      throw dataError(`--input-data ${path}: ${label} names '${key}', which is not an input of model '${model.name}' (its inputs: ${model.inputs.map((i) => i.name).join(', ')})`);
    }
  }
  const samples = new Map<string, Sample>();
  for (const input of model.inputs) {
    if (!(input.name in obj)) {
      throw dataError(`--input-data ${path}: ${label} has no data for input '${input.name}' of model '${model.name}'`);
    }
    samples.set(input.name, jsonSample(model, input, obj[input.name], options, where));
  }
  return samples;
}

/** A JSON file's entries: plain entries, or (sequence models) streams, arrays of entries. */
async function jsonEntries(path: string, model: ModelInfo, options: DataOptions): Promise<{ entries: Map<string, Sample>[]; streams: Map<string, Sample>[][] }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw dataError(`--input-data ${path}: cannot read the file (${code ?? String(err)})`);
  }
  let doc: unknown;
  try {
    doc = parseJson(text);
  } catch (err) {
    throw dataError(`--input-data ${path} is not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const data = (doc as { data?: unknown } | null)?.data;
  if (!Array.isArray(data) || data.length === 0) {
    throw dataError(`--input-data ${path} needs a non-empty "data" array of entries, one per sample: {"data": [{"${model.inputs[0]?.name ?? 'INPUT'}": [...]}]}`);
  }
  const streams = data.filter((e) => Array.isArray(e)).length;
  if (streams > 0 && streams < data.length) {
    throw dataError(`--input-data ${path}: "data" mixes streams (arrays of steps) and single entries; use one form`);
  }
  if (streams === 0) return { entries: data.map((entry, index) => jsonEntry(entry, path, `entry ${index}`, model, options)), streams: [] };
  if (!model.sequence) {
    throw dataError(`--input-data ${path}: "data" holds streams (arrays of steps), which only sequence models use; model '${model.name}' has no sequence_batching: give one object per entry`);
  }
  return {
    entries: [],
    streams: (data as unknown[][]).map((stream, index) => {
      if (stream.length === 0) throw dataError(`--input-data ${path}: stream ${index} is empty; a stream needs at least one step`);
      return stream.map((entry, step) => jsonEntry(entry, path, `step ${step} of stream ${index}`, model, options));
    }),
  };
}

/**
 * The requests to send, used round-robin: one per synthetic source or data directory, one per JSON
 * entry (request k of batch B takes samples k, k+1, … k+B−1, wrapping). JSON streams (sequence
 * models) also come back as `streams`, each replayed on one sequence; `requests` then holds their
 * steps in order. Each input's data is a byte view sent as it is; the requests are shared by every
 * sender and never modified.
 */
export async function prepareRequests(model: ModelInfo, options: DataOptions): Promise<PreparedData> {
  if (model.sequence && options.batchSize > 1) {
    throw dataError(`model '${model.name}' is a sequence model, whose requests carry one sample each (batch size 1); drop -b ${options.batchSize}`);
  }
  if (options.batchSize > 1 && model.maxBatchSize === 0) {
    throw dataError(`model '${model.name}' does not batch (max_batch_size 0); -b must be 1`);
  }
  if (model.maxBatchSize > 0 && options.batchSize > model.maxBatchSize) {
    throw dataError(`-b ${options.batchSize} exceeds the max_batch_size ${model.maxBatchSize} of model '${model.name}'`);
  }
  for (const name of options.shapes.keys()) {
    if (!model.inputs.some((i) => i.name === name)) {
      throw dataError(`--shape names '${name}', which is not an input of model '${model.name}' (its inputs: ${model.inputs.map((i) => i.name).join(', ')})`);
    }
  }
  const entries: Map<string, Sample>[] = [];
  const streams: Map<string, Sample>[][] = [];
  for (const source of options.inputData) {
    if (source === 'random' || source === 'zero') {
      const samples = new Map<string, Sample>();
      for (const input of model.inputs) {
        const shape = sampleShape(model, input, options.shapes.get(input.name), '');
        samples.set(input.name, { shape, bytes: syntheticSample(source, input.datatype, shape, options) });
      }
      entries.push(samples);
    } else if ((await stat(source).catch(() => undefined))?.isDirectory()) {
      entries.push(await directoryEntry(source, model, options));
    } else {
      const read = await jsonEntries(source, model, options);
      entries.push(...read.entries);
      streams.push(...read.streams);
    }
  }
  const batch = options.batchSize;
  const request = (samples: (k: number) => Map<string, Sample>, k: number): ClientInput[] =>
    model.inputs.map((input) => {
      const parts: Sample[] = [];
      for (let b = 0; b < batch; b++) parts.push(samples(k + b).get(input.name)!);
      const shape = parts[0].shape;
      if (parts.some((p) => p.shape.join() !== shape.join())) {
        throw dataError(`-b ${batch} puts samples of input '${input.name}' with different shapes into one request; use one shape per input when batching`);
      }
      const bytes = batch === 1 ? parts[0].bytes : Buffer.concat(parts.map((p) => p.bytes));
      const fullShape = model.maxBatchSize > 0 ? [batch, ...shape] : shape;
      return { name: input.name, datatype: input.datatype, shape: fullShape, data: bytes, json: options.json || undefined };
    });
  const flat = streams.length > 0 && entries.length === 0 ? streams.flat() : entries;
  return {
    requests: flat.map((_, k) => request((i) => flat[i % flat.length], k)),
    streams: streams.length > 0 ? streams.map((stream) => stream.map((_, k) => request((i) => stream[i], k))) : undefined,
  };
}
