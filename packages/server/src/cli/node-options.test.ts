import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { missingNodeOptions, SERVE_NODE_OPTIONS } from './node-options.js';

describe('missingNodeOptions', () => {
  it('names every option when the process was started without any', () => {
    assert.deepEqual(missingNodeOptions([], undefined), [...SERVE_NODE_OPTIONS]);
    assert.deepEqual(missingNodeOptions(['--enable-source-maps'], '--trace-warnings'), [...SERVE_NODE_OPTIONS]);
  });

  it('counts an option given on the command line or in NODE_OPTIONS, with any value and either spelling', () => {
    assert.deepEqual(missingNodeOptions(['--max-semi-space-size=64', '--single-threaded-gc'], undefined), []);
    assert.deepEqual(missingNodeOptions(['--single-threaded-gc'], '--trace-warnings --max-semi-space-size=32'), []);
    assert.deepEqual(missingNodeOptions(['--max_semi_space_size=128', '--single_threaded_gc'], ''), []);
    assert.deepEqual(missingNodeOptions(['--max-semi-space-size=64'], undefined), ['--single-threaded-gc']);
  });

  it("counts the --no- form as the operator's choice", () => {
    assert.deepEqual(missingNodeOptions(['--no-single-threaded-gc'], '--max-semi-space-size=16'), []);
  });

  it('does not take a similar flag for it', () => {
    assert.deepEqual(missingNodeOptions(['--max-old-space-size=4096', '--single-threaded-gc'], '--semi-space-growth-factor=2'), ['--max-semi-space-size=64']);
    assert.deepEqual(missingNodeOptions(['--max-semi-space-size=64', '--single-threaded'], undefined), ['--single-threaded-gc']);
  });
});
