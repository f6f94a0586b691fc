/**
 * Static ensemble checks (models-and-scheduling.md §6.1, §6.2 first table), run by
 * validateModelConfig when `ensemble_scheduling` is set. The load-time checks of §6.2 (against the
 * composing models' configs) belong to the ensemble scheduler.
 *
 * "A composing-model input is mapped at most once within a step" holds by construction:
 * `input_map` is a map keyed by the composing model's input name.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from './model-config.js';

interface EnsembleTensor {
  readonly name: string;
  /** Written by some step's output_map. */
  produced: boolean;
  /** Tensors this one is computed from (the inputs of the step producing it). */
  readonly upstream: EnsembleTensor[];
  /** Tensors computed from this one. */
  readonly downstream: EnsembleTensor[];
  ready: boolean;
}

/** Throws `NereidError('CONFIG_INVALID')` for the first §6.1/§6.2 static rule `config` breaks. */
export function validateEnsembleScheduling(config: ModelConfig): void {
  const fail: (message: string) => never = (message) => {
    throw new NereidError('CONFIG_INVALID', `model '${config.name}': ${message}`);
  };
  const ensemble = config.ensemble_scheduling;
  if (ensemble === undefined) return;
  if (config.platform !== 'ensemble') {
    fail(`'ensemble_scheduling' cannot be set for a model whose platform is not 'ensemble' (platform is '${config.platform}')`);
  }
  if (config.instance_group.length > 0) fail("'instance_group' must not be specified for an ensemble");
  if (config.optimization !== undefined) fail("'optimization' must not be specified for an ensemble");
  if (config.model_warmup.length > 0) fail("'model_warmup' must not be specified for an ensemble");
  if (ensemble.step.length === 0) fail("ensemble_scheduling must specify one or more 'step's");

  const tensors = new Map<string, EnsembleTensor>();
  const tensor = (name: string): EnsembleTensor => {
    let t = tensors.get(name);
    if (t === undefined) {
      t = { name, produced: false, upstream: [], downstream: [], ready: false };
      tensors.set(name, t);
    }
    return t;
  };

  ensemble.step.forEach((step, index) => {
    const where = `ensemble step ${index}`;
    if (step.model_name === '') fail(`${where} must specify 'model_name'`);
    if (Object.keys(step.input_map).length === 0) fail(`${where} (model '${step.model_name}') must specify a non-empty 'input_map'`);
    if (Object.keys(step.output_map).length === 0) fail(`${where} (model '${step.model_name}') must specify a non-empty 'output_map'`);
    const outputs: EnsembleTensor[] = [];
    for (const name of Object.values(step.output_map)) {
      const t = tensor(name);
      if (t.produced) fail(`ensemble tensor '${name}' can appear in an output map only once (again in ${where})`);
      t.produced = true;
      outputs.push(t);
    }
    for (const name of Object.values(step.input_map)) {
      const t = tensor(name);
      for (const out of outputs) {
        out.upstream.push(t);
        t.downstream.push(out);
      }
    }
  });

  // A conditional step (docs/ensembles.md) also consumes its condition tensor.
  for (const [key, value] of Object.entries(config.parameters)) {
    if (!key.startsWith('step_condition:')) continue;
    const target = key.slice('step_condition:'.length);
    ensemble.step.forEach((step, index) => {
      if (String(index) !== target && step.model_name !== target) return;
      const condition = tensor(value.string_value);
      for (const name of Object.values(step.output_map)) {
        const out = tensor(name);
        out.upstream.push(condition);
        condition.downstream.push(out);
      }
    });
  }

  const queue: EnsembleTensor[] = [];
  for (const input of config.input) {
    const t = tensors.get(input.name);
    if (t === undefined) fail(`ensemble input '${input.name}' is not used: no step maps it into a composing model`);
    t.ready = true;
    queue.push(t);
  }
  for (let i = 0; i < queue.length; i++) {
    for (const next of queue[i].downstream) {
      if (!next.ready && next.upstream.every((u) => u.ready)) {
        next.ready = true;
        queue.push(next);
      }
    }
  }

  const outputs = new Set<string>();
  for (const output of config.output) {
    const t = tensors.get(output.name);
    if (t === undefined || !t.produced) fail(`output '${output.name}' for ensemble '${config.name}' is not written: no step maps an output to it`);
    if (!t.ready) {
      const source = firstUnconnected(t);
      fail(
        `output '${output.name}' for ensemble '${config.name}' is not written` +
          (source !== t ? `: at least one of its depending tensors, '${source.name}', is not connected` : ''),
      );
    }
    outputs.add(output.name);
  }
  for (const t of tensors.values()) {
    if (outputs.has(t.name)) continue;
    if (!t.ready || t.downstream.length === 0) {
      fail(`ensemble tensor '${t.name}' is unused in ensemble '${config.name}': it must be produced from the ensemble inputs and consumed by a step`);
    }
  }
}

/** Walks up through not-ready tensors to the first one that nothing feeds (as the reference). */
function firstUnconnected(start: EnsembleTensor): EnsembleTensor {
  const seen = new Set<string>();
  let last = start;
  let upstream: EnsembleTensor[] | undefined = start.upstream;
  while (upstream !== undefined && upstream.length > 0) {
    const next: EnsembleTensor | undefined = upstream.find((u) => !u.ready && !seen.has(u.name));
    upstream = undefined;
    if (next !== undefined) {
      seen.add(next.name);
      last = next;
      upstream = next.upstream;
    }
  }
  return last;
}
