/**
 * A validated inference request on its way through a scheduler into a backend, and the promise
 * of its response. Implements both what schedulers need (`ScheduledRequest`) and what backends
 * see (`BackendRequest`), so nothing is converted per request on the way down.
 */
import { NereidError, toNereidError, type ParameterValue } from '@nereid/protocol';
import type { BackendResponse, BackendTensor } from '../backends/spi.js';
import type { RequestTimes, ScheduledRequest } from '../scheduling/scheduler.js';

export interface InferenceRequestInit {
  id: string;
  model: string;
  inputs: ReadonlyMap<string, BackendTensor>;
  requestedOutputs: readonly string[];
  parameters: Readonly<Record<string, ParameterValue>>;
  batchSize: number;
  priority: number;
  timeoutUs: number;
  signal: AbortSignal;
  requestTime: bigint;
}

export class InferenceRequest implements ScheduledRequest {
  readonly id: string;
  readonly model: string;
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  readonly requestedOutputs: readonly string[];
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly batchSize: number;
  readonly priority: number;
  readonly timeoutUs: number;
  readonly signal: AbortSignal;
  readonly times: RequestTimes;
  /** Settles with the request's one data response, or rejects with its error. */
  readonly response: Promise<BackendResponse>;
  /**
   * `response`, released in order when the scheduler asked for it (`deliverAfter`). The same
   * promise from construction on: callers take it as soon as the request is enqueued, before the
   * scheduler has dequeued it.
   */
  readonly delivered: Promise<BackendResponse>;

  #completed = false;
  #completedAt = 0n;
  #error: NereidError | undefined;
  #data: BackendResponse | undefined;
  #callbacks: (() => void)[] | undefined;
  /** What delivery waits for (`deliverAfter`); read when the response settles. */
  #after: Promise<unknown> | undefined;
  #resolve!: (r: BackendResponse) => void;
  #reject!: (e: NereidError) => void;

  constructor(init: InferenceRequestInit) {
    this.id = init.id;
    this.model = init.model;
    this.inputs = init.inputs;
    this.requestedOutputs = init.requestedOutputs;
    this.parameters = init.parameters;
    this.batchSize = init.batchSize;
    this.priority = init.priority;
    this.timeoutUs = init.timeoutUs;
    this.signal = init.signal;
    this.times = {
      request: init.requestTime,
      queue: 0n,
      computeStart: 0n,
      computeInputEnd: 0n,
      computeOutputStart: 0n,
      computeEnd: 0n,
    };
    this.response = new Promise<BackendResponse>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.delivered = this.response.then(
      (data) => (this.#after === undefined ? data : this.#after.then(() => data, () => data)),
      (error: unknown) => {
        if (this.#after === undefined) throw error;
        return this.#after.then(
          () => Promise.reject(error),
          () => Promise.reject(error),
        );
      },
    );
    // Callers await `delivered`; an unobserved rejection must not crash the process meanwhile.
    this.delivered.catch(() => undefined);
  }

  get completed(): boolean {
    return this.#completed;
  }

  get completedAt(): bigint {
    return this.#completedAt;
  }

  get error(): NereidError | undefined {
    return this.#error;
  }

  respond(response: BackendResponse | NereidError | null, final = true): void {
    if (this.#completed) return;
    if (response instanceof Error) {
      // A plain Error from a custom backend is accepted as a failure too.
      this.#finish(toNereidError(response, 'BACKEND_ERROR', `model '${this.model}' failed request '${this.id}'`));
      return;
    }
    if (response !== null) {
      if (this.#data !== undefined) {
        this.#finish(
          new NereidError(
            'BACKEND_ERROR',
            `model '${this.model}' sent more than one response for request '${this.id}'; only decoupled models may do that`,
          ),
        );
        return;
      }
      this.#data = response;
    }
    if (!final) return;
    if (this.#data === undefined) {
      this.#finish(new NereidError('BACKEND_ERROR', `model '${this.model}' completed request '${this.id}' without sending a response`));
    } else {
      this.#finish(undefined);
    }
  }

  #finish(error: NereidError | undefined): void {
    this.#completed = true;
    this.#completedAt = process.hrtime.bigint();
    this.#error = error;
    if (error) this.#reject(error);
    else this.#resolve(this.#data!);
    const callbacks = this.#callbacks;
    this.#callbacks = undefined;
    if (callbacks) for (const cb of callbacks) cb();
  }

  fail(error: NereidError): void {
    this.respond(error, true);
  }

  onComplete(callback: () => void): void {
    if (this.#completed) callback();
    else (this.#callbacks ??= []).push(callback);
  }

  deliverAfter(previous: Promise<unknown>): void {
    this.#after = previous;
  }
}
