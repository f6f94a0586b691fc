/**
 * Per-call settings both clients take (signal, timeout, headers, retry policy) and the retry loop
 * of idempotent calls.
 */
import { GrpcStatus } from '@nereid/protocol';
import { InferenceServerError } from './errors.js';

/**
 * How an idempotent call (health, metadata, config, statistics, repository index, shared-memory
 * status) is retried when the server cannot be reached or answers UNAVAILABLE (HTTP 503, gRPC
 * code 14). Inference, model control and registration are never retried.
 */
export interface RetryPolicy {
  /** Further attempts after the first (0: none). */
  retries: number;
  /** Wait before the first retry, in ms; doubled after each (default 100). */
  backoffMs?: number;
  /** Longest wait between attempts, in ms (default 2000). */
  maxBackoffMs?: number;
}

/** Settings of one call, for every method of both clients. */
export interface CallOptions {
  /** Aborting cancels the call (the server cancels the request); it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Milliseconds the call may take (gRPC: its deadline). Past it the call is cancelled and
   * rejects with InferenceServerError status 504 (gRPC: code DEADLINE_EXCEEDED). Each retry
   * attempt has its own timeout.
   */
  timeout?: number;
  /** Headers (gRPC: metadata) sent with the call. */
  headers?: Readonly<Record<string, string>>;
  /** Overrides the client's retry policy for this call; `false`: no retries. Idempotent calls only. */
  retry?: RetryPolicy | false;
}

/**
 * Log settings of the logging extension (protocol.md §3.16): `log_file`, `log_info`,
 * `log_warning`, `log_error`, `log_verbose_level`, `log_format`.
 */
export type LogSettings = Record<string, boolean | number | string>;

/** Settings of a client, defaults for each call. */
export interface ClientDefaults {
  /** Retry policy of idempotent calls (default: no retries). */
  retry?: RetryPolicy;
  /** Default `timeout` of every call, in ms (default: none). */
  timeout?: number;
}

/** Whether `err` means the server was not there or not ready to take the call. */
export function isRetryable(err: unknown): boolean {
  return err instanceof InferenceServerError && (err.status === 503 || err.grpcCode === GrpcStatus.UNAVAILABLE);
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs `attempt` and, while it fails with a retryable error and the policy allows, again after
 * the policy's backoff. The last error is thrown; an abort of `signal` stops the waiting.
 */
export async function withRetry<T>(policy: RetryPolicy | false | undefined, signal: AbortSignal | undefined, attempt: () => Promise<T>): Promise<T> {
  const retries = policy ? Math.max(0, Math.floor(policy.retries)) : 0;
  let wait = policy ? (policy.backoffMs ?? 100) : 0;
  const maxWait = policy ? (policy.maxBackoffMs ?? 2000) : 0;
  for (let i = 0; ; i++) {
    try {
      return await attempt();
    } catch (err) {
      if (i >= retries || !isRetryable(err) || signal?.aborted) throw err;
    }
    await sleep(Math.min(wait, maxWait), signal);
    wait *= 2;
  }
}
