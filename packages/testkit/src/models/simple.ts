/**
 * Triton's `simple` and `simple_string` example models, as ONNX: two [batch, 16] inputs,
 * OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.
 */
import { OnnxGraphBuilder, attr } from '../onnx/model-writer.js';
import { OnnxElemType } from '../onnx/onnx-types.js';
import { identityModel } from './identity.js';
import type { BuilderOptions, TestModel } from './test-model.js';
import { finishModel } from './test-model.js';

/** Triton's `simple`: INT32 [-1, 16] × 2 → sum and difference (config: max_batch_size 8, dims [16]). */
export function simpleModel(options: BuilderOptions = {}): TestModel {
  const shape = ['batch', 16];
  const g = new OnnxGraphBuilder('simple')
    .input('INPUT0', 'INT32', shape)
    .input('INPUT1', 'INT32', shape)
    .output('OUTPUT0', 'INT32', shape)
    .output('OUTPUT1', 'INT32', shape)
    .node('Add', ['INPUT0', 'INPUT1'], ['OUTPUT0'])
    .node('Sub', ['INPUT0', 'INPUT1'], ['OUTPUT1']);
  return finishModel(g, options.name ?? 'simple', options.maxBatchSize ?? 8, options.model);
}

/**
 * Triton's `simple_string`: STRING [-1, 16] × 2 holding decimal integers → their sum and
 * difference as decimal strings. ONNX Runtime's Cast converts STRING ⇄ INT32 both ways.
 */
export function simpleStringModel(options: BuilderOptions = {}): TestModel {
  const shape = ['batch', 16];
  const toInt = attr.int(OnnxElemType.INT32);
  const toString = attr.int(OnnxElemType.STRING);
  const g = new OnnxGraphBuilder('simple_string')
    .input('INPUT0', 'STRING', shape)
    .input('INPUT1', 'STRING', shape)
    .output('OUTPUT0', 'STRING', shape)
    .output('OUTPUT1', 'STRING', shape)
    .node('Cast', ['INPUT0'], ['a'], { to: toInt })
    .node('Cast', ['INPUT1'], ['b'], { to: toInt })
    .node('Add', ['a', 'b'], ['sum'])
    .node('Sub', ['a', 'b'], ['diff'])
    .node('Cast', ['sum'], ['OUTPUT0'], { to: toString })
    .node('Cast', ['diff'], ['OUTPUT1'], { to: toString });
  return finishModel(g, options.name ?? 'simple_string', options.maxBatchSize ?? 8, options.model);
}

/**
 * Triton's `simple_int8`: INT8 [-1, 16] × 2 → sum and difference, wrapping at the INT8 range as
 * Triton's example does.
 */
export function simpleInt8Model(options: BuilderOptions = {}): TestModel {
  const shape = ['batch', 16];
  const g = new OnnxGraphBuilder('simple_int8')
    .input('INPUT0', 'INT8', shape)
    .input('INPUT1', 'INT8', shape)
    .output('OUTPUT0', 'INT8', shape)
    .output('OUTPUT1', 'INT8', shape)
    .node('Add', ['INPUT0', 'INPUT1'], ['OUTPUT0'])
    .node('Sub', ['INPUT0', 'INPUT1'], ['OUTPUT1']);
  // Add and Sub take INT8 from opset 14 on.
  return finishModel(g, options.name ?? 'simple_int8', options.maxBatchSize ?? 8, { opsets: [{ domain: '', version: 14 }], ...options.model });
}

/**
 * Triton's `simple_identity`: STRING [-1, -1] → Identity (config: max_batch_size 8, dims [-1]),
 * so any BYTES content, UTF-8 or not, comes back unchanged.
 */
export function simpleIdentityModel(options: BuilderOptions = {}): TestModel {
  return identityModel('BYTES', [-1, -1], { ...options, name: options.name ?? 'simple_identity' });
}
