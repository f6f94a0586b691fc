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
  readonly signal: AbortSignal;
  readonly times: RequestTimes;
  /** Settles with the request's one data response, or rejects with its error. */
  readonly response: Promise<BackendResponse>;

  #completed = false;
  #data: BackendResponse | undefined;
  #resolve!: (r: BackendResponse) => void;
  #reject!: (e: NereidError) => void;

  constructor(init: InferenceRequestInit) {
    this.id = init.id;
    this.model = init.model;
    this.inputs = init.inputs;
    this.requestedOutputs = init.requestedOutputs;
    this.parameters = init.parameters;
    this.batchSize = init.batchSize;
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
    // Callers await `response`; an unobserved rejection must not crash the process meanwhile.
    this.response.catch(() => undefined);
  }

  get completed(): boolean {
    return this.#completed;
  }

  respond(response: BackendResponse | NereidError | null, final = true): void {
    if (this.#completed) return;
    if (response instanceof NereidError) {
      this.#completed = true;
      this.#reject(response);
      return;
    }
    if (response !== null) {
      if (this.#data !== undefined) {
        this.#completed = true;
        this.#reject(
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
    this.#completed = true;
    if (this.#data === undefined) {
      this.#reject(
        new NereidError('BACKEND_ERROR', `model '${this.model}' completed request '${this.id}' without sending a response`),
      );
    } else {
      this.#resolve(this.#data);
    }
  }

  fail(error: NereidError): void {
    this.respond(error, true);
  }
}
