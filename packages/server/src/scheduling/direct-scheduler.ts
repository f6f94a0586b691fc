/**
 * The default scheduler (models-and-scheduling.md §4.1): every request is its own batch, queued
 * FIFO for the model; the next idle instance takes the oldest. A request may still carry its own
 * batch size > 1. No priorities, queue policies or delays.
 */
import { NereidError } from '@nereid/protocol';
import type { InstanceRunner } from './instance-runner.js';
import { NO_OBSERVER, type ScheduledRequest, type Scheduler, type SchedulerObserver } from './scheduler.js';
import { RequestQueue } from './request-queue.js';

export class DirectScheduler implements Scheduler {
  readonly #model: string;
  #runners: InstanceRunner[];
  readonly #queue = new RequestQueue();
  readonly #observer: SchedulerObserver;
  #executing = 0;
  #stopped = false;
  #drainWaiters: (() => void)[] = [];

  /** @param instances the instances that take work (passive ones excluded) */
  constructor(model: string, instances: readonly InstanceRunner[], observer: SchedulerObserver = NO_OBSERVER) {
    this.#model = model;
    this.#runners = [...instances];
    this.#observer = observer;
  }

  get inflightCount(): number {
    return this.#queue.size + this.#executing;
  }

  get queuedCount(): number {
    return this.#queue.size;
  }

  enqueue(request: ScheduledRequest): void {
    if (this.#stopped) {
      throw new NereidError(
        'SERVER_STOPPING',
        `Server is stopping, scheduler for model '${this.#model}' has stopped accepting new inference requests`,
      );
    }
    if (request.signal.aborted) {
      request.fail(new NereidError('REQUEST_CANCELLED', `request '${request.id}' for model '${this.#model}' was cancelled`));
      this.#observer.onRequestComplete(request, 'CANCELED');
      return;
    }
    request.times.queue = process.hrtime.bigint();
    if (this.#queue.size === 0) {
      // Nothing waits: an instance that can take the request now takes it without queueing.
      const runner = this.#pick();
      if (runner !== undefined) {
        this.#start(runner, request);
        return;
      }
    }
    this.#queue.push(request, () => {
      request.fail(new NereidError('REQUEST_CANCELLED', `request '${request.id}' for model '${this.#model}' was cancelled while queued`));
      this.#observer.onRequestComplete(request, 'CANCELED');
      this.#settle();
    });
    this.#dispatch();
  }

  addInstances(runners: readonly InstanceRunner[]): void {
    this.#runners.push(...runners.filter((r) => !this.#runners.includes(r)));
    this.#dispatch();
  }

  removeInstances(runners: readonly InstanceRunner[]): void {
    this.#runners = this.#runners.filter((r) => !runners.includes(r));
  }

  stop(): void {
    this.#stopped = true;
  }

  drain(): Promise<void> {
    if (this.inflightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  /**
   * Hands queued requests to instances: an idle instance first; when every instance is busy, one
   * that can hold another batch (pipelined instances), least loaded first.
   */
  #dispatch(): void {
    while (this.#queue.size > 0) {
      const runner = this.#pick();
      if (runner === undefined) return;
      this.#start(runner, this.#queue.shift()!);
    }
  }

  #pick(): InstanceRunner | undefined {
    let runner: InstanceRunner | undefined;
    for (const r of this.#runners) {
      if (r.available && (runner === undefined || r.inflight < runner.inflight || (r.inflight === runner.inflight && r.key < runner.key))) {
        runner = r;
      }
    }
    return runner;
  }

  #start(runner: InstanceRunner, request: ScheduledRequest): void {
    this.#executing++;
    void runner.run([request], this.#onReleased).then(this.#onRunDone);
  }

  /** The instance can take another request (released early, or `execute` returned). */
  readonly #onReleased = (): void => this.#dispatch();

  readonly #onRunDone = (): void => {
    this.#executing--;
    this.#dispatch();
    this.#settle();
  };

  #settle(): void {
    if (this.inflightCount === 0 && this.#drainWaiters.length > 0) {
      const waiters = this.#drainWaiters;
      this.#drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}
