/**
 * `ModelStreamInfer` (protocol.md §4.7): a bidirectional stream on which every request gets its
 * response(s). Errors travel in-band as `error_message` and the stream stays open, unless the
 * client asked for strict error mode (`triton_grpc_error: true` metadata), where the first error
 * ends the stream with its status.
 *
 * Each request owns a slot in arrival order. Responses of non-decoupled models are released in
 * that order even when they complete out of order; a decoupled model's responses (several per
 * request) will be written as they come through the same slot mechanism.
 */
import { setMaxListeners } from 'node:events';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import { toNereidError, type pb } from '@nereid/protocol';
import type { Server } from '../../core/server.js';
import type { Logger } from '../../observability/logger.js';
import { decodeInferRequest, encodeInferResponse } from './infer-codec.js';
import { grpcError } from './status.js';

interface Slot {
  message: pb.ModelStreamInferResponse | undefined;
  /** The error of a failed request (strict mode ends the stream with it). */
  error: ReturnType<typeof toNereidError> | undefined;
}

const FINAL = { triton_final_response: { bool_param: true } };

function errorResponse(message: string, id: string, model = '', version = ''): pb.ModelStreamInferResponse {
  return {
    error_message: message,
    infer_response: { model_name: model, model_version: version, id, parameters: {}, outputs: [], raw_output_contents: [] },
  };
}

export class InferStream {
  readonly #server: Server;
  readonly #call: ServerDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>;
  readonly #logger: Logger;
  readonly #abort = new AbortController();
  readonly #strict: boolean;
  readonly #slots: Slot[] = [];
  #clientDone = false;
  /** The server is shutting down: end the stream once every request so far is answered. */
  #serverDone = false;
  #closed = false;
  readonly #onClosed: (() => void) | undefined;

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
   * Shutdown: ends the stream with OK as soon as every request received so far is answered
   * (requests that arrive meanwhile are answered too, with the server's refusal once it has
   * stopped), unless the client ends it first.
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
    const slot: Slot = { message: undefined, error: undefined };
    this.#slots.push(slot);
    void this.#run(request).then(
      (message) => {
        slot.message = message;
        this.#flush();
      },
      (err: unknown) => {
        const error = toNereidError(err);
        slot.error = error;
        const issued = error.code === 'BACKEND_ERROR' || error.code === 'REQUEST_CANCELLED';
        slot.message = issued
          ? errorResponse(error.message, request.id, request.model_name, request.model_version)
          : errorResponse(error.message, request.id);
        this.#flush();
      },
    );
  }

  async #run(request: pb.ModelInferRequest): Promise<pb.ModelStreamInferResponse> {
    const decoded = decodeInferRequest(request);
    const response = await this.#server.infer(decoded, { signal: this.#abort.signal });
    return { error_message: '', infer_response: encodeInferResponse(response, FINAL) };
  }

  /** Writes finished responses in request order; ends the call once the client is done. */
  #flush(): void {
    if (this.#closed) return;
    while (this.#slots.length > 0 && this.#slots[0]!.message !== undefined) {
      const slot = this.#slots.shift()!;
      if (slot.error !== undefined && this.#strict) {
        this.#closed = true;
        this.#abort.abort();
        this.#call.emit('error', grpcError(slot.error));
        return;
      }
      try {
        this.#call.write(slot.message!);
      } catch (err) {
        this.#logger.error(`ModelStreamInfer: could not write a response: ${toNereidError(err).message}`);
        this.#close();
        return;
      }
    }
    if ((this.#clientDone || this.#serverDone) && this.#slots.length === 0) {
      this.#closed = true;
      this.#call.end();
    }
  }
}
