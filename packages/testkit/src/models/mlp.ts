/**
 * A multi-layer perceptron with seeded pseudo-random weights: big enough (a few MFLOP per row)
 * that batching pays, small enough to build in milliseconds. `compute` is a plain-JS reference
 * of the same network for checking outputs.
 */
import { OnnxGraphBuilder, attr } from '../onnx/model-writer.js';
import { Prng } from './prng.js';
import type { BuilderOptions, TestModel } from './test-model.js';
import { finishModel } from './test-model.js';

export interface MlpOptions extends BuilderOptions {
  /** Default 1. */
  readonly seed?: number;
  /** Default 256. */
  readonly inputSize?: number;
  /** Default [1024, 1024]. */
  readonly hiddenSizes?: readonly number[];
  /** Default 16. */
  readonly outputSize?: number;
  /** Config text appended after the tensors; default: dynamic batching (200 µs) and one CPU instance. */
  readonly configExtra?: string;
}

export interface MlpLayer {
  readonly inSize: number;
  readonly outSize: number;
  /** Row-major [inSize, outSize]. */
  readonly weight: Float32Array;
  readonly bias: Float32Array;
}

export interface MlpModel extends TestModel {
  readonly layers: readonly MlpLayer[];
  /** Multiply-adds × 2 per batch row. */
  readonly flopsPerRow: number;
  /** Reference forward pass of `batch` rows of `input` (row-major [batch, inputSize]). */
  compute(input: Float32Array, batch: number): Float32Array;
}

export const MLP_CONFIG_EXTRA = `dynamic_batching {
  max_queue_delay_microseconds: 200
}
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
`;

/** FP32 INPUT0 [-1, 256] → Gemm+Relu (1024) → Gemm+Relu (1024) → Gemm → OUTPUT0 [-1, 16]. */
export function mlpModel(options: MlpOptions = {}): MlpModel {
  const inputSize = options.inputSize ?? 256;
  const sizes = [inputSize, ...(options.hiddenSizes ?? [1024, 1024]), options.outputSize ?? 16];
  const rng = new Prng(options.seed ?? 1);
  const external = options.externalData ?? false;
  const g = new OnnxGraphBuilder('mlp')
    .input('INPUT0', 'FLOAT', ['batch', inputSize])
    .output('OUTPUT0', 'FLOAT', ['batch', sizes[sizes.length - 1]!]);
  const layers: MlpLayer[] = [];
  let x = 'INPUT0';
  let flopsPerRow = 0;
  for (let l = 0; l + 1 < sizes.length; l++) {
    const inSize = sizes[l]!;
    const outSize = sizes[l + 1]!;
    const scale = 1 / Math.sqrt(inSize);
    const weight = rng.float32Array(inSize * outSize, -scale, scale);
    const bias = rng.float32Array(outSize, -0.1, 0.1);
    layers.push({ inSize, outSize, weight, bias });
    flopsPerRow += 2 * inSize * outSize;
    const last = l + 2 === sizes.length;
    const y = last ? 'OUTPUT0' : `h${l}`;
    g.initializer(`W${l}`, 'FLOAT', [inSize, outSize], weight, { external });
    g.initializer(`B${l}`, 'FLOAT', [outSize], bias, { external });
    g.node('Gemm', [x, `W${l}`, `B${l}`], [last ? y : `${y}_linear`], { alpha: attr.float(1), beta: attr.float(1) });
    if (!last) g.node('Relu', [`${y}_linear`], [y]);
    x = y;
  }
  const base = finishModel(
    g,
    options.name ?? 'mlp',
    options.maxBatchSize ?? 32,
    options.model,
    options.configExtra ?? MLP_CONFIG_EXTRA,
  );
  return { ...base, layers, flopsPerRow, compute: (input, batch) => mlpForward(layers, input, batch) };
}

function mlpForward(layers: readonly MlpLayer[], input: Float32Array, batch: number): Float32Array {
  let x: Float64Array = Float64Array.from(input);
  layers.forEach((layer, index) => {
    const { inSize, outSize, weight, bias } = layer;
    const y = new Float64Array(batch * outSize);
    for (let r = 0; r < batch; r++) {
      const row = y.subarray(r * outSize, (r + 1) * outSize);
      for (let j = 0; j < outSize; j++) row[j] = bias[j];
      for (let i = 0; i < inSize; i++) {
        const xi = x[r * inSize + i];
        if (xi === 0) continue;
        const w = weight.subarray(i * outSize, (i + 1) * outSize);
        for (let j = 0; j < outSize; j++) row[j] += xi * w[j];
      }
      if (index + 1 < layers.length) for (let j = 0; j < outSize; j++) if (row[j] < 0) row[j] = 0;
    }
    x = y;
  });
  return Float32Array.from(x);
}
