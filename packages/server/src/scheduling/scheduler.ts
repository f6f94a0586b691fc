/**
 * What every scheduler implements (direct, dynamic batcher, and later sequence and ensemble), and
 * what it needs of a request. Shutdown and reload rely only on this interface.
 */
import type { NereidError } from '@nereid/protocol';
import type { BackendRequest } from '../backends/spi.js';

/** Monotonic timestamps of a request, in nanoseconds (models-and-scheduling.md §9.1). */
export interface RequestTimes {
  request: bigint;
  queue: bigint;
  computeStart: bigint;
  computeInputEnd: bigint;
  computeOutputStart: bigint;
  computeEnd: bigint;
}

/** A validated request as a scheduler sees it. */
export interface ScheduledRequest extends BackendRequest {
  readonly times: RequestTimes;
  /** Set once the final response (or an error) was delivered. */
  readonly completed: boolean;
  /** Ends the request with an error (ignored if already completed). */
  fail(error: NereidError): void;
}

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
  /** Refuses new requests from now on; queued and executing ones still complete. */
  stop(): void;
  /** Resolves once nothing is queued or executing. */
  drain(): Promise<void>;
}
