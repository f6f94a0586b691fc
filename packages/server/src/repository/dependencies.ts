/**
 * The dependency graph between models (models-and-scheduling.md §1.11): an ensemble depends on
 * every model its steps name. The model manager loads dependencies first, unloads dependents
 * with what they depend on, and cascades `unload_dependents`.
 */
import type { ModelConfig } from '../config/model-config.js';

/** One model another one needs: a version number, or -1 for "any ready version". */
export interface Dependency {
  readonly model: string;
  readonly version: number;
}

/** The (model, version) pairs `config` depends on, each once, in step order. */
export function dependenciesOf(config: ModelConfig): Dependency[] {
  const seen = new Set<string>();
  const out: Dependency[] = [];
  for (const step of config.ensemble_scheduling?.step ?? []) {
    if (step.model_name === '') continue;
    const version = step.model_version >= 0 ? step.model_version : -1;
    const key = `${step.model_name}\0${version}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ model: step.model_name, version });
  }
  return out;
}

/** `a -> b -> a`, for the circular-dependency error. */
export function describeCycle(chain: readonly string[], back: string): string {
  return [...chain.slice(chain.indexOf(back)), back].join(' -> ');
}
