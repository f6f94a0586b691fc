/**
 * Timers with sub-millisecond resolution, for the dynamic batcher's `max_queue_delay_microseconds`.
 * Node's timers count whole milliseconds and fire a millisecond or more late, so a 200 µs delay
 * became about 1.2 ms of queue time. A delay shorter than PRECISE_BELOW_NS is served instead by
 * one worker thread that sleeps in `Atomics.wait` until the earliest deadline (a timed wait on a
 * condition variable: microsecond resolution, no spinning) and then posts a message; the
 * callbacks run on the main thread, from that message. The worker starts with the first such
 * timer (or the first hold) and, like setTimeout, keeps the process alive only while a timer is
 * pending. It ends when no timer is pending and nothing holds it: a dynamic batcher with a queue
 * delay holds it from its creation until it stops, so a model's batches do not start a thread
 * each, and an unloaded model or a stopped server leaves no thread behind.
 *
 * Contract: a callback runs once, on the main thread, no earlier than about 20 µs before its
 * deadline; `clearPreciseTimer` before it ran means it never does.
 */
import { Worker } from 'node:worker_threads';

/** Delays at least this long go to setTimeout, whose lateness is small next to them. */
export const PRECISE_BELOW_NS = 2_000_000n;

/** A deadline this close counts as reached (the message from the worker takes about as long). */
const SLACK_NS = 20_000n;

const WORKER_SOURCE = `
const { workerData } = require('node:worker_threads');
const { parentPort } = require('node:worker_threads');
const generation = new Int32Array(workerData, 0, 1);
const deadline = new BigInt64Array(workerData, 8, 1);
for (;;) {
  const seen = Atomics.load(generation, 0);
  const at = Atomics.load(deadline, 0);
  if (at === 0n) {
    Atomics.wait(generation, 0, seen);
    continue;
  }
  const now = process.hrtime.bigint();
  if (now >= at) {
    Atomics.compareExchange(deadline, 0, at, 0n);
    parentPort.postMessage(0);
    continue;
  }
  Atomics.wait(generation, 0, seen, Number(at - now) / 1e6);
}
`;

export class PreciseTimer {
  /** Monotonic ns (process.hrtime.bigint) when it is due. */
  readonly at: bigint;
  readonly callback: () => void;

  constructor(at: bigint, callback: () => void) {
    this.at = at;
    this.callback = callback;
  }
}

const pending = new Set<PreciseTimer>();
let worker: Worker | undefined;
/** The worker runs its loop (it takes some milliseconds to start). */
let online = false;
let generation: Int32Array;
let deadline: BigInt64Array;
/** The deadline the worker was last given (0n: none). */
let armed = 0n;
/** Holders that keep the worker while no timer is pending (holdPreciseTimers). */
let holders = 0;

function start(): void {
  online = false;
  armed = 0n;
  const shared = new SharedArrayBuffer(16);
  generation = new Int32Array(shared, 0, 1);
  deadline = new BigInt64Array(shared, 8, 1);
  worker = new Worker(WORKER_SOURCE, { eval: true, workerData: shared, name: 'nereid precise timer' });
  worker.on('message', fire);
  const started = worker;
  worker.once('online', () => {
    if (worker !== started) return;
    online = true;
    armed = -1n;
    arm();
  });
  worker.unref();
}

/**
 * Starts the worker ahead of the first timer and keeps it while no timer is pending (a model with
 * a queue delay loads), until the returned release is called (once; later calls do nothing).
 */
export function holdPreciseTimers(): () => void {
  holders++;
  if (worker === undefined) start();
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    holders--;
    if (pending.size === 0) stopIfIdle();
  };
}

/** Ends the worker when no timer is pending and nothing holds it. */
function stopIfIdle(): void {
  if (worker === undefined || holders > 0 || pending.size > 0) return;
  const ending = worker;
  worker = undefined;
  online = false;
  armed = 0n;
  void ending.terminate();
}

/** Gives the worker the earliest pending deadline (if it changed) and wakes it. */
function arm(): void {
  let earliest = 0n;
  for (const t of pending) if (earliest === 0n || t.at < earliest) earliest = t.at;
  if (earliest === 0n && holders === 0) {
    stopIfIdle();
    return;
  }
  // Like a pending setTimeout, a pending timer keeps the process alive.
  if (earliest === 0n) worker!.unref();
  else worker!.ref();
  if (earliest === armed) return;
  armed = earliest;
  Atomics.store(deadline, 0, earliest);
  Atomics.add(generation, 0, 1);
  Atomics.notify(generation, 0);
}

function fire(): void {
  armed = 0n;
  const now = process.hrtime.bigint() + SLACK_NS;
  const due: PreciseTimer[] = [];
  for (const t of pending) if (t.at <= now) due.push(t);
  for (const t of due) pending.delete(t);
  due.sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : 0));
  arm();
  for (const t of due) t.callback();
}

/** Runs `callback` once `delayNs` (under PRECISE_BELOW_NS) has passed. */
export function setPreciseTimer(callback: () => void, delayNs: bigint): PreciseTimer {
  if (worker === undefined) start();
  const timer = new PreciseTimer(process.hrtime.bigint() + (delayNs > 0n ? delayNs : 0n), callback);
  pending.add(timer);
  arm();
  // Until the worker runs, setTimeout stands in (late by a millisecond, but not by the start-up).
  if (!online) setTimeout(fire, Math.ceil(Number(delayNs) / 1e6));
  return timer;
}

export function clearPreciseTimer(timer: PreciseTimer): void {
  if (pending.delete(timer) && pending.size === 0) arm();
}
