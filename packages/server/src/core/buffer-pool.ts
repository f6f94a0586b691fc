import { giveSlab, takeSlab } from './slabs.js';

/**
 * A pool of large `ArrayBuffer`s reused across requests, so that a hot path which must copy
 * megabytes per request does not also allocate them: a fresh large buffer costs page faults on
 * first touch and, as external memory, drives V8 into full collections.
 *
 * Ownership: `take` hands a buffer to the caller alone; the caller gives it back with `give` once
 * nothing can read or write it any more (for a transferred buffer: once it has come back). A
 * buffer that is never given back is simply garbage collected (not a slab: see `shared`). The
 * pool keeps at most `maxBytes` of idle buffers; buffers below `minBytes` are not worth pooling
 * and are allocated fresh.
 */
export interface BufferPoolOptions {
  /**
   * Fresh buffers are slabs (`slabs.ts`: memory other threads of the process can view by id)
   * when the native addon is available, and dropped ones are given back to the slabs. Every
   * buffer taken from such a pool must be given back to it: a slab that never is stays taken.
   */
  shared?: boolean;
  /** Smallest request served from the pool (smaller ones get a fresh buffer). Default 64 KiB. */
  minBytes?: number;
  /** Most idle bytes kept. Default 256 MiB. */
  maxBytes?: number;
}

const NONE: readonly ArrayBuffer[] = Object.freeze([]);

export class BufferPool {
  readonly #minBytes: number;
  readonly #maxBytes: number;
  readonly #shared: boolean;
  /** Idle buffers, smallest first. */
  #idle: ArrayBuffer[] = [];
  #idleBytes = 0;

  constructor(options: BufferPoolOptions = {}) {
    this.#minBytes = options.minBytes ?? 64 * 1024;
    this.#maxBytes = options.maxBytes ?? 256 * 1024 * 1024;
    this.#shared = options.shared ?? false;
  }

  /** Smallest request served from the pool; smaller ones gain nothing from it. */
  get minBytes(): number {
    return this.#minBytes;
  }

  /** Idle bytes held. */
  get idleBytes(): number {
    return this.#idleBytes;
  }

  /**
   * A buffer of at least `size` bytes (contents undefined), owned by the caller until `give`.
   * An idle buffer is reused when it is no more than twice as large as asked.
   */
  take(size: number): ArrayBuffer {
    const idle = this.takeIdle(size);
    if (idle !== undefined) return idle;
    const slab = this.#shared && size >= this.#minBytes ? takeSlab(size) : undefined;
    if (slab !== undefined) return slab;
    // Unpooled, so that the whole ArrayBuffer is this tensor's own and may be transferred.
    const fresh = Buffer.allocUnsafeSlow(size);
    return fresh.buffer as ArrayBuffer;
  }

  /** Like `take`, but only an idle buffer: undefined when none fits. */
  takeIdle(size: number): ArrayBuffer | undefined {
    if (size < this.#minBytes) return undefined;
    const idle = this.#idle;
    for (let i = 0; i < idle.length; i++) {
      const buffer = idle[i]!;
      if (buffer.byteLength < size) continue;
      if (buffer.byteLength > 2 * size) break;
      idle.splice(i, 1);
      this.#idleBytes -= buffer.byteLength;
      return buffer;
    }
    return undefined;
  }

  /** Takes every idle buffer out of the pool (to hand them to another owner, e.g. a worker). */
  drain(): readonly ArrayBuffer[] {
    if (this.#idle.length === 0) return NONE;
    const idle = this.#idle;
    this.#idle = [];
    this.#idleBytes = 0;
    return idle;
  }

  /** Returns a buffer taken from this pool (or any buffer the caller owns alone) for reuse. */
  give(buffer: ArrayBuffer): void {
    const size = buffer.byteLength;
    if (size < this.#minBytes || size === 0) return;
    if (this.#idleBytes + size > this.#maxBytes) {
      // Keeps the most recently used sizes: drops the largest idle buffers to make room.
      while (this.#idle.length > 0 && this.#idleBytes + size > this.#maxBytes) {
        const dropped = this.#idle.pop()!;
        this.#idleBytes -= dropped.byteLength;
        giveSlab(dropped);
      }
      if (size > this.#maxBytes) {
        giveSlab(buffer);
        return;
      }
    }
    let i = 0;
    while (i < this.#idle.length && this.#idle[i]!.byteLength < size) i++;
    this.#idle.splice(i, 0, buffer);
    this.#idleBytes += size;
  }
}

/** A pooled buffer lent out as views; it goes back to its pool when every view was returned. */
interface Loan {
  readonly pool: BufferPool;
  readonly buffer: ArrayBuffer;
  outstanding: number;
}

/**
 * Where a lent view keeps its loan: a symbol-keyed property of the view itself. A WeakMap keyed
 * by the views would do the same without touching them, but V8's young-generation collector
 * keeps WeakMap entries alive, so every lent buffer that is never returned would survive until
 * a full collection, and large external memory waiting for full collections is what this pool
 * exists to avoid.
 */
const LOAN: unique symbol = Symbol('nereid.bufferLoan');

interface LentView extends Uint8Array {
  [LOAN]?: Loan | undefined;
}

/**
 * Lends `buffer` (taken from `pool`) out as `views`, each over part of it, for as long as any of
 * them may be read. Every holder that is the last reader of a view hands it back with
 * `returnView`; once all views are back the buffer returns to the pool. A view that is never
 * returned (kept as sequence state, turned into another tensor, dropped by an embedder) keeps
 * the buffer out of the pool: it is then garbage collected like any other, so forgetting to
 * return a view costs a reuse, never correctness.
 *
 * Contract for callers of `returnView`: after it, the view's bytes may change at any moment, so
 * only the final consumer of a response (the frontend once the bytes were written out, the
 * shared-memory delivery once they were copied into a region) returns views.
 */
export function lendViews(pool: BufferPool, buffer: ArrayBuffer, views: readonly Uint8Array[]): void {
  const loan: Loan = { pool, buffer, outstanding: 0 };
  for (const view of views as readonly LentView[]) {
    if (view.buffer !== buffer || view[LOAN] !== undefined) continue;
    view[LOAN] = loan;
    loan.outstanding++;
  }
  if (loan.outstanding === 0) pool.give(buffer);
}

/** Whether `view` is lent by `lendViews` and not returned yet. */
export function isLent(view: Uint8Array): boolean {
  return (view as LentView)[LOAN] !== undefined;
}

/** Returns a view lent by `lendViews` (any other view is ignored; a second return too). */
export function returnView(view: Uint8Array): void {
  const lent = view as LentView;
  const loan = lent[LOAN];
  if (loan === undefined) return;
  lent[LOAN] = undefined;
  if (--loan.outstanding === 0) loan.pool.give(loan.buffer);
}
