/**
 * The controllers' work queue: keys (`namespace/name`) are deduplicated while waiting, a key is
 * never processed by two workers at once (a key added while it is being processed runs again
 * once the first run ends), failures are retried with per-key exponential backoff, and a
 * handler may ask to run again after a delay (periodic re-checks).
 */

/** Exponential backoff with full jitter off: base·2^n, capped. */
export class Backoff {
  #base: number;
  #max: number;
  #failures = 0;

  constructor(baseMs: number, maxMs: number) {
    this.#base = baseMs;
    this.#max = maxMs;
  }

  next(): number {
    const delay = Math.min(this.#max, this.#base * 2 ** this.#failures);
    this.#failures = Math.min(this.#failures + 1, 30);
    return delay;
  }

  reset(): void {
    this.#failures = 0;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** What a handler returns: nothing (done), or a delay after which the key runs again. */
export type ReconcileResult = void | { requeueAfterMs: number };

export interface WorkQueueOptions {
  /** Workers processing different keys at once (default 2). */
  concurrency?: number;
  /** First retry delay after a failure (default 100 ms), doubling per consecutive failure of a key. */
  retryBaseMs?: number;
  /** Longest retry delay (default 60 s). */
  retryMaxMs?: number;
  /** Hold keys until `resume()` (e.g. until the informers' caches have synced). */
  paused?: boolean;
  /** Called after each run of a key: its result and duration. */
  onResult?: (key: string, result: 'success' | 'error' | 'requeue', seconds: number, error?: unknown) => void;
}

export class WorkQueue {
  #handler: (key: string) => Promise<ReconcileResult>;
  #options: Required<Omit<WorkQueueOptions, 'onResult' | 'paused'>> & Pick<WorkQueueOptions, 'onResult'>;
  #paused: boolean;
  /** Keys waiting to run, in order. */
  #queue: string[] = [];
  #queued = new Set<string>();
  #processing = new Set<string>();
  /** Keys added while processing: they run again when the current run ends. */
  #dirty = new Set<string>();
  #timers = new Map<string, NodeJS.Timeout>();
  #failures = new Map<string, number>();
  #active = 0;
  #stopped = false;
  #idle: (() => void)[] = [];

  constructor(handler: (key: string) => Promise<ReconcileResult>, options: WorkQueueOptions = {}) {
    this.#handler = handler;
    this.#options = {
      concurrency: options.concurrency ?? 2,
      retryBaseMs: options.retryBaseMs ?? 100,
      retryMaxMs: options.retryMaxMs ?? 60_000,
      onResult: options.onResult,
    };
    this.#paused = options.paused ?? false;
  }

  resume(): void {
    this.#paused = false;
    this.#pump();
  }

  /** Keys waiting or delayed (not counting those being processed). */
  get depth(): number {
    return this.#queue.length;
  }

  add(key: string): void {
    if (this.#stopped) return;
    const timer = this.#timers.get(key);
    if (timer) {
      clearTimeout(timer);
      this.#timers.delete(key);
    }
    if (this.#processing.has(key)) {
      this.#dirty.add(key);
      return;
    }
    if (this.#queued.has(key)) return;
    this.#queued.add(key);
    this.#queue.push(key);
    this.#pump();
  }

  /** Adds `key` after `ms`, unless it is added sooner; an earlier pending delay wins. */
  addAfter(key: string, ms: number): void {
    if (this.#stopped || this.#queued.has(key)) return;
    const existing = this.#timers.get(key);
    if (existing) return;
    const timer = setTimeout(() => {
      this.#timers.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.#timers.set(key, timer);
  }

  /** The delay before the next retry of `key`, counting one more failure. */
  retryDelay(key: string): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    return Math.min(this.#options.retryMaxMs, this.#options.retryBaseMs * 2 ** failures);
  }

  /** Stops handing out keys and drops pending ones; resolves when running handlers end. */
  async shutdown(): Promise<void> {
    this.#stopped = true;
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
    this.#queue = [];
    this.#queued.clear();
    if (this.#active > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
  }

  #pump(): void {
    while (!this.#stopped && !this.#paused && this.#active < this.#options.concurrency) {
      const index = this.#queue.findIndex((key) => !this.#processing.has(key));
      if (index < 0) return;
      const [key] = this.#queue.splice(index, 1);
      this.#queued.delete(key);
      this.#processing.add(key);
      this.#active++;
      void this.#run(key);
    }
  }

  async #run(key: string): Promise<void> {
    const started = performance.now();
    let result: ReconcileResult = undefined;
    let error: unknown;
    let failed = false;
    try {
      result = await this.#handler(key);
    } catch (err) {
      failed = true;
      error = err;
    }
    const seconds = (performance.now() - started) / 1000;
    this.#processing.delete(key);
    this.#active--;
    if (failed) {
      this.#options.onResult?.(key, 'error', seconds, error);
      if (this.#dirty.delete(key)) this.add(key);
      else this.addAfter(key, this.retryDelay(key));
    } else {
      this.#failures.delete(key);
      this.#options.onResult?.(key, result ? 'requeue' : 'success', seconds);
      if (this.#dirty.delete(key)) this.add(key);
      else if (result) this.addAfter(key, result.requeueAfterMs);
    }
    if (this.#active === 0 && this.#stopped) for (const resolve of this.#idle.splice(0)) resolve();
    this.#pump();
  }
}
