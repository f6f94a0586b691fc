/**
 * Preemption by priority, a Nereid extension of the dynamic batcher's priority levels
 * (models-and-scheduling.md §4.2), set per model by two config parameters and off by default:
 *
 * - `preemption`: `off` (default), `queued`, `running` or `queued,running`.
 * - `max_total_queue_size`: requests queued for the model across all priority levels (0 or absent:
 *   no such limit). Triton's `max_queue_size` limits one level only, so evicting a request of
 *   another level would free none of it: queued preemption acts on this model-wide limit instead.
 *
 * Queued: a request that finds the model's queue at `max_total_queue_size` evicts the most
 * recently queued request of the lowest-priority level holding any, provided that level is lower
 * than its own; else it is refused as a full queue refuses it. A level's own `max_queue_size`
 * still refuses first (evicting elsewhere frees nothing in it).
 *
 * Running: when a request waits and every instance is busy, a decoupled batch executing on an
 * instance whose requests are all of a lower level than the waiting request's is ended with a
 * preempted error, and its backend is told (`BackendInstance.preempt`) so that the model stops
 * and `execute` returns; the instance then takes the waiting request.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../config/model-config.js';

/** The kinds of preemption, the `kind` label of `nereid_inference_preemptions_total`. */
export type PreemptionKind = 'queued' | 'running';
export const PREEMPTION_KINDS: readonly PreemptionKind[] = ['queued', 'running'];

export interface PreemptionSettings {
  readonly queued: boolean;
  readonly running: boolean;
  /** Requests queued across all priority levels; 0: unlimited. */
  readonly maxTotalQueueSize: number;
}

export const NO_PREEMPTION: PreemptionSettings = { queued: false, running: false, maxTotalQueueSize: 0 };

export const PREEMPTION_PARAMETER = 'preemption';
export const MAX_TOTAL_QUEUE_SIZE_PARAMETER = 'max_total_queue_size';

type PreemptionConfig = Pick<ModelConfig, 'name' | 'parameters' | 'dynamic_batching' | 'sequence_batching' | 'model_transaction_policy'>;

function invalid(model: string, message: string): NereidError {
  return new NereidError('CONFIG_INVALID', `model '${model}': ${message}`);
}

/**
 * Reads and checks the two parameters. Throws CONFIG_INVALID naming the model, the parameter and
 * what would be accepted.
 */
export function preemptionSettings(config: PreemptionConfig): PreemptionSettings {
  const model = config.name;
  const mode = (config.parameters[PREEMPTION_PARAMETER]?.string_value ?? '').trim();
  const sizeText = (config.parameters[MAX_TOTAL_QUEUE_SIZE_PARAMETER]?.string_value ?? '').trim();
  let queued = false;
  let running = false;
  if (mode !== '' && mode !== 'off') {
    for (const part of mode.split(',').map((p) => p.trim())) {
      if (part === 'queued') queued = true;
      else if (part === 'running') running = true;
      else {
        throw invalid(model, `parameter '${PREEMPTION_PARAMETER}' must be "off", "queued", "running" or "queued,running", got '${mode}'`);
      }
    }
  }
  let maxTotalQueueSize = 0;
  if (sizeText !== '') {
    maxTotalQueueSize = Number(sizeText);
    if (!/^\d+$/.test(sizeText) || !Number.isSafeInteger(maxTotalQueueSize)) {
      throw invalid(model, `parameter '${MAX_TOTAL_QUEUE_SIZE_PARAMETER}' must be a non-negative integer, got '${sizeText}'`);
    }
  }
  const db = config.dynamic_batching;
  if (maxTotalQueueSize > 0 && (db === undefined || config.sequence_batching !== undefined)) {
    throw invalid(
      model,
      `parameter '${MAX_TOTAL_QUEUE_SIZE_PARAMETER}' limits the dynamic batcher's queue; the model has no dynamic_batching section`,
    );
  }
  if (queued || running) {
    if (db === undefined || config.sequence_batching !== undefined || db.priority_levels < 2) {
      throw invalid(
        model,
        `parameter '${PREEMPTION_PARAMETER}' acts between priority levels and needs dynamic_batching with priority_levels of 2 or more` +
          (db === undefined ? '; the model has no dynamic_batching section' : `; priority_levels is ${db.priority_levels}`),
      );
    }
  }
  if (queued && maxTotalQueueSize === 0) {
    throw invalid(
      model,
      `parameter '${PREEMPTION_PARAMETER}' "queued" evicts requests from a full model-wide queue: set parameter '${MAX_TOTAL_QUEUE_SIZE_PARAMETER}' ` +
        `(a level's max_queue_size limits that level only, and evicting a request of another level frees none of it)`,
    );
  }
  if (running && config.model_transaction_policy?.decoupled !== true) {
    throw invalid(
      model,
      `parameter '${PREEMPTION_PARAMETER}' "running" stops decoupled requests between two responses; ` +
        `the model is not decoupled (model_transaction_policy { decoupled: true })`,
    );
  }
  return { queued, running, maxTotalQueueSize };
}

/** The error of a request evicted from the queue by a higher-priority one. */
export function queuedPreemptionError(model: string, request: string, level: number, by: number, capacity: number): NereidError {
  return new NereidError(
    'REQUEST_PREEMPTED',
    `Request preempted while queued: model '${model}' evicted request '${request}' (priority level ${level}, the lowest queued) ` +
      `from its full queue (max_total_queue_size ${capacity}) to admit a request of priority level ${by}; ` +
      `retry later or send it with a higher priority`,
  );
}

/** The error of a running decoupled request stopped for a higher-priority one. */
export function runningPreemptionError(model: string, request: string, level: number, by: number): NereidError {
  return new NereidError(
    'REQUEST_PREEMPTED',
    `Request preempted while running: model '${model}' stopped request '${request}' (priority level ${level}) ` +
      `between two responses to give its instance to a request of priority level ${by}; ` +
      `the responses already sent stand; retry the rest later or send it with a higher priority`,
  );
}
