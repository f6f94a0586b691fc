import assert from 'node:assert/strict';
import { it } from 'node:test';
import { defaultIntraOpThreads } from './threads.js';

it('defaultIntraOpThreads leaves the event loop a core and divides the rest among the instances', () => {
  assert.equal(defaultIntraOpThreads(2, 1), 1);
  assert.equal(defaultIntraOpThreads(16, 1), 15);
  assert.equal(defaultIntraOpThreads(16, 2), 7);
  assert.equal(defaultIntraOpThreads(16, 4), 3);
  assert.equal(defaultIntraOpThreads(1, 1), 1, 'at least one thread');
  assert.equal(defaultIntraOpThreads(4, 8), 1, 'more instances than cores');
  assert.equal(defaultIntraOpThreads(4, 0), 3, 'no instance count: one');
});
