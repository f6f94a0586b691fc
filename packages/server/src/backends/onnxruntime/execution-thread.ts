/**
 * Where an ONNX Runtime instance runs its session (model config parameter `execution_thread`, a
 * Nereid extension beyond Triton; docs/backends.md):
 *   - `worker`: on the instance's worker thread (Triton's behaviour: the event loop never blocks);
 *   - `inline`: on the event loop's thread, every run, whatever it costs;
 *   - `auto` (default): on the worker, and on the event loop's thread once the instance has shown
 *     that its runs are shorter than the hop to the worker and back would be (`InlineChoice`).
 */
import { NereidError } from '@nereid/protocol';

export type ExecutionThread = 'auto' | 'inline' | 'worker';

/** Parses the `execution_thread` parameter (absent or empty: `auto`). */
export function parseExecutionThread(model: string, text: string | undefined): ExecutionThread {
  const value = text?.trim().toLowerCase();
  if (value === undefined || value === '') return 'auto';
  if (value === 'auto' || value === 'inline' || value === 'worker') return value;
  throw new NereidError(
    'CONFIG_INVALID',
    `model '${model}': parameter 'execution_thread' must be "auto", "inline" or "worker", got '${text}'`,
  );
}

export interface InlineLimits {
  /** Worker runs measured before each decision. */
  readonly sampleRuns: number;
  /**
   * The median of their run times must be at most this (ns), or at most the median time the hop
   * to the worker added to them when that is longer, up to four times this; and the 90th
   * percentile at most four times the bound. On a busy machine every wall-clock time stretches,
   * runs and hops alike: the hop keeps the comparison fair, the cap keeps long runs off the event
   * loop. Not a higher percentile: a worker's first run after it wakes runs on cold caches
   * (measured: 50 µs where the next ones take 20 µs), and the slowest runs of a window measure
   * preemption, not the model.
   */
  readonly maxRunNs: number;
  /** Loading the session (as measured on the worker) must have taken at most this (ns). */
  readonly maxLoadNs: number;
  /**
   * Inline runs whose median is checked against twice the bound that admitted them (twice: a
   * machine that gets busier makes every run somewhat longer, which must not send the instance
   * back and forth).
   */
  readonly recheckRuns: number;
  /** One inline run longer than this (ns) moves the instance back to its worker at once. */
  readonly maxSingleRunNs: number;
}

/**
 * Run times of the ONNX Runtime call alone: the hop to a worker and back costs 25–30 µs on the
 * development machine, and a run this short blocks the event loop for less than a request's own
 * parsing does.
 */
export const DEFAULT_INLINE_LIMITS: InlineLimits = {
  sampleRuns: 64,
  maxRunNs: 50_000,
  maxLoadNs: 50_000_000,
  recheckRuns: 32,
  maxSingleRunNs: 10_000_000,
};

/**
 * The `auto` decision of one instance. It samples the run time of worker runs and the time the
 * hop added; when a window of `sampleRuns` is within the bound (see `InlineLimits.maxRunNs`) (and the session loaded quickly
 * enough that loading a second copy on the event loop's thread is harmless), the instance may run
 * inline batches of up to the largest input size sampled. Inline runs are measured in turn: when
 * the median of the last `recheckRuns` exceeds twice that bound, or a single run exceeds
 * `maxSingleRunNs`, the instance goes back to its worker and sampling starts over.
 */
export class InlineChoice {
  readonly #limits: InlineLimits;
  #loadNs: number;
  readonly #samples: Float64Array;
  readonly #hops: Float64Array;
  /** The bound that admitted the current inline period. */
  #inlineBound = 0;
  #sampled = 0;
  #sampledMaxBytes = 0;
  #inline = false;
  #inlineMaxBytes = 0;
  readonly #recent: Float64Array;
  #recentCount = 0;

  /** @param loadNs how long loading the session took on the worker */
  constructor(loadNs: number, limits: InlineLimits = DEFAULT_INLINE_LIMITS) {
    this.#limits = limits;
    this.#loadNs = loadNs;
    this.#samples = new Float64Array(limits.sampleRuns);
    this.#hops = new Float64Array(limits.sampleRuns);
    this.#recent = new Float64Array(limits.recheckRuns);
  }

  /** Whether batches may run inline at all now. */
  get inline(): boolean {
    return this.#inline;
  }

  /** Whether a batch with `inputBytes` bytes of input may run inline now. */
  fits(inputBytes: number): boolean {
    return this.#inline && inputBytes <= this.#inlineMaxBytes;
  }

  /**
   * Records a worker run of `runNs` on `inputBytes` bytes of input, `hopNs` being what the trip
   * to the worker and back added to it; true when this run completes a window that qualifies the
   * instance for inline runs (it is then `inline`).
   */
  recordWorkerRun(runNs: number, inputBytes: number, hopNs = 0): boolean {
    if (this.#inline || this.#loadNs > this.#limits.maxLoadNs) return false;
    this.#hops[this.#sampled] = hopNs;
    this.#samples[this.#sampled++] = runNs;
    if (inputBytes > this.#sampledMaxBytes) this.#sampledMaxBytes = inputBytes;
    if (this.#sampled < this.#samples.length) return false;
    const median = percentile(this.#samples, 0.5);
    const p90 = percentile(this.#samples, 0.9);
    const max = this.#limits.maxRunNs;
    const bound = Math.min(4 * max, Math.max(max, percentile(this.#hops, 0.5)));
    const maxBytes = this.#sampledMaxBytes;
    this.#sampled = 0;
    this.#sampledMaxBytes = 0;
    if (median > bound || p90 > 4 * bound) return false;
    this.#inline = true;
    this.#inlineBound = bound;
    this.#inlineMaxBytes = maxBytes;
    this.#recentCount = 0;
    return true;
  }

  /**
   * Records an inline run of `runNs`; false when the instance must go back to its worker (it is
   * then no longer `inline`, and worker runs are sampled again).
   */
  recordInlineRun(runNs: number): boolean {
    if (!this.#inline) return false;
    const recent = this.#recent;
    recent[this.#recentCount++ % recent.length] = runNs;
    const slow =
      runNs > this.#limits.maxSingleRunNs ||
      (this.#recentCount >= recent.length && this.#recentCount % recent.length === 0 && percentile(recent, 0.5) > 2 * this.#inlineBound);
    if (slow) this.#inline = false;
    return !slow;
  }

  /** Gives up inline runs for good (the inline session could not be loaded). */
  disable(): void {
    this.#inline = false;
    this.#loadNs = Infinity;
  }
}

function percentile(values: Float64Array, q: number): number {
  const sorted = values.slice().sort();
  return sorted[Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)))]!;
}
