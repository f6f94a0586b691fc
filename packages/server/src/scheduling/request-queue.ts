/**
 * A FIFO of scheduled requests that removes a request as soon as its signal aborts (cancelled
 * while queued) and tells the owner through the callback given at push time.
 */
import { NEVER_ABORTED } from '../backends/spi.js';
import { watchAbort } from '../core/abort-watch.js';
import type { ScheduledRequest } from './scheduler.js';

interface Entry {
  request: ScheduledRequest;
  /** Stops watching the request's signal. */
  unwatch: (() => void) | undefined;
  removed: boolean;
}

export class RequestQueue {
  /** Slots before `#head` are taken: cleared, so that a taken request is not kept reachable. */
  #entries: (Entry | undefined)[] = [];
  #head = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** Appends; `onCancel` runs (once) if the request's signal aborts while it is still queued. */
  push(request: ScheduledRequest, onCancel: () => void): void {
    const entry: Entry = { request, unwatch: undefined, removed: false };
    this.#entries.push(entry);
    this.#size++;
    if (request.signal === NEVER_ABORTED) return;
    entry.unwatch = watchAbort(request.signal, () => {
      if (entry.removed) return;
      entry.removed = true;
      this.#size--;
      onCancel();
    });
  }

  /** Removes and returns the oldest request still queued. */
  shift(): ScheduledRequest | undefined {
    while (this.#head < this.#entries.length) {
      const entry = this.#entries[this.#head]!;
      // Up to a thousand taken slots wait for the next compaction: each would keep its request,
      // and with it the request's tensors and response, alive through young-generation
      // collections (megabytes copied and promoted under load).
      this.#entries[this.#head++] = undefined;
      if (entry.removed) continue;
      entry.removed = true;
      this.#size--;
      entry.unwatch?.();
      this.#compact();
      return entry.request;
    }
    this.#compact();
    return undefined;
  }

  #compact(): void {
    if (this.#head > 1024 && this.#head * 2 > this.#entries.length) {
      this.#entries = this.#entries.slice(this.#head);
      this.#head = 0;
    } else if (this.#head === this.#entries.length) {
      this.#entries = [];
      this.#head = 0;
    }
  }
}
