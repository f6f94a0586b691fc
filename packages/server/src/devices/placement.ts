/**
 * Placement of KIND_GPU instances on GPUs and MIG instances.
 *
 * Triton's rules hold for whole GPUs: a group `{ kind: KIND_GPU count: N gpus: [a, b] }` has N
 * instances on each listed GPU, and GPUs are shared between models. Nereid's extension names MIG
 * instances through model parameters (never new configuration fields):
 *
 *     parameters { key: "mig_devices" value { string_value: "MIG-<uuid>,1g.10gb:2" } }
 *     parameters { key: "mig_devices.<group name>" value { string_value: "3g.20gb" } }
 *
 * Each comma-separated item is a MIG UUID or a profile with an optional count (`1g.10gb:2`: two
 * free instances of that profile). The per-group key wins over the model-wide one, which applies
 * to every KIND_GPU group. A group on MIG instances has `count` instances on each of them (as
 * `count` per GPU in Triton). A MIG instance is held by one model at a time (hard isolation): a
 * second model asking for it fails to load, naming the holder; the hold ends when the model's
 * last version that uses it unloads.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig, ModelInstanceGroup } from '../config/model-config.js';
import type { DeviceList, Gpu, MigInstance } from './discovery.js';

export const MIG_DEVICES_PARAMETER = 'mig_devices';
/**
 * `instance` (default): a stub-hosted KIND_GPU instance sees only its device (CUDA_VISIBLE_DEVICES
 * set to its UUID; it is `cuda:0` there). `server`: it sees every GPU the server sees, numbered as
 * the server numbers them (GPUs in MIG mode left out), so that `cuda:<model_instance_device_id>`
 * is its device, as in Triton, when no GPU is in MIG mode.
 */
export const CUDA_VISIBLE_DEVICES_PARAMETER = 'cuda_visible_devices';

/** Where one KIND_GPU instance runs. */
export interface PlacedDevice {
  /** The server's index of the GPU (the parent GPU of a MIG instance). */
  readonly index: number;
  /** The GPU's UUID. */
  readonly uuid: string;
  readonly name: string;
  /** Set when the instance runs on a MIG instance. */
  readonly mig?: { readonly uuid: string; readonly profile: string; readonly memoryBytes: number };
  /**
   * What a stub-hosted instance's CUDA_VISIBLE_DEVICES is set to: the MIG or GPU UUID, or with
   * `cuda_visible_devices: server` every visible GPU's UUID in the server's order.
   */
  readonly cudaVisibleDevices: string;
}

interface MigRequest {
  readonly uuids: readonly string[];
  readonly profiles: readonly { readonly profile: string; readonly count: number }[];
  /** The parameter key it came from, for messages. */
  readonly key: string;
}

function configError(config: Pick<ModelConfig, 'name'>, message: string): NereidError {
  return new NereidError('CONFIG_INVALID', `model '${config.name}': ${message}`);
}

function parameter(config: ModelConfig, key: string): string | undefined {
  return config.parameters[key]?.string_value;
}

/** The MIG request of `group`, if its model names MIG instances for it. */
function migRequest(config: ModelConfig, group: ModelInstanceGroup): MigRequest | undefined {
  const own = `${MIG_DEVICES_PARAMETER}.${group.name}`;
  const key = parameter(config, own) !== undefined ? own : parameter(config, MIG_DEVICES_PARAMETER) !== undefined ? MIG_DEVICES_PARAMETER : undefined;
  if (key === undefined) return undefined;
  const uuids: string[] = [];
  const profiles: { profile: string; count: number }[] = [];
  for (const raw of parameter(config, key)!.split(',')) {
    const item = raw.trim();
    const profile = /^(\d+(?:c\.\d+)?g\.\d+gb(?:\+[a-z0-9.]+)?)(?::(\d+))?$/.exec(item);
    if (item.startsWith('MIG-')) uuids.push(item);
    else if (profile && (profile[2] === undefined || Number(profile[2]) >= 1)) profiles.push({ profile: profile[1]!, count: Number(profile[2] ?? 1) });
    else {
      throw configError(
        config,
        `parameter '${key}' has '${item}', which is neither a MIG UUID ('MIG-…') nor a MIG profile with an optional count ('1g.10gb', '1g.10gb:2')`,
      );
    }
  }
  return { uuids, profiles, key };
}

function label(m: MigInstance): string {
  return `${m.uuid} (${m.profile} on GPU ${m.parentIndex})`;
}

/** How the stub of a KIND_GPU instance on `gpu` (or its MIG instance) sees CUDA devices. */
function visibleFor(config: ModelConfig, devices: DeviceList, gpu: Gpu, mig: MigInstance | undefined): string {
  const mode = parameter(config, CUDA_VISIBLE_DEVICES_PARAMETER) ?? 'instance';
  if (mode === 'instance') return mig?.uuid ?? gpu.uuid;
  if (mode !== 'server') throw configError(config, `parameter '${CUDA_VISIBLE_DEVICES_PARAMETER}' must be 'instance' or 'server', got '${mode}'`);
  if (mig !== undefined) {
    throw configError(config, `parameter '${CUDA_VISIBLE_DEVICES_PARAMETER}: server' cannot be used with MIG instances: a MIG instance is always isolated`);
  }
  return devices.gpus.filter((g) => !g.migEnabled).map((g) => g.uuid).join(',');
}

/**
 * The configuration step after instance-group normalisation: checks the placement parameters
 * against the discovered devices and sets each MIG group's `gpus` to the GPUs its MIG instances
 * can come from. Throws CONFIG_INVALID for a parameter naming a missing group, a malformed or
 * unknown MIG UUID or profile, or a whole GPU in MIG mode used without naming MIG instances.
 * `requestedGpus`: each group's `gpus` as the configuration gave it, before normalisation.
 */
export function checkDevicePlacement(config: ModelConfig, devices: DeviceList, requestedGpus: ReadonlyMap<string, readonly number[]>): void {
  for (const key of Object.keys(config.parameters)) {
    if (!key.startsWith(`${MIG_DEVICES_PARAMETER}.`)) continue;
    const name = key.slice(MIG_DEVICES_PARAMETER.length + 1);
    const group = config.instance_group.find((g) => g.name === name);
    if (group === undefined) throw configError(config, `parameter '${key}' names no instance group of the model`);
    if (group.kind !== 'KIND_GPU') throw configError(config, `parameter '${key}' names instance group '${name}', which has kind ${group.kind}, not KIND_GPU`);
  }
  for (const group of config.instance_group) {
    if (group.kind !== 'KIND_GPU') continue;
    const request = migRequest(config, group);
    if (request === undefined) {
      if (group.gpus.length === 0 && devices.gpus.every((g) => g.migEnabled)) {
        throw configError(
          config,
          `instance group '${group.name}' has kind KIND_GPU, but every GPU the server sees is in MIG mode: ` +
            `name MIG instances with parameter '${MIG_DEVICES_PARAMETER}'`,
        );
      }
      for (const index of group.gpus) {
        const gpu = devices.gpu(index);
        if (gpu?.migEnabled) {
          throw configError(
            config,
            `instance group '${group.name}' is placed on GPU ${index} (${gpu.name}), which is in MIG mode: CUDA runs only on its MIG instances; ` +
              `name them with parameter '${MIG_DEVICES_PARAMETER}' (a MIG UUID or a profile such as '${gpu.migs[0]?.profile ?? '1g.10gb'}')`,
          );
        }
        if (gpu !== undefined) visibleFor(config, devices, gpu, undefined);
      }
      continue;
    }
    const allowed = requestedGpus.get(group.name) ?? [];
    const pool = devices.migInstances.filter((m) => allowed.length === 0 || allowed.includes(m.parentIndex));
    const parents = new Set<number>();
    for (const uuid of request.uuids) {
      const mig = devices.migInstances.find((m) => m.uuid === uuid);
      if (mig === undefined) {
        const known = devices.migInstances.map(label);
        throw configError(
          config,
          `parameter '${request.key}' names MIG instance ${uuid}, which the server does not see; ${known.length > 0 ? `its MIG instances are: ${known.join(', ')}` : 'it has no MIG instances'}`,
        );
      }
      if (!pool.includes(mig)) throw configError(config, `parameter '${request.key}' names MIG instance ${label(mig)}, which is not on the group's gpus [${allowed.join(', ')}]`);
      parents.add(mig.parentIndex);
    }
    for (const { profile, count } of request.profiles) {
      const matching = pool.filter((m) => m.profile === profile && !request.uuids.includes(m.uuid));
      if (matching.length < count) {
        const profiles = [...new Set(pool.map((m) => m.profile))];
        throw configError(
          config,
          `parameter '${request.key}' asks for ${count} MIG instance(s) of profile ${profile}, but the server has ${matching.length}` +
            `${allowed.length > 0 ? ` on GPUs [${allowed.join(', ')}]` : ''}; profiles there: ${profiles.length > 0 ? profiles.join(', ') : 'none'}`,
        );
      }
      for (const m of matching) parents.add(m.parentIndex);
    }
    group.gpus = [...parents].sort((a, b) => a - b);
  }
}

/** The devices each KIND_GPU instance group's instances run on, and the MIG holds taken for them. */
export interface Placement {
  /** Group name → devices; the group has `count` instances on each. */
  readonly groups: ReadonlyMap<string, readonly PlacedDevice[]>;
  /** Gives back the MIG holds (once; later calls do nothing). */
  release(): void;
}

/**
 * Who holds which MIG instance. Single-threaded (the event loop): `place` reserves everything it
 * needs before it returns, so two loads never pick the same free instance.
 */
export class MigHolds {
  /** MIG UUID → holding model and how many of its versions hold it. */
  readonly #holds = new Map<string, { model: string; versions: number }>();

  /** The model holding `uuid`, if any. */
  holder(uuid: string): string | undefined {
    return this.#holds.get(uuid)?.model;
  }

  /**
   * Places the KIND_GPU groups of `config` (after `checkDevicePlacement`) for one version of
   * `model`, taking its MIG instances. Throws MODEL_LOAD_FAILED naming the holder when a MIG
   * instance it needs is held by another model, or too few free ones of a profile remain.
   */
  place(config: ModelConfig, devices: DeviceList): Placement {
    const model = config.name;
    const groups = new Map<string, PlacedDevice[]>();
    const taken = new Set<string>();
    for (const group of config.instance_group) {
      if (group.kind !== 'KIND_GPU') continue;
      const request = migRequest(config, group);
      if (request === undefined) {
        groups.set(
          group.name,
          group.gpus.map((index) => {
            const gpu = devices.gpu(index)!;
            return { index, uuid: gpu.uuid, name: gpu.name, cudaVisibleDevices: visibleFor(config, devices, gpu, undefined) };
          }),
        );
        continue;
      }
      const pool = devices.migInstances.filter((m) => group.gpus.includes(m.parentIndex));
      const picked: MigInstance[] = [];
      for (const uuid of request.uuids) {
        const mig = pool.find((m) => m.uuid === uuid)!;
        const holder = this.holder(uuid);
        if (holder !== undefined && holder !== model) {
          throw new NereidError('MODEL_LOAD_FAILED', `model '${model}': MIG instance ${label(mig)} is held by model '${holder}'; it is freed when that model unloads`);
        }
        if (!picked.includes(mig)) picked.push(mig);
      }
      for (const { profile, count } of request.profiles) {
        // Instances this model already holds first (a reload keeps its devices), then free ones.
        const candidates = pool
          .filter((m) => m.profile === profile && !picked.includes(m) && !taken.has(m.uuid))
          .filter((m) => this.holder(m.uuid) === undefined || this.holder(m.uuid) === model)
          .sort((a, b) => Number(this.holder(b.uuid) === model) - Number(this.holder(a.uuid) === model));
        if (candidates.length < count) {
          const held = pool
            .filter((m) => m.profile === profile && this.holder(m.uuid) !== undefined && this.holder(m.uuid) !== model)
            .map((m) => `${m.uuid} by model '${this.holder(m.uuid)}'`);
          throw new NereidError(
            'MODEL_LOAD_FAILED',
            `model '${model}': instance group '${group.name}' needs ${count} free MIG instance(s) of profile ${profile}, ${candidates.length} free` +
              `${held.length > 0 ? `; held: ${held.join(', ')}` : ''}`,
          );
        }
        picked.push(...candidates.slice(0, count));
      }
      for (const m of picked) taken.add(m.uuid);
      groups.set(
        group.name,
        picked.map((m) => {
          const gpu = devices.gpu(m.parentIndex)!;
          return {
            index: gpu.index,
            uuid: gpu.uuid,
            name: gpu.name,
            mig: { uuid: m.uuid, profile: m.profile, memoryBytes: m.memoryBytes },
            cudaVisibleDevices: visibleFor(config, devices, gpu, m),
          };
        }),
      );
    }
    for (const uuid of taken) {
      const hold = this.#holds.get(uuid);
      if (hold) hold.versions++;
      else this.#holds.set(uuid, { model, versions: 1 });
    }
    let released = false;
    return {
      groups,
      release: () => {
        if (released) return;
        released = true;
        for (const uuid of taken) {
          const hold = this.#holds.get(uuid)!;
          if (--hold.versions === 0) this.#holds.delete(uuid);
        }
      },
    };
  }
}
