/**
 * The requests in flight on one `ModelStreamInfer` stream and when each is complete
 * (protocol.md §4.7, perf-and-analyzer.md §1.1).
 *
 * A stream carries responses of every request sent on it, in whatever order the server finishes
 * them; each names its request by the id the request carried. A request is complete at:
 * - an error response (in-band `error_message`, or one the client could not decode);
 * - its final response: `triton_final_response` true, or absent (a non-decoupled model's only
 *   response; Triton 2.51 sets it true on a stream anyway). A decoupled model's responses carry
 *   it false, and the model may end a request with a flags-only final that has no outputs: the
 *   server sends that as an empty final response only when the request asked for one with
 *   `triton_enable_empty_final_response`. Every stream request must ask (as perf_analyzer does),
 *   or such a request never completes and its concurrency slot stalls.
 */
import type { Sent } from './transport.js';

/** One response message of a stream, as `GrpcInferStream` yields it. */
export interface StreamResponse {
  id: string;
  final: boolean;
  /** Present for a response with outputs; absent for an error and an empty final response. */
  result?: unknown;
  error?: Error;
}

interface Pending {
  responses: number;
  resolve: (s: Sent) => void;
  reject: (e: unknown) => void;
}

/**
 * Correlates a stream's responses with its requests. One instance per stream; not shared.
 *
 * Contract: `open` gives each request a fresh id, unique on this stream; `settle` is called with
 * every response in arrival order and completes at most one request; `failAll` rejects every
 * request still in flight (the stream failed or ended) and leaves the instance usable.
 */
export class StreamRequests {
  #next = 0;
  readonly #pending = new Map<string, Pending>();

  /** Requests sent and not complete. */
  get size(): number {
    return this.#pending.size;
  }

  /** Registers a new request: its id, and a promise that settles when it is complete. */
  open(): { id: string; done: Promise<Sent> } {
    const id = String(++this.#next);
    const done = new Promise<Sent>((resolve, reject) => {
      this.#pending.set(id, { responses: 0, resolve, reject });
    });
    return { id, done };
  }

  /** Completes request `id` with `err` (its send failed); nothing if it is not in flight. */
  abandon(id: string, err: unknown): void {
    const p = this.#pending.get(id);
    if (p === undefined) return;
    this.#pending.delete(id);
    p.reject(err);
  }

  /**
   * Accounts for one response. Returns false when it names no request in flight (ignored). A
   * response without an id (a server that does not echo ids) goes to the oldest request in flight.
   */
  settle(r: StreamResponse): boolean {
    const id = r.id === '' ? this.#pending.keys().next().value : r.id;
    const p = id === undefined ? undefined : this.#pending.get(id);
    if (p === undefined) return false;
    if (r.result !== undefined) p.responses++;
    if (r.error !== undefined) {
      this.#pending.delete(id!);
      p.reject(r.error);
    } else if (r.final) {
      this.#pending.delete(id!);
      p.resolve({ responses: p.responses, sendMs: 0, recvMs: 0 });
    }
    return true;
  }

  /** Rejects every request in flight with `err`. */
  failAll(err: unknown): void {
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) p.reject(err);
  }
}
