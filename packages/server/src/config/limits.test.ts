import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { completeModelConfig } from './config-json.js';
import { DEFAULT_CONFIG_LIMITS, InstanceBudget, parseConfigLimit, validateConfigLimits } from './limits.js';
import type { ModelConfig, Sparse } from './model-config.js';

const config = (fields: Sparse<ModelConfig>): ModelConfig => completeModelConfig({ name: 'm', backend: 'onnxruntime', ...fields });

describe('configuration limits', () => {
  it('lets a value at its limit through and refuses one above, naming field, value, limit and option', () => {
    const limits = { ...DEFAULT_CONFIG_LIMITS, 'max-batch-size': 8 };
    assert.doesNotThrow(() => validateConfigLimits(config({ max_batch_size: 8 }), limits));
    assert.throws(
      () => validateConfigLimits(config({ max_batch_size: 9 }), limits),
      /^NereidError: model 'm': max_batch_size is 9, above this server's limit of 8 \(max-batch-size\); lower it, or start the server with --model-config-limit max-batch-size=<n> to allow more$/,
    );
  });

  it('counts instances over every group, a count below 1 as 1', () => {
    const limits = { ...DEFAULT_CONFIG_LIMITS, 'instances-per-model': 4 };
    const groups = (counts: number[]) => config({ instance_group: counts.map((count) => ({ count, kind: 'KIND_CPU' as const })) });
    assert.doesNotThrow(() => validateConfigLimits(groups([2, 1, 0]), limits));
    assert.throws(() => validateConfigLimits(groups([2, 2, 0]), limits), /the instance count \(over all instance_group entries\) is 5/);
  });

  it('counts sequence slots as instances × max_batch_size, or × max_candidate_sequences', () => {
    const limits = { ...DEFAULT_CONFIG_LIMITS, 'sequence-slots': 64 };
    const seq = (fields: Sparse<ModelConfig>) => config({ sequence_batching: {}, instance_group: [{ count: 4, kind: 'KIND_CPU' }], ...fields });
    assert.doesNotThrow(() => validateConfigLimits(seq({ max_batch_size: 16 }), limits));
    assert.throws(() => validateConfigLimits(seq({ max_batch_size: 17 }), limits), /the sequence slots \(4 instance\(s\) × 17 slot\(s\) each\) is 68/);
    assert.throws(
      () => validateConfigLimits(seq({ max_batch_size: 1, sequence_batching: { oldest: { max_candidate_sequences: 20 } } }), limits),
      /4 instance\(s\) × 20 slot\(s\) each/,
    );
  });

  it('counts the fixed elements of a tensor, -1 as 1', () => {
    const limits = { ...DEFAULT_CONFIG_LIMITS, 'tensor-elements': 1000 };
    const input = (dims: number[]) => config({ input: [{ name: 'X', data_type: 'TYPE_FP32', dims }] });
    assert.doesNotThrow(() => validateConfigLimits(input([-1, 10, 100]), limits));
    assert.throws(() => validateConfigLimits(input([-1, 10, 101]), limits), /the element count of input 'X' dims \[-1,10,101\] is 1010/);
  });

  it('cuts a long model name in its own error', () => {
    const name = 'n'.repeat(5000);
    assert.throws(() => validateConfigLimits(completeModelConfig({ name, backend: 'onnxruntime' })), (err: Error) => err.message.length < 400 && /is 5000 characters long/.test(err.message));
  });

  it('parses --model-config-limit settings', () => {
    assert.deepEqual(parseConfigLimit('warmup-count=5'), ['warmup-count', 5]);
    assert.throws(() => parseConfigLimit('warmup-count'), /expects <limit>=<positive integer>/);
    assert.throws(() => parseConfigLimit('warmup-count=-1'), /expects a positive integer, got '-1'/);
  });
});

describe('InstanceBudget', () => {
  it('takes instances up to its limit, refuses past it, and takes again once some are given back', () => {
    const budget = new InstanceBudget(3);
    budget.take('a', 2);
    assert.throws(() => budget.take('b', 2), /model 'b': 2 more instance\(s\) would make 4 on this server, above its limit of 3 \(instances-per-server\)/);
    assert.equal(budget.used, 2);
    budget.give(1);
    budget.take('b', 2);
    assert.equal(budget.used, 3);
  });
});
