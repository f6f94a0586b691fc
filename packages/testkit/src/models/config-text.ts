/**
 * Writes `config.pbtxt` text in the layout of Triton's own examples, and derives the input and
 * output entries of a config from a model's declared tensors the way ONNX Runtime auto-complete
 * does (models-and-scheduling.md §3.4 steps 6–7).
 */
import type { DataType } from '@nereid/protocol';
import { toConfigDataType } from '@nereid/protocol';
import type { ValueInfoSpec } from '../onnx/model-writer.js';
import { dataTypeOfOnnx } from '../onnx/onnx-types.js';

export interface ConfigTensor {
  readonly name: string;
  readonly dataType: DataType;
  readonly dims: readonly number[];
  /** Written as `reshape: { shape: [ ... ] }` when present. */
  readonly reshape?: readonly number[];
}

export interface ModelConfigTextOptions {
  readonly name: string;
  /** Default `onnxruntime_onnx`; pass null to write no platform line. */
  readonly platform?: string | null;
  readonly backend?: string;
  readonly maxBatchSize: number;
  readonly inputs: readonly ConfigTensor[];
  readonly outputs: readonly ConfigTensor[];
  /** Text appended verbatim (for example a `dynamic_batching { ... }` block). */
  readonly extra?: string;
}

/** A complete `config.pbtxt`. */
export function modelConfigText(options: ModelConfigTextOptions): string {
  const lines: string[] = [`name: "${options.name}"`];
  const platform = options.platform === undefined ? 'onnxruntime_onnx' : options.platform;
  if (platform !== null) lines.push(`platform: "${platform}"`);
  if (options.backend !== undefined) lines.push(`backend: "${options.backend}"`);
  lines.push(`max_batch_size: ${options.maxBatchSize}`);
  lines.push(...tensorList('input', options.inputs), ...tensorList('output', options.outputs));
  let text = lines.join('\n') + '\n';
  if (options.extra !== undefined && options.extra.trim() !== '') text += options.extra.trimEnd() + '\n';
  return text;
}

function tensorList(kind: 'input' | 'output', tensors: readonly ConfigTensor[]): string[] {
  if (tensors.length === 0) return [];
  const blocks = tensors.map((t) => {
    const body = [
      `    name: "${t.name}"`,
      `    data_type: ${toConfigDataType(t.dataType)}`,
      `    dims: ${list(t.dims)}`,
    ];
    if (t.reshape !== undefined) body.push(`    reshape: { shape: ${list(t.reshape)} }`);
    return ['  {', ...body, '  }'].join('\n');
  });
  return [`${kind} [`, blocks.join(',\n'), ']'];
}

function list(values: readonly number[]): string {
  return values.length === 0 ? '[ ]' : `[ ${values.join(', ')} ]`;
}

/**
 * Config entries for declared model tensors: datatype mapped from the ONNX type, dims = model
 * shape without the batch dimension when `maxBatchSize > 0`, symbolic or unknown dims as -1,
 * and an empty result replaced by `[1]` (with `reshape: { shape: [] }` when batching).
 * Throws for a tensor without a shape or with an unmappable type.
 */
export function configTensorsFor(specs: readonly ValueInfoSpec[], maxBatchSize: number): ConfigTensor[] {
  return specs.map((spec) => {
    const dataType = dataTypeOfOnnx(spec.elemType);
    if (dataType === undefined) throw new TypeError(`tensor '${spec.name}' has no Nereid datatype`);
    if (spec.shape == null) throw new TypeError(`tensor '${spec.name}' has no shape to derive dims from`);
    const full = spec.shape.map((d) => (typeof d === 'number' ? d : -1));
    const dims = maxBatchSize > 0 ? full.slice(1) : full;
    if (dims.length === 0) return maxBatchSize > 0 ? { name: spec.name, dataType, dims: [1], reshape: [] } : { name: spec.name, dataType, dims: [1] };
    return { name: spec.name, dataType, dims };
  });
}
