/**
 * Configuration normalisation (models-and-scheduling.md §3.2) and instance-group normalisation
 * (§3.3, §2.10). Both return a new complete config and never modify their input.
 */
import type { ModelConfig, ModelInstanceGroup, Sparse } from './model-config.js';
import { completeModelConfig } from './config-json.js';

/** Idle time set when `max_sequence_idle_microseconds` is 0 (§2.12). */
export const DEFAULT_MAX_SEQUENCE_IDLE_MICROSECONDS = 1_000_000;

/** Backends whose KIND_CPU groups default to 2 instances (§3.3). */
const TWO_CPU_INSTANCE_BACKENDS = new Set(['onnxruntime', 'tensorflow']);

/**
 * Applies the §3.2 defaults: version policy `latest { num_versions: 1 }`, preferred batch sizes
 * `[max_batch_size]` for the dynamic batcher and the oldest sequence strategy, the 1 s sequence
 * idle time, and (not for ensembles) enabled input/output pinned memory.
 */
export function normalizeModelConfig(config: Sparse<ModelConfig> | ModelConfig): ModelConfig {
  const out = completeModelConfig(config);
  out.version_policy ??= { latest: { num_versions: 1 } };

  if (out.dynamic_batching && out.dynamic_batching.preferred_batch_size.length === 0 && out.max_batch_size > 0) {
    out.dynamic_batching.preferred_batch_size = [out.max_batch_size];
  }

  const sequence = out.sequence_batching;
  if (sequence) {
    if (sequence.max_sequence_idle_microseconds === 0) {
      sequence.max_sequence_idle_microseconds = DEFAULT_MAX_SEQUENCE_IDLE_MICROSECONDS;
    }
    if (sequence.oldest && sequence.oldest.preferred_batch_size.length === 0 && out.max_batch_size > 0) {
      sequence.oldest.preferred_batch_size = [out.max_batch_size];
    }
  }

  if (!isEnsemble(out)) {
    const optimization = (out.optimization ??= { priority: 'PRIORITY_DEFAULT', gather_kernel_buffer_threshold: 0, eager_batching: false });
    optimization.input_pinned_memory ??= { enable: true };
    optimization.output_pinned_memory ??= { enable: true };
  }
  return out;
}

export interface InstanceGroupEnvironment {
  /** Ids of the GPUs this server may use; `[]` on a CPU-only server. */
  readonly gpus: readonly number[];
  /** Groups the backend prefers, in order (§3.3); none by default. */
  readonly preferredGroups?: readonly Sparse<ModelInstanceGroup>[];
  /**
   * Default count of a KIND_CPU group, as the backend declares it. When absent: 2 for backends
   * `onnxruntime` and `tensorflow`, else 1 (§3.3).
   */
  readonly defaultCpuCount?: number;
}

/**
 * Instance-group normalisation of §3.3 (not for ensembles, which are returned unchanged apart
 * from being completed):
 * - no group: one group named after the model, from the first usable preferred group, else
 *   KIND_AUTO with the default count;
 * - every group: empty name → `<model>_<index>`; KIND_AUTO → KIND_GPU when GPUs exist and all
 *   listed ones do, else KIND_CPU; count < 1 → a preferred group's count (same kind), else the
 *   default (see `defaultCpuCount`; 1 for other kinds); KIND_GPU without gpus → all available GPUs.
 */
export function normalizeInstanceGroups(config: Sparse<ModelConfig> | ModelConfig, env: InstanceGroupEnvironment): ModelConfig {
  const out = completeModelConfig(config);
  if (isEnsemble(out)) return out;
  const available = new Set(env.gpus);
  const cpuCount = env.defaultCpuCount ?? (TWO_CPU_INSTANCE_BACKENDS.has(out.backend) ? 2 : 1);
  const preferred = (env.preferredGroups ?? []).map((g) => ({
    kind: g.kind ?? 'KIND_AUTO',
    count: g.count ?? 0,
    gpus: g.gpus ?? [],
  }));

  if (out.instance_group.length === 0) {
    const group: ModelInstanceGroup = {
      name: out.name,
      kind: 'KIND_AUTO',
      count: 0,
      gpus: [],
      secondary_devices: [],
      profile: [],
      passive: false,
      host_policy: '',
    };
    for (const pg of preferred) {
      if (pg.kind === 'KIND_GPU') {
        if (available.size === 0) continue;
        group.gpus = pg.gpus.filter((id) => available.has(id));
      } else if (pg.kind === 'KIND_AUTO') {
        group.gpus = [...pg.gpus];
      }
      group.kind = pg.kind;
      group.count = pg.count;
      break;
    }
    out.instance_group.push(group);
  }

  out.instance_group.forEach((group, index) => {
    if (group.name === '') group.name = `${out.name}_${index}`;
    if (group.kind === 'KIND_AUTO') {
      group.kind = available.size > 0 && group.gpus.every((id) => available.has(id)) ? 'KIND_GPU' : 'KIND_CPU';
    }
    for (const pg of preferred) {
      if (pg.kind !== group.kind) continue;
      if (group.kind === 'KIND_GPU' && group.gpus.length === 0 && pg.gpus.length > 0) {
        group.gpus = pg.gpus.filter((id) => available.has(id));
        if (group.gpus.length === 0) continue;
      }
      if (group.count < 1 && pg.count > 0) group.count = pg.count;
    }
    if (group.count < 1) {
      group.count = group.kind === 'KIND_CPU' ? cpuCount : 1;
    }
    if (group.kind === 'KIND_GPU' && group.gpus.length === 0) group.gpus = [...available].sort((a, b) => a - b);
  });
  return out;
}

/** Ensembles are recognised by their scheduling choice, as in the reference normaliser. */
function isEnsemble(config: ModelConfig): boolean {
  return config.ensemble_scheduling !== undefined;
}
