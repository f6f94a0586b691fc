/**
 * What every scheduler implements (direct, dynamic batcher, and later sequence and ensemble), and
 * what it needs of a request. Shutdown and reload rely only on this interface.
 */
import type { Trace } from '../observability/trace.js';
import type { NereidError } from '@nereid/protocol';
import type { BackendRequest } from '../backends/spi.js';
import type { InstanceRunner } from './instance-runner.js';
import type { PreemptionKind } from './preemption.js';

/** Monotonic timestamps of a request, in nanoseconds (models-and-scheduling.md §9.1). */
export interface RequestTimes {
  request: bigint;
  queue: bigint;
  computeStart: bigint;
  computeInputEnd: bigint;
  computeOutputStart: bigint;
  computeEnd: bigint;
}

/**
 * One response a backend sent for a request (models-and-scheduling.md §9.1 response_stats):
 * when, and whether it carried outputs, none (a flags-only or empty response), or an error
 * (`cancel`: the request was cancelled).
 */
export interface ResponseRecord {
  readonly at: bigint;
  readonly kind: 'data' | 'empty' | 'error' | 'cancel';
}

/** Why an accepted request failed (the `reason` label of `nv_inference_request_failure`). */
export type FailureReason = 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER';

/** A validated request as a scheduler sees it. */
export interface ScheduledRequest extends BackendRequest {
  readonly times: RequestTimes;
  /** The request's trace when it is traced (observability/trace.ts): an ensemble gives its steps child traces. */
  readonly trace?: Trace | undefined;
  /** Resolved priority parameter: 0 = the model's default level (protocol.md §3.12). */
  readonly priority: number;
  /** Requested queue timeout in microseconds; 0 = none. */
  readonly timeoutUs: number;
  /** Correlation id (`sequence_id`); 0n / '' when the request is not part of a sequence. */
  readonly correlationId: bigint | string;
  /** `sequence_start`: the first request of its sequence. */
  readonly sequenceStart: boolean;
  /** `sequence_end`: the last request of its sequence. */
  readonly sequenceEnd: boolean;
  /** Set once the final response (or an error) was delivered. */
  readonly completed: boolean;
  /** The error the request ended with, if it failed. */
  readonly error: NereidError | undefined;
  /** Monotonic time of completion (0n while in flight). */
  readonly completedAt: bigint;
  /** The responses sent so far, in order. */
  readonly responses: readonly ResponseRecord[];
  /**
   * Told by the instance that `execute` returned for this request (decoupled models only, which
   * may answer later): arms the request's response timeout if it has one.
   */
  executeReturned(): void;
  /** Ends the request with an error (ignored if already completed). */
  fail(error: NereidError): void;
  /** Runs `callback` once the request has completed (at once if it already has). */
  onComplete(callback: () => void): void;
  /**
   * Delivers this request's response only after `previous` settles (preserve_ordering,
   * models-and-scheduling.md §4.7). Called when the request leaves the queue, before it can
   * complete.
   */
  deliverAfter(previous: Promise<unknown>): void;
  /**
   * Settles once the response was delivered to the caller (see `deliverAfter`). One promise for
   * the request's whole life: callers take it when they enqueue.
   */
  readonly delivered: Promise<unknown>;
}

/** Receives what schedulers and instances observe, for statistics and metrics. */
export interface SchedulerObserver {
  /** A batch executed: `batchSize` is the sum of its requests' batch sizes. */
  onExecution(batch: readonly ScheduledRequest[], batchSize: number): void;
  /** An accepted request completed; `reason` is set when it failed. */
  onRequestComplete(request: ScheduledRequest, reason: FailureReason | undefined): void;
  /** A request is being preempted by a higher-priority one (preemption.ts); told before it fails. */
  onPreempted?(request: ScheduledRequest, kind: PreemptionKind): void;
}

/** An observer that records nothing. */
export const NO_OBSERVER: SchedulerObserver = {
  onExecution: () => undefined,
  onRequestComplete: () => undefined,
};

export interface Scheduler {
  /**
   * Accepts a request. Throws a NereidError when the request is refused synchronously (scheduler
   * stopping, queue full); once accepted, the request is guaranteed a final response.
   */
  enqueue(request: ScheduledRequest): void;
  /** Requests accepted and not yet completed (queued or executing). */
  readonly inflightCount: number;
  /** Requests waiting for an instance. */
  readonly queuedCount: number;
  /**
   * Instances that start taking work now, beside the others (an in-place instance count change,
   * models-and-scheduling.md §1.10). Their warmup must be done.
   */
  addInstances(runners: readonly InstanceRunner[]): void;
  /**
   * Instances that take no new work from now on; batches they already hold finish and still count
   * in `inflightCount` until they do (`InstanceRunner.idle` tells when).
   */
  removeInstances(runners: readonly InstanceRunner[]): void;
  /** Refuses new requests from now on; queued and executing ones still complete. */
  stop(): void;
  /** Resolves once nothing is queued or executing. */
  drain(): Promise<void>;
}
