import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { nativeAddon } from './native.js';
import { requireNativeAddon } from './test-support.js';


describe('native addon', () => {
  before(requireNativeAddon);
  it('loads once and offers the mapping copies; bad arguments are type errors, not crashes', () => {
    const addon = nativeAddon()!;
    assert.equal(nativeAddon(), addon);
    for (const name of ['map', 'unmap', 'copy'] as const) assert.equal(typeof addon[name], 'function', name);
    assert.throws(() => addon.map(-1, 16, false), TypeError);
    assert.throws(() => addon.map(0, 0, false), TypeError);
    assert.throws(() => addon.copy({} as never, 0, new Uint8Array(1), false), TypeError);
  });
});
