import assert from 'node:assert/strict';
import { it } from 'node:test';
import { frameJson } from './stub-process.js';

it('frameJson writes messages as JSON, BigInts as numbers where exact and as strings beyond', () => {
  assert.equal(frameJson({ t: 'exec', x: 1, s: [1, 16] }), '{"t":"exec","x":1,"s":[1,16]}');
  assert.equal(frameJson({ t: 'reply', value: { n: 5n, big: 2n ** 64n - 1n, list: [1n] } }), '{"t":"reply","value":{"n":5,"big":"18446744073709551615","list":[1]}}');
  const cyclic: Record<string, unknown> = {};
  cyclic['self'] = cyclic;
  assert.throws(() => frameJson(cyclic), /circular/i);
});
