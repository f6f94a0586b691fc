/**
 * The default scheduler (models-and-scheduling.md §4.1): every request is its own batch, queued
 * FIFO for the model; the next idle instance takes the oldest. A request may still carry its own
 * batch size > 1. No priorities, queue policies or delays.
 */
import { NereidError } from '@nereid/protocol';
import type { InstanceRunner } from './instance-runner.js';
import type { ScheduledRequest, Scheduler } from './scheduler.js';
import { RequestQueue } from './request-queue.js';

export class DirectScheduler implements Scheduler {
  readonly #model: string;
  readonly #idle: InstanceRunner[];
  readonly #queue = new RequestQueue();
  #executing = 0;
  #stopped = false;
  #drainWaiters: (() => void)[] = [];

  /** @param instances the instances that take work (passive ones excluded) */
  constructor(model: string, instances: readonly InstanceRunner[]) {
    this.#model = model;
    this.#idle = [...instances].reverse();
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
      return;
    }
    request.times.queue = process.hrtime.bigint();
    this.#queue.push(request, () => {
      request.fail(new NereidError('REQUEST_CANCELLED', `request '${request.id}' for model '${this.#model}' was cancelled while queued`));
      this.#settle();
    });
    this.#dispatch();
  }

  stop(): void {
    this.#stopped = true;
  }

  drain(): Promise<void> {
    if (this.inflightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  #dispatch(): void {
    while (this.#idle.length > 0) {
      const request = this.#queue.shift();
      if (request === undefined) return;
      const runner = this.#idle.pop()!;
      this.#executing++;
      void runner.run([request]).then(() => {
        this.#executing--;
        this.#idle.push(runner);
        this.#dispatch();
        this.#settle();
      });
    }
  }

  #settle(): void {
    if (this.inflightCount === 0 && this.#drainWaiters.length > 0) {
      const waiters = this.#drainWaiters;
      this.#drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}
