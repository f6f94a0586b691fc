/**
 * Request validation against the model configuration (models-and-scheduling.md §3.7), done
 * before scheduling; failures are INVALID_ARG errors returned to the caller synchronously.
 */
import {
  NereidError,
  countBytesElements,
  elementCount,
  elementSize,
  encodeBytesElements,
  fromConfigDataType,
  type DataType,
} from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';
import type { ModelConfig } from '../config/model-config.js';
import type { InferInput, RequestedOutput } from './types.js';

export interface TensorSpec {
  readonly name: string;
  readonly datatype: DataType;
  /** Config dims, batch dimension excluded. */
  readonly dims: readonly number[];
  /** `reshape.shape` when configured. */
  readonly reshape: readonly number[] | undefined;
  readonly optional: boolean;
}

/** The per-version facts request validation needs, computed once at load. */
export interface ModelIOSpec {
  readonly model: string;
  readonly version: number;
  readonly maxBatchSize: number;
  readonly inputs: ReadonlyMap<string, TensorSpec>;
  readonly requiredInputs: readonly string[];
  readonly outputs: ReadonlyMap<string, TensorSpec>;
  /** Output names in config order (the order of "all outputs"). */
  readonly outputOrder: readonly string[];
}

export function buildIOSpec(config: ModelConfig, version: number): ModelIOSpec {
  const spec = (t: ModelConfig['input'][number] | ModelConfig['output'][number]): TensorSpec => ({
    name: t.name,
    datatype: fromConfigDataType(t.data_type)!,
    dims: t.dims,
    reshape: t.reshape?.shape,
    optional: 'optional' in t ? t.optional : false,
  });
  const inputs = new Map(config.input.map((t) => [t.name, spec(t)] as const));
  return {
    model: config.name,
    version,
    maxBatchSize: config.max_batch_size,
    inputs,
    requiredInputs: config.input.filter((t) => !t.optional).map((t) => t.name),
    outputs: new Map(config.output.map((t) => [t.name, spec(t)] as const)),
    outputOrder: config.output.map((t) => t.name),
  };
}

export interface ValidatedRequest {
  inputs: Map<string, BackendTensor>;
  requestedOutputs: string[];
  /** Requested outputs that asked for classification, with their k. */
  classification: Map<string, number>;
  batchSize: number;
}

/** `[-1,16]`, the way Triton prints shapes in messages. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(',')}]`;
}

function asBytes(input: InferInput): Uint8Array {
  const data = input.data;
  if (Array.isArray(data)) {
    if (input.datatype !== 'BYTES') {
      throw new NereidError(
        'INPUT_DATA_SOURCE',
        `input '${input.name}': an array of elements is only accepted for BYTES tensors; pass a typed array for ${input.datatype}`,
      );
    }
    return encodeBytesElements(data as readonly (string | Uint8Array)[]);
  }
  const view = data as ArrayBufferView;
  return view instanceof Uint8Array ? view : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Validates inputs and requested outputs and returns the tensors as the backend will see them
 * (reshape applied). `what` helpers keep messages naming the model and tensor.
 */
export function validateRequest(
  spec: ModelIOSpec,
  inputs: readonly InferInput[],
  outputs: readonly RequestedOutput[] | undefined,
): ValidatedRequest {
  const model = spec.model;

  // 1. Requested outputs (none requested: all, in config order).
  const requestedOutputs: string[] = [];
  const classification = new Map<string, number>();
  if (outputs && outputs.length > 0) {
    for (const out of outputs) {
      if (!spec.outputs.has(out.name)) {
        throw new NereidError(
          'OUTPUT_UNKNOWN',
          `unexpected inference output '${out.name}' for model '${model}'; the model's outputs are: ${spec.outputOrder.join(', ')}`,
        );
      }
      // An output requested twice is answered once, as Triton does; the first request's
      // parameters (classification) apply.
      if (requestedOutputs.includes(out.name)) continue;
      requestedOutputs.push(out.name);
      if (out.classification !== undefined && out.classification !== 0) {
        if (!Number.isInteger(out.classification) || out.classification < 0) {
          throw new NereidError(
            'OUTPUT_PARAMETER',
            `output '${out.name}' of model '${model}': 'classification' must be a positive integer, got ${out.classification}`,
          );
        }
        classification.set(out.name, out.classification);
      }
    }
  } else {
    requestedOutputs.push(...spec.outputOrder);
  }

  // 2. Duplicates, input count, then names (Triton's order: more inputs than the model has is a
  // count error even when one of them is unknown).
  const seen = new Set<string>();
  for (const input of inputs) {
    if (seen.has(input.name)) {
      throw new NereidError('INPUT_DUPLICATE', `input '${input.name}' is given more than once in the request for model '${model}'`);
    }
    seen.add(input.name);
  }
  if (inputs.length > spec.inputs.size) {
    const names = inputs.map((i) => i.name);
    const missing = spec.requiredInputs.filter((n) => !names.includes(n));
    throw new NereidError(
      'INPUT_UNKNOWN',
      `expected ${spec.requiredInputs.length} inputs but got ${inputs.length} inputs for model '${model}'. ` +
        `Got input(s) [${names.map((n) => `'${n}'`).join(', ')}], but missing required input(s) ` +
        `[${missing.map((n) => `'${n}'`).join(', ')}]. Please provide all required input(s). ` +
        `The model's inputs are: ${[...spec.inputs.keys()].join(', ')}`,
    );
  }
  for (const input of inputs) {
    if (!spec.inputs.has(input.name)) {
      throw new NereidError(
        'INPUT_UNKNOWN',
        `unexpected inference input '${input.name}' for model '${model}'; allowed inputs are: ${[...spec.inputs.keys()].join(', ')}`,
      );
    }
  }
  const missing = spec.requiredInputs.filter((n) => !seen.has(n));
  if (missing.length > 0) {
    throw new NereidError(
      'INPUT_MISSING',
      `expected ${spec.requiredInputs.length} inputs but got ${inputs.length} inputs for model '${model}'. ` +
        `Got input(s) [${[...seen].map((n) => `'${n}'`).join(', ')}], but missing required input(s) ` +
        `[${missing.map((n) => `'${n}'`).join(', ')}]. Please provide all required input(s).`,
    );
  }

  // 3. Batch size.
  let batchSize = 1;
  if (spec.maxBatchSize > 0) {
    let first: { name: string; size: number } | undefined;
    for (const input of inputs) {
      if (input.shape.length === 0) {
        throw new NereidError(
          'INPUT_SHAPE',
          `input '${input.name}' has no shape but model '${model}' requires a batch dimension (max_batch_size ${spec.maxBatchSize})`,
        );
      }
      const size = input.shape[0]!;
      if (first === undefined) first = { name: input.name, size };
      else if (size !== first.size) {
        throw new NereidError(
          'BATCH_SIZE',
          `input '${input.name}' batch size ${size} does not match other inputs for model '${model}' (input '${first.name}' has batch size ${first.size})`,
        );
      }
    }
    batchSize = first?.size ?? 1;
    if (batchSize < 1) {
      // Triton 2.51 refuses a batch of 0 with its byte-size check; its message prefix is kept.
      throw new NereidError(
        'BATCH_SIZE',
        `input byte size mismatch for input '${first!.name}' for model '${model}': inference request batch-size must be >= 1, got a batch dimension of 0`,
      );
    }
    if (batchSize > spec.maxBatchSize) {
      throw new NereidError(
        'BATCH_SIZE',
        `inference request batch-size must be <= ${spec.maxBatchSize} for '${model}', got ${batchSize}`,
      );
    }
  }

  // 4.–7. Datatype, shape, reshape, byte size.
  const tensors = new Map<string, BackendTensor>();
  for (const input of inputs) {
    const tspec = spec.inputs.get(input.name)!;
    if (input.datatype !== tspec.datatype) {
      throw new NereidError(
        'INPUT_DATATYPE',
        `inference input '${input.name}' data-type is '${input.datatype}', but model '${model}' expects '${tspec.datatype}'`,
      );
    }
    const batched = spec.maxBatchSize > 0;
    const item = batched ? input.shape.slice(1) : input.shape;
    let shapeOk = item.length === tspec.dims.length;
    for (let i = 0; shapeOk && i < item.length; i++) {
      const d = item[i]!;
      const want = tspec.dims[i]!;
      if (!Number.isInteger(d) || d < 0 || (want !== -1 && d !== want)) shapeOk = false;
    }
    if (!shapeOk) {
      const expected = batched ? [-1, ...tspec.dims] : [...tspec.dims];
      const note = batched
        ? ' NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape.' +
          ' If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero.'
        : '';
      throw new NereidError(
        'INPUT_SHAPE',
        `unexpected shape for input '${input.name}' for model '${model}'. Expected ${formatShape(expected)}, got ${formatShape(input.shape)}.${note}`,
      );
    }

    const data = asBytes(input);
    const count = elementCount(input.shape);
    if (tspec.datatype === 'BYTES') {
      const got = countBytesElements(data, `input '${input.name}' of model '${model}'`);
      if (got !== count) {
        throw new NereidError(
          'INPUT_BYTE_SIZE',
          `input '${input.name}' of model '${model}' holds ${got} BYTES elements but its shape ${formatShape(input.shape)} needs ${count}`,
        );
      }
    } else {
      const expected = count * elementSize(tspec.datatype);
      if (data.byteLength !== expected) {
        throw new NereidError(
          'INPUT_BYTE_SIZE',
          `input byte size mismatch for input '${input.name}' for model '${model}'. Expected ${expected}, got ${data.byteLength}`,
        );
      }
    }

    let shape: readonly number[] = input.shape;
    if (tspec.reshape !== undefined) {
      const itemShape = applyReshape(item, tspec.dims, tspec.reshape);
      shape = batched ? [input.shape[0]!, ...itemShape] : itemShape;
    }
    tensors.set(input.name, { name: input.name, datatype: input.datatype, shape, data });
  }

  return { inputs: tensors, requestedOutputs, classification, batchSize };
}

/**
 * §2.7 request-time reshape: the request's values at the wildcard positions of `dims` are put,
 * in order, into the wildcard positions of `reshape`.
 */
export function applyReshape(item: readonly number[], dims: readonly number[], reshape: readonly number[]): number[] {
  const wild: number[] = [];
  for (let i = 0; i < dims.length; i++) if (dims[i] === -1) wild.push(item[i]!);
  let w = 0;
  return reshape.map((d) => (d === -1 ? (wild[w++] ?? 1) : d));
}

/**
 * The inverse, for outputs: the model produced `produced` (per item, in `reshape` form); return
 * the shape in `dims` form, wildcards filled from the produced wildcard values in order.
 */
export function undoReshape(produced: readonly number[], dims: readonly number[], reshape: readonly number[]): number[] {
  const wild: number[] = [];
  for (let i = 0; i < reshape.length; i++) if (reshape[i] === -1) wild.push(produced[i]!);
  let w = 0;
  return dims.map((d) => (d === -1 ? (wild[w++] ?? 1) : d));
}
