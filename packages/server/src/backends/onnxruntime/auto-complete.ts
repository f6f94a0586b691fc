/**
 * ONNX Runtime configuration auto-complete and config-versus-model checks
 * (models-and-scheduling.md §3.4).
 */
import { NereidError, toConfigDataType } from '@nereid/protocol';
import type { ModelConfig, ModelInput, ModelOutput } from '../../config/model-config.js';
import type { Logger } from '../../observability/logger.js';
import type { OnnxModelInfo, OnnxValueInfo } from './onnx-model-info.js';

/** Graph inputs that are not initializers: what a request must (or may) feed. */
export function requiredGraphInputs(info: OnnxModelInfo): OnnxValueInfo[] {
  const initializers = new Set(info.initializerNames);
  return info.inputs.filter((i) => !initializers.has(i.name));
}

function canBatch(values: readonly OnnxValueInfo[]): boolean {
  return values.every((v) => v.shape !== null && v.shape.length >= 1 && v.shape[0] === -1);
}

function configDims(model: string, v: OnnxValueInfo, maxBatchSize: number): { dims: number[]; reshape?: { shape: number[] } } {
  const shape = v.shape ?? [-1];
  const dims = maxBatchSize > 0 ? shape.slice(1) : [...shape];
  if (dims.length === 0) {
    return maxBatchSize > 0 ? { dims: [1], reshape: { shape: [] } } : { dims: [1] };
  }
  if (v.datatype === undefined) {
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `model '${model}': tensor '${v.name}' has ONNX element type ${v.elemType}, which Nereid cannot serve`,
    );
  }
  return { dims };
}

/**
 * Completes `config` from the ONNX model when inputs or outputs are missing (§3.4 steps 1–7).
 * Returns the config unchanged when both are given.
 */
export function autoCompleteOnnxConfig(
  config: ModelConfig,
  info: OnnxModelInfo,
  defaultMaxBatchSize: number,
  logger: Logger,
): ModelConfig {
  const inputCount = config.input.length + config.batch_input.length;
  if (inputCount > 0 && config.output.length > 0) return config;
  const model = config.name;
  const inputs = requiredGraphInputs(info);
  const next: ModelConfig = { ...config };

  const batchable = canBatch(inputs) && canBatch(info.outputs);
  if (batchable && next.max_batch_size === 0) {
    next.max_batch_size = defaultMaxBatchSize;
    logger.warning(
      `model '${model}': auto-complete set max_batch_size to ${defaultMaxBatchSize} (the default-max-batch-size); set max_batch_size in config.pbtxt to choose it`,
    );
    if (next.max_batch_size > 1 && next.dynamic_batching === undefined && next.sequence_batching === undefined) {
      next.dynamic_batching = {
        preferred_batch_size: [],
        max_queue_delay_microseconds: 0,
        preserve_ordering: false,
        priority_levels: 0,
        default_priority_level: 0,
        priority_queue_policy: {},
      };
    }
  } else if (!batchable && next.max_batch_size !== 0) {
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `model '${model}': model does not support batching while non-zero max_batch_size is specified ` +
        `(every input and output must have a variable first dimension); set max_batch_size: 0`,
    );
  }

  const typeOf = (v: OnnxValueInfo) => {
    if (v.datatype === undefined) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `model '${model}': tensor '${v.name}' has ONNX element type ${v.elemType}, which Nereid cannot serve`,
      );
    }
    return toConfigDataType(v.datatype);
  };
  if (config.input.length === 0) {
    next.input = inputs.map(
      (v): ModelInput => ({
        name: v.name,
        data_type: typeOf(v),
        format: 'FORMAT_NONE',
        ...configDims(model, v, next.max_batch_size),
        is_shape_tensor: false,
        allow_ragged_batch: false,
        optional: false,
        is_non_linear_format_io: false,
      }),
    );
  }
  if (config.output.length === 0) {
    next.output = info.outputs.map(
      (v): ModelOutput => ({
        name: v.name,
        data_type: typeOf(v),
        ...configDims(model, v, next.max_batch_size),
        label_filename: '',
        is_shape_tensor: false,
        is_non_linear_format_io: false,
      }),
    );
  }
  return next;
}

function shapeMatches(model: readonly number[] | null, configured: readonly number[], maxBatchSize: number): boolean {
  if (model === null) return true;
  let expected: readonly number[];
  if (maxBatchSize > 0) {
    if (model.length === 0 || model[0] !== -1) return false;
    expected = model.slice(1);
  } else {
    expected = model;
  }
  // A scalar model tensor accepts only dims of all 1s.
  if (expected.length === 0) return configured.every((d) => d === 1);
  if (expected.length !== configured.length) return false;
  return expected.every((d, i) => d === -1 || d === configured[i]);
}

function describe(shape: readonly number[] | null): string {
  return shape === null ? 'unknown' : `[${shape.join(',')}]`;
}

/** Data type and shape of one configured tensor against the model's (§3.4). */
function checkTensor(
  kind: 'input' | 'output',
  tensor: ModelInput | ModelOutput,
  v: OnnxValueInfo,
  model: string,
  mbs: number,
): void {
  const want = v.datatype === undefined ? undefined : toConfigDataType(v.datatype);
  if (want !== tensor.data_type) {
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `unable to load model '${model}': ${kind} '${tensor.name}' has data type ${tensor.data_type} in the configuration but ${want ?? `ONNX type ${v.elemType}`} in the model`,
    );
  }
  const dims = tensor.reshape?.shape ?? tensor.dims;
  if (!shapeMatches(v.shape, dims, mbs)) {
    const rankNote =
      mbs > 0 && v.shape !== null && v.shape.length === dims.length && v.shape.length > 0
        ? ` (with max_batch_size > 0 the configuration's dims exclude the batch dimension; the model expects ${v.shape.length} dimensions including it)`
        : '';
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `unable to load model '${model}': ${kind} '${tensor.name}' dims ${describe(dims)} with max_batch_size ${mbs} do not match the model's shape ${describe(v.shape)}${rankNote}`,
    );
  }
}

/** Checks a complete config against the ONNX model (§3.4, "Otherwise ... validates"). */
export function checkConfigAgainstModel(config: ModelConfig, info: OnnxModelInfo): void {
  const model = config.name;
  const graphInputs = requiredGraphInputs(info);
  const initializers = new Set(info.initializerNames);
  const modelInputs = new Map(info.inputs.map((v) => [v.name, v]));
  const modelOutputs = new Map(info.outputs.map((v) => [v.name, v]));
  const mbs = config.max_batch_size;

  // The sequence batcher supplies control and implicit-state inputs that `input` does not list.
  const supplied = [
    ...(config.sequence_batching?.control_input.map((c) => c.name) ?? []),
    ...(config.sequence_batching?.state.map((s) => s.input_name) ?? []),
  ];
  const configured = new Set([...config.input.map((i) => i.name), ...supplied]);
  const missing = graphInputs.filter((v) => !configured.has(v.name)).map((v) => v.name);
  if (missing.length > 0) {
    const quote = (names: readonly string[]) => names.map((n) => `'${n}'`).join(', ');
    const unknown = config.input.map((i) => i.name).filter((n) => !modelInputs.has(n));
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `unable to load model '${model}', configuration expects ${config.input.length + supplied.length} inputs, model provides ${graphInputs.length}: ` +
        `model input(s) ${quote(missing)} are not in the configuration` +
        (unknown.length > 0 ? `, and configuration input(s) ${quote(unknown)} are not inputs of the model` : '') +
        `; the configuration has ${quote([...configured]) || 'no inputs'}, the model has ${quote(graphInputs.map((g) => g.name))}`,
    );
  }
  for (const name of supplied) {
    if (!modelInputs.has(name)) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': sequence_batching names input '${name}' (a control or state input), which is not an input of the model; ` +
          `allowed inputs are: ${graphInputs.map((g) => g.name).join(', ')}`,
      );
    }
  }
  for (const state of config.sequence_batching?.state ?? []) {
    if (!modelOutputs.has(state.output_name)) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': sequence_batching state output '${state.output_name}' is not an output of the model; ` +
          `allowed outputs are: ${info.outputs.map((o) => o.name).join(', ')}`,
      );
    }
  }
  for (const input of config.input) {
    const v = modelInputs.get(input.name);
    if (v === undefined) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': configuration input '${input.name}' is not an input of the model; ` +
          `allowed inputs are: ${[...graphInputs.map((g) => g.name), ...initializers].join(', ')}`,
      );
    }
    checkTensor('input', input, v, model, mbs);
    if (input.allow_ragged_batch && !(v.shape !== null && v.shape.length === 1 && v.shape[0] === -1)) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': ragged input '${input.name}' must be a 1-D [-1] tensor in the model, it is ${describe(v.shape)}`,
      );
    }
    if (input.optional && (mbs > 0 || input.allow_ragged_batch)) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': optional input '${input.name}' is not supported with max_batch_size > 0 or ragged batching`,
      );
    }
  }
  for (const output of config.output) {
    const v = modelOutputs.get(output.name);
    if (v === undefined) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `unable to load model '${model}': configuration output '${output.name}' is not an output of the model; ` +
          `allowed outputs are: ${info.outputs.map((o) => o.name).join(', ')}`,
      );
    }
    checkTensor('output', output, v, model, mbs);
  }
}
