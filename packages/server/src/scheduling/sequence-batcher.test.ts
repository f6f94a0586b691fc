// The sequence batcher (models-and-scheduling.md §5) on backend instances that answer when the
// test says so: batch rows, control values, fillers, state handling, cancellation, stopping and
// the load-time state rules. Timing-dependent behaviour is covered end to end in
// test/e2e/sequence/.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import type { BackendInstance, BackendRequest, BackendTensor } from '../backends/spi.js';
import type { ModelConfig, ModelSequenceBatching, SequenceControlInput, SequenceState } from '../config/model-config.js';
import { InferenceRequest } from '../core/inference-request.js';
import { InstanceRunner } from './instance-runner.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import type { FailureReason, ScheduledRequest, SchedulerObserver } from './scheduler.js';
import { SequenceBatcher, resolveSequenceStates } from './sequence-batcher.js';

const int32 = (t: BackendTensor | undefined): number[] => {
  assert.ok(t, 'tensor present');
  return [...new Int32Array(t.data.slice().buffer)];
};
const uint64 = (t: BackendTensor | undefined): bigint[] => {
  assert.ok(t, 'tensor present');
  return [...new BigUint64Array(t.data.slice().buffer)];
};

/** Records batches; answers OUTPUT = INPUT + STATE_IN and STATE_OUT = OUTPUT on `finish`. */
class GatedInstance implements BackendInstance {
  readonly batches: BackendRequest[][] = [];
  readonly #pending: (() => void)[] = [];

  execute(requests: readonly BackendRequest[]): Promise<void> {
    this.batches.push([...requests]);
    return new Promise((resolve) => {
      this.#pending.push(() => {
        for (const r of requests) {
          const value = int32(r.inputs.get('INPUT'))[0]! + (r.inputs.has('STATE_IN') ? int32(r.inputs.get('STATE_IN'))[0]! : 0);
          const data = new Uint8Array(Int32Array.of(value).buffer);
          const outputs = r.requestedOutputs.map((name) => ({ name, datatype: 'INT32' as const, shape: [1, 1], data }));
          r.respond({ outputs });
        }
        resolve();
      });
    });
  }

  get waiting(): number {
    return this.#pending.length;
  }

  finish(): void {
    const next = this.#pending.shift();
    assert.ok(next, 'no execution is waiting');
    next();
  }

  async unload(): Promise<void> {}
}

const spec = (i: number) => ({ name: `m_${i}`, groupName: 'm', kind: 'KIND_CPU' as const, deviceId: 0, instanceCount: 1 });

class Recorder implements SchedulerObserver {
  readonly completed: { id: string; reason: FailureReason | undefined }[] = [];
  onExecution(): void {}
  onRequestComplete(request: ScheduledRequest, reason: FailureReason | undefined): void {
    this.completed.push({ id: request.id, reason });
  }
}

const CONTROLS: SequenceControlInput[] = [
  { name: 'START', control: [{ kind: 'CONTROL_SEQUENCE_START', int32_false_true: [0, 1], fp32_false_true: [], bool_false_true: [], data_type: 'TYPE_INVALID' }] },
  { name: 'END', control: [{ kind: 'CONTROL_SEQUENCE_END', int32_false_true: [], fp32_false_true: [0.5, 2.5], bool_false_true: [], data_type: 'TYPE_INVALID' }] },
  { name: 'READY', control: [{ kind: 'CONTROL_SEQUENCE_READY', int32_false_true: [], fp32_false_true: [], bool_false_true: [false, true], data_type: 'TYPE_INVALID' }] },
  { name: 'CORRID', control: [{ kind: 'CONTROL_SEQUENCE_CORRID', int32_false_true: [], fp32_false_true: [], bool_false_true: [], data_type: 'TYPE_UINT64' }] },
];

const STATE: SequenceState = {
  input_name: 'STATE_IN',
  output_name: 'STATE_OUT',
  data_type: 'TYPE_INT32',
  dims: [1],
  initial_state: [],
  use_same_buffer_for_input_output: false,
  use_growable_memory: false,
};

function setup(options: { strategy?: Partial<ModelSequenceBatching>; instances?: number; maxBatchSize?: number } = {}) {
  const config: ModelSequenceBatching = {
    direct: { max_queue_delay_microseconds: 0, minimum_slot_utilization: 0 },
    max_sequence_idle_microseconds: 60_000_000,
    control_input: CONTROLS,
    state: [STATE],
    iterative_sequence: false,
    ...options.strategy,
  };
  const observer = new Recorder();
  const instances = Array.from({ length: options.instances ?? 1 }, () => new GatedInstance());
  const runners = instances.map((inst, i) => new InstanceRunner(spec(i), inst, 'test', { observer }));
  const batcher = new SequenceBatcher({
    model: 'm',
    maxBatchSize: options.maxBatchSize ?? 4,
    config,
    states: [{ inputName: 'STATE_IN', outputName: 'STATE_OUT', datatype: 'INT32', initialShape: [1], initialData: new Uint8Array(4) }],
    runners,
    observer,
  });
  return { batcher, instances, observer };
}

let nextId = 0;
function req(id: bigint | string, value: number, flags: { start?: boolean; end?: boolean; signal?: AbortSignal; batch?: number } = {}): InferenceRequest {
  const batch = flags.batch ?? 1;
  return new InferenceRequest({
    id: `r${nextId++}`,
    model: 'm',
    inputs: new Map([['INPUT', { name: 'INPUT', datatype: 'INT32', shape: [batch, 1], data: new Uint8Array(Int32Array.from({ length: batch }, () => value).buffer) }]]),
    requestedOutputs: ['OUTPUT'],
    parameters: {},
    batchSize: batch,
    priority: 0,
    timeoutUs: 0,
    correlationId: id,
    sequenceStart: flags.start ?? false,
    sequenceEnd: flags.end ?? false,
    signal: flags.signal ?? NEVER_ABORTED,
    requestTime: process.hrtime.bigint(),
  });
}

const tick = () => new Promise((resolve) => setImmediate(resolve));
const outputOf = async (r: InferenceRequest) => int32((await r.delivered).outputs.find((o) => o.name === 'OUTPUT'))[0];

describe('sequence batcher: direct strategy', () => {
  it('keeps each sequence in its slot row, fills idle lower rows, and sets §5.3 control values', async () => {
    const { batcher, instances } = setup();
    const inst = instances[0]!;
    const a1 = req(1n, 10, { start: true });
    const b1 = req(2n, 20, { start: true });
    batcher.enqueue(a1);
    batcher.enqueue(b1);
    await tick();
    assert.equal(inst.batches.length, 1);
    assert.deepEqual(inst.batches[0]!.map((r) => r.id), [a1.id, b1.id]);
    inst.finish();
    assert.equal(await outputOf(a1), 10);
    // Only sequence 2 (slot 1) is ready: slot 0 becomes a filler row.
    const b2 = req(2n, 5, { end: true });
    batcher.enqueue(b2);
    await tick();
    const batch = inst.batches[1]!;
    assert.equal(batch.length, 2);
    const [filler, row] = batch as [BackendRequest, BackendRequest];
    assert.equal(row.id, b2.id);
    assert.deepEqual(int32(filler.inputs.get('START')), [0]);
    assert.deepEqual([...filler.inputs.get('READY')!.data], [0]);
    assert.deepEqual(uint64(filler.inputs.get('CORRID')), [0n]);
    assert.deepEqual(int32(row.inputs.get('START')), [0]);
    assert.deepEqual([...new Float32Array(row.inputs.get('END')!.data.slice().buffer)], [2.5]);
    assert.deepEqual([...row.inputs.get('READY')!.data], [1]);
    assert.deepEqual(row.inputs.get('READY')!.datatype, 'BOOL');
    assert.deepEqual(uint64(row.inputs.get('CORRID')), [2n]);
    assert.deepEqual(row.inputs.get('CORRID')!.shape, [1, 1]);
    assert.deepEqual(int32(row.inputs.get('STATE_IN')), [20]);
    inst.finish();
    assert.equal(await outputOf(b2), 25);
    assert.deepEqual((await b2.delivered).outputs.map((o) => o.name), ['OUTPUT'], 'state output captured, not returned');
    assert.deepEqual(batcher.activeSequences, { slots: 1, backlog: 0 });
  });

  it('queues sequences beyond the slots in the backlog and moves them in when a slot frees', async () => {
    const { batcher, instances } = setup({ maxBatchSize: 1 });
    const inst = instances[0]!;
    const a = req(1n, 1, { start: true });
    const b1 = req(2n, 2, { start: true });
    const b2 = req(2n, 3, { end: true });
    batcher.enqueue(a);
    batcher.enqueue(b1);
    batcher.enqueue(b2);
    assert.deepEqual(batcher.activeSequences, { slots: 1, backlog: 1 });
    await tick();
    inst.finish();
    await a.delivered;
    const aEnd = req(1n, 1, { end: true });
    batcher.enqueue(aEnd);
    await tick();
    inst.finish();
    assert.equal(await outputOf(aEnd), 2);
    await tick();
    inst.finish();
    await tick();
    inst.finish();
    assert.equal(await outputOf(b1), 2);
    assert.equal(await outputOf(b2), 5);
    await batcher.drain();
  });

  it('a START for an active id restarts its state in the same slot', async () => {
    const { batcher, instances } = setup();
    const inst = instances[0]!;
    batcher.enqueue(req(7n, 100, { start: true }));
    await tick();
    inst.finish();
    const again = req(7n, 1, { start: true });
    batcher.enqueue(again);
    await tick();
    inst.finish();
    assert.equal(await outputOf(again), 1);
    assert.equal(inst.batches[1]!.length, 1, 'same slot (row 0)');
  });

  it('refuses synchronously: no id, batch size > 1, no START, a string id for an integer CORRID', () => {
    const { batcher, observer } = setup();
    const codes = (r: InferenceRequest) => {
      try {
        batcher.enqueue(r);
      } catch (err) {
        assert.ok(err instanceof NereidError);
        return err.code;
      }
      return 'accepted';
    };
    assert.equal(codes(req(0n, 1, { start: true })), 'SEQUENCE_ID_MISSING');
    assert.equal(codes(req('', 1, { start: true })), 'SEQUENCE_ID_MISSING');
    assert.equal(codes(req(3n, 1, { start: true, batch: 2 })), 'SEQUENCE_BATCH_SIZE');
    assert.equal(codes(req(3n, 1)), 'SEQUENCE_START_MISSING');
    assert.equal(codes(req('abc', 1, { start: true })), 'SEQUENCE_ID_TYPE');
    assert.deepEqual(observer.completed, [], 'refusals are not counted');
  });

  it('cancelling a queued request mid-sequence cancels the rest, frees the slot and drops the state', async () => {
    const { batcher, instances, observer } = setup({ maxBatchSize: 1 });
    const inst = instances[0]!;
    const controller = new AbortController();
    const first = req(9n, 4, { start: true, signal: controller.signal });
    batcher.enqueue(first);
    await tick();
    const queued = req(9n, 1, { signal: controller.signal });
    const other = req(10n, 50, { start: true });
    batcher.enqueue(queued);
    batcher.enqueue(other);
    assert.deepEqual(batcher.activeSequences, { slots: 1, backlog: 1 });
    controller.abort();
    await assert.rejects(queued.delivered, (e: NereidError) => e.code === 'REQUEST_CANCELLED');
    inst.finish();
    await first.delivered.catch(() => undefined);
    await tick();
    // Sequence 10 took the freed slot; sequence 9 is unknown now.
    inst.finish();
    assert.equal(await outputOf(other), 50);
    assert.throws(() => batcher.enqueue(req(9n, 1)), (e: NereidError) => e.code === 'SEQUENCE_START_MISSING');
    assert.ok(observer.completed.some((c) => c.id === queued.id && c.reason === 'CANCELED'));
  });

  it('while stopping, refuses new START requests and lets active sequences finish', async () => {
    const { batcher, instances } = setup();
    const inst = instances[0]!;
    batcher.enqueue(req(1n, 1, { start: true }));
    await tick();
    inst.finish();
    batcher.stop();
    assert.throws(() => batcher.enqueue(req(2n, 1, { start: true })), (e: NereidError) => e.code === 'SERVER_STOPPING');
    const end = req(1n, 2, { end: true });
    batcher.enqueue(end);
    await tick();
    inst.finish();
    assert.equal(await outputOf(end), 3);
    await batcher.drain();
  });
});

describe('sequence batcher: oldest strategy', () => {
  it('never puts two requests of one sequence in a batch and keeps their order', async () => {
    const { batcher, instances } = setup({
      strategy: { direct: undefined, oldest: { max_candidate_sequences: 3, preferred_batch_size: [4], max_queue_delay_microseconds: 0, preserve_ordering: false } },
    });
    const inst = instances[0]!;
    const a1 = req(1n, 1, { start: true });
    const a2 = req(1n, 2, { end: true });
    const b1 = req(2n, 10, { start: true });
    batcher.enqueue(a1);
    batcher.enqueue(a2);
    batcher.enqueue(b1);
    await tick();
    assert.deepEqual(inst.batches[0]!.map((r) => r.id), [a1.id, b1.id]);
    assert.deepEqual([...inst.batches[0]!.map((r) => [...r.inputs.get('READY')!.data][0])], [1, 1], 'no fillers');
    inst.finish();
    await tick();
    assert.deepEqual(inst.batches[1]!.map((r) => r.id), [a2.id]);
    inst.finish();
    assert.equal(await outputOf(a2), 3);
  });
});

describe('resolveSequenceStates', () => {
  const base = (state: Partial<SequenceState>): ModelConfig =>
    ({ name: 'm', sequence_batching: { max_sequence_idle_microseconds: 1, control_input: [], state: [{ ...STATE, ...state }], iterative_sequence: false } }) as unknown as ModelConfig;

  it('reads an initial state from initial_state/<file>; zero data and -1 dims otherwise', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'nereid-seq-'));
    try {
      await mkdir(join(dir, 'initial_state'));
      await writeFile(join(dir, 'initial_state', 'init.bin'), new Uint8Array(Int32Array.of(7, 8).buffer));
      const [fromFile] = await resolveSequenceStates(
        base({ dims: [-1], initial_state: [{ data_type: 'TYPE_INT32', dims: [2], data_file: 'init.bin', name: 'f' }] }),
        dir,
      );
      assert.deepEqual(fromFile!.initialShape, [2]);
      assert.deepEqual([...new Int32Array(fromFile!.initialData.slice().buffer)], [7, 8]);
      const [none] = await resolveSequenceStates(base({ dims: [-1, 3] }), dir);
      assert.deepEqual(none!.initialShape, [1, 3]);
      assert.equal(none!.initialData.byteLength, 12);
      await assert.rejects(
        resolveSequenceStates(base({ initial_state: [{ data_type: 'TYPE_INT32', dims: [4], data_file: 'init.bin', name: 'f' }] }), dir),
        /do not match the state dims/,
      );
      await assert.rejects(
        resolveSequenceStates(base({ dims: [4], initial_state: [{ data_type: 'TYPE_INT32', dims: [4], data_file: 'init.bin', name: 'f' }] }), dir),
        /holds 8 bytes, 16 are needed/,
      );
      await assert.rejects(
        resolveSequenceStates(base({ initial_state: [{ data_type: 'TYPE_FP32', dims: [1], zero_data: true, name: 'z' }] }), dir),
        /must equal the state's TYPE_INT32/,
      );
      await assert.rejects(resolveSequenceStates(base({ initial_state: [{ data_type: 'TYPE_INT32', dims: [1], name: 'z' }] }), dir), /zero_data or data_file/);
      const iterative = base({});
      iterative.sequence_batching!.iterative_sequence = true;
      assert.equal((await resolveSequenceStates(iterative, dir)).length, 1, 'iterative sequences load');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/** Runs each request once per `plan` entry: true reschedules it, false answers it (final). */
class IterativeInstance implements BackendInstance {
  readonly rows: { id: string; corrid: bigint; start: number; end: number }[] = [];
  readonly late: unknown[] = [];
  #held: BackendRequest[] = [];

  constructor(readonly plan: (r: BackendRequest, iteration: number) => boolean) {}

  async execute(requests: readonly BackendRequest[]): Promise<void> {
    // A turn of the event loop per execution, so iterations interleave with the test.
    await new Promise((resolve) => setImmediate(resolve));
    for (const r of requests) {
      const iteration = this.rows.filter((row) => row.id === r.id).length;
      this.rows.push({ id: r.id, corrid: uint64(r.inputs.get('CORRID'))[0]!, start: int32(r.inputs.get('START'))[0]!, end: [...new Float32Array(r.inputs.get('END')!.data.slice().buffer)][0]! });
      if (this.plan(r, iteration)) r.reschedule!();
      else r.respond({ outputs: [{ name: 'OUTPUT', datatype: 'INT32', shape: [1, 1], data: new Uint8Array(Int32Array.of(iteration + 1).buffer) }] });
      this.#held.push(r);
    }
  }

  /** Tries to reschedule every request it executed, after the fact. */
  rescheduleLate(): void {
    for (const r of this.#held) {
      try {
        r.reschedule!();
      } catch (err) {
        this.late.push(err);
      }
    }
  }

  async unload(): Promise<void> {}
}

describe('sequence batcher: iterative sequences', () => {
  function iterative(plan: (r: BackendRequest, iteration: number) => boolean) {
    const observer = new Recorder();
    const inst = new IterativeInstance(plan);
    const runner = new InstanceRunner(spec(0), inst, 'test', { observer });
    const batcher = new SequenceBatcher({
      model: 'm',
      maxBatchSize: 4,
      config: {
        direct: { max_queue_delay_microseconds: 0, minimum_slot_utilization: 0 },
        max_sequence_idle_microseconds: 60_000_000,
        control_input: CONTROLS,
        state: [],
        iterative_sequence: true,
      },
      runners: [runner],
      observer,
    });
    return { batcher, inst, observer, runner };
  }

  it("ignores a client's END flag, refuses reschedule() after execute returned, and frees the slot when the model stops", async () => {
    const { batcher, inst, observer } = iterative((_r, iteration) => iteration < 2);
    const r = req(9n, 1, { start: true, end: true });
    batcher.enqueue(r);
    assert.equal(await outputOf(r), 3, 'three executions');
    assert.deepEqual(inst.rows.map((row) => [row.start, row.end]), [[1, 0.5], [0, 0.5], [0, 0.5]], 'START once, END never');
    await tick();
    inst.rescheduleLate();
    assert.equal(inst.late.length, 3);
    assert.ok(inst.late.every((e) => e instanceof NereidError && /after execute returned/.test(e.message)));
    assert.deepEqual(batcher.activeSequences, { slots: 0, backlog: 0 });
    assert.deepEqual(observer.completed, [{ id: r.id, reason: undefined }], 'counted once, at the end');
    await batcher.drain();
  });

  it('gives requests without an id internal ids of their own; a removed instance ends an iterating request UNAVAILABLE', async () => {
    const { batcher, inst, runner } = iterative(() => true);
    const a = req(0n, 1);
    const b = req(0n, 2);
    batcher.enqueue(a);
    batcher.enqueue(b);
    for (let i = 0; i < 5; i++) await tick();
    assert.deepEqual(batcher.activeSequences, { slots: 2, backlog: 0 });
    const ids = new Set(inst.rows.map((row) => row.corrid));
    assert.equal(ids.size, 2);
    assert.ok(!ids.has(0n));
    assert.ok(inst.rows.length > 2, 'iterating');
    batcher.removeInstances([runner]);
    for (const r of [a, b]) await assert.rejects(r.delivered, (e: NereidError) => e.kind === 'UNAVAILABLE');
    await batcher.drain();
  });
});
