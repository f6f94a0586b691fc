/**
 * Runs batches on one backend instance, records their compute timestamps, and guarantees that
 * every request of a batch ends with a final response whatever the backend does.
 *
 * An instance may accept up to `depth` batches at once (`BackendInstance.pipelineDepth`); it
 * still computes them one at a time.
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import type { BackendInstance, ExecutionTiming, InstanceSpec, MemoryUsageEntry } from '../backends/spi.js';
import type { RateLimitedInstance, RateLimiter } from './rate-limiter.js';
import { NO_OBSERVER, type FailureReason, type ScheduledRequest, type SchedulerObserver } from './scheduler.js';

/** The failure reason of a request that went through an instance (§9.1). */
function executionFailure(request: ScheduledRequest): FailureReason | undefined {
  const error = request.error;
  if (error === undefined) return undefined;
  if (error.code === 'REQUEST_PREEMPTED') return 'REJECTED';
  return error.kind === 'CANCELLED' ? 'CANCELED' : 'BACKEND';
}

/** The marks of one execution; unset marks are 0n. */
class BatchTiming implements ExecutionTiming {
  readonly called = process.hrtime.bigint();
  start = 0n;
  inputEnd = 0n;
  outputStart = 0n;
  end = 0n;

  markComputeStart(at?: bigint): void {
    this.start = at ?? process.hrtime.bigint();
  }

  markInputsReady(at?: bigint): void {
    this.inputEnd = at ?? process.hrtime.bigint();
  }

  markOutputsStart(at?: bigint): void {
    this.outputStart = at ?? process.hrtime.bigint();
  }

  markComputeEnd(at?: bigint): void {
    this.end = at ?? process.hrtime.bigint();
  }

  /** Set by the runner when the instance may be released before `execute` returns. */
  onRelease: (() => void) | undefined = undefined;

  releaseInstance(): void {
    const release = this.onRelease;
    this.onRelease = undefined;
    release?.();
  }
}

export class InstanceRunner {
  readonly spec: InstanceSpec;
  /** Batches this instance may hold at once. */
  readonly depth: number;
  readonly #instance: BackendInstance;
  readonly #backendName: string;
  readonly #decoupled: boolean;
  readonly #observer: SchedulerObserver;
  readonly #limiter: RateLimiter | undefined;
  #onReleased: (() => void) | undefined;
  /** This instance as the rate limiter knows it (executions × priority is its key, §7.3). */
  readonly limited: RateLimitedInstance;
  /** Batches handed to the instance and not released (`inflight`). */
  #inflight = 0;
  /** Batches whose `execute` has not returned, released or not (`idle`). */
  #executing = 0;
  #idleWaiters: (() => void)[] = [];
  /** Requests of a decoupled model whose `execute` returned before their final response. */
  #open = 0;
  #openWaiters: (() => void)[] = [];

  /**
   * @param options.decoupled  decoupled models may keep responding after `execute` returns
   *                           (models-and-scheduling.md §8.1); others must answer every request.
   * @param options.observer   told of every execution and of every request's completion
   * @param options.rateLimiter  with `--rate-limit=execution_count`: executions wait for their
   *                             resources (and the instance holds one batch at a time)
   */
  constructor(
    spec: InstanceSpec,
    instance: BackendInstance,
    backendName: string,
    options: {
      decoupled?: boolean;
      observer?: SchedulerObserver;
      rateLimiter?: RateLimiter;
      resources?: RateLimitedInstance['resources'];
      priority?: number;
      /** Called once, when `unload` has released the instance (or failed to). */
      onReleased?: () => void;
    } = {},
  ) {
    this.spec = spec;
    this.#instance = instance;
    this.#backendName = backendName;
    this.#decoupled = options.decoupled ?? false;
    this.#observer = options.observer ?? NO_OBSERVER;
    this.#limiter = options.rateLimiter;
    this.#onReleased = options.onReleased;
    this.limited = {
      name: spec.name,
      device: spec.deviceId,
      resources: options.resources ?? [],
      priority: Math.max(1, options.priority ?? 1),
      executions: 0,
    };
    this.depth = this.#limiter ? 1 : Math.max(1, Math.floor(instance.pipelineDepth ?? 1));
  }

  /** Preference among idle instances: lower first (executions × priority, §7.3). */
  get key(): number {
    return this.limited.executions * this.limited.priority;
  }

  /**
   * Batches handed to the instance and not finished: not returned from `execute`, nor released
   * before it returned (`ExecutionTiming.releaseInstance`, while their outputs are handed over).
   */
  get inflight(): number {
    return this.#inflight;
  }

  /**
   * Resolves once the instance holds no batch (at once if it holds none). With the instance taken
   * out of its scheduler first, it then stays idle: an in-place instance removal waits for this
   * before unloading the instance.
   */
  idle(): Promise<void> {
    if (this.#executing === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Can take another batch now. */
  get available(): boolean {
    return this.#inflight < this.depth;
  }

  /**
   * Executes one batch. Never rejects: backend failures become error responses for the requests
   * that have no final response yet. `onReleased` is called once the instance can take another
   * batch: when the backend releases it early (`ExecutionTiming.releaseInstance`, synchronously
   * from there), else when `execute` returns, before the promise settles.
   */
  run(batch: readonly ScheduledRequest[], onReleased?: () => void): Promise<void> {
    return this.#run(batch, false, onReleased);
  }

  /**
   * Executes one warmup batch (models-and-scheduling.md §8.3) as `run` does, except that it
   * bypasses the rate limiter and is left out of statistics and of the instance's execution
   * count. Called before the instance serves; never rejects.
   */
  warm(batch: readonly ScheduledRequest[]): Promise<void> {
    return this.#run(batch, true);
  }

  async #run(batch: readonly ScheduledRequest[], warmup: boolean, onReleased?: () => void): Promise<void> {
    if (!this.available) throw new Error(`instance ${this.spec.name} already holds ${this.#inflight} batches`);
    const limiter = warmup ? undefined : this.#limiter;
    this.#inflight++;
    this.#executing++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.#inflight--;
      onReleased?.();
    };
    if (limiter) await limiter.acquire(this.limited);
    const timing = new BatchTiming();
    // Under the rate limiter the instance's resources are held until `execute` returns.
    if (limiter === undefined && !warmup) timing.onRelease = release;
    try {
      await this.#instance.execute(batch, timing);
    } catch (err) {
      const error = toNereidError(err, 'BACKEND_ERROR', `backend '${this.#backendName}' failed to execute instance '${this.spec.name}'`);
      for (const r of batch) r.fail(error);
    } finally {
      if (limiter) limiter.release(this.limited);
      else if (!warmup) this.limited.executions++;
      timing.onRelease = undefined;
      this.#executing--;
      if (this.#executing === 0 && this.#idleWaiters.length > 0) {
        const waiters = this.#idleWaiters;
        this.#idleWaiters = [];
        for (const w of waiters) w();
      }
      const start = timing.start === 0n ? timing.called : timing.start;
      const end = timing.end === 0n ? process.hrtime.bigint() : timing.end;
      const inputEnd = timing.inputEnd === 0n ? start : timing.inputEnd;
      const outputStart = timing.outputStart === 0n ? end : timing.outputStart;
      for (const r of batch) {
        r.times.computeStart = start;
        r.times.computeInputEnd = inputEnd;
        r.times.computeOutputStart = outputStart;
        r.times.computeEnd = end;
      }
    }
    try {
      this.#returned(batch, warmup);
    } finally {
      release();
    }
  }

  /** After `execute` returned: requests left without a final response, and the observer. */
  #returned(batch: readonly ScheduledRequest[], warmup: boolean): void {
    if (this.#decoupled) {
      for (const r of batch) {
        if (!r.completed) this.#trackDecoupled(r);
      }
    } else {
      for (const r of batch) {
        if (!r.completed) {
          r.fail(
            new NereidError(
              'BACKEND_ERROR',
              `backend '${this.#backendName}' returned from execute without sending a final response for request '${r.id}' on instance '${this.spec.name}'`,
            ),
          );
        }
      }
    }
    if (warmup) return;
    let size = 0;
    for (const r of batch) size += Math.max(1, r.batchSize);
    this.#observer.onExecution(batch, size);
    for (const r of batch) r.onComplete(() => this.#observer.onRequestComplete(r, executionFailure(r)));
  }

  /**
   * A decoupled request still open after `execute` returned: its response timeout starts, and
   * the instance is not unloaded before it completes.
   */
  #trackDecoupled(r: ScheduledRequest): void {
    this.#open++;
    r.executeReturned();
    r.onComplete(() => {
      if (--this.#open === 0 && this.#openWaiters.length > 0) {
        const waiters = this.#openWaiters;
        this.#openWaiters = [];
        for (const w of waiters) w();
      }
    });
  }

  /**
   * Whether a batch executing here can be stopped before `execute` returns (running preemption,
   * preemption.ts): a decoupled model whose backend instance implements `preempt`.
   */
  get preemptible(): boolean {
    return this.#decoupled && this.#instance.preempt !== undefined;
  }

  /**
   * Ends `request`, part of a batch this instance is executing, with `error`: the backend instance
   * is told first (so that the model stops and its `execute` returns), then the request fails. A
   * request already completed is left alone.
   */
  preempt(request: ScheduledRequest, error: NereidError): void {
    if (request.completed) return;
    try {
      this.#instance.preempt?.(request, error);
    } catch {
      // A backend that breaks the SPI's "must not throw": the request still ends here.
    }
    request.fail(error);
  }

  /** The backend instance's readiness probe (`BackendInstance.isReady`); true without one. */
  async probeReady(): Promise<boolean> {
    const probe = this.#instance.isReady;
    if (probe === undefined) return true;
    try {
      return (await probe.call(this.#instance)) === true;
    } catch {
      return false;
    }
  }

  /** Whether the backend instance reports its memory (`BackendInstance.memoryUsage`). */
  get reportsMemory(): boolean {
    return this.#instance.memoryUsage !== undefined;
  }

  /** The backend instance's memory (`BackendInstance.memoryUsage`); empty when it reports none. */
  memoryUsage(fresh: boolean): readonly MemoryUsageEntry[] {
    return this.#instance.memoryUsage?.(fresh) ?? [];
  }

  /** Stops the backend instance for good (`BackendInstance.terminate`); a no-op for one without. */
  terminate(error: NereidError): void {
    this.#instance.terminate?.(error);
  }

  /** Tells the backend instance that its version unloads (`BackendInstance.unloading`). */
  unloading(): void {
    this.#instance.unloading?.();
  }

  /**
   * Releases the instance once no request it executed is still open (a decoupled model's
   * responses after `execute` returned; each bounded by its response timeout).
   */
  async unload(): Promise<void> {
    if (this.#open > 0) await new Promise<void>((resolve) => this.#openWaiters.push(resolve));
    try {
      return await this.#instance.unload();
    } finally {
      const released = this.#onReleased;
      this.#onReleased = undefined;
      released?.();
    }
  }
}
