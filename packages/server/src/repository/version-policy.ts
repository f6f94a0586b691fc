/**
 * Version policies (models-and-scheduling.md §1.7): which of a model's version directories are
 * served.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelVersionPolicy } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';

/**
 * The versions a policy selects from the available ones, ascending. Fails when nothing is
 * selected: "at least one version must be available under the version policy of model '<m>'".
 */
export function selectVersions(
  model: string,
  policy: ModelVersionPolicy | undefined,
  available: readonly number[],
  logger?: Logger,
): number[] {
  const sorted = [...available].sort((a, b) => a - b);
  let selected: number[];
  if (policy?.all) {
    selected = sorted;
  } else if (policy?.specific) {
    const present = new Set(sorted);
    selected = [];
    for (const v of [...new Set(policy.specific.versions)].sort((a, b) => a - b)) {
      if (present.has(v)) selected.push(v);
      else logger?.error(`model '${model}': version ${v} named by the version policy has no directory; skipping it`);
    }
  } else {
    const n = policy?.latest?.num_versions ?? 1;
    selected = n > 0 ? sorted.slice(Math.max(0, sorted.length - n)) : [];
  }
  if (selected.length === 0) {
    const have = sorted.length ? `found versions ${sorted.join(', ')}` : 'found no version directories';
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `at least one version must be available under the version policy of model '${model}' (${have})`,
    );
  }
  return selected;
}
