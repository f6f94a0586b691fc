/**
 * `ModelStreamInfer` (protocol.md §4.7): a bidirectional stream on which every request gets its
 * response(s). Errors travel in-band as `error_message` and the stream stays open, unless the
 * client asked for strict error mode (`triton_grpc_error: true` metadata), where the first error
 * ends the stream with its status.
 *
 * Ordering: a request for a non-decoupled model owns a slot in arrival order, and its one
 * response is written when every earlier slot has been; so is an error that refuses a request
 * before it is accepted. A decoupled model's responses are written as they are produced and
 * interleave with everything else (the client correlates them by `id`). Every response carries
 * `triton_final_response`; a decoupled model's flags-only final response is written only when the
 * request set `triton_enable_empty_final_response`. Cancelling the stream aborts the signal of
 * every request in flight.
 *
 * Backpressure: while the call's write buffer is full (the client reads slower than the server
 * answers), no further request is taken off the stream; HTTP/2 flow control then holds the
 * client's writes. Requests already taken are served and their responses buffered, so none is
 * lost, and reading resumes once the buffer has drained.
 */
import { setMaxListeners } from 'node:events';
import { clientErrorMessage, NereidError, toNereidError, whenEncoded, type pb } from '@nereid/protocol';
import type { Trace } from '../../observability/trace.js';
import type { Server } from '../../core/server.js';
import type { InferResponse, StreamAccepted, StreamResponse } from '../../core/types.js';
import type { Logger } from '../../observability/logger.js';
import { decodeInferRequest, encodeInferResponse } from './infer-codec.js';
import type { H2DuplexCall } from './h2-server.js';
import { grpcError } from './status.js';

/** What a stream needs of its call; both gRPC servers' bidirectional calls have it. */
type ServerDuplexStream<Req, Res> = Pick<H2DuplexCall<Req, Res>, 'metadata' | 'on' | 'once' | 'write' | 'pause' | 'resume' | 'end' | 'emit'>;

interface Slot {
  message: pb.ModelStreamInferResponse | undefined;
  /** The error of a failed request (strict mode ends the stream with it). */
  error: NereidError | undefined;
}

/** Triton's refusal of a gRPC request during shutdown. */
export const STOPPING_MESSAGE = 'GRPC server is shutting down and has stopped accepting new requests.';

const FINAL = { triton_final_response: { bool_param: true } };
const NOT_FINAL = { triton_final_response: { bool_param: false } };

function errorResponse(message: string, id: string, model = '', version = ''): pb.ModelStreamInferResponse {
  return {
    error_message: clientErrorMessage(message, 'body'),
    infer_response: { model_name: clientErrorMessage(model, 'body'), model_version: version, id, parameters: {}, outputs: [], raw_output_contents: [] },
  };
}

export class InferStream {
  readonly #server: Server;
  readonly #call: ServerDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>;
  readonly #logger: Logger;
  readonly #abort = new AbortController();
  readonly #strict: boolean;
  /** Requests answered in arrival order (non-decoupled models and refusals). */
  readonly #slots: Slot[] = [];
  /** Decoupled requests in flight (their responses are written as they come). */
  #unordered = 0;
  #clientDone = false;
  /** The server is shutting down: end the stream once every request so far is answered. */
  #serverDone = false;
  /**
   * Pending while a request was issued but is not queued yet (its inputs are being copied from a
   * CUDA shared-memory region): later requests are issued once it is, so that the stream's
   * requests reach their queues in the order they came. Other requests are queued within
   * `inferStream` and never set it.
   */
  #gate: Promise<void> | undefined;
  #closed = false;
  /** Reading paused until the call's write buffer drains. */
  #paused = false;
  readonly #onClosed: (() => void) | undefined;
  /** The client's W3C trace context from the stream's metadata: every request of the stream continues it. */
  readonly #traceparent: string | undefined;
  readonly #tracestate: string | undefined;

  /** @param onClosed called once, when the stream is over (ended, cancelled or failed) */
  constructor(
    server: Server,
    call: ServerDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>,
    logger: Logger,
    onClosed?: () => void,
  ) {
    this.#server = server;
    this.#call = call;
    this.#logger = logger;
    this.#onClosed = onClosed;
    // Every queued request of the stream listens to this one signal, and a stream may hold any
    // number: past ten, Node would warn of a listener leak.
    setMaxListeners(0, this.#abort.signal);
    const flag = call.metadata.get('triton_grpc_error')[0];
    this.#strict = typeof flag === 'string' && flag.toLowerCase() === 'true';
    const parent = call.metadata.get('traceparent')[0];
    const state = call.metadata.get('tracestate')[0];
    this.#traceparent = typeof parent === 'string' ? parent : undefined;
    this.#tracestate = typeof state === 'string' ? state : undefined;
    call.on('data', (request: pb.ModelInferRequest) => this.#onRequest(request));
    call.on('end', () => {
      this.#clientDone = true;
      this.#flush();
    });
    call.on('cancelled', () => this.#close());
    call.on('error', () => this.#close());
    call.on('close', () => this.#onClosed?.());
  }

  /**
   * Shutdown: requests that arrive from now on are refused in-band (UNAVAILABLE's "GRPC server is
   * shutting down…"); once every request received so far is answered, the stream ends: with OK
   * if the client had ended its side, otherwise with that UNAVAILABLE status, so a request the
   * client wrote while the stream was ending is known to be refused rather than lost.
   */
  finish(): void {
    this.#serverDone = true;
    this.#flush();
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#abort.abort();
  }

  #onRequest(request: pb.ModelInferRequest): void {
    if (this.#closed) return;
    // The request's clock starts when its message arrived (docs/protocol.md, statistics).
    const receivedAt = process.hrtime.bigint();
    let trace: Trace | undefined;
    if (this.#server.tracing.enabled) {
      trace = this.#server.tracing.sample(request.model_name, this.#traceparent !== undefined);
      if (trace !== undefined) {
        trace.stamp('GRPC_WAITREAD_START', receivedAt);
        if (this.#traceparent !== undefined) {
          trace.carrier = { traceparent: this.#traceparent };
          if (this.#tracestate !== undefined) trace.carrier.tracestate = this.#tracestate;
        }
      }
    }
    let slot: Slot | undefined = { message: undefined, error: undefined };
    this.#slots.push(slot);
    if (this.#serverDone) {
      const error = new NereidError('SERVER_STOPPING', STOPPING_MESSAGE);
      slot.message = errorResponse(error.message, request.id);
      slot.error = error;
      this.#flush();
      return;
    }
    let accepted: StreamAccepted | undefined;
    const emptyFinal = request.parameters['triton_enable_empty_final_response']?.bool_param === true;
    const settle = (s: Slot, message: pb.ModelStreamInferResponse, error?: NereidError) => {
      s.message = message;
      s.error = error;
      this.#flush();
    };
    let openGate: (() => void) | undefined;
    const onAccepted = (a: StreamAccepted) => {
      accepted = a;
      openGate?.();
      if (!a.decoupled) return;
      // Decoupled: no place in the order; responses go out as they come.
      this.#slots.splice(this.#slots.indexOf(slot!), 1);
      slot = undefined;
      this.#unordered++;
    };
    const onResponse = (r: StreamResponse) => {
      // A traced request's final response: handed to the stream between the two stamps.
      if (trace !== undefined && r.final) trace.stamp('GRPC_SEND_START');
      if (slot !== undefined) {
        settle(slot, this.#message(r.response!, FINAL));
        if (trace !== undefined) trace.stamp('GRPC_SEND_END');
        return;
      }
      if (r.response !== undefined) {
        this.#write(this.#message(r.response, r.final ? FINAL : NOT_FINAL));
      } else if (emptyFinal) {
        this.#write({
          error_message: '',
          infer_response: {
            model_name: request.model_name,
            model_version: request.model_version,
            id: request.id,
            parameters: FINAL,
            outputs: [],
            raw_output_contents: [],
          },
        });
      }
      if (trace !== undefined && r.final) trace.stamp('GRPC_SEND_END');
    };
    /** Issues the request; a promise while it is not queued yet (see `#gate`). */
    const issue = (): Promise<void> | undefined => {
      let run: Promise<void>;
      try {
        if (trace === undefined) {
          run = this.#server.inferStream(decodeInferRequest(request), { signal: this.#abort.signal, receivedAt, onAccepted, onResponse });
        } else {
          const decoded = decodeInferRequest(request);
          trace.stamp('GRPC_WAITREAD_END');
          run = this.#server.inferStream(decoded, { signal: this.#abort.signal, receivedAt, onAccepted, onResponse, trace });
        }
      } catch (err) {
        run = Promise.reject(err);
      }
      run.then(
        () => {
          trace?.end();
          if (slot === undefined) this.#settleUnordered();
        },
        (err: unknown) => {
          const error = toNereidError(err);
          if (trace !== undefined) {
            trace.error = error.message;
            trace.end();
          }
          // After the request was issued the message names the model and version (§4.7).
          const message =
            accepted === undefined
              ? errorResponse(error.message, request.id)
              : errorResponse(error.message, request.id, request.model_name, request.model_version);
          if (slot !== undefined) {
            settle(slot, message, error);
            return;
          }
          this.#writeError(message, error);
          this.#settleUnordered();
        },
      );
      if (accepted !== undefined) return undefined;
      return new Promise<void>((resolve) => {
        openGate = resolve;
        run.then(resolve, resolve);
      });
    };
    const gate = this.#gate === undefined ? issue() : this.#gate.then(issue);
    if (gate === undefined) return;
    this.#gate = gate;
    void gate.then(() => {
      if (this.#gate === gate) this.#gate = undefined;
    });
  }

  #settleUnordered(): void {
    this.#unordered--;
    this.#flush();
  }

  /** The stream message of a response; its pooled output buffers go back once the server encoded it. */
  #message(response: InferResponse, parameters: typeof FINAL | typeof NOT_FINAL): pb.ModelStreamInferResponse {
    const message = { error_message: '', infer_response: encodeInferResponse(response, parameters) };
    if (this.#server.holdsPooledOutputs(response)) whenEncoded(message, () => this.#server.recycleOutputs(response));
    return message;
  }

  /** Writes one message now (reading pauses while the write buffer is full); false once the stream is over. */
  #write(message: pb.ModelStreamInferResponse): boolean {
    if (this.#closed) return false;
    try {
      if (!this.#call.write(message) && !this.#paused) {
        this.#paused = true;
        this.#call.pause();
        this.#call.once('drain', this.#onDrain);
      }
      return true;
    } catch (err) {
      this.#logger.error(`ModelStreamInfer: could not write a response: ${toNereidError(err).message}`);
      this.#close();
      return false;
    }
  }

  readonly #onDrain = (): void => {
    this.#paused = false;
    if (!this.#closed) this.#call.resume();
  };

  /** An in-band error, or in strict mode the end of the stream with the error's status. */
  #writeError(message: pb.ModelStreamInferResponse, error: NereidError): boolean {
    if (this.#closed) return false;
    if (this.#strict) {
      this.#closed = true;
      this.#abort.abort();
      this.#call.emit('error', grpcError(error));
      return false;
    }
    return this.#write(message);
  }

  /** Writes finished ordered responses in request order; ends the call once the client is done. */
  #flush(): void {
    if (this.#closed) return;
    while (this.#slots.length > 0 && this.#slots[0]!.message !== undefined) {
      const slot = this.#slots.shift()!;
      const written = slot.error !== undefined ? this.#writeError(slot.message!, slot.error) : this.#write(slot.message!);
      if (!written) return;
    }
    if ((this.#clientDone || this.#serverDone) && this.#slots.length === 0 && this.#unordered === 0) {
      this.#closed = true;
      if (this.#clientDone) this.#call.end();
      else this.#call.emit('error', grpcError(new NereidError('SERVER_STOPPING', STOPPING_MESSAGE)));
    }
  }
}
