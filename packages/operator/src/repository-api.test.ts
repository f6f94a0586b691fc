/** Reading a pod's repository index, conditions that keep their transition time, ConfigMap keys. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { configMapKeyToPath } from './model-controller.js';
import { modelState } from './repository-api.js';
import { setCondition, type Condition } from './types.js';

describe('modelState', () => {
  const index = [
    { name: 'a', version: '1', state: 'READY' },
    { name: 'a', version: '2', state: 'UNAVAILABLE', reason: 'bad file' },
    { name: 'b', version: '1', state: 'UNAVAILABLE', reason: 'load failed: no such backend' },
  ];
  it('is READY when some version is, or every wanted one', () => {
    assert.deepEqual(modelState(index, 'a'), { state: 'READY' });
    assert.deepEqual(modelState(index, 'a', [1]), { state: 'READY' });
    assert.deepEqual(modelState(index, 'a', [1, 2]), { state: 'UNAVAILABLE', reason: 'bad file' });
    assert.deepEqual(modelState(index, 'a', [3]), { state: 'UNAVAILABLE', reason: 'version 3 is not loaded' });
  });
  it('reports the reason of a failed model and a missing one', () => {
    assert.deepEqual(modelState(index, 'b'), { state: 'UNAVAILABLE', reason: 'load failed: no such backend' });
    assert.equal(modelState(index, 'c').state, 'NOT_LOADED');
  });
});

describe('setCondition', () => {
  it('keeps lastTransitionTime unless the status changes', () => {
    const conditions: Condition[] = [];
    assert.equal(setCondition(conditions, { type: 'Ready', status: 'False', reason: 'A', message: 'a' }, new Date('2026-01-01T00:00:00Z')), true);
    assert.equal(setCondition(conditions, { type: 'Ready', status: 'False', reason: 'B', message: 'b' }, new Date('2026-01-02T00:00:00Z')), false);
    assert.equal(conditions[0].lastTransitionTime, '2026-01-01T00:00:00Z');
    assert.equal(conditions[0].reason, 'B');
    assert.equal(setCondition(conditions, { type: 'Ready', status: 'True', reason: 'C', message: 'c' }, new Date('2026-01-03T00:00:00Z')), true);
    assert.equal(conditions[0].lastTransitionTime, '2026-01-03T00:00:00Z');
    assert.equal(conditions.length, 1);
  });
});

describe('configMapKeyToPath', () => {
  it('turns __ into /', () => {
    assert.equal(configMapKeyToPath('1__model.onnx'), '1/model.onnx');
    assert.equal(configMapKeyToPath('labels.txt'), 'labels.txt');
  });
});
