/**
 * The shape of what every model builder returns, and the helper that turns a graph into one.
 */
import type { EncodedModel, ModelOptions, OnnxGraphBuilder, ValueInfoSpec } from '../onnx/model-writer.js';
import { encodeModel } from '../onnx/model-writer.js';
import { dataTypeOfOnnx } from '../onnx/onnx-types.js';
import { configTensorsFor, modelConfigText } from './config-text.js';

/** A generated ONNX model with its declared tensors and a matching `config.pbtxt`. */
export interface TestModel {
  /** The model name used in `config` (and as the directory name by `writeModelToRepository`). */
  readonly name: string;
  readonly onnx: EncodedModel;
  /** The graph inputs and outputs exactly as declared in the ONNX file. */
  readonly inputs: readonly ValueInfoSpec[];
  readonly outputs: readonly ValueInfoSpec[];
  readonly maxBatchSize: number;
  /** `config.pbtxt` text; undefined where no complete config can describe the model (a tensor
   * without a shape, or of a type with no Nereid datatype such as BFLOAT16). */
  readonly config: string | undefined;
}

/** Options every builder accepts. */
export interface BuilderOptions {
  /** Model name (config `name`, repository directory name). */
  readonly name?: string;
  /** `max_batch_size` written to the config. */
  readonly maxBatchSize?: number;
  /** Store every initializer in an external data file (`model.onnx.data`). */
  readonly externalData?: boolean;
  /** ModelProto options (IR version, opsets, producer, ...). */
  readonly model?: ModelOptions;
}

/**
 * Encodes `graph` and derives its config. The config is undefined when some tensor has no
 * shape or no Nereid datatype, since then no complete config can describe the model.
 */
export function finishModel(
  graph: OnnxGraphBuilder,
  name: string,
  maxBatchSize: number,
  modelOptions: ModelOptions | undefined,
  configExtra?: string,
): TestModel {
  const onnx = encodeModel(graph, modelOptions);
  const describable = [...graph.inputs, ...graph.outputs].every(
    (t) => t.shape != null && (t.kind ?? 'tensor') === 'tensor' && dataTypeOfOnnx(t.elemType) !== undefined,
  );
  const config = describable
    ? modelConfigText({
        name,
        maxBatchSize,
        inputs: configTensorsFor(graph.inputs, maxBatchSize),
        outputs: configTensorsFor(graph.outputs, maxBatchSize),
        extra: configExtra,
      })
    : undefined;
  return { name, onnx, inputs: [...graph.inputs], outputs: [...graph.outputs], maxBatchSize, config };
}
