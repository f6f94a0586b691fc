import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IdMap, LiveSet } from './id-map.js';
import { scavengeRetention } from './scavenge-retention.test-support.js';

describe('IdMap', () => {
  it('gets, sets, replaces and deletes entries by id, counting them', () => {
    const m = new IdMap<string>();
    assert.equal(m.size, 0);
    m.set(3, 'c');
    m.set(1, 'a');
    m.set(2, 'b');
    m.set(2, 'B');
    assert.equal(m.size, 3);
    assert.equal(m.get(2), 'B');
    assert.equal(m.get(4), undefined);
    assert.deepEqual(m.entries(), [[1, 'a'], [2, 'B'], [3, 'c']]);
    assert.equal(m.delete(2), true);
    assert.equal(m.delete(2), false);
    assert.equal(m.size, 2);
    assert.deepEqual(m.values(), ['a', 'c']);
    m.clear();
    assert.equal(m.size, 0);
    assert.deepEqual(m.entries(), []);
  });

  it('lets the caller delete while going through a copy of its entries', () => {
    const m = new IdMap<number>();
    for (let i = 0; i < 5; i++) m.set(i, i * 10);
    for (const [id] of m.entries()) m.delete(id);
    assert.equal(m.size, 0);
    m.set(7, 70);
    assert.deepEqual(m.entries(), [[7, 70]]);
  });
});

describe('LiveSet', () => {
  it('keeps values in the order they were added, each deleted by the id add returned', () => {
    const s = new LiveSet<string>();
    const a = s.add('a');
    const b = s.add('b');
    s.add('c');
    assert.equal(s.size, 3);
    assert.equal(s.delete(b), true);
    assert.equal(s.delete(b), false);
    assert.deepEqual(s.values(), ['a', 'c']);
    s.delete(a);
    s.add('d');
    assert.deepEqual(s.values(), ['c', 'd']);
  });

  it("keeps nothing alive through young-generation collections after a full one, where a long-lived Map's old tables chain every request since", () => {
    // Sixteen requests in flight in one long-lived collection, each entry holding half a
    // kilobyte; one full collection while they are in flight moves the collection to the old
    // generation. What the scavenges after it keep shows whether the collection's old storage
    // holds the entries added after it.
    const run = (how: 'idmap' | 'map') =>
      scavengeRetention({
        imports: `import { IdMap } from ${JSON.stringify(new URL('./id-map.js', import.meta.url).href)};`,
        setup: `const table = ${how === 'idmap' ? 'new IdMap()' : 'new Map()'};`,
        request: 'const id = n++; table.set(id, { payload: new Array(64).fill(id) }); if (id >= 16) table.delete(id - 16);',
        requests: 1_000_000,
      });
    const idmap = run('idmap');
    assert.ok(idmap.keptKB < 200, `IdMap: ${idmap.keptKB.toFixed(0)} KB kept per scavenge`);
    // The reason for IdMap: the same turnover in a Map keeps megabytes. If this fails, V8 no
    // longer links a Map's old tables to its new ones and IdMap may be retired.
    const map = run('map');
    assert.ok(map.keptKB > 1000, `Map: ${map.keptKB.toFixed(0)} KB kept per scavenge`);
  });
});
