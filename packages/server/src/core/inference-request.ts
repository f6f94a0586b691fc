/**
 * A validated inference request on its way through a scheduler into a backend, and the promise
 * of its response. Implements both what schedulers need (`ScheduledRequest`) and what backends
 * see (`BackendRequest`), so nothing is converted per request on the way down.
 */
import { NereidError, type ParameterValue } from '@nereid/protocol';
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

const ignore = (): void => undefined;

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
  /**
   * Settles with the request's one data response, or rejects with its error, once the scheduler
   * lets it (`deliverAfter`). The same promise from construction on: callers take it as soon as
   * the request is enqueued, before the scheduler has dequeued it.
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
    this.delivered = new Promise<BackendResponse>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    // Callers await `delivered`; an unobserved rejection must not crash the process meanwhile.
    this.delivered.catch(ignore);
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
    if (response instanceof NereidError) {
      this.#finish(response);
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
    const after = this.#after;
    if (after === undefined) this.#deliver();
    else {
      const deliver = () => this.#deliver();
      after.then(deliver, deliver);
    }
    const callbacks = this.#callbacks;
    this.#callbacks = undefined;
    if (callbacks) for (const cb of callbacks) cb();
  }

  #deliver(): void {
    if (this.#error) this.#reject(this.#error);
    else this.#resolve(this.#data!);
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
