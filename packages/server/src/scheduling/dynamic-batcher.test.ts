// The dynamic batcher (models-and-scheduling.md §4.2–§4.9) on a clock the tests move by hand and
// on fake instances that answer when the test says so: no real time is ever asserted.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { NereidError } from '@nereid/protocol';
import type { BackendInstance, BackendRequest, ExecutionTiming } from '../backends/spi.js';
import type { ModelDynamicBatching, ModelQueuePolicy } from '../config/model-config.js';
import { InferenceRequest } from '../core/inference-request.js';
import { createLogger, type Logger } from '../observability/logger.js';
import { DynamicBatcher, SYSTEM_CLOCK, type BatcherClock } from './dynamic-batcher.js';
import { InstanceRunner } from './instance-runner.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import type { FailureReason, ScheduledRequest, SchedulerObserver } from './scheduler.js';
import type { PreemptionKind, PreemptionSettings } from './preemption.js';

// ---------------------------------------------------------------------------------------------
// Test doubles

/** A clock whose time moves only in `advance`, firing due timers in time order as it passes them. */
class FakeClock implements BatcherClock {
  #now = 0n;
  #nextId = 1;
  readonly #timers = new Map<number, { at: bigint; callback: () => void }>();

  now(): bigint {
    return this.#now;
  }

  setTimer(callback: () => void, delayNs: bigint): unknown {
    assert.ok(delayNs >= 0n, `timer set ${delayNs} ns in the past`);
    const id = this.#nextId++;
    this.#timers.set(id, { at: this.#now + delayNs, callback });
    return id;
  }

  clearTimer(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  /** Timers set and not yet fired or cleared. */
  get timers(): number {
    return this.#timers.size;
  }

  /** Microseconds since the start. */
  get us(): number {
    return Number(this.#now / 1000n);
  }

  /** Moves time forward by `us` microseconds (ns precision with a fraction). */
  advance(us: number): void {
    const target = this.#now + BigInt(Math.round(us * 1000));
    for (;;) {
      let due: [number, { at: bigint; callback: () => void }] | undefined;
      for (const entry of this.#timers) {
        if (entry[1].at <= target && (due === undefined || entry[1].at < due[1].at)) due = entry;
      }
      if (due === undefined) break;
      this.#timers.delete(due[0]);
      if (due[1].at > this.#now) this.#now = due[1].at;
      due[1].callback();
    }
    this.#now = target;
  }
}

/** One `execute` call of a fake instance, finished when the test says so. */
interface Execution {
  readonly requests: readonly BackendRequest[];
  /** Every request gets its own output (its input echoed) and `execute` returns. */
  finish(): void;
  readonly finished: boolean;
  /** What the runner gave `execute`: `releaseInstance` releases the instance early. */
  readonly timing: ExecutionTiming;
}

/** A backend instance that records the batches it receives and answers on command. */
class FakeInstance implements BackendInstance {
  readonly pipelineDepth: number;
  readonly executions: Execution[] = [];

  constructor(depth = 1) {
    this.pipelineDepth = depth;
  }

  /** Batches received, as request ids. */
  get batches(): string[][] {
    return this.executions.map((e) => e.requests.map((r) => r.id));
  }

  /** Executions not finished yet. */
  get running(): Execution[] {
    return this.executions.filter((e) => !e.finished);
  }

  execute(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    return new Promise((resolve) => {
      const execution = {
        requests,
        timing,
        finished: false,
        finish() {
          assert.equal(execution.finished, false, 'execution finished twice');
          execution.finished = true;
          for (const r of requests) {
            const input = r.inputs.values().next().value!;
            r.respond({ outputs: [{ name: 'OUT', datatype: input.datatype, shape: input.shape, data: input.data }] });
          }
          resolve();
        },
      };
      this.executions.push(execution);
    });
  }

  /** Finishes the oldest unfinished execution. */
  finishNext(): void {
    const next = this.running[0];
    assert.ok(next, 'no execution is running');
    next.finish();
  }

  async unload(): Promise<void> {}
}

/**
 * A decoupled model's instance that stops when the server preempts a request it executes: the
 * preempted requests are recorded, and `execute` returns once every request it holds has ended
 * (the others still get their echo).
 */
class PreemptibleInstance extends FakeInstance {
  readonly preempted: string[] = [];

  preempt(request: BackendRequest, error: NereidError): void {
    assert.equal(error.code, 'REQUEST_PREEMPTED');
    this.preempted.push(request.id);
    const execution = this.running.find((e) => e.requests.includes(request));
    assert.ok(execution, `request '${request.id}' preempted while not executing`);
    queueMicrotask(() => {
      if (!execution.finished && execution.requests.every((r) => r === request || this.preempted.includes(r.id))) execution.finish();
    });
  }
}

/** Records what the batcher and the instances report, checking each request is reported once. */
class RecordingObserver implements SchedulerObserver {
  readonly executions: number[] = [];
  readonly completions = new Map<ScheduledRequest, FailureReason | 'SUCCESS'>();
  readonly preemptions: [string, PreemptionKind][] = [];

  onPreempted(request: ScheduledRequest, kind: PreemptionKind): void {
    assert.ok(!request.completed, `request '${request.id}' reported preempted after it completed`);
    this.preemptions.push([request.id, kind]);
  }

  onExecution(_batch: readonly ScheduledRequest[], batchSize: number): void {
    this.executions.push(batchSize);
  }

  onRequestComplete(request: ScheduledRequest, reason: FailureReason | undefined): void {
    assert.ok(!this.completions.has(request), `request '${request.id}' reported complete twice`);
    assert.ok(request.completed, `request '${request.id}' reported before it completed`);
    this.completions.set(request, reason ?? 'SUCCESS');
  }

  reasonOf(request: ScheduledRequest): FailureReason | 'SUCCESS' | undefined {
    return this.completions.get(request);
  }
}

let nextId = 0;

interface RequestOptions {
  id?: string;
  /** Request batch size (first dimension); default 1. */
  batch?: number;
  priority?: number;
  timeoutUs?: number;
  signal?: AbortSignal;
  /** Second dimension of every input; default 2. */
  width?: number;
  /** Input names; default ['IN']. */
  inputs?: readonly string[];
}

/** A real InferenceRequest with INT32 inputs of shape [batch, width]. */
function req(options: RequestOptions = {}): InferenceRequest {
  const batch = options.batch ?? 1;
  const width = options.width ?? 2;
  const inputs = new Map(
    (options.inputs ?? ['IN']).map((name) => [
      name,
      { name, datatype: 'INT32' as const, shape: [batch, width], data: new Uint8Array(4 * batch * width) },
    ]),
  );
  return new InferenceRequest({
    id: options.id ?? `r${nextId++}`,
    model: 'm',
    inputs,
    requestedOutputs: ['OUT'],
    parameters: {},
    batchSize: batch,
    priority: options.priority ?? 0,
    timeoutUs: options.timeoutUs ?? 0,
    signal: options.signal ?? NEVER_ABORTED,
    requestTime: process.hrtime.bigint(),
  });
}

const policy = (p: Partial<ModelQueuePolicy>): ModelQueuePolicy => ({
  timeout_action: 'REJECT',
  default_timeout_microseconds: 0,
  allow_timeout_override: false,
  max_queue_size: 0,
  ...p,
});

interface SetupOptions {
  maxBatchSize?: number;
  /** Fields of the dynamic_batching section; preferred sizes default to [max_batch_size] as normalisation makes them. */
  db?: Partial<ModelDynamicBatching>;
  instances?: number;
  /** Pipeline depth of every instance. */
  depth?: number;
  shapeChecked?: readonly string[];
  optional?: boolean;
  logger?: Logger;
  preemption?: Partial<PreemptionSettings>;
  /** Decoupled instances that can be preempted (`PreemptibleInstance`). */
  preemptible?: boolean;
}

function setup(options: SetupOptions = {}) {
  const mbs = options.maxBatchSize ?? 16;
  const clock = new FakeClock();
  const observer = new RecordingObserver();
  const instances = Array.from({ length: options.instances ?? 1 }, () =>
    options.preemptible ? new PreemptibleInstance(options.depth ?? 1) : new FakeInstance(options.depth ?? 1),
  );
  const runners = instances.map(
    (inst, i) =>
      new InstanceRunner({ name: `m_${i}`, groupName: 'm', kind: 'KIND_CPU', deviceId: 0, instanceCount: instances.length }, inst, 'fake', {
        observer,
        decoupled: options.preemptible ?? false,
      }),
  );
  const config: ModelDynamicBatching = {
    preferred_batch_size: mbs > 0 ? [mbs] : [],
    max_queue_delay_microseconds: 0,
    preserve_ordering: false,
    priority_levels: 0,
    default_priority_level: 0,
    priority_queue_policy: {},
    ...options.db,
  };
  const batcher = new DynamicBatcher({
    model: 'm',
    maxBatchSize: mbs,
    config,
    shapeCheckedInputs: options.shapeChecked ?? [],
    hasOptionalInputs: options.optional ?? false,
    runners,
    observer,
    clock,
    logger: options.logger,
    ...(options.preemption ? { preemption: { queued: false, running: false, maxTotalQueueSize: 0, ...options.preemption } } : {}),
  });
  const instance = instances[0]!;
  /** Enqueues requests; returns them. */
  const add = (...requests: InferenceRequest[]): InferenceRequest[] => {
    for (const r of requests) batcher.enqueue(r);
    return requests;
  };
  /** Enqueues `n` requests of batch size 1. */
  const addN = (n: number, o: RequestOptions = {}): InferenceRequest[] => add(...Array.from({ length: n }, () => req(o)));
  /** Makes the (single) instance busy with one full batch, so later requests accumulate. */
  const occupy = (): InferenceRequest => {
    const r = add(req({ batch: Math.max(1, mbs) }))[0]!;
    assert.equal(instance.running.length, 1, 'the occupying batch should run at once');
    return r;
  };
  /** Finishes the instance's oldest execution and lets the batcher react. */
  const free = async (inst = instance): Promise<void> => {
    inst.finishNext();
    await settle();
  };
  /** Sizes (sum of batch sizes) of the batches the instance received, the occupying one excluded when `skip`. */
  const sizes = (inst = instance, skip = 0): number[] =>
    inst.executions.slice(skip).map((e) => e.requests.reduce((s, r) => s + Math.max(1, r.batchSize), 0));
  return { clock, observer, instances, instance, batcher, add, addN, occupy, free, sizes };
}

/** V8's collector, exposed at run time (the test runner starts Node without --expose-gc). */
function collector(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** Lets every pending promise continuation run (instance completion → batcher). */
const settle = () => new Promise<void>((r) => setImmediate(r));

const ids = (requests: readonly ScheduledRequest[]) => requests.map((r) => r.id);

/** Resolves to the request's error (or undefined on success) once it completed. */
async function outcome(r: InferenceRequest): Promise<NereidError | undefined> {
  try {
    await r.delivered;
    return undefined;
  } catch (err) {
    assert.ok(err instanceof NereidError);
    return err;
  }
}

/** Enqueues `r` into a full queue: it is answered with the refusal, not thrown at the caller. */
async function refusedAsFull(t: { batcher: DynamicBatcher }, r: InferenceRequest, message: RegExp): Promise<NereidError> {
  t.batcher.enqueue(r);
  const error = await outcome(r);
  assert.ok(error !== undefined, 'refused');
  assert.match(error.message, message);
  return error;
}

// ---------------------------------------------------------------------------------------------

describe('DynamicBatcher: worked examples (§4.9, max_batch_size 16, batch-1 requests)', () => {
  it('preferred (none → [16]), D 0, 5 queued when an instance frees: a batch of 5 now', async () => {
    const t = setup();
    t.occupy();
    t.addN(5);
    assert.equal(t.instance.executions.length, 1, 'nothing forms while the only instance is busy');
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [5]);
    assert.equal(t.batcher.queuedCount, 0);
  });

  it('preferred (none → [16]), D 100, 5 queued, oldest waited 40 µs: waits up to 60 µs more, then sends all', async () => {
    const t = setup({ db: { max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(5);
    t.clock.advance(40);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [], 'waits: the oldest has waited only 40 µs');
    t.clock.advance(59.999);
    assert.deepEqual(t.sizes(t.instance, 1), [], 'still inside the delay');
    t.clock.advance(0.001);
    assert.deepEqual(t.sizes(t.instance, 1), [5], 'sent at the deadline, measured from the oldest request');
  });

  it('preferred (none → [16]), D 100, 5 queued, oldest waited 40 µs: 11 more arriving make 16, sent at once', async () => {
    const t = setup({ db: { max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(5);
    t.clock.advance(40);
    await t.free();
    t.addN(10);
    assert.deepEqual(t.sizes(t.instance, 1), []);
    t.addN(1);
    assert.deepEqual(t.sizes(t.instance, 1), [16], 'the preferred size is reached before the deadline');
    assert.equal(t.clock.us, 40);
  });

  it('[4, 8], D 0, 6 queued: a batch of 4 now (largest reachable preferred); 2 remain', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8] } });
    t.occupy();
    t.addN(6);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [4]);
    assert.equal(t.batcher.queuedCount, 2);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [4, 2]);
  });

  it('[4, 8], D 0, 3 queued: a batch of 3 now', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8] } });
    t.occupy();
    t.addN(3);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [3]);
  });

  it('[4, 8], D 0, 11 queued: a batch of 8', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8] } });
    t.occupy();
    t.addN(11);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [8]);
    assert.equal(t.batcher.queuedCount, 3);
  });

  it('[4, 8], D 100, 11 queued, delay not yet exceeded: a batch of 8 immediately (the rest waits out its delay)', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(11);
    t.clock.advance(40);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [8]);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [8], 'the 3 left can still grow: they wait');
    t.clock.advance(60);
    assert.deepEqual(t.sizes(t.instance, 1), [8, 3]);
  });

  it('[4, 8], D 100, 11 queued, delay exceeded: a batch of 11', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(11);
    t.clock.advance(100);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [11]);
  });

  it('[4], D 100, 3 queued, delay not exceeded: waits for the 4th request', async () => {
    const t = setup({ db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(3);
    t.clock.advance(10);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), []);
    t.clock.advance(50);
    t.addN(1);
    assert.deepEqual(t.sizes(t.instance, 1), [4]);
  });

  it('[4], D 100, 3 queued, delay not exceeded: or sends the 3 at the deadline', async () => {
    const t = setup({ db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(3);
    t.clock.advance(10);
    await t.free();
    t.clock.advance(89);
    assert.deepEqual(t.sizes(t.instance, 1), []);
    t.clock.advance(1);
    assert.deepEqual(t.sizes(t.instance, 1), [3]);
  });
});

describe('DynamicBatcher: an instance released before execute returns', () => {
  it('takes its next batch at once, synchronously, while the released batch is still handing its outputs over', async () => {
    const { instance, addN, occupy, free, observer, sizes } = setup({ maxBatchSize: 4 });
    occupy();
    const waiting = addN(3);
    assert.equal(instance.executions.length, 1, 'a busy instance holds one batch');
    instance.running[0]!.timing.releaseInstance!();
    assert.deepEqual(sizes(), [4, 3], 'the 3 queued requests went out within releaseInstance');
    assert.equal(instance.running.length, 2, 'the released batch has not returned yet');
    // A second release of the same execution changes nothing.
    addN(2);
    instance.running[0]!.timing.releaseInstance!();
    assert.deepEqual(sizes(), [4, 3]);
    await free();
    // The first batch returned: its instance holds one (the 3), so the 2 wait for that one.
    assert.deepEqual(sizes(), [4, 3]);
    await free();
    assert.deepEqual(sizes(), [4, 3, 2]);
    await free();
    assert.ok(waiting.every((r) => r.completed && r.error === undefined));
    assert.deepEqual(observer.executions, [4, 3, 2]);
  });

  it("idle() waits for execute to return, released or not; a warmup's release is ignored", async () => {
    const inst = new FakeInstance();
    const runner = new InstanceRunner({ name: 'm_0', groupName: 'm', kind: 'KIND_CPU', deviceId: 0, instanceCount: 1 }, inst, 'fake');
    const released: string[] = [];
    const done = runner.run([req({ id: 'a' })], () => released.push('a'));
    await settle();
    inst.running[0]!.timing.releaseInstance!();
    assert.deepEqual(released, ['a'], 'onReleased is called from releaseInstance');
    assert.equal(runner.inflight, 0);
    assert.equal(runner.available, true);
    let idle = false;
    void runner.idle().then(() => (idle = true));
    await settle();
    assert.equal(idle, false, 'idle before execute returned');
    inst.finishNext();
    await done;
    await settle();
    assert.equal(idle, true);
    assert.deepEqual(released, ['a'], 'onReleased is called once');
    // Not released early: onReleased when execute returns, before run settles.
    const order: string[] = [];
    const second = runner.run([req({ id: 'b' })], () => order.push('released')).then(() => order.push('settled'));
    await settle();
    inst.finishNext();
    await second;
    assert.deepEqual(order, ['released', 'settled']);
    // A warmup batch keeps the instance until it returns.
    const warm = runner.warm([req({ id: 'w' })]);
    await settle();
    inst.running[0]!.timing.releaseInstance?.();
    assert.equal(runner.inflight, 1);
    inst.finishNext();
    await warm;
    assert.equal(runner.inflight, 0);
  });
});

describe('DynamicBatcher: batch formation (§4.4)', () => {
  it('D 0: an idle instance takes a request at once; requests arriving meanwhile form the next batch', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8] } });
    t.addN(1);
    assert.deepEqual(t.sizes(), [1]);
    t.addN(9);
    await t.free();
    assert.deepEqual(t.sizes(), [1, 8]);
    await t.free();
    assert.deepEqual(t.sizes(), [1, 8, 1]);
  });

  it('D > 0 with an idle instance: a preferred size reached by arrivals is sent without waiting', () => {
    const t = setup({ db: { preferred_batch_size: [4], max_queue_delay_microseconds: 1000 } });
    t.addN(3);
    t.clock.advance(10);
    assert.deepEqual(t.sizes(), []);
    t.addN(1);
    assert.deepEqual(t.sizes(), [4]);
    assert.equal(t.clock.timers, 0, 'no timer is left behind once the queue is empty');
  });

  it('D > 0: the delay is measured from the oldest request of the batch, not the newest', () => {
    const t = setup({ db: { max_queue_delay_microseconds: 100 } });
    t.addN(1);
    t.clock.advance(60);
    t.addN(1);
    t.clock.advance(39);
    assert.deepEqual(t.sizes(), []);
    t.clock.advance(1);
    assert.deepEqual(t.sizes(), [2], 'sent 100 µs after the first request, 40 µs after the second');
    // The next batch's delay starts with its own oldest request.
    t.clock.advance(50);
    t.addN(1);
    return t.free().then(() => {
      t.clock.advance(99);
      assert.deepEqual(t.sizes(), [2]);
      t.clock.advance(1);
      assert.deepEqual(t.sizes(), [2, 1]);
    });
  });

  it('after the delay, a batch may exceed the largest preferred size, up to max_batch_size', async () => {
    const t = setup({ maxBatchSize: 8, db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(10);
    t.clock.advance(100);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [8], 'capped at max_batch_size, not at the preferred 4');
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [8, 2], 'the rest has waited out its delay too');
  });

  it('before the delay expires, a preferred size truncates the batch', async () => {
    const t = setup({ maxBatchSize: 8, db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.addN(10);
    t.clock.advance(99);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [4]);
  });

  it('requests of batch size > 1 may jump over a preferred size: 3 + 3 is not preferred, 3 + 3 + 2 = 8 is', () => {
    const t = setup({ db: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 1000 } });
    t.add(req({ batch: 3 }), req({ batch: 3 }));
    assert.deepEqual(t.sizes(), [], '6 is no preferred size and can still reach 8');
    t.add(req({ batch: 2 }));
    assert.deepEqual(t.sizes(), [8]);
  });

  it('a request that would overshoot the largest preferred size sends what is pending (cannot reach a larger preferred)', () => {
    const t = setup({ db: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 1000 } });
    const [a, b] = t.add(req({ batch: 3 }), req({ batch: 3 }));
    const [c] = t.add(req({ batch: 3 }));
    assert.deepEqual(t.instance.batches, [[a!.id, b!.id]], '3 + 3 = 6 goes; 9 would pass 8');
    assert.equal(t.batcher.queuedCount, 1);
    t.clock.advance(1000);
    return t.free().then(() => assert.deepEqual(t.instance.batches.at(-1), [c!.id]));
  });

  it('D 0: a request that would pass the largest preferred size ends the batch there', async () => {
    const t = setup({ db: { preferred_batch_size: [4, 8] } });
    t.occupy();
    t.add(req({ batch: 3 }), req({ batch: 3 }), req({ batch: 5 }), req({ batch: 5 }));
    await t.free();
    // 3 + 3 = 6; 6 + 5 = 11 > Pmax with no preferred size reached: best = 6 (FORM_BATCH).
    assert.deepEqual(t.sizes(t.instance, 1), [6]);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [6, 5]);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [6, 5, 5]);
  });

  it('D 0 and no preferred size reachable: everything up to max_batch_size goes at once', async () => {
    const t = setup({ maxBatchSize: 8, db: { preferred_batch_size: [8] } });
    t.occupy();
    t.add(req({ batch: 3 }), req({ batch: 2 }), req({ batch: 2 }));
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [7]);
  });

  it('a request that does not fit into max_batch_size ends the batch and starts the next', async () => {
    const t = setup({ maxBatchSize: 8, db: { preferred_batch_size: [8], max_queue_delay_microseconds: 100 } });
    t.occupy();
    t.add(req({ batch: 5 }), req({ batch: 4 }), req({ batch: 1 }));
    t.clock.advance(100);
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [5], 'the batch-4 request does not fit after 5; the batch-1 behind it is not taken');
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [5, 5]);
  });

  it('max_batch_size 0 with dynamic batching: one request per batch, at once even with a delay', async () => {
    const t = setup({ maxBatchSize: 0, db: { max_queue_delay_microseconds: 1000 } });
    t.addN(1);
    assert.equal(t.instance.executions.length, 1, 'no wait: a batch of one cannot grow');
    t.addN(3);
    await t.free();
    await t.free();
    await t.free();
    assert.deepEqual(
      t.instance.executions.map((e) => e.requests.length),
      [1, 1, 1, 1],
    );
  });

  it('max_batch_size 0: priorities and queue policies still apply', async () => {
    const t = setup({
      maxBatchSize: 0,
      db: {
        priority_levels: 2,
        default_priority_level: 2,
        priority_queue_policy: { '2': policy({ max_queue_size: 2, default_timeout_microseconds: 500 }) },
      },
    });
    const first = t.add(req({ priority: 1 }))[0]!;
    const [low1, low2] = t.add(req({ priority: 2 }), req({ priority: 2 }));
    await refusedAsFull(t, req({ priority: 2 }), /Exceeds maximum queue size/);
    const [high] = t.add(req({ priority: 1 }));
    await t.free();
    assert.deepEqual(t.instance.batches, [[first.id], [high!.id]], 'the level-1 request overtakes the queued level-2 ones');
    t.clock.advance(501);
    assert.equal((await outcome(low1!))?.message.includes('Request timeout expired'), true);
    assert.equal((await outcome(low2!))?.message.includes('Request timeout expired'), true);
  });

  it('the instance receives the requests in queue order', async () => {
    const t = setup({ db: { preferred_batch_size: [4] } });
    t.occupy();
    const queued = t.addN(4);
    await t.free();
    assert.deepEqual(t.instance.batches[1], ids(queued));
  });
});

describe('DynamicBatcher: shape compatibility and optional inputs (§4.5)', () => {
  it('a request of another shape ends the batch; the batcher never skips ahead to a compatible one', async () => {
    const t = setup({ shapeChecked: ['IN'] });
    t.occupy();
    const [a, b, c, d, e] = t.add(req({ width: 2 }), req({ width: 2 }), req({ width: 3 }), req({ width: 2 }), req({ width: 3 }));
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [[a!.id, b!.id]]);
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [[a!.id, b!.id], [c!.id]]);
    await t.free();
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [[a!.id, b!.id], [c!.id], [d!.id], [e!.id]]);
  });

  it('a shape mismatch ends a waiting batch at once, even with a delay', () => {
    const t = setup({ shapeChecked: ['IN'], db: { max_queue_delay_microseconds: 1000 } });
    const [a, b] = t.add(req({ width: 2 }), req({ width: 2 }));
    assert.deepEqual(t.instance.batches, []);
    t.add(req({ width: 5 }));
    assert.deepEqual(t.instance.batches, [[a!.id, b!.id]]);
  });

  it('inputs not checked for shape (fixed dims or ragged) never end a batch', async () => {
    const t = setup({ shapeChecked: [] });
    t.occupy();
    t.add(req({ width: 2 }), req({ width: 3 }), req({ width: 4 }));
    await t.free();
    assert.deepEqual(t.sizes(t.instance, 1), [3]);
  });

  it('with optional inputs, only requests providing the same set of inputs share a batch', async () => {
    const t = setup({ optional: true });
    t.occupy();
    const [a, b, c, d] = t.add(
      req({ inputs: ['A', 'B'] }),
      req({ inputs: ['B', 'A'] }),
      req({ inputs: ['A'] }),
      req({ inputs: ['A', 'B'] }),
    );
    await t.free();
    await t.free();
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [[a!.id, b!.id], [c!.id], [d!.id]]);
  });
});

describe('DynamicBatcher: priority levels (§4.2, §3.7 step 9)', () => {
  const levels = { priority_levels: 3, default_priority_level: 2 };

  it('batches take requests in global order: level 1, then 2, then 3; 0 and out-of-range go to the default level', async () => {
    const t = setup({ db: levels });
    t.occupy();
    const [p3, p2, p0, p1, p9] = t.add(
      req({ priority: 3 }),
      req({ priority: 2 }),
      req({ priority: 0 }),
      req({ priority: 1 }),
      req({ priority: 9 }),
    );
    await t.free();
    assert.deepEqual(t.instance.batches[1], [p1!.id, p2!.id, p0!.id, p9!.id, p3!.id]);
  });

  it('a higher-priority request never waits behind lower-priority queued work', async () => {
    const t = setup({ maxBatchSize: 2, db: levels });
    t.occupy();
    const low = t.addN(4, { priority: 3 });
    const [high] = t.add(req({ priority: 1 }));
    await t.free();
    assert.deepEqual(t.instance.batches[1], [high!.id, low[0]!.id]);
    const [high2] = t.add(req({ priority: 1 }));
    await t.free();
    assert.deepEqual(t.instance.batches[2], [high2!.id, low[1]!.id]);
  });

  it('a higher-priority request joins the front of a batch that is waiting out its delay', () => {
    const t = setup({ maxBatchSize: 4, db: { ...levels, max_queue_delay_microseconds: 100 } });
    const [low] = t.add(req({ priority: 3 }));
    t.clock.advance(50);
    const [high] = t.add(req({ priority: 1 }));
    t.clock.advance(50);
    assert.deepEqual(t.instance.batches, [[high!.id, low!.id]], 'the delay still counts from the oldest (low) request');
  });

  it('a pipelined instance is not handed lower-priority batches ahead, which a later higher-priority request would wait behind', async () => {
    // §4.4: batches are prepared ahead for busy instances only when the queue has no priority
    // levels, timeouts or size limit.
    const t = setup({ maxBatchSize: 2, depth: 2, db: levels });
    t.add(req({ batch: 2, priority: 3 }));
    const low = t.addN(2, { priority: 3 });
    assert.equal(t.instance.executions.length, 1, 'no batch is prepared ahead when priority levels exist');
    const [high] = t.add(req({ priority: 1 }));
    await t.free();
    assert.deepEqual(t.instance.batches[1], [high!.id, low[0]!.id]);
  });
});

describe('DynamicBatcher: pipelined instances (batches prepared ahead)', () => {
  it('a busy instance that can hold another batch takes a full batch, but a batch that can still grow keeps growing', async () => {
    const t = setup({ maxBatchSize: 4, depth: 2, db: { preferred_batch_size: [4] } });
    t.addN(1);
    assert.deepEqual(t.sizes(), [1], 'idle: taken at once');
    t.addN(3);
    assert.deepEqual(t.sizes(), [1], 'busy, 3 < 4: not prepared ahead');
    t.addN(1);
    assert.deepEqual(t.sizes(), [1, 4], 'busy, full: prepared ahead');
    t.addN(5);
    assert.deepEqual(t.sizes(), [1, 4], 'at most two batches per instance');
    await t.free();
    assert.deepEqual(t.sizes(), [1, 4, 4]);
    await t.free();
    await t.free();
    assert.deepEqual(t.sizes(), [1, 4, 4, 1]);
  });

  it('a batch for a busy instance keeps growing past its queue delay until it is full or the instance is free', async () => {
    const t = setup({ maxBatchSize: 8, depth: 2, db: { max_queue_delay_microseconds: 100 } });
    t.addN(1);
    assert.deepEqual(t.sizes(), [], 'idle: the first request waits for its delay');
    t.clock.advance(100);
    assert.deepEqual(t.sizes(), [1], 'and goes alone once it expired');
    t.addN(3);
    t.clock.advance(500);
    assert.deepEqual(t.sizes(), [1], 'busy: 3 requests, 500 µs old, are not sent as a small batch behind the running one');
    assert.equal(t.clock.timers, 0, 'and no timer spins on the expired delay');
    t.addN(2);
    await t.free();
    assert.deepEqual(t.sizes(), [1, 5], 'free: the grown batch goes at once');
    t.addN(8);
    assert.deepEqual(t.sizes(), [1, 5, 8], 'busy, full: prepared ahead without waiting');
  });

  it('no batch is prepared ahead when the queue can time requests out (they would escape their timeout)', async () => {
    const t = setup({ maxBatchSize: 2, depth: 2, db: { default_queue_policy: policy({ default_timeout_microseconds: 100 }) } });
    t.addN(1);
    const [a, b] = t.addN(2);
    assert.equal(t.instance.executions.length, 1);
    t.clock.advance(101);
    assert.equal((await outcome(a!))?.kind, 'UNAVAILABLE');
    assert.equal((await outcome(b!))?.kind, 'UNAVAILABLE');
  });

  it('no batch is prepared ahead when the queue has a size limit', async () => {
    const t = setup({ maxBatchSize: 2, depth: 2, db: { default_queue_policy: policy({ max_queue_size: 2 }) } });
    t.addN(1);
    t.addN(2);
    assert.equal(t.instance.executions.length, 1);
    await refusedAsFull(t, req(), /Exceeds maximum queue size/);
  });
});

describe('DynamicBatcher: queue policies (§4.3, §4.6)', () => {
  it('max_queue_size rejects the excess at enqueue with UNAVAILABLE naming the model and the limit, counted as REJECTED', async () => {
    const t = setup({ db: { default_queue_policy: policy({ max_queue_size: 3 }) } });
    t.occupy();
    t.addN(3);
    const extra = req();
    const err = await refusedAsFull(t, extra, /^Exceeds maximum queue size/);
    assert.equal(err.kind, 'UNAVAILABLE');
    assert.match(err.message, /'m'/);
    assert.match(err.message, /max_queue_size 3\b/);
    assert.equal(t.observer.reasonOf(extra), 'REJECTED', 'a refused request is a failure with reason REJECTED');
    assert.equal(t.batcher.queuedCount, 3);
    assert.equal(t.batcher.inflightCount, 4);
  });

  it('max_queue_size is per priority level', async () => {
    const t = setup({
      db: {
        priority_levels: 2,
        default_priority_level: 1,
        priority_queue_policy: { '2': policy({ max_queue_size: 1 }) },
      },
    });
    t.occupy();
    t.addN(1, { priority: 2 });
    await refusedAsFull(t, req({ priority: 2 }), /priority level 2.*max_queue_size 1/);
    t.addN(5, { priority: 1 });
    assert.equal(t.batcher.queuedCount, 6);
  });

  it('the queue accepts again once requests left it', async () => {
    const t = setup({ maxBatchSize: 2, db: { default_queue_policy: policy({ max_queue_size: 2 }) } });
    t.occupy();
    t.addN(2);
    await refusedAsFull(t, req(), /Exceeds maximum queue size/);
    await t.free();
    t.addN(2);
    assert.equal(t.batcher.queuedCount, 2);
  });

  it('REJECT: an expired request is answered UNAVAILABLE "Request timeout expired", observer told REJECTED', async () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 100 }) } });
    t.occupy();
    const [a] = t.addN(1);
    t.clock.advance(50);
    const [b] = t.addN(1);
    t.clock.advance(50);
    assert.equal(a!.completed, false, 'not expired at exactly its timeout');
    t.clock.advance(1);
    const error = await outcome(a!);
    assert.equal(error?.kind, 'UNAVAILABLE');
    assert.match(error!.message, /Request timeout expired/);
    assert.equal(t.observer.reasonOf(a!), 'REJECTED');
    assert.equal(b!.completed, false);
    await t.free();
    assert.deepEqual(t.instance.batches[1], [b!.id], 'the expired request is not executed');
  });

  it('expired requests are purged while every instance is busy', async () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 100 }) } });
    t.occupy();
    const queued = t.addN(3);
    t.clock.advance(101);
    for (const r of queued) assert.equal((await outcome(r))?.message, `Request timeout expired for request '${r.id}' of model 'm'`);
    assert.equal(t.batcher.queuedCount, 0);
    assert.equal(t.clock.timers, 0);
    await t.free();
    assert.equal(t.instance.executions.length, 1);
  });

  it('a request placed in a batch is no longer subject to its queue timeout', async () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 100 }) } });
    const [a] = t.addN(1);
    t.clock.advance(1000);
    t.instance.finishNext();
    assert.equal(await outcome(a!), undefined);
  });

  it('an expiring request wakes a batch that is waiting out a longer delay', () => {
    const t = setup({
      db: { max_queue_delay_microseconds: 1000, default_queue_policy: policy({ default_timeout_microseconds: 100 }) },
    });
    const [a] = t.addN(1);
    t.clock.advance(101);
    assert.equal(a!.completed, true);
    assert.equal(a!.error?.kind, 'UNAVAILABLE');
    assert.equal(t.instance.executions.length, 0);
  });

  it('DELAY: an expired request moves behind the non-expired requests of its level and is never rejected', async () => {
    const t = setup({
      maxBatchSize: 1,
      db: { default_queue_policy: policy({ timeout_action: 'DELAY', default_timeout_microseconds: 100 }) },
    });
    t.occupy();
    const [a] = t.addN(1);
    t.clock.advance(150);
    const [b, c] = t.addN(2);
    await t.free();
    await t.free();
    t.clock.advance(10_000);
    const [d] = t.addN(1);
    await t.free();
    await t.free();
    await t.free();
    // a expired before b and c arrived, so both go first; d, arriving long after a expired (and
    // after b and c expired too, but they had left the queue), still goes before a.
    assert.deepEqual(t.instance.batches.slice(1), [[b!.id], [c!.id], [d!.id], [a!.id]]);
    for (const r of [a, b, c, d]) assert.equal(await outcome(r!), undefined);
  });

  it('DELAY: the delayed part of a level still comes before lower levels', async () => {
    const t = setup({
      maxBatchSize: 1,
      db: {
        priority_levels: 2,
        default_priority_level: 2,
        priority_queue_policy: { '1': policy({ timeout_action: 'DELAY', default_timeout_microseconds: 100 }) },
      },
    });
    t.occupy();
    const [late] = t.addN(1, { priority: 1 });
    const [low] = t.addN(1, { priority: 2 });
    t.clock.advance(200);
    const [fresh] = t.addN(1, { priority: 1 });
    await t.free();
    await t.free();
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [[fresh!.id], [late!.id], [low!.id]]);
  });

  it('allow_timeout_override: a request may shrink the timeout, never extend it', async () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 1000, allow_timeout_override: true }) } });
    t.occupy();
    const [short, long, none] = t.add(req({ timeoutUs: 100 }), req({ timeoutUs: 5000 }), req());
    t.clock.advance(101);
    assert.equal(short!.completed, true, 'the smaller request timeout applies');
    assert.equal(long!.completed, false);
    t.clock.advance(900);
    assert.equal(long!.completed, true, 'a larger request timeout is capped at the default');
    assert.equal(none!.completed, true);
    for (const r of [short, long, none]) assert.equal(t.observer.reasonOf(r!), 'REJECTED');
  });

  it('without allow_timeout_override a request timeout is ignored', () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 1000 }) } });
    t.occupy();
    const [r] = t.add(req({ timeoutUs: 100 }));
    t.clock.advance(500);
    assert.equal(r!.completed, false);
    t.clock.advance(501);
    assert.equal(r!.completed, true);
  });

  it('quirk: with a default timeout of 0 a request timeout has no effect, even with the override allowed', async () => {
    const t = setup({ db: { default_queue_policy: policy({ allow_timeout_override: true }) } });
    t.occupy();
    const [r] = t.add(req({ timeoutUs: 10 }));
    t.clock.advance(1_000_000);
    assert.equal(r!.completed, false);
    await t.free();
    t.instance.finishNext();
    assert.equal(await outcome(r!), undefined);
  });

  it('timeouts follow each level’s own policy', () => {
    const t = setup({
      db: {
        priority_levels: 2,
        default_priority_level: 1,
        default_queue_policy: policy({ default_timeout_microseconds: 100 }),
        priority_queue_policy: { '2': policy({ default_timeout_microseconds: 1000 }) },
      },
    });
    t.occupy();
    const [one] = t.addN(1, { priority: 1 });
    const [two] = t.addN(1, { priority: 2 });
    t.clock.advance(500);
    assert.equal(one!.completed, true);
    assert.equal(two!.completed, false);
  });
});

describe('DynamicBatcher: cancellation', () => {
  it('a request cancelled while queued is removed and answered CANCELLED; the others are undisturbed', async () => {
    const t = setup();
    t.occupy();
    const controller = new AbortController();
    const [a, b, c] = t.add(req(), req({ signal: controller.signal }), req());
    controller.abort();
    const error = await outcome(b!);
    assert.equal(error?.kind, 'CANCELLED');
    assert.equal(t.observer.reasonOf(b!), 'CANCELED');
    assert.equal(t.batcher.queuedCount, 2);
    await t.free();
    assert.deepEqual(t.instance.batches[1], [a!.id, c!.id]);
    t.instance.finishNext();
    assert.equal(await outcome(a!), undefined);
    assert.equal(await outcome(c!), undefined);
  });

  it('a request whose signal already aborted is answered CANCELLED at once', async () => {
    const t = setup();
    const controller = new AbortController();
    controller.abort();
    const r = req({ signal: controller.signal });
    t.batcher.enqueue(r);
    assert.equal((await outcome(r))?.kind, 'CANCELLED');
    assert.equal(t.observer.reasonOf(r), 'CANCELED');
    assert.equal(t.batcher.inflightCount, 0);
  });

  it('cancelling the oldest request of a waiting batch lets the delay restart from the next oldest', () => {
    const t = setup({ db: { max_queue_delay_microseconds: 100 } });
    const controller = new AbortController();
    t.add(req({ signal: controller.signal }));
    t.clock.advance(50);
    const [b] = t.addN(1);
    controller.abort();
    t.clock.advance(50);
    assert.deepEqual(t.instance.batches, []);
    t.clock.advance(50);
    assert.deepEqual(t.instance.batches, [[b!.id]]);
  });

  it('requests sharing one signal (a gRPC stream) are cancelled together, once each, with one listener on the signal', async () => {
    const t = setup({ maxBatchSize: 2 });
    const stream = new AbortController();
    let listeners = 0;
    const add = stream.signal.addEventListener.bind(stream.signal);
    stream.signal.addEventListener = ((...args: Parameters<AbortSignal['addEventListener']>) => {
      listeners++;
      add(...args);
    }) as AbortSignal['addEventListener'];
    const [first] = t.add(req({ signal: stream.signal }));
    assert.equal(t.instance.running.length, 1, 'the first request runs at once');
    const [a, other, b] = t.add(req({ signal: stream.signal }), req(), req({ signal: stream.signal }));
    assert.equal(listeners, 1, 'one listener for the stream, however many of its requests were queued');
    stream.abort();
    assert.equal((await outcome(a!))?.kind, 'CANCELLED');
    assert.equal((await outcome(b!))?.kind, 'CANCELLED');
    assert.equal(t.observer.reasonOf(a!), 'CANCELED');
    assert.equal(t.observer.reasonOf(b!), 'CANCELED');
    assert.equal(t.batcher.queuedCount, 1, "the other signal's request stays queued");
    await t.free();
    assert.equal(await outcome(first!), undefined, 'the request that had left the queue is answered by its backend');
    assert.deepEqual(t.instance.batches, [[first!.id], [other!.id]]);
  });

  it('a request of a shared signal that leaves the queue out of order is no longer cancelled with the rest', async () => {
    const t = setup({ maxBatchSize: 1, db: { priority_levels: 2, default_priority_level: 2 } });
    t.occupy();
    const stream = new AbortController();
    // Queued in this order; priority 1 goes first, so r2 leaves from the middle of the signal's list.
    const [r1, r2, r3, r4] = t.add(
      req({ signal: stream.signal, priority: 2 }),
      req({ signal: stream.signal, priority: 1 }),
      req({ signal: stream.signal, priority: 2 }),
      req({ signal: stream.signal, priority: 2 }),
    );
    await t.free();
    assert.deepEqual(t.instance.batches.at(-1), [r2!.id]);
    stream.abort();
    for (const r of [r1, r3, r4]) assert.equal((await outcome(r!))?.kind, 'CANCELLED');
    assert.equal(t.batcher.queuedCount, 0);
    t.instance.finishNext();
    assert.equal(await outcome(r2!), undefined, 'the request that left the queue is answered by its backend');
    assert.equal(t.observer.reasonOf(r2!), 'SUCCESS');
  });

  it('a cancellation after the request left the queue does not touch the queue', async () => {
    const t = setup();
    const controller = new AbortController();
    const [a] = t.add(req({ signal: controller.signal }));
    t.addN(2);
    controller.abort();
    assert.equal(t.batcher.queuedCount, 2);
    t.instance.finishNext();
    assert.equal(await outcome(a!), undefined, 'the backend answered it');
  });
});

describe('DynamicBatcher: preserve_ordering (§4.7)', () => {
  it('responses are delivered in dequeue order even when a later batch finishes first', async () => {
    const t = setup({ maxBatchSize: 2, instances: 2, db: { preserve_ordering: true, max_queue_delay_microseconds: 100 } });
    const [a] = t.add(req({ batch: 2 }));
    const [b, c] = t.addN(2);
    const [first, second] = t.instances;
    assert.deepEqual(first!.batches, [[a!.id]]);
    assert.deepEqual(second!.batches, [[b!.id, c!.id]]);
    const order: string[] = [];
    for (const r of [a, b, c]) void r!.delivered.then(() => order.push(r!.id));
    second!.finishNext();
    await settle();
    assert.equal(c!.completed, true);
    assert.deepEqual(order, [], 'b and c are held back until a is delivered');
    first!.finishNext();
    await settle();
    assert.deepEqual(order, [a!.id, b!.id, c!.id]);
  });

  it('holds for requests that waited in the queue, whose `delivered` was taken at enqueue (as Server.infer takes it)', async () => {
    const t = setup({ maxBatchSize: 1, instances: 2, db: { preserve_ordering: true } });
    const [a, b, c] = t.addN(3);
    const delivered = [a, b, c].map((r) => r!.delivered);
    assert.equal(t.batcher.queuedCount, 1, 'c waits for an instance');
    const order: string[] = [];
    delivered.forEach((p, i) => void p.then(() => order.push(['a', 'b', 'c'][i]!)));
    const [first, second] = t.instances;
    await t.free(first);
    assert.deepEqual(first!.batches, [[a!.id], [c!.id]]);
    first!.finishNext();
    await settle();
    assert.equal(c!.completed, true);
    assert.deepEqual(order, ['a'], 'c is held back until b, dequeued before it, is delivered');
    second!.finishNext();
    await settle();
    assert.deepEqual(order, ['a', 'b', 'c']);
  });

  it('an earlier request that failed releases the later ones', async () => {
    const t = setup({ maxBatchSize: 1, instances: 2, db: { preserve_ordering: true } });
    const [a, b] = t.addN(2);
    const order: string[] = [];
    void b!.delivered.then(() => order.push('b'));
    t.instances[1]!.finishNext();
    await settle();
    assert.deepEqual(order, []);
    a!.fail(new NereidError('BACKEND_ERROR', 'boom'));
    t.instances[0]!.finishNext();
    await settle();
    assert.deepEqual(order, ['b']);
  });

  it('without preserve_ordering, responses are delivered as batches finish', async () => {
    const t = setup({ maxBatchSize: 1, instances: 2 });
    const [a, b] = t.addN(2);
    const order: string[] = [];
    for (const r of [a, b]) void r!.delivered.then(() => order.push(r!.id));
    t.instances[1]!.finishNext();
    await settle();
    assert.deepEqual(order, [b!.id]);
    t.instances[0]!.finishNext();
    await settle();
    assert.deepEqual(order, [b!.id, a!.id]);
  });
});

describe('DynamicBatcher: instances', () => {
  it('two instances execute batches in parallel', async () => {
    const t = setup({ maxBatchSize: 4, instances: 2, db: { preferred_batch_size: [4] } });
    const [one, two] = t.instances;
    t.add(req({ batch: 4 }), req({ batch: 4 }));
    assert.equal(one!.running.length, 1);
    assert.equal(two!.running.length, 1);
    t.addN(6);
    await t.free(two);
    assert.deepEqual(t.sizes(two), [4, 4], 'the instance that freed first takes the next batch');
    await t.free(one);
    assert.deepEqual(t.sizes(one), [4, 2]);
  });

  it('an idle instance is preferred over one that could hold a batch ahead', () => {
    const t = setup({ maxBatchSize: 2, instances: 2, depth: 2 });
    t.add(req({ batch: 2 }), req({ batch: 2 }));
    assert.equal(t.instances[0]!.executions.length, 1);
    assert.equal(t.instances[1]!.executions.length, 1);
  });

  it('a backend failure answers every request of the batch with its error', async () => {
    const t = setup({ maxBatchSize: 4, db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 } });
    const batch = t.addN(4);
    const execution = t.instance.executions[0]!;
    for (const r of execution.requests) r.respond(new NereidError('BACKEND_ERROR', 'no'));
    execution.finish();
    await settle();
    for (const r of batch) assert.equal((await outcome(r))?.message, 'no');
    for (const r of batch) assert.equal(t.observer.reasonOf(r), 'BACKEND');
    assert.deepEqual(t.observer.executions, [4]);
  });
});

describe('DynamicBatcher: stop and drain', () => {
  it('stop refuses new requests; drain resolves once queued and executing requests have completed', async () => {
    const t = setup({ maxBatchSize: 2, db: { max_queue_delay_microseconds: 100 } });
    t.occupy();
    const queued = t.addN(3);
    t.batcher.stop();
    assert.throws(
      () => t.batcher.enqueue(req()),
      (err: unknown) => err instanceof NereidError && err.kind === 'UNAVAILABLE' && /stopped accepting/.test(err.message),
    );
    let drained = false;
    const draining = t.batcher.drain().then(() => (drained = true));
    await t.free();
    await settle();
    assert.equal(drained, false);
    t.clock.advance(100);
    await t.free();
    await t.free();
    await settle();
    await draining;
    assert.equal(drained, true);
    for (const r of queued) assert.equal(await outcome(r), undefined);
    assert.equal(t.batcher.inflightCount, 0);
    assert.equal(t.clock.timers, 0);
  });

  it('drain resolves at once when nothing is in flight', async () => {
    const t = setup();
    t.batcher.stop();
    await t.batcher.drain();
  });

  it('drain waits for requests cancelled or timed out while queued as well', async () => {
    const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 100 }) } });
    t.occupy();
    const controller = new AbortController();
    t.add(req({ signal: controller.signal }), req());
    let drained = false;
    void t.batcher.drain().then(() => (drained = true));
    t.instance.finishNext();
    controller.abort();
    t.clock.advance(101);
    await settle();
    assert.equal(drained, true, `inflight ${t.batcher.inflightCount}`);
  });
});

describe('DynamicBatcher: every accepted request gets exactly one final response', () => {
  it('holds over a long seeded run of arrivals, priorities, timeouts, cancellations and completions', async () => {
    let seed = 12345;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const t = setup({
      maxBatchSize: 8,
      instances: 2,
      depth: 2,
      shapeChecked: ['IN'],
      db: {
        preferred_batch_size: [2, 4, 8],
        max_queue_delay_microseconds: 50,
        priority_levels: 2,
        default_priority_level: 2,
        priority_queue_policy: {
          '1': policy({ timeout_action: 'DELAY', default_timeout_microseconds: 200, max_queue_size: 6 }),
          '2': policy({ default_timeout_microseconds: 300, allow_timeout_override: true, max_queue_size: 10 }),
        },
      },
    });
    const accepted: InferenceRequest[] = [];
    let refused = 0;
    for (let step = 0; step < 3000; step++) {
      const x = random();
      if (x < 0.55) {
        const controller = random() < 0.1 ? new AbortController() : undefined;
        const r = req({
          batch: 1 + Math.floor(random() * 3),
          width: random() < 0.8 ? 2 : 3,
          priority: Math.floor(random() * 4),
          timeoutUs: random() < 0.3 ? Math.floor(random() * 400) : 0,
          ...(controller ? { signal: controller.signal } : {}),
        });
        t.batcher.enqueue(r);
        accepted.push(r);
        if (r.completed) {
          // Refused at once by a full queue: answered, and counted as REJECTED.
          assert.equal(t.observer.reasonOf(r), 'REJECTED');
          refused++;
        } else if (controller && random() < 0.7) controller.abort();
      } else if (x < 0.75) {
        const inst = t.instances[Math.floor(random() * 2)]!;
        if (inst.running.length > 0) inst.finishNext();
        await settle();
      } else {
        t.clock.advance(random() * 80);
      }
      for (const inst of t.instances) {
        assert.ok(inst.running.length <= 2);
        for (const e of inst.executions) assert.ok(e.requests.reduce((s, r) => s + r.batchSize, 0) <= 8);
      }
    }
    t.batcher.stop();
    const draining = t.batcher.drain();
    while (t.batcher.inflightCount > 0) {
      for (const inst of t.instances) if (inst.running.length > 0) inst.finishNext();
      t.clock.advance(1000);
      await settle();
    }
    await draining;
    assert.ok(refused > 0, 'the run should hit the queue limits');
    assert.ok(accepted.length > 500);
    const executed = new Map<BackendRequest, number>();
    for (const inst of t.instances) for (const e of inst.executions) for (const r of e.requests) executed.set(r, (executed.get(r) ?? 0) + 1);
    const reasons = new Set<string>();
    for (const r of accepted) {
      assert.equal(r.completed, true, `request '${r.id}' never completed`);
      const reason = t.observer.reasonOf(r);
      assert.ok(reason !== undefined, `request '${r.id}' never reported`);
      reasons.add(reason);
      assert.ok((executed.get(r) ?? 0) <= 1, `request '${r.id}' executed twice`);
      if (reason === 'SUCCESS') assert.equal(executed.get(r), 1);
    }
    assert.equal(t.observer.completions.size, accepted.length);
    assert.deepEqual([...reasons].sort(), ['CANCELED', 'REJECTED', 'SUCCESS']);
    assert.equal(t.clock.timers, 0);
  });
});

describe('DynamicBatcher: a log line per batch at --log-verbose=1 (model, size, oldest wait, reason)', () => {
  /** A logger at `level` whose verbose lines are kept instead of written. */
  const recording = (level: number) => {
    const lines: string[] = [];
    const logger: Logger = { ...createLogger({ verboseLevel: level }), verbose: (l, m) => void (level >= l && lines.push(m)) };
    return { lines, logger };
  };

  it('a preferred size reached', () => {
    const { lines, logger } = recording(1);
    const t = setup({ db: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 100 }, logger });
    t.addN(3);
    t.clock.advance(30);
    assert.deepEqual(lines, [], 'nothing is logged while the batch waits');
    t.addN(1);
    assert.deepEqual(lines, ["dynamic batcher for model 'm': batch of 4 (4 requests) to m_0, oldest waited 30 us, reason: preferred batch size"]);
  });

  it('the queue delay expired', () => {
    const { lines, logger } = recording(1);
    const t = setup({ db: { max_queue_delay_microseconds: 100 }, logger });
    t.addN(2);
    t.clock.advance(40);
    t.addN(1);
    t.clock.advance(60);
    assert.deepEqual(lines, ["dynamic batcher for model 'm': batch of 3 (3 requests) to m_0, oldest waited 100 us, reason: queue delay expired"]);
  });

  it('full: the batch cannot grow past the largest preferred size', async () => {
    const { lines, logger } = recording(1);
    const t = setup({ db: { preferred_batch_size: [4], max_queue_delay_microseconds: 100 }, logger });
    t.add(req({ batch: 6 }));
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /^dynamic batcher for model 'm': batch of 6 \(1 requests\) to m_0, oldest waited 0 us, reason: full$/);
    // 17 rows queued behind a busy instance, the delay long expired: a batch that reached a
    // preferred size (here max_batch_size) says so rather than that its delay expired.
    const u = setup({ db: { max_queue_delay_microseconds: 100 }, logger });
    u.occupy();
    u.addN(17);
    u.clock.advance(250);
    await u.free();
    assert.match(lines.at(-1)!, /batch of 16 \(16 requests\) to m_0, oldest waited 250 us, reason: preferred batch size$/);
    assert.match(lines.at(-2)!, /batch of 16 \(1 requests\) to m_0, oldest waited 0 us, reason: preferred batch size$/, 'the occupying batch');
  });

  it('the next request does not fit (size or shape), and no delay configured', async () => {
    const { lines, logger } = recording(1);
    const t = setup({ db: { max_queue_delay_microseconds: 100 }, shapeChecked: ['IN'], logger });
    t.add(req({ width: 2 }), req({ width: 3 }));
    assert.match(lines.at(-1)!, /batch of 1 \(1 requests\) to m_0, oldest waited 0 us, reason: next request does not fit$/);
    const u = setup({ logger });
    u.addN(1);
    assert.match(lines.at(-1)!, /batch of 1 \(1 requests\) to m_0, oldest waited 0 us, reason: no queue delay$/);
  });

  it('a batch handed to a pipelined instance while it runs another says so', () => {
    const { lines, logger } = recording(1);
    const t = setup({ maxBatchSize: 4, depth: 2, logger });
    t.addN(1);
    t.addN(4);
    assert.deepEqual(t.sizes(), [1, 4]);
    assert.match(lines[0]!, /batch of 1 \(1 requests\) to m_0, oldest waited 0 us, reason: no queue delay$/);
    assert.match(lines[1]!, /batch of 4 \(4 requests\) to m_0 ahead, while it runs another, oldest waited 0 us, reason: preferred batch size$/);
  });

  it('nothing below verbose level 1', () => {
    const { lines, logger } = recording(0);
    const t = setup({ logger });
    t.addN(3);
    assert.equal(t.instance.executions.length, 1);
    assert.deepEqual(lines, []);
  });
});

describe('SYSTEM_CLOCK', () => {
  it('waits out a delay longer than setTimeout can hold instead of firing at once', async () => {
    // A max_queue_delay or queue timeout beyond 24.8 days (they are uint64 microseconds).
    let fired = false;
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    const handle = SYSTEM_CLOCK.setTimer(() => (fired = true), 30n * 86_400n * 1_000_000_000n);
    try {
      await new Promise((r) => setTimeout(r, 20));
      assert.equal(fired, false);
      assert.deepEqual(warnings, []);
    } finally {
      SYSTEM_CLOCK.clearTimer(handle);
      process.off('warning', onWarning);
    }
  });

  it('fires after the delay it was given', async () => {
    const fired = await new Promise<boolean>((resolve) => SYSTEM_CLOCK.setTimer(() => resolve(true), 1_000_000n));
    assert.equal(fired, true);
  });
});

describe('DynamicBatcher: cost', () => {
  it('an arrival while every instance is busy costs as much with a long queue as with a short one (timeouts on)', () => {
    // Scaling, not speed: both figures come from this run, each the best of several. Scanning the
    // whole queue for expired requests on every arrival makes a request 16 times dearer in a
    // queue 16 times longer.
    const gc = collector();
    const nsPerRequest = (n: number): number => {
      const t = setup({ db: { default_queue_policy: policy({ default_timeout_microseconds: 60_000_000 }) } });
      t.occupy();
      const requests = Array.from({ length: n }, () => req());
      gc();
      const start = process.hrtime.bigint();
      for (const r of requests) t.batcher.enqueue(r);
      return Number(process.hrtime.bigint() - start) / n;
    };
    const best = (n: number): number => Math.min(...Array.from({ length: 5 }, () => nsPerRequest(n)));
    best(1000);
    // Up to three comparisons, each of its own best figures: a machine busy with other work can
    // stall one of them, while a cost that grows with the queue fails all three (16 times, not 4).
    const tries: string[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const short = best(250);
      const long = best(4000);
      if (long < 4 * short) return;
      tries.push(`${long.toFixed(0)} ns per request with 4000 queued, ${short.toFixed(0)} ns with 250`);
    }
    assert.fail(tries.join('; '));
  });
});

describe('DynamicBatcher: memory', () => {
  it('a signal that outlives the batcher (a stream across model reloads) does not keep it alive', async () => {
    const gc = collector();
    const stream = new AbortController();
    // Made in a plain function: a suspended async one may keep its last locals alive.
    const { ref, done } = ((): { ref: WeakRef<object>; done: Promise<void> } => {
      const t = setup({ maxBatchSize: 2 });
      const [r] = t.add(req({ signal: stream.signal }));
      t.instance.finishNext();
      t.batcher.stop();
      return { ref: new WeakRef(t.batcher), done: outcome(r!).then(() => undefined) };
    })();
    await done;
    await settle();
    gc();
    await settle();
    gc();
    assert.equal(ref.deref(), undefined, 'the stream\'s signal still holds the stopped batcher');
    assert.equal(stream.signal.aborted, false);
  });

  it('keeps no request alive once the queue has emptied (their tensors may be large)', async () => {
    const gc = collector();
    const instance: BackendInstance = {
      async execute(requests) {
        for (const r of requests) r.respond({ outputs: [] });
      },
      async unload() {},
    };
    const runner = new InstanceRunner({ name: 'm_0', groupName: 'm', kind: 'KIND_CPU', deviceId: 0, instanceCount: 1 }, instance, 'fake');
    const batcher = new DynamicBatcher({
      model: 'm',
      maxBatchSize: 4,
      config: {
        preferred_batch_size: [4],
        max_queue_delay_microseconds: 0,
        preserve_ordering: false,
        priority_levels: 0,
        default_priority_level: 0,
        priority_queue_policy: {},
      },
      shapeCheckedInputs: [],
      hasOptionalInputs: false,
      runners: [runner],
      clock: new FakeClock(),
    });
    // Made in a plain function: a suspended async one may keep its last locals alive.
    const refs = ((): WeakRef<object>[] =>
      Array.from({ length: 10 }, () => {
        const r = req();
        batcher.enqueue(r);
        return new WeakRef(r);
      }))();
    await batcher.drain();
    await settle();
    gc();
    await settle();
    gc();
    const alive = refs.filter((r) => r.deref() !== undefined).length;
    assert.equal(alive, 0, `${alive} of 10 completed requests are still referenced`);
  });
});

describe('DynamicBatcher: instances added and removed while it runs (in-place count changes, §1.10)', () => {
  const runnerFor = (inst: FakeInstance, name: string, observer: SchedulerObserver) =>
    new InstanceRunner({ name, groupName: 'm', kind: 'KIND_CPU', deviceId: 0, instanceCount: 2 }, inst, 'fake', { observer });

  it('an added instance takes the queued batch at once', async () => {
    const t = setup({ maxBatchSize: 4 });
    t.occupy();
    const queued = t.addN(3);
    const extra = new FakeInstance();
    t.batcher.addInstances([runnerFor(extra, 'm_1', t.observer)]);
    assert.deepEqual(extra.batches, [ids(queued)]);
    extra.finishNext();
    await t.free();
    assert.equal(t.batcher.inflightCount, 0);
  });

  it('a removed instance finishes its batch, gets no more, and is idle once it finished', async () => {
    const t = setup({ maxBatchSize: 4 });
    const extra = new FakeInstance();
    const removed = runnerFor(extra, 'm_1', t.observer);
    t.batcher.addInstances([removed]);
    t.occupy();
    const held = t.add(req({ batch: 4 }));
    assert.deepEqual(extra.batches, [ids(held)]);
    t.batcher.removeInstances([removed]);
    let idle = false;
    void removed.idle().then(() => (idle = true));
    const later = t.addN(2);
    extra.finishNext();
    await settle();
    assert.equal(idle, true);
    assert.equal(await outcome(held[0]!), undefined, 'the batch it held completed');
    assert.equal(extra.executions.length, 1, 'the removed instance took nothing new');
    await t.free();
    assert.deepEqual(t.instance.batches.slice(1), [ids(later)]);
    t.instance.finishNext();
    await settle();
    assert.equal(t.batcher.inflightCount, 0);
  });
});

describe('DynamicBatcher: queued preemption (max_total_queue_size, preemption "queued")', () => {
  const levels = (n = 3) => ({ priority_levels: n, default_priority_level: n });

  it('a higher-priority request evicts the most recently queued request of the lowest level, then the next lowest', async () => {
    const t = setup({ maxBatchSize: 8, db: levels(), preemption: { queued: true, maxTotalQueueSize: 3 } });
    t.occupy();
    const [a, b] = t.addN(2, { priority: 3 });
    const [c] = t.addN(1, { priority: 2 });
    const [d] = t.addN(1, { priority: 1 });
    const evictedB = await outcome(b!);
    assert.equal(evictedB?.code, 'REQUEST_PREEMPTED');
    assert.equal(evictedB?.kind, 'UNAVAILABLE');
    assert.match(evictedB!.message, /^Request preempted while queued: model 'm' evicted request 'r\d+' \(priority level 3, the lowest queued\)/);
    assert.match(evictedB!.message, /max_total_queue_size 3\b.*priority level 1; retry later or send it with a higher priority$/);
    assert.equal(a!.completed, false, 'the older request of the same level stays');
    const [e] = t.addN(1, { priority: 2 });
    assert.equal((await outcome(a!))?.code, 'REQUEST_PREEMPTED', 'level 3 empties before level 2 is touched');
    const [f] = t.addN(1, { priority: 1 });
    assert.equal((await outcome(e!))?.code, 'REQUEST_PREEMPTED', 'the most recently queued of level 2');
    assert.equal(c!.completed, false);
    assert.deepEqual(
      t.observer.preemptions.map(([, kind]) => kind),
      ['queued', 'queued', 'queued'],
    );
    for (const r of [a, b, e]) assert.equal(t.observer.reasonOf(r!), 'REJECTED', 'an evicted request is a failure with reason REJECTED');
    assert.equal(t.batcher.queuedCount, 3);
    await t.free();
    assert.deepEqual(t.instance.batches[1], ids([d!, f!, c!]), 'the survivors run in priority order');
    t.instance.finishNext();
    await settle();
    assert.equal(t.batcher.inflightCount, 0);
  });

  it('a request of equal or lower priority than everything queued is refused as a full queue refuses, evicting nothing', async () => {
    const t = setup({ db: levels(), preemption: { queued: true, maxTotalQueueSize: 2 } });
    t.occupy();
    const queued = t.addN(2, { priority: 2 });
    const err = await refusedAsFull(t, req({ priority: 2 }), /^Exceeds maximum queue size: model 'm' already holds 2 queued requests across its priority levels \(max_total_queue_size 2\), none of a lower priority than level 2; retry later$/);
    assert.equal(err.kind, 'UNAVAILABLE');
    await refusedAsFull(t, req({ priority: 3 }), /max_total_queue_size 2/);
    assert.ok(queued.every((r) => !r.completed));
    assert.deepEqual(t.observer.preemptions, []);
  });

  it('max_total_queue_size without preemption is a model-wide limit that refuses, whatever the priority', async () => {
    const t = setup({ db: levels(2), preemption: { maxTotalQueueSize: 2 } });
    t.occupy();
    const queued = t.addN(2, { priority: 2 });
    const err = await refusedAsFull(t, req({ priority: 1 }), /max_total_queue_size 2\); retry later$/);
    assert.equal(err.code, 'UNAVAILABLE');
    assert.ok(queued.every((r) => !r.completed));
  });

  it("a level's own max_queue_size still refuses first: evicting another level frees nothing in it", async () => {
    const t = setup({
      db: { ...levels(2), priority_queue_policy: { '1': policy({ max_queue_size: 1 }) } },
      preemption: { queued: true, maxTotalQueueSize: 3 },
    });
    t.occupy();
    const low = t.addN(2, { priority: 2 });
    t.addN(1, { priority: 1 });
    await refusedAsFull(t, req({ priority: 1 }), /priority level 1.*max_queue_size 1/);
    assert.ok(low.every((r) => !r.completed), 'nothing evicted for a request its own level refuses');
  });

  it('off by default: a full queue refuses the arriving request whatever its priority (Triton)', async () => {
    const t = setup({ db: { ...levels(2), default_queue_policy: policy({ max_queue_size: 1 }) } });
    t.occupy();
    const [low] = t.addN(1, { priority: 2 });
    t.addN(1, { priority: 1 });
    await refusedAsFull(t, req({ priority: 1 }), /priority level 1.*max_queue_size 1/);
    assert.equal(low!.completed, false);
    assert.deepEqual(t.observer.preemptions, []);
  });

  it('timeouts stay right: an evicted request is not timed out later, the others expire (REJECT) or move (DELAY) as before', async () => {
    const t = setup({
      maxBatchSize: 8,
      db: {
        ...levels(3),
        priority_queue_policy: {
          '2': policy({ timeout_action: 'DELAY', default_timeout_microseconds: 100 }),
          '3': policy({ default_timeout_microseconds: 200 }),
        },
      },
      preemption: { queued: true, maxTotalQueueSize: 3 },
    });
    t.occupy();
    const [old3] = t.addN(1, { priority: 3 });
    const [delayed2] = t.addN(1, { priority: 2 });
    t.clock.advance(150);
    const [new3] = t.addN(1, { priority: 3 });
    const [high] = t.addN(1, { priority: 1 });
    assert.equal((await outcome(new3!))?.code, 'REQUEST_PREEMPTED', 'the most recently queued of level 3');
    t.clock.advance(60);
    const expired = await outcome(old3!);
    assert.match(expired!.message, /^Request timeout expired/, 'the older level-3 request still times out');
    assert.equal(t.observer.reasonOf(new3!), 'REJECTED');
    await t.free();
    assert.deepEqual(t.instance.batches[1], ids([high!, delayed2!]), 'the delayed request runs after level 1, as before');
    t.instance.finishNext();
    await settle();
    assert.equal(t.batcher.inflightCount, 0);
  });

  it('a cancelled arrival evicts nothing', async () => {
    const t = setup({ db: levels(2), preemption: { queued: true, maxTotalQueueSize: 1 } });
    t.occupy();
    const [low] = t.addN(1, { priority: 2 });
    const controller = new AbortController();
    controller.abort();
    const r = req({ priority: 1, signal: controller.signal });
    t.batcher.enqueue(r);
    assert.equal((await outcome(r))?.code, 'REQUEST_CANCELLED');
    assert.equal(low!.completed, false);
  });

  it('every accepted request gets exactly one final response through a storm of mixed priorities', async () => {
    const t = setup({ maxBatchSize: 4, instances: 2, db: levels(4), preemption: { queued: true, maxTotalQueueSize: 5 } });
    const all: InferenceRequest[] = [];
    for (let i = 0; i < 200; i++) {
      all.push(...t.addN(1, { priority: 1 + ((i * 7) % 4) }));
      if (i % 9 === 0) for (const inst of t.instances) if (inst.running.length > 0) inst.finishNext();
      await settle();
    }
    while (t.batcher.inflightCount > 0) {
      for (const inst of t.instances) if (inst.running.length > 0) inst.finishNext();
      await settle();
    }
    assert.ok(all.every((r) => r.completed), 'every request completed');
    assert.equal(t.observer.completions.size, all.length, 'each reported exactly once');
    const preempted = [...t.observer.completions.keys()].filter((r) => r.error?.code === 'REQUEST_PREEMPTED');
    assert.equal(preempted.length, t.observer.preemptions.length);
    assert.ok(preempted.length > 0);
  });
});

describe('DynamicBatcher: running preemption (preemption "running", decoupled models)', () => {
  const db = { priority_levels: 2, default_priority_level: 2 };

  it('a running lower-priority batch is ended for a waiting higher-priority request, which gets the instance once execute returns', async () => {
    const t = setup({ maxBatchSize: 1, db, preemptible: true, preemption: { running: true } });
    const [low] = t.addN(1, { priority: 2 });
    const instance = t.instance as PreemptibleInstance;
    assert.equal(instance.running.length, 1);
    const [high] = t.addN(1, { priority: 1 });
    assert.deepEqual(instance.preempted, [low!.id], 'the backend is told');
    const error = await outcome(low!);
    assert.equal(error?.code, 'REQUEST_PREEMPTED');
    assert.equal(error?.kind, 'UNAVAILABLE');
    assert.match(error!.message, /^Request preempted while running: model 'm' stopped request 'r\d+' \(priority level 2\) between two responses to give its instance to a request of priority level 1;/);
    await settle();
    assert.deepEqual(instance.batches, [[low!.id], [high!.id]], 'the instance takes the waiting request once execute returned');
    assert.deepEqual(t.observer.preemptions, [[low!.id, 'running']]);
    assert.equal(t.observer.reasonOf(low!), 'REJECTED');
    t.instance.finishNext();
    assert.equal(await outcome(high!), undefined);
    await settle();
    assert.equal(t.batcher.inflightCount, 0);
  });

  it('equal priority preempts nothing; nor does anything when running preemption is off (the default)', async () => {
    for (const preemption of [{ running: true }, undefined]) {
      const t = setup({ maxBatchSize: 1, db, preemptible: true, ...(preemption ? { preemption } : {}) });
      const [first] = t.addN(1, { priority: preemption ? 1 : 2 });
      t.addN(1, { priority: 1 });
      assert.deepEqual((t.instance as PreemptibleInstance).preempted, []);
      assert.equal(first!.completed, false);
      await t.free();
      await t.free();
      assert.equal(t.batcher.inflightCount, 0);
    }
  });

  it('one preemption at a time: a second waiting request preempts the next lowest batch once the first instance is back', async () => {
    const t = setup({ maxBatchSize: 1, instances: 2, db: { priority_levels: 3, default_priority_level: 3 }, preemptible: true, preemption: { running: true } });
    const [lowA] = t.addN(1, { priority: 3 });
    const [midB] = t.addN(1, { priority: 2 });
    const [h1, h2] = t.addN(2, { priority: 1 });
    const [a, b] = t.instances as PreemptibleInstance[];
    assert.deepEqual([a!.preempted, b!.preempted], [[lowA!.id], []], 'the lowest-priority batch goes first, and alone');
    await settle();
    assert.deepEqual(a!.batches, [[lowA!.id], [h1!.id]]);
    await settle();
    assert.deepEqual(b!.preempted, [midB!.id], 'then the next one, for the request still waiting');
    await settle();
    assert.deepEqual(b!.batches, [[midB!.id], [h2!.id]]);
    a!.finishNext();
    b!.finishNext();
    await settle();
    assert.equal(t.batcher.inflightCount, 0);
    assert.equal(t.observer.preemptions.length, 2);
  });

  it('an instance whose backend cannot preempt is left running', async () => {
    const t = setup({ maxBatchSize: 1, db, preemption: { running: true } });
    const [low] = t.addN(1, { priority: 2 });
    const [high] = t.addN(1, { priority: 1 });
    assert.equal(low!.completed, false);
    await t.free();
    assert.deepEqual(t.instance.batches, [[low!.id], [high!.id]]);
    await t.free();
  });
});
