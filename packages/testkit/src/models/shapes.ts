/**
 * Small models whose point is their declared shapes: for config auto-complete, validation and
 * the ONNX reader (models-and-scheduling.md §3.4).
 */
import { OnnxGraphBuilder, attr } from '../onnx/model-writer.js';
import { OnnxElemType } from '../onnx/onnx-types.js';
import type { BuilderOptions, TestModel } from './test-model.js';
import { finishModel } from './test-model.js';

/** FP32 INPUT0 [4] → ReduceSum → OUTPUT0 of shape [] (a scalar). Cannot batch (max_batch_size 0). */
export function scalarOutputModel(options: BuilderOptions = {}): TestModel {
  const g = new OnnxGraphBuilder('scalar_output')
    .input('INPUT0', 'FLOAT', [4])
    .output('OUTPUT0', 'FLOAT', [])
    .node('ReduceSum', ['INPUT0'], ['OUTPUT0'], { keepdims: attr.int(0) });
  return finishModel(g, options.name ?? 'scalar_output', options.maxBatchSize ?? 0, options.model);
}

/** FP32 INPUT0 [2, 8] → OUTPUT0 = INPUT0 + INPUT0, [2, 8]: a fixed first dimension, so no batching. */
export function fixedFirstDimModel(options: BuilderOptions = {}): TestModel {
  const g = new OnnxGraphBuilder('fixed_first_dim')
    .input('INPUT0', 'FLOAT', [2, 8])
    .output('OUTPUT0', 'FLOAT', [2, 8])
    .node('Add', ['INPUT0', 'INPUT0'], ['OUTPUT0']);
  return finishModel(g, options.name ?? 'fixed_first_dim', options.maxBatchSize ?? 0, options.model);
}

/**
 * FP32 INPUT0 ['batch', 'height', 'width', 3] → Relu → OUTPUT0 of the same shape: several
 * symbolic dimensions (config dims [-1, -1, 3] with max_batch_size 8).
 */
export function symbolicDimsModel(options: BuilderOptions = {}): TestModel {
  const shape = ['batch', 'height', 'width', 3];
  const g = new OnnxGraphBuilder('symbolic_dims')
    .input('INPUT0', 'FLOAT', shape)
    .output('OUTPUT0', 'FLOAT', shape)
    .node('Relu', ['INPUT0'], ['OUTPUT0']);
  return finishModel(g, options.name ?? 'symbolic_dims', options.maxBatchSize ?? 8, options.model);
}

/**
 * FP32 INPUT0 ['batch', 4] → OUTPUT0 FP32 = -INPUT0 and OUTPUT1 INT64 = Cast(INPUT0) (truncated
 * toward zero): two outputs of different types.
 */
export function twoOutputTypesModel(options: BuilderOptions = {}): TestModel {
  const shape = ['batch', 4];
  const g = new OnnxGraphBuilder('two_output_types')
    .input('INPUT0', 'FLOAT', shape)
    .output('OUTPUT0', 'FLOAT', shape)
    .output('OUTPUT1', 'INT64', shape)
    .node('Neg', ['INPUT0'], ['OUTPUT0'])
    .node('Cast', ['INPUT0'], ['OUTPUT1'], { to: attr.int(OnnxElemType.INT64) });
  return finishModel(g, options.name ?? 'two_output_types', options.maxBatchSize ?? 8, options.model);
}

/**
 * FP32 INPUT0 → Identity → OUTPUT0 with no declared shape at all (unknown rank). Its `config`
 * is undefined: no dims can be derived, which is what auto-complete tests want to see.
 */
export function noShapeModel(options: BuilderOptions = {}): TestModel {
  const g = new OnnxGraphBuilder('no_shape')
    .input('INPUT0', 'FLOAT', null)
    .output('OUTPUT0', 'FLOAT', null)
    .node('Identity', ['INPUT0'], ['OUTPUT0']);
  return finishModel(g, options.name ?? 'no_shape', options.maxBatchSize ?? 0, options.model);
}
