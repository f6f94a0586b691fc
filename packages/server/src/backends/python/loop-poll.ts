/**
 * Busy polling of the event loop while a stub's answer is due soon (`busy-poll-us`,
 * docs/backends.md). An execution sent to a stub that has been answering within the window keeps
 * the event loop from sleeping until its answer comes or the window passes: a chain of
 * `setImmediate` callbacks makes libuv poll for I/O without blocking, so the stub's answer is read
 * by a running thread instead of waking a sleeping one (tens of microseconds per hand-over, more in
 * a virtual machine, where it is an interrupt between CPUs). Nothing else changes: timers, I/O and
 * other callbacks run as usual between the polls. The stub polls the other way
 * (python/nereid_stub/transport.py, `Channel`).
 *
 * Each poll yields the CPU first (sched_yield, through the native addon): a thread waiting for this
 * CPU — the client that is about to read the previous answer or send the next request, on a
 * machine whose cores the server shares — runs at once instead of waiting for the scheduler to
 * preempt a loop that never sleeps. Measured with perf_analyzer on `add_sub` on two virtual CPUs,
 * three rounds alternated: p99 at one client 825–840 → 512–553 µs over HTTP and 841–856 →
 * 495–605 µs over gRPC, throughput unchanged (docs/benchmarks.md).
 *
 * Adaptive per stub, as on the stub's side: an execution is polled for only when the stub's
 * previous one was answered within the window, so a model whose executions take longer (or an
 * idle one) costs no polling. The window bounds what polling costs the execution itself: a loop
 * that spins while the runtime computes slows it where the CPUs share a core (measured on two
 * virtual CPUs: an MLP whose executions take about 0.6 ms ran 30% slower with the loop polling
 * throughout, while one of 0.2 ms answered 40% sooner).
 *
 * And only at low load: an execution of one request, sent while no other execution of any stub is
 * in flight. Under load the loop is busy anyway, and a polling loop would take CPU time from the
 * stubs (measured: 15-30% fewer inferences per second at 8 concurrent clients on two cores when
 * every execution was polled for). A stub's execution that stays in flight (a decoupled model
 * streaming for long) therefore keeps every other from being polled for.
 */

import { availableParallelism } from 'node:os';
import { IdMap } from '../../core/id-map.js';
import { nativeAddon } from '../../core/native.js';

/** Executions polled for and not yet answered, over all stubs. */
let waiting = 0;
/** Executions in flight, polled for or not, over all stubs. */
let executing = 0;
/** performance.now() after which the loop stops polling. */
let deadline = 0;
let polling = false;

/** sched_yield, from the native addon (none without it). */
const yieldCpu = nativeAddon()?.yieldCpu;
/** Times the polling loop yielded its CPU (tests). */
let yields = 0;

function poll(): void {
  if (waiting > 0 && performance.now() < deadline) {
    if (yieldCpu !== undefined) {
      yieldCpu();
      yields++;
    }
    setImmediate(poll);
  } else polling = false;
}

/** An execution polled for was answered (or its stub died): the last one ends the window. */
function unwait(): void {
  waiting--;
  if (waiting === 0) deadline = 0;
}

/** One stub's side: `sent` when an execution goes out, `answered` when its `done` comes back. */
export class LoopPoller {
  readonly #windowMs: number;
  /** Executions in flight: id → when sent, and whether polled for. */
  readonly #inFlight = new IdMap<{ at: number; polled: boolean }>();
  #pollNext = true;

  /**
   * `windowUs`: how long to poll for an answer, µs; 0 never polls. Nor does a server with one CPU
   * (`cpus`), where the polling loop would take the CPU from the stub it waits for.
   */
  constructor(windowUs: number, cpus = availableParallelism()) {
    this.#windowMs = cpus < 2 ? 0 : windowUs / 1000;
  }

  /** An execution of `requests` requests went out. */
  sent(id: number, requests: number): void {
    if (this.#windowMs <= 0) return;
    const at = performance.now();
    const polled = this.#pollNext && requests === 1 && executing === 0;
    executing++;
    this.#inFlight.set(id, { at, polled });
    if (!polled) return;
    waiting++;
    deadline = Math.max(deadline, at + this.#windowMs);
    if (!polling) {
      polling = true;
      setImmediate(poll);
    }
  }

  answered(id: number): void {
    const entry = this.#inFlight.get(id);
    if (entry === undefined) return;
    this.#inFlight.delete(id);
    executing--;
    if (entry.polled) unwait();
    this.#pollNext = performance.now() - entry.at <= this.#windowMs;
  }

  /** The stub is gone: nothing it had in flight is waited for. */
  clear(): void {
    for (const entry of this.#inFlight.values()) {
      executing--;
      if (entry.polled) unwait();
    }
    this.#inFlight.clear();
  }
}

/** How many times the polling loop has yielded its CPU (tests). */
export function pollYields(): number {
  return yields;
}

/** Executions being polled for, over all stubs (tests). */
export function pollingFor(): number {
  return waiting;
}

/**
 * Whether the event loop has been busy nearly all the time lately: its utilisation
 * (`performance.eventLoopUtilization`) over the last stretch of at least `LOOP_SAMPLE_MS`, measured
 * when asked (no timer), at or above `LOOP_BUSY`. The Python backend releases an instance before
 * its responses are handed over only while the loop has time to spare: a saturated loop would
 * hand the stub smaller batches sooner, each costing the loop the same fixed work, and serve
 * fewer requests. Measured at 16 HTTP clients on two CPUs (docs/backends.md): a model with 2 ms per
 * batch served 15–30% more inferences/s released early; `add_sub`, whose loop is saturated, was
 * within the noise either way.
 */
const LOOP_SAMPLE_MS = 50;
const LOOP_BUSY = 0.9;
let loopSample = performance.eventLoopUtilization();
let loopSampledAt = performance.now();
let loopBusy = false;

export function loopSaturated(now = performance.now()): boolean {
  if (now - loopSampledAt >= LOOP_SAMPLE_MS) {
    const current = performance.eventLoopUtilization();
    loopBusy = performance.eventLoopUtilization(current, loopSample).utilization >= LOOP_BUSY;
    loopSample = current;
    loopSampledAt = now;
  }
  return loopBusy;
}
