/**
 * Load generators (perf-and-analyzer.md §1.1): concurrency mode keeps N requests outstanding;
 * request-rate mode sends on a precomputed schedule (constant, Poisson, or gaps from a file)
 * whatever the responses do. Both record every completed request, in completion order.
 *
 * Node runs every sender on one event loop, so perf_analyzer's sync and async modes generate the
 * same load here: N outstanding requests either way.
 */
import type { ClientInput } from '@nereid/client';
import type { Sender } from './transport.js';

/** One finished request. Times are `performance.now()` milliseconds. */
export interface RequestRecord {
  start: number;
  end: number;
  ok: boolean;
  responses: number;
  /** Rate modes: how late the send was against its slot (ms). */
  lag: number;
  /** Client time building the request and reading the response (ms; 0 where not measured). */
  sendMs: number;
  recvMs: number;
}

/** The first failure seen, kept for the report. */
export interface LoadState {
  readonly records: RequestRecord[];
  /** Requests started so far. */
  sent: number;
  /** Requests started later than 1 ms after their scheduled slot (rate modes). */
  delayed: number;
  firstError?: unknown;
  /** Worker loads: resolves once every request finished so far is in `records`. */
  flush?(): Promise<void>;
  /** Worker loads: the load generators' own busy share (0–1). */
  busy?(): number;
}

export interface LoadGenerator extends LoadState {
  /** When sending began (`performance.now()` ms). */
  readonly startedAt: number;
  /** Stops sending and resolves once every request in flight has finished. */
  stop(): Promise<void>;
}

function requestSource(requests: readonly ClientInput[][]): () => readonly ClientInput[] {
  let next = 0;
  return () => requests[next++ % requests.length];
}

abstract class Base implements LoadGenerator {
  readonly records: RequestRecord[] = [];
  readonly startedAt = performance.now();
  sent = 0;
  delayed = 0;
  firstError?: unknown;
  protected stopped = false;
  protected inflight = new Set<Promise<void>>();

  protected send(sender: Sender, inputs: readonly ClientInput[], lag = 0): Promise<void> {
    this.sent++;
    const start = performance.now();
    const done = sender.infer(inputs).then(
      (sent) => {
        this.records.push({ start, end: performance.now(), ok: true, responses: sent.responses, lag, sendMs: sent.sendMs, recvMs: sent.recvMs });
      },
      (err: unknown) => {
        this.firstError ??= err;
        this.records.push({ start, end: performance.now(), ok: false, responses: 0, lag, sendMs: 0, recvMs: 0 });
      },
    );
    const tracked = done.finally(() => this.inflight.delete(tracked));
    this.inflight.add(tracked);
    return tracked;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.halt();
    while (this.inflight.size > 0) await Promise.all([...this.inflight]);
  }

  protected async halt(): Promise<void> {}
}

/**
 * `concurrency` slots, each sending its next request when its previous one completes. With `limit`,
 * exactly `limit` requests are sent in all (`--request-count`, warm-up); `finished` resolves then.
 */
export class ConcurrencyLoad extends Base {
  readonly finished: Promise<void>;

  constructor(senders: readonly Sender[], requests: readonly ClientInput[][], concurrency: number, limit = 0) {
    super();
    const next = requestSource(requests);
    const slots: Promise<void>[] = [];
    for (let i = 0; i < concurrency; i++) {
      const sender = senders[i % senders.length];
      slots.push(
        (async () => {
          while (!this.stopped && (limit === 0 || this.sent < limit)) await this.send(sender, next());
        })(),
      );
    }
    this.finished = Promise.all(slots).then(() => undefined);
  }
}

/** Gaps between sends in milliseconds: constant 1/rate, Poisson (exponential, mean 1/rate), or a file's list in a loop. */
export function gapSource(kind: 'constant' | 'poisson' | 'intervals', rate: number, intervalsUs: readonly number[] = []): () => number {
  if (kind === 'intervals') {
    let i = 0;
    return () => intervalsUs[i++ % intervalsUs.length] / 1000;
  }
  const mean = 1000 / rate;
  if (kind === 'constant') return () => mean;
  return () => -Math.log(1 - Math.random()) * mean;
}

/**
 * Open-loop sends on a schedule; requests are dealt round-robin to the senders. A timer wakes
 * shortly before each slot; a send more than 1 ms after its slot counts as delayed. Latency is
 * timed from the actual send.
 */
export class RateLoad extends Base {
  #timer: NodeJS.Timeout | NodeJS.Immediate | undefined;

  /** `firstGapMs`: when the first send is due (default: one gap from now). */
  constructor(senders: readonly Sender[], requests: readonly ClientInput[][], gap: () => number, firstGapMs?: number) {
    super();
    const next = requestSource(requests);
    let due = performance.now() + (firstGapMs ?? gap());
    let k = 0;
    const tick = () => {
      this.#timer = undefined;
      if (this.stopped) return;
      const now = performance.now();
      while (due <= now) {
        const lag = now - due;
        if (lag > 1) this.delayed++;
        void this.send(senders[k++ % senders.length], next(), lag);
        due += gap();
      }
      const wait = due - performance.now();
      this.#timer = wait > 2 ? setTimeout(tick, wait - 1.5) : setImmediate(tick);
    };
    tick();
  }

  protected override async halt(): Promise<void> {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer as NodeJS.Timeout);
      clearImmediate(this.#timer as NodeJS.Immediate);
    }
  }
}

/** What a load level needs, whoever runs it (this process or a worker). */
export interface LoadPlan {
  mode: 'concurrency' | 'request_rate' | 'custom_intervals';
  /** Concurrency, or requests per second. */
  value: number;
  /** Concurrency mode: requests to send in all (0: until stopped). */
  limit: number;
  streaming: boolean;
  maxThreads?: number;
  distribution: 'constant' | 'poisson';
  intervalsUs: readonly number[];
  /** Rate modes: the first send's offset as a fraction of the mean gap. */
  phase?: number;
}

/**
 * Starts a level's load. `senders` grows the shared pool as needed: gRPC streaming gives each
 * concurrency slot its own stream, as perf_analyzer gives each context one; rate modes deal
 * requests to `maxThreads` (default 4) senders.
 */
export function startLoad(
  plan: LoadPlan,
  senders: Sender[],
  makeSender: () => Sender,
  requests: readonly ClientInput[][],
): LoadGenerator & { finished?: Promise<void> } {
  const want = plan.mode === 'concurrency' ? (plan.streaming ? plan.value : 1) : (plan.maxThreads ?? 4);
  while (senders.length < want) senders.push(makeSender());
  const use = senders.slice(0, want);
  if (plan.mode === 'concurrency') return new ConcurrencyLoad(use, requests, plan.value, plan.limit);
  const gap = plan.mode === 'custom_intervals' ? gapSource('intervals', 0, plan.intervalsUs) : gapSource(plan.distribution, plan.value);
  const first = plan.phase !== undefined && plan.mode === 'request_rate' ? ((1 + plan.phase) * 1000) / plan.value : undefined;
  return new RateLoad(use, requests, gap, first);
}
