/**
 * Load generators (perf-and-analyzer.md §1.1): concurrency mode keeps N requests outstanding;
 * request-rate mode sends on a precomputed schedule (constant, Poisson, or gaps from a file)
 * whatever the responses do. Both record every completed request, in completion order.
 *
 * Node runs every sender on one event loop, so perf_analyzer's sync and async modes generate the
 * same load here: N outstanding requests either way.
 */
import { NereidError, type ParameterValue } from '@nereid/protocol';
import type { PerfInput, Sender } from './transport.js';

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
  /** The request ended its sequence (it carried `sequence_end`). */
  sequenceEnd?: boolean;
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

function requestSource(requests: readonly PerfInput[][]): () => readonly PerfInput[] {
  let next = 0;
  return () => requests[next++ % requests.length];
}

/** Sequence mode (perf-and-analyzer.md §1.1): lengths, correlation ids, data streams. */
export interface SequencePlan {
  /** Requests per sequence before variation (`--sequence-length`); undefined: a data stream's length, else 20. */
  length?: number;
  /** ± percent applied uniformly to each sequence's length (`--sequence-length-variation`). */
  variation: number;
  /** Correlation ids are dealt from `idStart` to `idEnd` (0: no end), wrapping, skipping ids in use. */
  idStart: number;
  idEnd: number;
  /** Rate modes: sequences open at once (`--num-of-sequences`). */
  count: number;
  /** Rate modes: at most one request of a sequence outstanding (`--serial-sequences`). */
  serial: boolean;
}

/** Default `--sequence-length` when neither the flag nor a data stream gives one. */
export const DEFAULT_SEQUENCE_LENGTH = 20;

/**
 * Deals correlation ids, lengths and data streams to new sequences; one per load, shared by all
 * its slots, so an id is never used by two open sequences (the caller keeps the id range at
 * least as large as the number of sequences open at once).
 */
export class SequenceIds {
  readonly #plan: SequencePlan;
  readonly #streams: readonly (readonly PerfInput[])[][] | undefined;
  readonly #active = new Set<number>();
  #next: number;
  #stream = 0;

  constructor(plan: SequencePlan, streams?: readonly (readonly PerfInput[])[][]) {
    this.#plan = plan;
    this.#streams = streams !== undefined && streams.length > 0 ? streams : undefined;
    this.#next = plan.idStart;
  }

  /** A new sequence: its correlation id, length (at least 1) and, with JSON streams, its data. */
  open(): { id: number; length: number; stream?: readonly (readonly PerfInput[])[] } {
    let id = this.#next;
    // Past a full cycle every id is in use (last requests still in flight): reuse the next one.
    for (let tries = 0; this.#active.has(id) && tries < this.#active.size; tries++) id = this.#after(id);
    this.#next = this.#after(id);
    this.#active.add(id);
    const stream = this.#streams?.[this.#stream++ % this.#streams.length];
    const base = this.#plan.length ?? stream?.length ?? DEFAULT_SEQUENCE_LENGTH;
    const v = this.#plan.variation / 100;
    const length = Math.max(1, Math.round(base * (1 + (Math.random() * 2 - 1) * v)));
    return { id, length, stream };
  }

  close(id: number): void {
    this.#active.delete(id);
  }

  #after(id: number): number {
    return this.#plan.idEnd > 0 && id >= this.#plan.idEnd ? this.#plan.idStart : id + 1;
  }
}

interface SequenceRequest {
  inputs: readonly PerfInput[];
  parameters: Record<string, ParameterValue>;
  ended: boolean;
  release: () => void;
}

/** One sequence in progress: the inputs and parameters of its next request, start and end flags where they belong. */
class OpenSequence {
  readonly id: number;
  readonly length: number;
  readonly #ids: SequenceIds;
  readonly #stream: readonly (readonly PerfInput[])[] | undefined;
  step = 0;
  /** The requests of this sequence in flight. */
  readonly #pending = new Set<Promise<void>>();
  /** The start request is in flight: nothing else of the sequence may be sent before it is answered. */
  #starting = false;

  constructor(ids: SequenceIds) {
    this.#ids = ids;
    ({ id: this.id, length: this.length, stream: this.#stream } = ids.open());
  }

  get done(): boolean {
    return this.step >= this.length;
  }

  /** Follows `sent`, a request of this sequence (its start request when `start`), until it settles. */
  track(sent: Promise<void>, start: boolean): void {
    this.#pending.add(sent);
    if (start) this.#starting = true;
    void sent.then(() => {
      this.#pending.delete(sent);
      if (start) this.#starting = false;
    });
  }

  /**
   * Whether the next request may go now. Never before the start request is answered, and the end
   * request not while another is in flight: over connections of their own, a later request may
   * reach the server before an earlier one, and the server refuses a request of a sequence it has
   * not started or has already ended. With `serial`, no request while another is in flight.
   */
  mayContinue(serial: boolean): boolean {
    if (this.#starting) return false;
    return serial || this.step + 1 >= this.length ? this.#pending.size === 0 : true;
  }

  /** Resolves once no request of this sequence is in flight. */
  async settled(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  /**
   * The next request: a JSON stream's next step (replayed in a loop when the length exceeds it),
   * else `fallback`; `end` forces the end flag (closing a sequence early). `ended` is true for
   * the end request: the caller releases the id once it settled.
   */
  next(fallback: () => readonly PerfInput[], end = false): SequenceRequest {
    const inputs = this.#stream !== undefined ? this.#stream[this.step % this.#stream.length] : fallback();
    const parameters: Record<string, ParameterValue> = { sequence_id: this.id };
    if (this.step === 0) parameters.sequence_start = true;
    this.step++;
    const ended = end || this.step >= this.length;
    if (ended) {
      parameters.sequence_end = true;
      this.step = this.length;
    }
    return { inputs, parameters, ended, release: () => this.#ids.close(this.id) };
  }
}

/** How long requests in flight may take to finish once the load stopped sending (`--drain-timeout`). */
export const DEFAULT_DRAIN_TIMEOUT_MS = 60_000;

abstract class Base implements LoadGenerator {
  readonly records: RequestRecord[] = [];
  readonly startedAt = performance.now();
  sent = 0;
  delayed = 0;
  firstError?: unknown;
  protected stopped = false;
  /** Requests in flight, each with what fails it at the drain limit. */
  protected inflight = new Map<Promise<void>, (err: Error) => void>();
  readonly #drainTimeoutMs: number;
  #drainTimer: NodeJS.Timeout | undefined;
  /** Set once the drain limit passed: what every request still in flight, and any later send, fails with. */
  #expired: NereidError | undefined;

  constructor(drainTimeoutMs = DEFAULT_DRAIN_TIMEOUT_MS) {
    this.#drainTimeoutMs = drainTimeoutMs;
  }

  /**
   * The load has sent its last request (it stopped, or reached its count): the requests in flight
   * get `drainTimeoutMs` to finish, then fail. A response the server never sends (a lost stream
   * response, a hung model) would otherwise hold the run open for ever.
   */
  protected startDrain(): void {
    if (this.#drainTimer !== undefined || this.#expired !== undefined) return;
    this.#drainTimer = setTimeout(() => {
      this.#expired = new NereidError(
        'PERF_NO_RESPONSE',
        `no response within ${this.#drainTimeoutMs / 1000} s after the load stopped sending; the server lost the request or is still running it (raise --drain-timeout for requests that take longer)`,
      );
      for (const fail of [...this.inflight.values()]) fail(this.#expired);
    }, this.#drainTimeoutMs);
  }

  /**
   * `record` false: a request that only closes a sequence after the load stopped; it is neither
   * counted in `sent` nor recorded, so `--request-count N` still measures exactly N requests.
   */
  protected send(sender: Sender, inputs: readonly PerfInput[], lag = 0, sequence?: SequenceRequest, record = true): Promise<void> {
    if (record) this.sent++;
    const start = performance.now();
    const sequenceEnd = sequence?.ended === true;
    let fail!: (err: Error) => void;
    const failed = new Promise<never>((_, reject) => (fail = reject));
    const answered = this.#expired !== undefined ? Promise.reject(this.#expired) : sender.infer(inputs, sequence?.parameters);
    const done = Promise.race([answered, failed]).then(
      (sent) => {
        if (record) this.records.push({ start, end: performance.now(), ok: true, responses: sent.responses, lag, sendMs: sent.sendMs, recvMs: sent.recvMs, sequenceEnd });
      },
      (err: unknown) => {
        this.firstError ??= err;
        if (record) this.records.push({ start, end: performance.now(), ok: false, responses: 0, lag, sendMs: 0, recvMs: 0 });
      },
    );
    const tracked = done.finally(() => {
      this.inflight.delete(tracked);
      if (sequenceEnd) sequence!.release();
    });
    this.inflight.set(tracked, fail);
    return tracked;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.startDrain();
    await this.halt();
    while (this.inflight.size > 0) await Promise.all([...this.inflight.keys()]);
    clearTimeout(this.#drainTimer);
  }

  protected async halt(): Promise<void> {}
}

/**
 * `concurrency` slots, each sending its next request when its previous one completes. With `limit`,
 * exactly `limit` requests are sent in all (`--request-count`, warm-up); `finished` resolves then.
 */
export class ConcurrencyLoad extends Base {
  readonly finished: Promise<void>;

  /**
   * With `sequences`, each slot runs sequences back to back, one request at a time, each with its
   * own correlation id and start/end flags; a sequence still open when the load stops (or reaches
   * `limit`) gets one more request carrying the end flag, so none is left open on the server.
   */
  constructor(senders: readonly Sender[], requests: readonly PerfInput[][], concurrency: number, limit = 0, sequences?: SequenceIds, drainTimeoutMs?: number) {
    super(drainTimeoutMs);
    const next = requestSource(requests);
    const slots: Promise<void>[] = [];
    const more = () => {
      if (this.stopped) return false;
      if (limit === 0 || this.sent < limit) return true;
      this.startDrain();
      return false;
    };
    for (let i = 0; i < concurrency; i++) {
      const sender = senders[i % senders.length];
      slots.push(
        (async () => {
          if (sequences === undefined) {
            while (more()) await this.send(sender, next());
            return;
          }
          let open: OpenSequence | undefined;
          while (more()) {
            if (open === undefined || open.done) open = new OpenSequence(sequences);
            const r = open.next(next);
            await this.send(sender, r.inputs, 0, r);
          }
          if (open !== undefined && !open.done) {
            const r = open.next(next, true);
            await this.send(sender, r.inputs, 0, r, false);
          }
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
 *
 * With sequences, sends go round-robin to `count` open sequences, each replaced by a new one once
 * it ended; every request of a sequence goes through the same sender. A turn that comes while its
 * sequence waits for the answer to its start request (its end request: to the others; with
 * `serial`: to any request) goes to the next sequence that does not, or waits (and counts as
 * delayed) when none is free. At stop, every open sequence gets one request carrying the end
 * flag, once its requests in flight are answered.
 */
export class RateLoad extends Base {
  #timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  readonly #open: (OpenSequence | undefined)[] = [];
  readonly #senders: readonly Sender[];
  readonly #requests: () => readonly PerfInput[];
  readonly #sequences: { ids: SequenceIds; count: number; serial: boolean } | undefined;

  /** `firstGapMs`: when the first send is due (default: one gap from now). */
  constructor(
    senders: readonly Sender[],
    requests: readonly PerfInput[][],
    gap: () => number,
    firstGapMs?: number,
    sequences?: { ids: SequenceIds; count: number; serial: boolean },
    drainTimeoutMs?: number,
  ) {
    super(drainTimeoutMs);
    const next = requestSource(requests);
    this.#senders = senders;
    this.#requests = next;
    this.#sequences = sequences;
    let due = performance.now() + (firstGapMs ?? gap());
    let k = 0;
    let turn = 0;
    const tick = () => {
      this.#timer = undefined;
      if (this.stopped) return;
      const now = performance.now();
      let blocked = false;
      while (due <= now) {
        const lag = now - due;
        if (sequences === undefined) {
          if (lag > 1) this.delayed++;
          void this.send(senders[k++ % senders.length], next(), lag);
        } else {
          const at = this.#freeSequence(turn);
          if (at < 0) {
            blocked = true;
            break;
          }
          turn = at + 1;
          if (lag > 1) this.delayed++;
          const open = this.#sequence(at);
          const r = open.next(next);
          open.track(this.send(senders[at % senders.length], r.inputs, lag, r), r.parameters.sequence_start === true);
        }
        due += gap();
      }
      // A send still due (every sequence waiting for an answer) is tried again in 1 ms.
      const wait = due - performance.now();
      this.#timer = blocked ? setTimeout(tick, 1) : wait > 2 ? setTimeout(tick, wait - 1.5) : setImmediate(tick);
    };
    tick();
  }

  /**
   * The index of the sequence slot to send to from `turn` on, or -1 when none may send now: a
   * sequence waits for the answer to its start request (so no later request of it can reach the
   * server first and be refused, leaving the start to hold a slot until the idle timeout), its end
   * request for the answers to the others, and with `serial` every request for the answer to the
   * one before.
   */
  #freeSequence(turn: number): number {
    const { count, serial } = this.#sequences!;
    for (let i = 0; i < count; i++) {
      const at = (turn + i) % count;
      const open = this.#open[at];
      if (open === undefined || open.done || open.mayContinue(serial)) return at;
    }
    return -1;
  }

  #sequence(at: number): OpenSequence {
    let open = this.#open[at];
    if (open === undefined || open.done) this.#open[at] = open = new OpenSequence(this.#sequences!.ids);
    return open;
  }

  protected override async halt(): Promise<void> {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer as NodeJS.Timeout);
      clearImmediate(this.#timer as NodeJS.Immediate);
      this.#timer = undefined;
    }
    await Promise.all(
      this.#open.map(async (open, at) => {
        if (open === undefined || open.done) return;
        await open.settled();
        const r = open.next(this.#requests, true);
        await this.send(this.#senders[at % this.#senders.length], r.inputs, 0, r, false);
      }),
    );
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
  /** Sequence models. */
  sequence?: SequencePlan;
  /** How long requests in flight may take once the load stopped sending (default DEFAULT_DRAIN_TIMEOUT_MS). */
  drainTimeoutMs?: number;
}

/**
 * Starts a level's load. `senders` grows the shared pool as needed: gRPC streaming gives each
 * concurrency slot its own stream, as perf_analyzer gives each context one; rate modes deal
 * requests to `maxThreads` (default 4) senders. `streams`: a sequence model's JSON data streams,
 * one per sequence in turn (§1.4).
 */
export function startLoad(
  plan: LoadPlan,
  senders: Sender[],
  makeSender: () => Sender,
  requests: readonly PerfInput[][],
  streams?: readonly (readonly PerfInput[])[][],
): LoadGenerator & { finished?: Promise<void> } {
  const want = plan.mode === 'concurrency' ? (plan.streaming ? plan.value : 1) : (plan.maxThreads ?? 4);
  while (senders.length < want) senders.push(makeSender());
  const use = senders.slice(0, want);
  const ids = plan.sequence !== undefined ? new SequenceIds(plan.sequence, streams) : undefined;
  if (plan.mode === 'concurrency') return new ConcurrencyLoad(use, requests, plan.value, plan.limit, ids, plan.drainTimeoutMs);
  const gap = plan.mode === 'custom_intervals' ? gapSource('intervals', 0, plan.intervalsUs) : gapSource(plan.distribution, plan.value);
  const first = plan.phase !== undefined && plan.mode === 'request_rate' ? ((1 + plan.phase) * 1000) / plan.value : undefined;
  return new RateLoad(use, requests, gap, first, ids !== undefined ? { ids, count: plan.sequence!.count, serial: plan.sequence!.serial } : undefined, plan.drainTimeoutMs);
}
