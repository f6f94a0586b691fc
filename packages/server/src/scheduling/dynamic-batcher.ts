/**
 * The dynamic batcher (models-and-scheduling.md §4.2–§4.7): requests that arrive one by one are
 * combined into batches within a latency budget, by priority level and queue policy.
 *
 * Queue structure (§4.2): one FIFO per priority level (a single one when `priority_levels` is
 * 0), each with a normal part and a delayed part (requests whose timeout expired under DELAY).
 * Batches are taken in global order — level 1 normal, level 1 delayed, level 2 normal, … — and a
 * request is never skipped to find a compatible one (§4.4).
 *
 * A batch is formed when an instance can take it: an idle instance always; an instance that is
 * busy but can hold another batch (pipelined instances, at most two batches ahead) only when the
 * batch cannot grow any more (full, preferred maximum reached, next request does not fit, or the
 * delay expired) — so batches keep growing while every instance is busy. Batches are prepared
 * ahead only when the queue has no priority levels, timeouts or size limit (§4.4): a batch handed
 * to an instance escapes its queue timeouts, frees queue room and would hold up a later
 * higher-priority request.
 *
 * Preemption (preemption.ts, off by default): a model-wide limit on queued requests across levels
 * (`max_total_queue_size`), at which a request evicts a queued one of a lower level; and running
 * decoupled batches of a lower level stopped for a request that waits while every instance is
 * busy.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelDynamicBatching, ModelQueuePolicy } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import type { InstanceRunner } from './instance-runner.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import { NO_OBSERVER, type ScheduledRequest, type Scheduler, type SchedulerObserver } from './scheduler.js';
import { NO_PREEMPTION, queuedPreemptionError, runningPreemptionError, type PreemptionSettings } from './preemption.js';
import { clearPreciseTimer, PRECISE_BELOW_NS, PreciseTimer, setPreciseTimer, holdPreciseTimers } from './precise-timer.js';

/** Time source and timers, injectable for tests (a controllable clock). */
export interface BatcherClock {
  /** Monotonic nanoseconds. */
  now(): bigint;
  setTimer(callback: () => void, delayNs: bigint): unknown;
  clearTimer(handle: unknown): void;
}

/** setTimeout's longest delay; a longer one fires at once. Waking early only re-forms the batch. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The real clock. A wait shorter than 2 ms (a sub-millisecond `max_queue_delay_microseconds`, or
 * the rest of a longer one) uses a precise timer: setTimeout would round it up to a whole
 * millisecond and fire later still.
 */
export const SYSTEM_CLOCK: BatcherClock = {
  now: () => process.hrtime.bigint(),
  setTimer: (callback, delayNs) =>
    delayNs < PRECISE_BELOW_NS
      ? setPreciseTimer(callback, delayNs)
      : setTimeout(callback, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(Number(delayNs) / 1e6)))),
  clearTimer: (handle) => {
    if (handle instanceof PreciseTimer) clearPreciseTimer(handle);
    else clearTimeout(handle as NodeJS.Timeout);
  },
};

export interface DynamicBatcherOptions {
  model: string;
  /** The model's `max_batch_size` (0: every batch holds one request). */
  maxBatchSize: number;
  /** The normalised `dynamic_batching` section. */
  config: ModelDynamicBatching;
  /**
   * Inputs whose non-batch shape must be equal for requests to share a batch (dims with -1 and
   * not `allow_ragged_batch`, §4.5).
   */
  shapeCheckedInputs: readonly string[];
  /** The model has optional inputs: only requests providing the same inputs share a batch. */
  hasOptionalInputs: boolean;
  /** Instances that take work (passive ones excluded). */
  runners: readonly InstanceRunner[];
  observer?: SchedulerObserver;
  logger?: Logger;
  clock?: BatcherClock;
  /** The model's preemption parameters (default: none). */
  preemption?: PreemptionSettings;
}

type Place = 'normal' | 'delayed' | 'gone';

interface Entry {
  request: ScheduledRequest;
  level: Level;
  /** Monotonic ns after which the queue timeout expires; 0n: never. */
  expiry: bigint;
  /** When the request entered this batcher. */
  start: bigint;
  /** max(1, request batch size). */
  size: number;
  /** Compatibility key (§4.5): equal keys may share a batch. */
  key: string;
  place: Place;
  /** The queued entries of its request's signal (`DynamicBatcher.#watch`), when it has one. */
  watch: Watch | undefined;
  /** Neighbours in `watch`'s list. */
  prevWatched: Entry | undefined;
  nextWatched: Entry | undefined;
}

/**
 * The queued entries of one signal, as a list linked through the entries: linking and unlinking
 * allocate nothing (a Set shrinking as a stream's one queued request leaves it reallocates its
 * table each time, and that table lives as long as the stream).
 */
interface Watch {
  first: Entry | undefined;
}

class Level {
  readonly number: number;
  readonly policy: ModelQueuePolicy;
  normal: Entry[] = [];
  normalHead = 0;
  delayed: Entry[] = [];
  delayedHead = 0;
  /** Entries in either part. */
  size = 0;

  constructor(number: number, policy: ModelQueuePolicy) {
    this.number = number;
    this.policy = policy;
  }

  /** Drops entries that left the front of either part; an emptied part lets go of every entry (and so of its request's tensors) at once. */
  compact(): void {
    while (this.normalHead < this.normal.length && this.normal[this.normalHead]!.place !== 'normal') this.normalHead++;
    while (this.delayedHead < this.delayed.length && this.delayed[this.delayedHead]!.place !== 'delayed') this.delayedHead++;
    if (this.normalHead === this.normal.length) {
      this.normal.length = 0;
      this.normalHead = 0;
    } else if (this.normalHead > 64 && this.normalHead * 2 > this.normal.length) {
      this.normal = this.normal.slice(this.normalHead);
      this.normalHead = 0;
    }
    if (this.delayedHead === this.delayed.length) {
      this.delayed.length = 0;
      this.delayedHead = 0;
    } else if (this.delayedHead > 64 && this.delayedHead * 2 > this.delayed.length) {
      this.delayed = this.delayed.slice(this.delayedHead);
      this.delayedHead = 0;
    }
  }
}

const DEFAULT_POLICY: ModelQueuePolicy = {
  timeout_action: 'REJECT',
  default_timeout_microseconds: 0,
  allow_timeout_override: false,
  max_queue_size: 0,
};

/** A batch an instance is executing, tracked for running preemption. */
interface RunningBatch {
  readonly requests: readonly ScheduledRequest[];
  /** The priority level of each request. */
  readonly levels: readonly number[];
  /** The highest priority among them (the smallest level number). */
  readonly top: number;
  /** Dispatch order: among equals, the most recently started is preempted first. */
  readonly order: number;
  preempted: boolean;
}

type Decision =
  | { kind: 'execute'; entries: Entry[]; size: number; reason: string }
  | { kind: 'wait'; wakeAt: bigint }
  | { kind: 'none' };

export class DynamicBatcher implements Scheduler {
  readonly #model: string;
  readonly #mbs: number;
  readonly #preferred: ReadonlySet<number>;
  readonly #pmax: number;
  readonly #delayNs: bigint;
  readonly #preserveOrdering: boolean;
  readonly #levels: Level[];
  readonly #defaultLevel: Level;
  readonly #shapeChecked: readonly string[];
  readonly #hasOptional: boolean;
  #runners: InstanceRunner[];
  readonly #observer: SchedulerObserver;
  readonly #logger: Logger | undefined;
  readonly #clock: BatcherClock;
  /** Releases this batcher's hold on the precise timer's thread (a queue delay on the real clock). */
  #releaseTimers: (() => void) | undefined;
  /** Whether batches may be prepared ahead for busy instances (§4.4). */
  readonly #prefetch: boolean;
  readonly #preemption: PreemptionSettings;
  /** Batches executing, by instance (tracked only with running preemption; one per instance, as nothing is prefetched then). */
  readonly #running = new Map<InstanceRunner, RunningBatch>();
  #dispatched = 0;
  /** Preempted batches whose `execute` has not returned yet. */
  #preempting = 0;

  /** Queued entries by their request's signal (see `#watch`). */
  readonly #watched = new WeakMap<AbortSignal, Watch>();
  /** This batcher, as the signals' listeners hold it: a stream outliving its model must not keep it. */
  readonly #self = new WeakRef<DynamicBatcher>(this);
  #queued = 0;
  /** Rows (batch sizes) of the queued requests. */
  #queuedRows = 0;
  #executing = 0;
  #stopped = false;
  #timer: unknown;
  #timerAt = 0n;
  /**
   * No queued request expires before this time (expiry + 1 ns of the earliest one; 0n: none
   * can): purges while every instance is busy wait for it instead of scanning the queue on every
   * arrival. May be early (its request left the queue), never late.
   */
  #nextPurge = 0n;
  #lastDelivered: Promise<unknown> = Promise.resolve();
  #drainWaiters: (() => void)[] = [];

  constructor(options: DynamicBatcherOptions) {
    const c = options.config;
    this.#model = options.model;
    this.#mbs = Math.max(1, options.maxBatchSize);
    this.#preferred = new Set(options.maxBatchSize > 0 ? c.preferred_batch_size : []);
    this.#pmax = Math.max(0, ...this.#preferred);
    this.#delayNs = BigInt(c.max_queue_delay_microseconds) * 1000n;
    this.#preserveOrdering = c.preserve_ordering;
    const defaultPolicy = c.default_queue_policy ?? DEFAULT_POLICY;
    if (c.priority_levels > 0) {
      this.#levels = [];
      for (let l = 1; l <= c.priority_levels; l++) {
        this.#levels.push(new Level(l, c.priority_queue_policy[String(l)] ?? defaultPolicy));
      }
      this.#defaultLevel = this.#levels[Math.min(Math.max(1, c.default_priority_level), c.priority_levels) - 1]!;
    } else {
      this.#defaultLevel = new Level(0, defaultPolicy);
      this.#levels = [this.#defaultLevel];
    }
    this.#preemption = options.preemption ?? NO_PREEMPTION;
    this.#prefetch =
      this.#preemption.maxTotalQueueSize === 0 &&
      c.priority_levels === 0 &&
      defaultPolicy.default_timeout_microseconds === 0 &&
      !defaultPolicy.allow_timeout_override &&
      defaultPolicy.max_queue_size === 0;
    this.#shapeChecked = options.shapeCheckedInputs;
    this.#hasOptional = options.hasOptionalInputs;
    this.#runners = [...options.runners];
    this.#observer = options.observer ?? NO_OBSERVER;
    this.#logger = options.logger;
    this.#clock = options.clock ?? SYSTEM_CLOCK;
    // Any queue delay may end in a wait under 2 ms (its remainder), served by the precise timer.
    if (this.#clock === SYSTEM_CLOCK && this.#delayNs > 0n) this.#releaseTimers = holdPreciseTimers();
  }

  get inflightCount(): number {
    return this.#queued + this.#executing;
  }

  get queuedCount(): number {
    return this.#queued;
  }

  addInstances(runners: readonly InstanceRunner[]): void {
    this.#runners.push(...runners.filter((r) => !this.#runners.includes(r)));
    this.#schedule();
  }

  removeInstances(runners: readonly InstanceRunner[]): void {
    this.#runners = this.#runners.filter((r) => !runners.includes(r));
  }

  stop(): void {
    this.#stopped = true;
    this.#releaseTimers?.();
  }

  drain(): Promise<void> {
    if (this.inflightCount === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  #levelOf(priority: number): Level {
    if (this.#levels.length === 1 && this.#levels[0]!.number === 0) return this.#defaultLevel;
    if (priority < 1 || priority > this.#levels.length) return this.#defaultLevel;
    return this.#levels[priority - 1]!;
  }

  #keyOf(request: ScheduledRequest): string {
    let key = '';
    for (const name of this.#shapeChecked) {
      const t = request.inputs.get(name);
      if (t !== undefined) key += `${name}:${t.shape.slice(1).join('x')};`;
    }
    if (this.#hasOptional) key += `|${[...request.inputs.keys()].sort().join(',')}`;
    return key;
  }

  enqueue(request: ScheduledRequest): void {
    if (this.#stopped) {
      throw new NereidError(
        'SERVER_STOPPING',
        `Server is stopping, scheduler for model '${this.#model}' has stopped accepting new inference requests`,
      );
    }
    const level = this.#levelOf(request.priority);
    const policy = level.policy;
    if (policy.max_queue_size > 0 && level.size >= policy.max_queue_size) {
      // Refused, but counted as a failure with reason REJECTED, as a queue timeout is.
      request.fail(
        new NereidError(
          'UNAVAILABLE',
          `Exceeds maximum queue size: model '${this.#model}'${level.number ? ` priority level ${level.number}` : ''} ` +
            `already holds ${level.size} queued requests (max_queue_size ${policy.max_queue_size}); retry later`,
        ),
      );
      this.#observer.onRequestComplete(request, 'REJECTED');
      return;
    }
    const capacity = this.#preemption.maxTotalQueueSize;
    let evict: Entry | undefined;
    if (capacity > 0 && this.#queued >= capacity) {
      evict = this.#preemption.queued ? this.#evictable(level) : undefined;
      if (evict === undefined) {
        request.fail(
          new NereidError(
            'UNAVAILABLE',
            `Exceeds maximum queue size: model '${this.#model}' already holds ${this.#queued} queued requests across its priority levels ` +
              `(max_total_queue_size ${capacity})` +
              (this.#preemption.queued ? `, none of a lower priority than level ${level.number}` : '') +
              `; retry later`,
          ),
        );
        this.#observer.onRequestComplete(request, 'REJECTED');
        return;
      }
    }
    if (request.signal.aborted) {
      request.fail(new NereidError('REQUEST_CANCELLED', `request '${request.id}' for model '${this.#model}' was cancelled`));
      this.#observer.onRequestComplete(request, 'CANCELED');
      return;
    }
    if (evict !== undefined) {
      this.#remove(evict);
      this.#observer.onPreempted?.(evict.request, 'queued');
      evict.request.fail(queuedPreemptionError(this.#model, evict.request.id, evict.level.number, level.number, capacity));
      this.#observer.onRequestComplete(evict.request, 'REJECTED');
    }
    const now = this.#clock.now();
    request.times.queue = process.hrtime.bigint();
    let timeoutUs = policy.default_timeout_microseconds;
    if (policy.allow_timeout_override && request.timeoutUs > 0 && request.timeoutUs < timeoutUs) timeoutUs = request.timeoutUs;
    const entry: Entry = {
      request,
      level,
      expiry: timeoutUs > 0 ? now + BigInt(timeoutUs) * 1000n : 0n,
      start: now,
      size: Math.max(1, request.batchSize),
      key: this.#keyOf(request),
      place: 'normal',
      watch: undefined,
      prevWatched: undefined,
      nextWatched: undefined,
    };
    if (request.signal !== NEVER_ABORTED) this.#watch(entry);
    level.normal.push(entry);
    level.size++;
    this.#queued++;
    this.#queuedRows += entry.size;
    if (entry.expiry !== 0n && (this.#nextPurge === 0n || entry.expiry < this.#nextPurge)) this.#nextPurge = entry.expiry + 1n;
    this.#schedule();
  }

  /**
   * The entry a request of `level` may evict from a full queue: the most recently queued one of
   * the lowest-priority level holding any, if that level is lower than `level`.
   */
  #evictable(level: Level): Entry | undefined {
    for (let i = this.#levels.length - 1; i >= 0; i--) {
      const candidate = this.#levels[i]!;
      if (candidate.number <= level.number) return undefined;
      if (candidate.size === 0) continue;
      const normal = lastIn(candidate.normal, candidate.normalHead, 'normal');
      const delayed = lastIn(candidate.delayed, candidate.delayedHead, 'delayed');
      if (normal === undefined) return delayed;
      if (delayed === undefined) return normal;
      return delayed.start > normal.start ? delayed : normal;
    }
    return undefined;
  }

  #remove(entry: Entry): void {
    entry.place = 'gone';
    entry.level.size--;
    this.#queued--;
    this.#queuedRows -= entry.size;
    if (entry.watch !== undefined) this.#unwatch(entry);
  }

  /**
   * Cancels the entry when its request's signal aborts. One listener per signal, kept for the
   * signal's life: the requests of a gRPC stream share their stream's signal, and adding and
   * removing an event listener per request cost more than the rest of queueing it. The listener
   * holds the batcher weakly, so a stream that outlives a model version (reloads) does not keep
   * its stopped batchers.
   */
  #watch(entry: Entry): void {
    const signal = entry.request.signal;
    let watch = this.#watched.get(signal);
    if (watch === undefined) {
      const created: Watch = { first: undefined };
      watch = created;
      this.#watched.set(signal, created);
      const self = this.#self;
      signal.addEventListener(
        'abort',
        () => {
          const batcher = self.deref();
          if (batcher !== undefined) batcher.#cancelQueued(created);
        },
        { once: true },
      );
    }
    entry.watch = watch;
    entry.nextWatched = watch.first;
    if (watch.first !== undefined) watch.first.prevWatched = entry;
    watch.first = entry;
  }

  #unwatch(entry: Entry): void {
    const { prevWatched: prev, nextWatched: next } = entry;
    if (prev !== undefined) prev.nextWatched = next;
    else entry.watch!.first = next;
    if (next !== undefined) next.prevWatched = prev;
    entry.watch = undefined;
    entry.prevWatched = undefined;
    entry.nextWatched = undefined;
  }

  #cancelQueued(watch: Watch): void {
    const cancelled: Entry[] = [];
    for (let e = watch.first; e !== undefined; e = e.nextWatched) cancelled.push(e);
    // Oldest first, as they were queued.
    cancelled.reverse();
    for (const entry of cancelled) {
      if (entry.place === 'gone') continue;
      this.#remove(entry);
      entry.request.fail(new NereidError('REQUEST_CANCELLED', `request '${entry.request.id}' for model '${this.#model}' was cancelled while queued`));
      this.#observer.onRequestComplete(entry.request, 'CANCELED');
    }
    if (cancelled.length > 0) this.#settle();
  }

  #expire(entry: Entry): void {
    if (entry.level.policy.timeout_action === 'DELAY') {
      if (entry.place === 'normal') {
        entry.place = 'delayed';
        entry.level.delayed.push(entry);
      }
      return;
    }
    this.#remove(entry);
    entry.request.fail(new NereidError('UNAVAILABLE', `Request timeout expired for request '${entry.request.id}' of model '${this.#model}'`));
    this.#observer.onRequestComplete(entry.request, 'REJECTED');
  }

  /** Entries in global order (§4.2). Safe against entries moving to the delayed part meanwhile. */
  *#ordered(): Generator<Entry> {
    for (const level of this.#levels) {
      for (let i = level.normalHead; i < level.normal.length; i++) {
        const e = level.normal[i]!;
        if (e.place === 'normal') yield e;
      }
      for (let i = level.delayedHead; i < level.delayed.length; i++) {
        const e = level.delayed[i]!;
        if (e.place === 'delayed') yield e;
      }
    }
  }

  /**
   * FORM_BATCH of §4.4. `ahead`: the instance is busy (a batch prepared ahead), so only a batch
   * that cannot grow any more is taken.
   */
  #formBatch(now: bigint, ahead: boolean): Decision {
    const pending: Entry[] = [];
    let size = 0;
    let best = 0;
    let bestCount = 0;
    let sendNow = false;
    let ref = '';
    let earliestExpiry = 0n;
    for (const e of this.#ordered()) {
      if (e.expiry !== 0n && now > e.expiry) {
        const wasDelayed = e.place === 'delayed';
        this.#expire(e);
        if (e.place === 'gone' || !wasDelayed) continue;
      }
      if (pending.length === 0) {
        ref = e.key;
      } else {
        if (size + e.size > this.#pmax && best === 0) {
          best = size;
          bestCount = pending.length;
        }
        if (size + e.size > this.#mbs || e.key !== ref) {
          sendNow = true;
          break;
        }
      }
      pending.push(e);
      size += e.size;
      if (e.expiry !== 0n && e.place === 'normal' && (earliestExpiry === 0n || e.expiry < earliestExpiry)) earliestExpiry = e.expiry;
      if (this.#preferred.has(size)) {
        best = size;
        bestCount = pending.length;
      }
    }
    if (pending.length === 0) return { kind: 'none' };
    let oldest = pending[0]!.start;
    for (const e of pending) if (e.start < oldest) oldest = e.start;
    const delay = this.#delayNs;
    const delayExceeded = delay > 0n && now - oldest >= delay;
    if (ahead && !(sendNow || size >= this.#pmax || size >= this.#mbs)) {
      // A batch for a busy instance waits, however long its oldest request has, until it is full
      // or the instance is free (which reschedules): requests that arrive meanwhile join it, as
      // they join Triton's payload until an instance takes it. Sent at its delay instead, it
      // would run as a small batch right behind the current one, and while all instances are busy
      // waiting costs a request nothing. No timer: prefetching queues never time requests out.
      return { kind: 'wait', wakeAt: 0n };
    }
    if (best !== 0 && !delayExceeded) {
      const entries = pending.slice(0, bestCount);
      // Not a preferred size: the next request would have passed the largest one.
      return { kind: 'execute', entries, size: best, reason: this.#preferred.has(best) ? 'preferred batch size' : 'full' };
    }
    if (sendNow || size >= this.#pmax || delay === 0n || delayExceeded) {
      // The first reason that holds: a batch that could not have grown any more says so even
      // when its delay has expired as well.
      const reason = this.#preferred.has(size)
        ? 'preferred batch size'
        : sendNow
          ? 'next request does not fit'
          : size >= this.#pmax || size >= this.#mbs
            ? 'full'
            : delayExceeded
              ? 'queue delay expired'
              : 'no queue delay';
      return { kind: 'execute', entries: pending, size, reason };
    }
    return { kind: 'wait', wakeAt: this.#wakeAt(oldest, earliestExpiry) };
  }

  #wakeAt(oldest: bigint, earliestExpiry: bigint): bigint {
    let wake = this.#delayNs > 0n ? oldest + this.#delayNs : 0n;
    if (earliestExpiry !== 0n && (wake === 0n || earliestExpiry < wake)) wake = earliestExpiry + 1n;
    return wake;
  }

  /**
   * Whether the queue surely holds no batch for a busy instance (one that is full, §4.4), known
   * without forming it: every request is compatible with every other (no shape-checked or
   * optional inputs) and together they are fewer rows than a full batch. Saves scanning the
   * whole queue on every arrival while it fills behind a running batch.
   */
  #cannotFill(): boolean {
    return this.#shapeChecked.length === 0 && !this.#hasOptional && this.#queuedRows < this.#mbs && this.#queuedRows < this.#pmax;
  }

  /** An idle instance, else (when prefetching) one that can hold a batch ahead (least loaded), else none. */
  #pickRunner(): { runner: InstanceRunner; ahead: boolean } | undefined {
    let idle: InstanceRunner | undefined;
    let busy: InstanceRunner | undefined;
    for (const r of this.#runners) {
      if (r.inflight === 0) {
        if (idle === undefined || r.key < idle.key) idle = r;
      } else if (this.#prefetch && r.inflight < Math.min(r.depth, 2) && (busy === undefined || r.inflight < busy.inflight)) busy = r;
    }
    if (idle) return { runner: idle, ahead: false };
    return busy ? { runner: busy, ahead: true } : undefined;
  }

  #schedule(): void {
    // Compaction happens here only: entries are iterated by index while batches form.
    for (const level of this.#levels) level.compact();
    try {
      this.#scheduleLoop();
    } finally {
      this.#settle();
    }
  }

  #scheduleLoop(): void {
    for (;;) {
      if (this.#queued === 0) {
        this.#nextPurge = 0n;
        this.#setTimer(0n);
        return;
      }
      const pick = this.#pickRunner();
      const now = this.#clock.now();
      if (pick === undefined) {
        if (this.#preemption.running && this.#preempting === 0) this.#preemptRunning();
        // Every instance is full: expired REJECT requests are still purged meanwhile (§4.4).
        if (this.#nextPurge !== 0n && now >= this.#nextPurge) this.#nextPurge = this.#purge(now);
        this.#setTimer(this.#nextPurge);
        return;
      }
      if (pick.ahead && this.#cannotFill()) {
        this.#setTimer(0n);
        return;
      }
      const decision = this.#formBatch(now, pick.ahead);
      if (decision.kind === 'none') {
        this.#setTimer(0n);
        return;
      }
      if (decision.kind === 'wait') {
        this.#setTimer(decision.wakeAt);
        return;
      }
      this.#dispatch(pick.runner, decision.entries, decision.size, decision.reason, now, pick.ahead);
    }
  }

  /**
   * Running preemption: every instance is busy and requests wait. The batch of lowest priority
   * (most recently started among equals) whose requests are all of a lower level than the
   * highest queued one is ended; its instance takes the waiting request once `execute` returns.
   * One preemption at a time: the next is considered once that instance is back.
   */
  #preemptRunning(): void {
    let waiting = 0;
    for (const level of this.#levels) {
      if (level.size > 0) {
        waiting = level.number;
        break;
      }
    }
    if (waiting === 0) return;
    let victim: [InstanceRunner, RunningBatch] | undefined;
    for (const [runner, batch] of this.#running) {
      if (batch.preempted || batch.top <= waiting || !runner.preemptible || !this.#runners.includes(runner)) continue;
      if (batch.requests.every((r) => r.completed)) continue;
      const best = victim?.[1];
      if (best === undefined || batch.top > best.top || (batch.top === best.top && batch.order > best.order)) victim = [runner, batch];
    }
    if (victim === undefined) return;
    const [runner, batch] = victim;
    batch.preempted = true;
    this.#preempting++;
    for (let i = 0; i < batch.requests.length; i++) {
      const r = batch.requests[i]!;
      if (r.completed) continue;
      this.#observer.onPreempted?.(r, 'running');
      runner.preempt(r, runningPreemptionError(this.#model, r.id, batch.levels[i]!, waiting));
    }
    this.#logger?.verbose(1, `dynamic batcher for model '${this.#model}': preempted a running batch of priority level ${batch.top} on ${runner.spec.name} for priority level ${waiting}`);
  }

  /** Removes (or, under DELAY, moves) expired requests; returns the next `#nextPurge`. */
  #purge(now: bigint): bigint {
    let next = 0n;
    for (const e of this.#ordered()) {
      if (e.expiry === 0n) continue;
      if (now > e.expiry) this.#expire(e);
      else if (e.place === 'normal' && (next === 0n || e.expiry < next)) next = e.expiry + 1n;
    }
    return next;
  }

  #setTimer(at: bigint): void {
    if (at === this.#timerAt && (at === 0n || this.#timer !== undefined)) return;
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#timerAt = at;
    if (at === 0n) return;
    const delay = at - this.#clock.now();
    this.#timer = this.#clock.setTimer(() => {
      this.#timer = undefined;
      this.#timerAt = 0n;
      this.#schedule();
    }, delay > 0n ? delay : 0n);
  }

  #dispatch(runner: InstanceRunner, entries: Entry[], size: number, reason: string, now: bigint, ahead: boolean): void {
    const batch: ScheduledRequest[] = new Array(entries.length);
    let oldest = entries[0]!.start;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.start < oldest) oldest = e.start;
      this.#remove(e);
      batch[i] = e.request;
      if (this.#preserveOrdering) {
        e.request.deliverAfter(this.#lastDelivered);
        this.#lastDelivered = e.request.delivered;
      }
    }
    if (this.#logger?.isVerbose(1)) {
      this.#logger.verbose(
        1,
        `dynamic batcher for model '${this.#model}': batch of ${size} (${batch.length} requests) to ${runner.spec.name}` +
          `${ahead ? ' ahead, while it runs another' : ''}, oldest waited ${Number(now - oldest) / 1000} us, reason: ${reason}`,
      );
    }
    this.#executing += batch.length;
    let running: RunningBatch | undefined;
    if (this.#preemption.running) {
      const levels = entries.map((e) => e.level.number);
      running = { requests: batch, levels, top: Math.min(...levels), order: this.#dispatched++, preempted: false };
      this.#running.set(runner, running);
    }
    // Released early (the backend has finished the batch and hands its outputs over), the
    // instance takes its next batch at once; `#schedule` again once `execute` returns.
    void runner.run(batch, this.#released).then(() => {
      if (running !== undefined) {
        if (this.#running.get(runner) === running) this.#running.delete(runner);
        if (running.preempted) this.#preempting--;
      }
      this.#executing -= batch.length;
      this.#schedule();
      this.#settle();
    });
  }

  readonly #released = (): void => this.#schedule();

  #settle(): void {
    if (this.inflightCount === 0 && this.#drainWaiters.length > 0) {
      const waiters = this.#drainWaiters;
      this.#drainWaiters = [];
      for (const w of waiters) w();
    }
  }
}

/** The last entry of `part` (from `head` on) still in `place`; drops the entries that left from its end. */
function lastIn(part: Entry[], head: number, place: Place): Entry | undefined {
  while (part.length > head) {
    const e = part[part.length - 1]!;
    if (e.place === place) return e;
    // Gone, or moved from the normal part to the delayed one: never read from here again.
    part.pop();
  }
  return undefined;
}
