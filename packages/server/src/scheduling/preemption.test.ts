// The preemption parameters: what is accepted, and the errors that name what is wrong.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ModelConfig, ModelDynamicBatching } from '../config/model-config.js';
import { NO_PREEMPTION, preemptionSettings } from './preemption.js';

const batching = (levels: number): ModelDynamicBatching => ({
  preferred_batch_size: [],
  max_queue_delay_microseconds: 0,
  preserve_ordering: false,
  priority_levels: levels,
  default_priority_level: levels,
  priority_queue_policy: {},
});

function config(parameters: Record<string, string>, options: { levels?: number; decoupled?: boolean; batching?: boolean } = {}) {
  return {
    name: 'm',
    parameters: Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, { string_value: v }])),
    ...(options.batching === false ? {} : { dynamic_batching: batching(options.levels ?? 3) }),
    ...(options.decoupled ? { model_transaction_policy: { decoupled: true } } : {}),
  } as unknown as ModelConfig;
}

const refused = (c: ModelConfig, message: RegExp) =>
  assert.throws(() => preemptionSettings(c), (err: { code?: string; message: string }) => {
    assert.equal(err.code, 'CONFIG_INVALID');
    assert.match(err.message, /^model 'm': /);
    assert.match(err.message, message);
    return true;
  });

describe('preemptionSettings', () => {
  it('is off without the parameters, and with "off"', () => {
    assert.deepEqual(preemptionSettings(config({})), NO_PREEMPTION);
    assert.deepEqual(preemptionSettings(config({ preemption: 'off' })), NO_PREEMPTION);
    assert.deepEqual(preemptionSettings(config({}, { batching: false })), NO_PREEMPTION);
  });

  it('reads queued, running, both, and the model-wide queue size', () => {
    assert.deepEqual(preemptionSettings(config({ preemption: 'queued', max_total_queue_size: '8' })), { queued: true, running: false, maxTotalQueueSize: 8 });
    assert.deepEqual(preemptionSettings(config({ preemption: 'running' }, { decoupled: true })), { queued: false, running: true, maxTotalQueueSize: 0 });
    assert.deepEqual(
      preemptionSettings(config({ preemption: 'queued, running', max_total_queue_size: '4' }, { decoupled: true })),
      { queued: true, running: true, maxTotalQueueSize: 4 },
    );
    assert.deepEqual(preemptionSettings(config({ max_total_queue_size: '5' }, { levels: 0 })), { queued: false, running: false, maxTotalQueueSize: 5 });
  });

  it('refuses what it cannot use, naming the parameter and the fix', () => {
    refused(config({ preemption: 'yes' }), /parameter 'preemption' must be "off", "queued", "running" or "queued,running", got 'yes'/);
    refused(config({ max_total_queue_size: '-1' }), /'max_total_queue_size' must be a non-negative integer, got '-1'/);
    refused(config({ max_total_queue_size: '2.5' }), /non-negative integer/);
    refused(config({ max_total_queue_size: '3' }, { batching: false }), /no dynamic_batching section/);
    refused(config({ preemption: 'queued', max_total_queue_size: '3' }, { levels: 1 }), /priority_levels of 2 or more; priority_levels is 1/);
    refused(config({ preemption: 'running' }, { batching: false, decoupled: true }), /priority_levels of 2 or more; the model has no dynamic_batching/);
    refused(config({ preemption: 'queued' }), /set parameter 'max_total_queue_size'/);
    refused(config({ preemption: 'running' }), /the model is not decoupled/);
  });
});
