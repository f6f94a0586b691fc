/**
 * One `ModelStreamInfer` call seen from the client (protocol.md §4.7): requests go out with
 * `send`, and every response message comes back through the async iterator, in the order the
 * server wrote them.
 */
import { GrpcStatus, NereidError, toNereidError, type pb } from '@nereid/protocol';
import type { ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import { InferenceServerError, grpcServerError, httpStatusOfGrpc } from './errors.js';
import { decodeInferResponse, encodeInferRequest, isFinalResponse } from './grpc-codec.js';
import type { BaseInferOptions } from './infer-options.js';
import type { InferResult } from './infer-result.js';

/** One request sent on a stream. */
export interface GrpcStreamInferOptions extends Omit<BaseInferOptions, 'signal'> {
  /**
   * Ask for an empty final response when a decoupled model finishes a request without one
   * (request parameter `triton_enable_empty_final_response`); it arrives as `{ final: true }`
   * without `result`.
   */
  enableEmptyFinalResponse?: boolean;
}

/** One response message of a stream. */
export interface StreamResult {
  /** The id of the request this answers ('' when the request had none). */
  id: string;
  /**
   * Whether this is the last response of its request (`triton_final_response`; always true for
   * non-decoupled models and for errors).
   */
  final: boolean;
  /** The response; absent for an error and for an empty final response. */
  result?: InferResult;
  /**
   * The request's failure: its in-band `error_message` as an InferenceServerError (the stream does
   * not carry the error's category, so it reads as UNKNOWN, `grpcCode` 2), or a NereidError for a
   * response this client could not decode.
   */
  error?: Error;
}

type Call = ClientDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>;

/** Results held before the call is paused until the reader catches up. */
const HIGH_WATER_MARK = 64;

const EMPTY_FINAL = { triton_enable_empty_final_response: { bool_param: true } };

/**
 * A bidirectional inference stream. Made by `GrpcClient.stream()`.
 *
 * Contract:
 * - `send` encodes and writes one request (throwing NereidError, before anything is written, for
 *   data it cannot encode); writes are buffered by grpc-js in order.
 * - `end` half-closes: the server answers what is in flight and finishes the call, and the
 *   iteration then completes.
 * - `cancel` cancels the call now: the server cancels the requests in flight, results not yet read
 *   are dropped and the iteration completes. Leaving a `for await` loop early cancels too.
 * - A call that ends with an error status (deadline, strict error mode, lost connection) makes the
 *   iteration throw an InferenceServerError after the results received before it; the stream's
 *   `signal`, once aborted, cancels the call and makes the iteration throw the signal's reason.
 * - One reader: results are delivered once, to whichever `next()` asks first.
 */
export class GrpcInferStream implements AsyncIterableIterator<StreamResult> {
  readonly #call: Call;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort: () => void;
  readonly #results: StreamResult[] = [];
  #waiter: { resolve: (r: IteratorResult<StreamResult>) => void; reject: (err: unknown) => void } | undefined;
  /** The call's readable side has ended (every message received has been queued). */
  #ended = false;
  /** Why the iteration must throw once the queue is read, if it must. */
  #failure: unknown;
  /** Ended on our side: `cancel()`, `return()` or abort; nothing more is delivered but `#failure`. */
  #stopped = false;
  #halfClosed = false;
  #paused = false;
  /** The server's status has arrived: the call is over, whatever is still to be read. */
  #callDone = false;

  /** @internal Use `GrpcClient.stream()`. */
  constructor(call: Call, signal?: AbortSignal) {
    this.#call = call;
    this.#signal = signal;
    this.#onAbort = () => this.#stop(signal!.reason);
    call.on('data', (message: pb.ModelStreamInferResponse) => this.#push(toStreamResult(message)));
    call.on('status', () => {
      this.#callDone = true;
    });
    call.on('error', (err: ServiceError) => {
      if (this.#stopped) return;
      this.#failure = typeof err.code === 'number' ? grpcServerError(err.code, err.details, err) : toNereidError(err);
      this.#settle();
    });
    call.on('end', () => {
      this.#ended = true;
      this.#signal?.removeEventListener('abort', this.#onAbort);
      this.#settle();
    });
    if (signal !== undefined) {
      if (signal.aborted) this.#stop(signal.reason);
      else signal.addEventListener('abort', this.#onAbort, { once: true });
    }
  }

  /**
   * Sends one request. Throws NereidError if the request cannot be encoded, or if the stream was
   * ended or cancelled.
   */
  send(options: GrpcStreamInferOptions): void {
    if (this.#halfClosed || this.#stopped || this.#callDone) {
      throw new NereidError('UNAVAILABLE', 'this inference stream has been ended or cancelled; open a new one');
    }
    this.#call.write(encodeInferRequest(options, options.enableEmptyFinalResponse ? EMPTY_FINAL : undefined));
  }

  /** Half-closes the stream: no more requests; the iteration completes after the last response. */
  end(): void {
    if (this.#halfClosed || this.#stopped) return;
    this.#halfClosed = true;
    this.#call.end();
  }

  /** Cancels the call and every request in flight; the iteration completes. */
  cancel(): void {
    this.#stop(undefined);
  }

  next(): Promise<IteratorResult<StreamResult>> {
    const result = this.#results.shift();
    if (result !== undefined) {
      if (this.#paused && this.#results.length < HIGH_WATER_MARK / 2) {
        this.#paused = false;
        this.#call.resume();
      }
      return Promise.resolve({ value: result, done: false });
    }
    if (this.#finished()) return this.#finish();
    if (this.#waiter !== undefined) return Promise.reject(new NereidError('INTERNAL', 'an inference stream has one reader'));
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  /** Leaving a `for await` loop early: cancels the call. */
  return(): Promise<IteratorResult<StreamResult>> {
    this.cancel();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  #push(result: StreamResult): void {
    if (this.#stopped) return;
    const waiter = this.#waiter;
    if (waiter !== undefined) {
      this.#waiter = undefined;
      waiter.resolve({ value: result, done: false });
      return;
    }
    this.#results.push(result);
    if (!this.#paused && this.#results.length >= HIGH_WATER_MARK) {
      this.#paused = true;
      this.#call.pause();
    }
  }

  #stop(failure: unknown): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#failure = failure;
    this.#results.length = 0;
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#call.cancel();
    this.#settle();
  }

  #finished(): boolean {
    return this.#stopped || this.#ended;
  }

  /** Answers a waiting reader once nothing more can come. */
  #settle(): void {
    if (this.#waiter === undefined || this.#results.length > 0 || !this.#finished()) return;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    this.#finish().then(waiter.resolve, waiter.reject);
  }

  #finish(): Promise<IteratorResult<StreamResult>> {
    if (this.#failure !== undefined) {
      const failure = this.#failure;
      this.#failure = undefined;
      return Promise.reject(failure);
    }
    return Promise.resolve({ value: undefined, done: true });
  }
}

function toStreamResult(message: pb.ModelStreamInferResponse): StreamResult {
  const response = message.infer_response;
  const id = response?.id ?? '';
  try {
    return decodeStreamResponse(message, id);
  } catch (err) {
    return { id, final: true, error: toNereidError(err) };
  }
}

function decodeStreamResponse(message: pb.ModelStreamInferResponse, id: string): StreamResult {
  const response = message.infer_response;
  if (message.error_message !== '') {
    const error = new InferenceServerError(httpStatusOfGrpc(GrpcStatus.UNKNOWN), message.error_message, { grpcCode: GrpcStatus.UNKNOWN });
    return { id, final: true, error };
  }
  if (response === undefined) return { id, final: true };
  const final = isFinalResponse(response);
  // "No outputs and final" is the empty final response of protocol.md §4.7, not a result.
  if (final && response.outputs.length === 0) return { id, final };
  return { id, final, result: decodeInferResponse(response) };
}
