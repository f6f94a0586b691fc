import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConcurrencyLoad, RateLoad, SequenceIds } from './load.js';
import type { Sender } from './transport.js';

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

describe('RateLoad with sequences', () => {
  /**
   * A sender that logs each request's send and answer; a sequence's second request is slow, so
   * without ordering its end request (fast) would be answered first, as a server would see it
   * over separate connections.
   */
  function loggingSender(log: string[]): Sender {
    return {
      infer: async (_inputs, parameters) => {
        const id = parameters?.sequence_id as number;
        const step = parameters?.sequence_start === true ? 'start' : parameters?.sequence_end === true ? 'end' : 'middle';
        log.push(`send ${id} ${step}`);
        await new Promise((resolve) => setTimeout(resolve, step === 'middle' ? 40 : 1));
        log.push(`answer ${id} ${step}`);
        return { responses: 1, sendMs: 0, recvMs: 0 };
      },
      close: () => undefined,
    };
  }

  for (const serial of [false, true]) {
    it(`sends a sequence's end request only once its other requests are answered${serial ? ' (serial)' : ''}`, async () => {
      const log: string[] = [];
      const ids = new SequenceIds({ length: 4, variation: 0, idStart: 1, idEnd: 0, count: 2, serial });
      const load = new RateLoad([loggingSender(log)], [[]], () => 2, 0, { ids, count: 2, serial });
      await new Promise((resolve) => setTimeout(resolve, 300));
      await load.stop();
      const sequences = new Set(log.map((l) => Number(l.split(' ')[1])));
      assert.ok(sequences.size >= 2, log.join('\n'));
      for (const id of sequences) {
        const events = log.filter((l) => Number(l.split(' ')[1]) === id);
        const end = events.indexOf(`send ${id} end`);
        assert.ok(end > 0, `sequence ${id} was ended:\n${events.join('\n')}`);
        const sent = events.slice(0, end).filter((e) => e.startsWith('send')).length;
        const answered = events.slice(0, end).filter((e) => e.startsWith('answer')).length;
        assert.equal(answered, sent, `sequence ${id}: its end request went out with requests unanswered:\n${events.join('\n')}`);
        assert.equal(events[1], `answer ${id} start`, `sequence ${id}: nothing before its start request was answered:\n${events.join('\n')}`);
      }
    });
  }
});

describe('the drain limit (--drain-timeout)', () => {
  /** A sender that answers every request at once except the `lost`-th, which it never answers (a lost response). */
  function losingSender(lost: number): Sender {
    let n = 0;
    return {
      infer: () => (++n === lost ? new Promise(() => undefined) : Promise.resolve({ responses: 1, sendMs: 0, recvMs: 0 })),
      close: () => undefined,
    };
  }

  it('fails a request never answered once the counted load sent its last, so the run ends', async () => {
    const load = new ConcurrencyLoad([losingSender(3)], [[]], 2, 6, undefined, 150);
    const started = performance.now();
    await load.finished;
    await load.stop();
    const took = performance.now() - started;
    assert.ok(took >= 140, `finished after ${took} ms`);
    assert.equal(load.records.length, 6);
    assert.equal(load.records.filter((r) => r.ok).length, 5);
    assert.match(String((load.firstError as Error).message), /no response within 0.15 s after the load stopped sending.*--drain-timeout/);
  });

  it('fails a request never answered when a timed load stops, and sends nothing after', async () => {
    const sender = losingSender(2);
    const load = new ConcurrencyLoad([sender], [[]], 1, 0, undefined, 100);
    // The slot's second request hangs: nothing more is sent until the drain limit fails it.
    await new Promise((resolve) => setTimeout(resolve, 20));
    const sentBefore = load.sent;
    assert.equal(sentBefore, 2);
    await load.stop();
    assert.equal(load.sent, 2);
    assert.deepEqual(load.records.map((r) => r.ok), [true, false]);
    assert.equal((load.firstError as { code?: string }).code, 'PERF_NO_RESPONSE');
  });
});
