import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SequenceIds } from './load.js';

describe('SequenceIds', () => {
  it('deals ids from the range, wrapping after its end and skipping ids still in use', () => {
    const ids = new SequenceIds({ length: 3, variation: 0, idStart: 5, idEnd: 7, count: 1, serial: false });
    const a = ids.open();
    const b = ids.open();
    const c = ids.open();
    assert.deepEqual([a.id, b.id, c.id], [5, 6, 7]);
    assert.equal(a.length, 3);
    ids.close(6);
    assert.equal(ids.open().id, 6, 'after the end, the first free id');
    ids.close(5);
    ids.close(7);
    assert.equal(ids.open().id, 7);
  });

  it('takes a stream\'s length unless --sequence-length is given, and varies lengths within the band', () => {
    const stream = [[], [], [], []];
    assert.equal(new SequenceIds({ variation: 0, idStart: 1, idEnd: 0, count: 1, serial: false }, [stream]).open().length, 4);
    assert.equal(new SequenceIds({ length: 9, variation: 0, idStart: 1, idEnd: 0, count: 1, serial: false }, [stream]).open().length, 9);
    const varied = new SequenceIds({ length: 100, variation: 20, idStart: 1, idEnd: 0, count: 1, serial: false });
    for (let i = 0; i < 200; i++) {
      const n = varied.open().length;
      assert.ok(n >= 80 && n <= 120, `${n}`);
    }
    assert.equal(new SequenceIds({ variation: 0, idStart: 1, idEnd: 0, count: 1, serial: false }).open().length, 20, 'default 20');
  });
});
