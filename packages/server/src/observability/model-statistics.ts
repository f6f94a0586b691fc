/**
 * Per-version inference statistics (models-and-scheduling.md §9, protocol.md §3.14): one
 * aggregator per loaded (model, version), fed by the scheduler and the instances, read by the
 * statistics extension and the metrics endpoint. Durations are cumulative nanoseconds (bigint:
 * a busy server exceeds 2^53 ns within months).
 */
import type { FailureReason, ScheduledRequest, SchedulerObserver } from '../scheduling/scheduler.js';
import type { PreemptionKind } from '../scheduling/preemption.js';

export class StatDuration {
  count = 0;
  /** The sum, as a number while it is exact (below 2^53 ns, about 104 days), then folded into `#folded`. */
  #exact = 0;
  #folded = 0n;

  /** Negative durations count as 0. Allocates nothing until the sum passes 2^53 ns. */
  add(ns: bigint): void {
    this.count++;
    if (ns <= 0n) return;
    const sum = this.#exact + Number(ns);
    if (Number.isSafeInteger(sum)) {
      this.#exact = sum;
    } else {
      this.#folded += BigInt(this.#exact) + ns;
      this.#exact = 0;
    }
  }

  /** Adds nanoseconds without counting an event (a cache miss's lookup and insert time, §9.1 success). */
  extend(ns: bigint): void {
    if (ns <= 0n) return;
    this.count--;
    this.add(ns);
  }

  /** Cumulative nanoseconds. */
  get ns(): bigint {
    return this.#folded + BigInt(this.#exact);
  }

  toJSON(): { count: number; ns: bigint } {
    return { count: this.count, ns: this.ns };
  }
}

export interface BatchStat {
  batchSize: number;
  computeInput: StatDuration;
  computeInfer: StatDuration;
  computeOutput: StatDuration;
}

/** Per-request and per-batch observations, for histograms (metrics). */
export interface StatisticsListener {
  /** A successful request: end-to-end, queue and compute (input + infer + output) nanoseconds. */
  request(requestNs: bigint, queueNs: bigint, computeNs: bigint): void;
  /** An executed batch of `size` (sum of request batch sizes). */
  batch(size: number): void;
}

/** Aggregates of the responses at one index within their requests (§9.1 response_stats). */
export interface ResponseStat {
  /** The response index as a string ("0", "1", …). */
  readonly key: string;
  readonly computeInfer: StatDuration;
  readonly computeOutput: StatDuration;
  readonly success: StatDuration;
  readonly fail: StatDuration;
  readonly emptyResponse: StatDuration;
  readonly cancel: StatDuration;
}

export const FAILURE_REASONS: readonly FailureReason[] = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'];

export class ModelStatistics implements SchedulerObserver {
  readonly name: string;
  readonly version: string;
  /** Milliseconds since the epoch of the last execution; 0 before any. */
  lastInference = 0;
  inferenceCount = 0;
  executionCount = 0;
  readonly success = new StatDuration();
  readonly fail = new StatDuration();
  readonly queue = new StatDuration();
  readonly computeInput = new StatDuration();
  readonly computeInfer = new StatDuration();
  readonly computeOutput = new StatDuration();
  readonly cacheHit = new StatDuration();
  readonly cacheMiss = new StatDuration();
  /** Failed requests by reason (`nv_inference_request_failure`). */
  readonly failures: Record<FailureReason, number> = { REJECTED: 0, CANCELED: 0, BACKEND: 0, OTHER: 0 };
  /**
   * Requests preempted by higher-priority ones, by kind (`nereid_inference_preemptions_total`; the
   * statistics extension has no field for them). They also count as REJECTED failures.
   */
  readonly preemptions: Record<PreemptionKind, number> = { queued: 0, running: 0 };
  readonly #batches = new Map<number, BatchStat>();
  /** By response index. */
  readonly #responses: ResponseStat[] = [];
  #listener: StatisticsListener | undefined;

  constructor(name: string, version: number | string) {
    this.name = name;
    this.version = String(version);
  }

  setListener(listener: StatisticsListener | undefined): void {
    this.#listener = listener;
  }

  /** Executions by total batch size, ascending. */
  batchStats(): BatchStat[] {
    return [...this.#batches.values()].sort((a, b) => a.batchSize - b.batchSize);
  }

  /** Per-response aggregates by response index, ascending. */
  responseStats(): readonly ResponseStat[] {
    return this.#responses;
  }

  #responseStat(index: number): ResponseStat {
    for (let i = this.#responses.length; i <= index; i++) {
      this.#responses.push({
        key: String(i),
        computeInfer: new StatDuration(),
        computeOutput: new StatDuration(),
        success: new StatDuration(),
        fail: new StatDuration(),
        emptyResponse: new StatDuration(),
        cancel: new StatDuration(),
      });
    }
    return this.#responses[index]!;
  }

  /**
   * The responses of an executed request (§9.1 response_stats). Response `i` spans from the
   * previous response (the batch's compute start for the first) to its own arrival; a response
   * that came after the batch's outputs started being extracted counts that part as
   * compute_output, the rest as compute_infer. Empty responses and failures count entirely as
   * compute_infer.
   */
  #recordResponses(request: ScheduledRequest): void {
    const t = request.times;
    let start = t.computeStart;
    const responses = request.responses;
    for (let i = 0; i < responses.length; i++) {
      const r = responses[i]!;
      const stat = this.#responseStat(i);
      const end = r.at > start ? r.at : start;
      const total = end - start;
      if (r.kind === 'data') {
        const outputStart = t.computeOutputStart > start && t.computeOutputStart < end ? t.computeOutputStart : end;
        stat.computeInfer.add(outputStart - start);
        stat.computeOutput.add(end - outputStart);
        stat.success.add(total);
      } else if (r.kind === 'empty') {
        stat.computeInfer.add(total);
        stat.emptyResponse.add(total);
      } else if (r.kind === 'cancel') {
        stat.cancel.add(total);
      } else {
        stat.computeInfer.add(total);
        stat.fail.add(total);
      }
      start = end;
    }
  }

  /**
   * A request answered from the response cache (§9.1): a success whose queue time runs until the
   * lookup started, and a cache hit of the lookup's duration; no inference or execution.
   */
  onCacheHit(requestTime: bigint, lookupStart: bigint, lookupEnd: bigint): void {
    this.success.add(lookupEnd - requestTime);
    this.queue.add(lookupStart - requestTime);
    this.cacheHit.add(lookupEnd - lookupStart);
  }

  /**
   * A request computed after a cache miss and its response inserted: `ns` is the lookup and
   * insert time, counted as a cache miss and added to the request's success duration (§9.1).
   */
  onCacheMiss(ns: bigint): void {
    this.cacheMiss.add(ns);
    this.success.extend(ns);
  }

  onExecution(batch: readonly ScheduledRequest[], batchSize: number): void {
    const t = batch[0]!.times;
    this.executionCount++;
    this.lastInference = Date.now();
    let stat = this.#batches.get(batchSize);
    if (stat === undefined) {
      stat = { batchSize, computeInput: new StatDuration(), computeInfer: new StatDuration(), computeOutput: new StatDuration() };
      this.#batches.set(batchSize, stat);
    }
    stat.computeInput.add(t.computeInputEnd - t.computeStart);
    stat.computeInfer.add(t.computeOutputStart - t.computeInputEnd);
    stat.computeOutput.add(t.computeEnd - t.computeOutputStart);
    this.#listener?.batch(batchSize);
  }

  onPreempted(_request: ScheduledRequest, kind: PreemptionKind): void {
    this.preemptions[kind]++;
  }

  onRequestComplete(request: ScheduledRequest, reason: FailureReason | undefined): void {
    const t = request.times;
    const total = request.completedAt - t.request;
    if (t.computeStart !== 0n) this.#recordResponses(request);
    if (reason !== undefined) {
      this.fail.add(total);
      this.failures[reason]++;
      return;
    }
    this.success.add(total);
    this.queue.add(t.computeStart - t.queue);
    this.computeInput.add(t.computeInputEnd - t.computeStart);
    this.computeInfer.add(t.computeOutputStart - t.computeInputEnd);
    this.computeOutput.add(t.computeEnd - t.computeOutputStart);
    this.inferenceCount += Math.max(1, request.batchSize);
    this.#listener?.request(total, t.computeStart - t.queue, t.computeEnd - t.computeStart);
  }
}
