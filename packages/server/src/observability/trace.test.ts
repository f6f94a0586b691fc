import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { TRACE_TENSORS, TRACE_TIMESTAMPS, TraceManager, epochNs, parseTraceLevel, tensorText, type Trace, type TraceSink } from './trace.js';
import { TraceFileWriter, traceEvents } from './trace-file.js';

const update = (entries: Record<string, string[] | null>) => new Map(Object.entries(entries));

/** A sink that keeps what it is given. */
function collector(): TraceSink & { traces: Trace[] } {
  const traces: Trace[] = [];
  return { traces, write: (t) => void traces.push(t), flush: async () => {}, close: async () => {} };
}

function refusal(fn: () => unknown): { code: string; httpStatus: number; message: string } {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof NereidError, String(err));
    return { code: err.code, httpStatus: err.httpStatus, message: err.message };
  }
  assert.fail('expected a refusal');
}

describe('trace settings', () => {
  it("answer Triton's defaults: level OFF, rate 1000, count -1, log frequency 0, no file, mode triton", () => {
    const m = new TraceManager();
    assert.deepEqual(m.answer(), {
      trace_level: ['OFF'],
      trace_rate: ['1000'],
      trace_count: ['-1'],
      log_frequency: ['0'],
      trace_file: [''],
      trace_mode: ['triton'],
    });
    assert.equal(m.enabled, false);
    // A level with nowhere to write traces samples nothing.
    const noSink = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1 });
    assert.equal(noSink.enabled, false);
    noSink.addSink(collector());
    assert.equal(noSink.enabled, true);
  });

  it('a model follows the global setting until it has its own, and a cleared global value returns to the start value', () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1, file: '/tmp/t.json' });
    m.addSink(collector());
    assert.equal(m.enabled, true);
    m.update('a', update({ trace_rate: ['5'] }));
    assert.deepEqual(m.answer('a').trace_rate, ['5']);
    assert.deepEqual(m.answer('b').trace_rate, ['1']);
    m.update(undefined, update({ trace_count: ['7'], trace_rate: ['9'] }));
    // 'a' keeps its own rate and follows the global count.
    assert.deepEqual([m.answer('a').trace_rate, m.answer('a').trace_count], [['5'], ['7']]);
    assert.deepEqual(m.answer('b').trace_rate, ['9']);
    m.update(undefined, update({ trace_rate: null }));
    assert.deepEqual(m.answer().trace_rate, ['1']);
    m.update('a', update({ trace_rate: null }));
    assert.deepEqual(m.answer('a'), m.answer());
  });

  it('levels: TIMESTAMPS and TENSORS combine, OFF stands alone', () => {
    assert.equal(parseTraceLevel(['TIMESTAMPS', 'TENSORS']), TRACE_TIMESTAMPS | TRACE_TENSORS);
    assert.equal(parseTraceLevel(['OFF']), 0);
    assert.equal(refusal(() => parseTraceLevel(['OFF', 'TENSORS'])).message, "Expect only one trace level 'OFF' is specified");
    assert.match(refusal(() => parseTraceLevel(['LOUD'])).message, /Unable to parse 'trace_level', got: LOUD; expected OFF, TIMESTAMPS or TENSORS/);
  });

  it("refuses bad values with Triton's wording and changes nothing", () => {
    const m = new TraceManager();
    const before = m.answer();
    const cases: [Record<string, string[] | null>, string, RegExp][] = [
      [{ trace_rate: ['abc'] }, 'TRACE_SETTING_INVALID', /^Unable to parse 'trace_rate', got: abc$/],
      [{ trace_rate: ['12abc'] }, 'TRACE_SETTING_INVALID', /^Unable to parse 'trace_rate', got: 12abc$/],
      [{ trace_rate: ['99999999999'] }, 'TRACE_SETTING_INVALID', /^Unable to parse 'trace_rate', value is out of range \[ 0, 4294967295 \], got: 99999999999$/],
      [{ trace_count: ['-2'] }, 'TRACE_SETTING_INVALID', /^Unable to parse 'trace_count'. Expecting value >= -1, got:-2$/],
      [{ trace_count: ['99999999999999999999'] }, 'TRACE_SETTING_INVALID', /value is out of range \[ -1, 2147483647 \]/],
      [{ log_frequency: ['x'] }, 'TRACE_SETTING_INVALID', /^Unable to parse 'log_frequency', got: x$/],
      [{ trace_level: ['TIMESTAMPS'], trace_file: ['/etc/passwd'] }, 'TRACE_SETTING_READ_ONLY', /^trace file location can not be updated through network protocol$/],
      [{ trace_file: null }, 'TRACE_SETTING_READ_ONLY', /can not be updated/],
      [{ trace_mode: ['opentelemetry'] }, 'TRACE_SETTING_READ_ONLY', /trace mode can not be updated/],
      [{ trace_colour: ['red'] }, 'TRACE_SETTING_INVALID', /Unknown trace setting 'trace_colour'/],
      [{ trace_rate: ['1', '2'] }, 'TRACE_SETTING_INVALID', /only one value for 'trace_rate'/],
    ];
    for (const [u, code, message] of cases) {
      const r = refusal(() => m.update(undefined, update(u)));
      assert.equal(r.code, code, JSON.stringify(u));
      assert.match(r.message, message);
    }
    assert.equal(refusal(() => m.update(undefined, update({ trace_file: ['/x'] }))).httpStatus, 501);
    assert.deepEqual(m.answer(), before);
  });

  it("refuses to turn tracing on with nowhere to write traces, as Triton without a trace file", () => {
    const m = new TraceManager();
    for (const model of [undefined, 'a']) {
      const r = refusal(() => m.update(model, update({ trace_level: ['TIMESTAMPS'] })));
      assert.deepEqual([r.code, r.httpStatus, r.message], ['TRACE_SETTING_INVALID', 400, 'Attempting to set invalid trace setting :trace file name is not given']);
    }
    assert.deepEqual(m.update(undefined, update({ trace_rate: ['3'] })).trace_rate, ['3']);
    m.addSink(collector());
    assert.deepEqual(m.update('a', update({ trace_level: ['TIMESTAMPS'] })).trace_level, ['TIMESTAMPS']);
    // A rate of 0 is taken while it would not trace, refused where it would.
    assert.deepEqual(m.update(undefined, update({ trace_rate: ['0'] })).trace_rate, ['0']);
    const r = refusal(() => m.update('a', update({ trace_rate: ['0'] })));
    assert.equal(r.message, 'Attempting to set invalid trace setting :sample rate must be non-zero');
    assert.equal(m.sample('b'), undefined);
  });
});

describe('sampling', () => {
  it('takes every rate-th request while the count lasts, and the count counts down', () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 3, count: 2 });
    const taken = Array.from({ length: 12 }, () => m.sample('a') !== undefined);
    assert.deepEqual(taken, [false, false, true, false, false, true, false, false, false, false, false, false]);
    assert.deepEqual(m.answer().trace_count, ['0']);
  });

  it('a model with its own setting has its own counter; level OFF samples nothing and turns the switch off', () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1000 });
    m.addSink(collector());
    m.update('hot', update({ trace_rate: ['1'] }));
    assert.ok(m.sample('hot'));
    assert.equal(m.sample('cold'), undefined);
    m.update(undefined, update({ trace_level: ['OFF'] }));
    // 'hot' set its rate only: it follows the global level, OFF.
    assert.equal(m.enabled, false);
    assert.equal(m.sample('hot'), undefined);
    m.update('hot', update({ trace_level: ['TIMESTAMPS'] }));
    assert.equal(m.enabled, true);
    assert.ok(m.sample('hot'));
    assert.equal(m.sample('cold'), undefined);
    m.update('hot', update({ trace_level: null, trace_rate: null }));
    assert.equal(m.enabled, false);
  });

  it('gives ids in order, children their parent id, and hands a root to the sinks once, on the next turn', async () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1 });
    const sink = collector();
    m.addSink(sink);
    const root = m.sample('ens')!;
    const c1 = root.child('a');
    const c2 = root.child('b');
    assert.deepEqual([root.id, root.parentId, c1.id, c1.parentId, c2.id, c2.parentId], [1, 0, 2, 1, 3, 1]);
    c1.end();
    assert.equal(sink.traces.length, 0);
    root.end();
    root.end();
    assert.equal(sink.traces.length, 0);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(sink.traces, [root]);
    assert.deepEqual(root.children, [c1, c2]);
  });
});

describe('a trace', () => {
  it("puts its stamps and its request's times in time order, without COMPUTE_* for an ensemble", () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1 });
    const t = m.sample('m')!;
    t.stamp('HTTP_RECV_START', 10n);
    t.stamp('REQUEST_START', 20n);
    const times = { request: 20n, queue: 30n, computeStart: 40n, computeInputEnd: 50n, computeOutputStart: 60n, computeEnd: 70n };
    let completedAt = 0n;
    t.attach(times, () => completedAt, true);
    t.stamp('HTTP_SEND_START', 90n);
    assert.deepEqual(
      t.timestamps().map(([n]) => n),
      ['HTTP_RECV_START', 'REQUEST_START', 'QUEUE_START', 'COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END', 'HTTP_SEND_START'],
    );
    completedAt = 80n;
    assert.deepEqual(t.timestamps()[7], ['REQUEST_END', 80n]);
    const e = m.sample('e')!;
    e.attach(times, () => 80n, false);
    assert.deepEqual(
      e.timestamps().map(([n]) => n),
      ['QUEUE_START', 'REQUEST_END'],
    );
  });

  it("writes Triton's events: the model line (parent_id for a child), one object per timestamp, tensors at level TENSORS", () => {
    const m = new TraceManager({ level: TRACE_TIMESTAMPS | TRACE_TENSORS, rate: 1 });
    const t = m.sample('ens')!;
    t.version = '1';
    t.requestId = 'r"1';
    t.stamp('REQUEST_START', 5n);
    const c = t.child('add');
    c.version = '3';
    c.recordTensors('TENSOR_QUEUE_INPUT', [{ name: 'X', datatype: 'INT32', shape: [2], data: new Uint8Array(new Int32Array([1, -2]).buffer) }]);
    const events = traceEvents(t).map((e) => JSON.parse(e) as unknown);
    assert.deepEqual(events[0], { id: 1, model_name: 'ens', model_version: 1, request_id: 'r"1' });
    assert.deepEqual(events[1], { id: 1, timestamps: [{ name: 'REQUEST_START', ns: 5 }] });
    assert.deepEqual(events[2], { id: 2, model_name: 'add', model_version: 3, parent_id: 1 });
    assert.deepEqual(events[3], { id: 2, activity: 'TENSOR_QUEUE_INPUT', tensor: { name: 'X', data: '1,-2', shape: '2', dtype: 'INT32' } });
    assert.equal(events.length, 4);
  });

  it('formats tensor elements of every type, unaligned views included', () => {
    const f = Buffer.alloc(17);
    Buffer.from(new Float32Array([1.5, -2, 3, 4]).buffer).copy(f, 1);
    assert.equal(tensorText('FP32', f.subarray(1)), '1.5,-2,3,4');
    assert.equal(tensorText('INT64', new Uint8Array(new BigInt64Array([-5n, 2n ** 40n]).buffer)), '-5,1099511627776');
    assert.equal(tensorText('BOOL', new Uint8Array([1, 0, 1])), '1,0,1');
    assert.equal(tensorText('BYTES', Buffer.from([2, 0, 0, 0, 104, 105, 0, 0, 0, 0])), 'hi,');
    assert.equal(tensorText('UINT8', new Uint8Array([7, 255])), '7,255');
  });

  it('epochNs is within a second of Date.now()', () => {
    const ms = Number(epochNs(process.hrtime.bigint()) / 1_000_000n);
    assert.ok(Math.abs(ms - Date.now()) < 1000);
  });
});

describe('the trace file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nereid-trace-unit-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  function traced(m: TraceManager, n: number): void {
    for (let i = 0; i < n; i++) {
      const t = m.sample('m')!;
      t.version = '1';
      t.stamp('REQUEST_START');
      t.end();
    }
  }

  it('with log frequency 0 is one JSON array, closed at shutdown', async () => {
    const file = join(dir, 'one.json');
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1, file });
    m.addSink(new TraceFileWriter(file, () => m.global.logFrequency, (e) => assert.fail(e)));
    traced(m, 3);
    await m.flush();
    // Written as it goes; the array closes at shutdown.
    assert.ok(readFileSync(file, 'utf8').startsWith('[{"id":1,'));
    await m.close();
    const events = JSON.parse(readFileSync(file, 'utf8')) as { id: number }[];
    assert.deepEqual([...new Set(events.map((e) => e.id))], [1, 2, 3]);
  });

  it('with log frequency N starts <file>.<k> every N traces, each a whole JSON array', async () => {
    const file = join(dir, 'rot.json');
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1, file, logFrequency: 2 });
    m.addSink(new TraceFileWriter(file, () => m.global.logFrequency, (e) => assert.fail(e)));
    traced(m, 5);
    await m.flush();
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('rot.json')).sort(), ['rot.json.0', 'rot.json.1', 'rot.json.2']);
    const ids = (k: number) => [...new Set((JSON.parse(readFileSync(`${file}.${k}`, 'utf8')) as { id: number }[]).map((e) => e.id))];
    assert.deepEqual([ids(0), ids(1)], [[1, 2], [3, 4]]);
    // The fifth trace's file is closed at shutdown.
    assert.throws(() => JSON.parse(readFileSync(`${file}.2`, 'utf8')));
    await m.close();
    assert.deepEqual(ids(2), [5]);
  });

  it('reports a write that fails once and keeps the server going', async () => {
    const file = join(dir, 'missing-dir', 'x.json');
    const errors: string[] = [];
    const m = new TraceManager({ level: TRACE_TIMESTAMPS, rate: 1, file });
    m.addSink(new TraceFileWriter(file, () => 0, (e) => errors.push(e)));
    traced(m, 2);
    await m.flush();
    traced(m, 1);
    await m.close();
    assert.equal(errors.length, 1);
    assert.match(errors[0]!, /cannot write the trace file '.*x\.json': ENOENT/);
  });
});
