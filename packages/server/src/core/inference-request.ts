/**
 * A validated inference request on its way through a scheduler into a backend, and the promise
 * of its response. Implements both what schedulers need (`ScheduledRequest`) and what backends
 * see (`BackendRequest`), so nothing is converted per request on the way down.
 *
 * Two modes. Without `onResponse` the request takes exactly one data response (`delivered`). With `onResponse` (decoupled models, models-and-scheduling.md §8.1) it takes any
 * number, each handed to `onResponse` with its final flag as it comes, or, under
 * `deliverAfter`, once the previous request was delivered (preserve_ordering, §4.7); the request
 * completes with its final flag and `delivered` then settles with no value.
 */
import { NereidError, toNereidError, type ParameterValue } from '@nereid/protocol';
import type { BackendResponse, BackendTensor } from '../backends/spi.js';
import type { Trace } from '../observability/trace.js';
import type { RequestTimes, ResponseRecord, ScheduledRequest } from '../scheduling/scheduler.js';

/** Default response timeout of decoupled models (`ServerOptions.decoupledResponseTimeoutMs`). */
export const DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS = 300_000;

/** Receives the responses of a streaming request, in order; `response` null: flags only. */
export type ResponseSink = (response: BackendResponse | null, final: boolean) => void;

export interface InferenceRequestInit {
  id: string;
  model: string;
  inputs: ReadonlyMap<string, BackendTensor>;
  requestedOutputs: readonly string[];
  /** `BackendRequest.outputBuffers`. */
  outputBuffers?: ReadonlyMap<string, Uint8Array>;
  parameters: Readonly<Record<string, ParameterValue>>;
  batchSize: number;
  priority: number;
  timeoutUs: number;
  /** Sequence parameters (protocol.md §3.12); default: not part of a sequence. */
  correlationId?: bigint | string;
  sequenceStart?: boolean;
  sequenceEnd?: boolean;
  signal: AbortSignal;
  requestTime: bigint;
  /** Streaming mode: every response goes here (see the file comment). */
  onResponse?: ResponseSink;
  /**
   * Streaming mode: once the model's `execute` returned without the final response, the longest
   * the request may go without a response before it fails with RESPONSE_TIMEOUT (0: no limit).
   */
  responseTimeoutMs?: number;
}

const ignore = (): void => undefined;

export class InferenceRequest implements ScheduledRequest {
  readonly id: string;
  readonly model: string;
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  readonly requestedOutputs: readonly string[];
  readonly outputBuffers: ReadonlyMap<string, Uint8Array> | undefined;
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly batchSize: number;
  readonly priority: number;
  readonly timeoutUs: number;
  readonly correlationId: bigint | string;
  readonly sequenceStart: boolean;
  readonly sequenceEnd: boolean;
  readonly signal: AbortSignal;
  readonly times: RequestTimes;
  /** Set by the facade when the request is traced. */
  trace: Trace | undefined = undefined;
  /**
   * Settles with the request's one data response (streaming mode: with nothing), or rejects with its error, once the scheduler
   * lets it (`deliverAfter`). The same promise from construction on: callers take it as soon as
   * the request is enqueued, before the scheduler has dequeued it.
   */
  readonly delivered: Promise<BackendResponse>;
  /** Every response the backend sent, errors included, with when it came (§9 response_stats). */
  readonly responses: ResponseRecord[] = [];

  #completed = false;
  #completedAt = 0n;
  #error: NereidError | undefined;
  #data: BackendResponse | undefined;
  #callbacks: (() => void)[] | undefined;
  /** What delivery waits for (`deliverAfter`); read when the response settles. */
  #after: Promise<unknown> | undefined;
  #resolve!: (r: BackendResponse) => void;
  #reject!: (e: NereidError) => void;
  readonly #sink: ResponseSink | undefined;
  readonly #responseTimeoutMs: number;
  #timer: NodeJS.Timeout | undefined;
  /** Streaming responses held until the previous request was delivered (`deliverAfter`). */
  #held: { response: BackendResponse | null; final: boolean }[] | undefined;

  constructor(init: InferenceRequestInit) {
    this.id = init.id;
    this.model = init.model;
    this.inputs = init.inputs;
    this.requestedOutputs = init.requestedOutputs;
    this.outputBuffers = init.outputBuffers;
    this.parameters = init.parameters;
    this.batchSize = init.batchSize;
    this.priority = init.priority;
    this.timeoutUs = init.timeoutUs;
    this.correlationId = init.correlationId ?? 0n;
    this.sequenceStart = init.sequenceStart ?? false;
    this.sequenceEnd = init.sequenceEnd ?? false;
    this.signal = init.signal;
    this.#sink = init.onResponse;
    this.#responseTimeoutMs = init.responseTimeoutMs ?? 0;
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
    const at = process.hrtime.bigint();
    if (response instanceof Error) {
      // A plain Error from a custom backend is accepted as a failure too.
      const error =
        response instanceof NereidError ? response : toNereidError(response, 'BACKEND_ERROR', `model '${this.model}' failed request '${this.id}'`);
      this.responses.push({ at, kind: error.kind === 'CANCELLED' ? 'cancel' : 'error' });
      this.#finish(error);
      return;
    }
    if (response === null && !final) return;
    this.responses.push({ at, kind: response === null || response.outputs.length === 0 ? 'empty' : 'data' });
    if (this.#sink !== undefined) {
      this.#emit(response, final);
      if (final) this.#finish(undefined);
      else if (this.#timer !== undefined) this.#timer.refresh();
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

  #emit(response: BackendResponse | null, final: boolean): void {
    if (this.#held !== undefined) this.#held.push({ response, final });
    else this.#sink!(response, final);
  }

  /**
   * The instance's `execute` returned. A streaming request still without its final response is
   * from now on bounded by the response timeout, restarted by every response.
   */
  executeReturned(): void {
    if (this.#completed || this.#sink === undefined || this.#responseTimeoutMs <= 0 || this.#timer !== undefined) return;
    const ms = this.#responseTimeoutMs;
    this.#timer = setTimeout(() => {
      this.fail(
        new NereidError(
          'RESPONSE_TIMEOUT',
          `model '${this.model}' sent no response for request '${this.id}' in ${ms} ms and has not sent its final response; ` +
            `a decoupled model must end every request with a final response (respond(response or null, true)), ` +
            `or raise the server's decoupled response timeout (--decoupled-response-timeout-secs)`,
        ),
      );
    }, ms);
    this.#timer.unref();
  }

  #finish(error: NereidError | undefined): void {
    this.#completed = true;
    this.#completedAt = process.hrtime.bigint();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
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
    else this.#resolve(this.#data as BackendResponse);
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
    if (this.#sink === undefined) return;
    const held: { response: BackendResponse | null; final: boolean }[] = [];
    this.#held = held;
    // Registered before `delivered` waits on `previous`: held responses reach the sink first.
    const release = () => {
      this.#held = undefined;
      for (const r of held) this.#sink!(r.response, r.final);
    };
    previous.then(release, release);
  }
}
