/**
 * GPU and MIG discovery through `nvidia-smi`, restricted to what CUDA_VISIBLE_DEVICES lets the
 * server see. Runs once at start-up; never throws: a machine without nvidia-smi has no GPUs (one
 * info line), a failing or hanging nvidia-smi is logged and also leaves the server without GPUs.
 */
import type { Logger } from '../observability/logger.js';
import { LIST_DEVICES, QUERY_GPUS, QUERY_XML, parseGpuRows, parseMigList, parseMigMemory, runNvidiaSmi, type GpuRow } from './nvidia-smi.js';

/** A MIG instance (a GPU instance with its compute instance) of a GPU in MIG mode. */
export interface MigInstance {
  /** `3g.20gb`, `1g.10gb`, … as `nvidia-smi -L` prints it. */
  readonly profile: string;
  /** `MIG-…`: what CUDA_VISIBLE_DEVICES names it by. */
  readonly uuid: string;
  /** Its framebuffer memory, bytes (0 when nvidia-smi did not say). */
  readonly memoryBytes: number;
  /** The server's index of its GPU. */
  readonly parentIndex: number;
  /** Its index among its GPU's MIG devices. */
  readonly migIndex: number;
}

/** A physical GPU the server may use. */
export interface Gpu {
  /** The server's device index: its position among the visible GPUs (CUDA renumbers from 0). */
  readonly index: number;
  /** nvidia-smi's index of the GPU (differs from `index` when CUDA_VISIBLE_DEVICES reorders). */
  readonly smiIndex: number;
  readonly uuid: string;
  readonly name: string;
  readonly memoryTotalBytes: number;
  readonly memoryUsedBytes: number;
  /** In MIG mode: CUDA runs only on its MIG instances, never on the GPU as a whole. */
  readonly migEnabled: boolean;
  /** Its visible MIG instances (none unless `migEnabled`). */
  readonly migs: readonly MigInstance[];
}

/**
 * One entry per GPU and one per MIG instance (the contract of `devices/index.ts`): a MIG
 * instance's entry has its parent's index and name, its own UUID and memory, and `mig` set.
 */
export interface Device {
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  readonly memoryTotalBytes: number;
  readonly mig?: { readonly profile: string; readonly uuid: string; readonly memoryBytes: number; readonly parentIndex: number };
}

/** What discovery found. */
export class DeviceList {
  readonly gpus: readonly Gpu[];
  constructor(gpus: readonly Gpu[]) {
    this.gpus = gpus;
  }

  static readonly NONE = new DeviceList([]);

  /** Whether the server has any GPU (a GPU in MIG mode counts). */
  get hasGpu(): boolean {
    return this.gpus.length > 0;
  }

  /** Every GPU, each followed by its MIG instances. */
  get devices(): Device[] {
    return this.gpus.flatMap((g) => [
      { index: g.index, uuid: g.uuid, name: g.name, memoryTotalBytes: g.memoryTotalBytes },
      ...g.migs.map((m) => ({
        index: g.index,
        uuid: m.uuid,
        name: g.name,
        memoryTotalBytes: m.memoryBytes,
        mig: { profile: m.profile, uuid: m.uuid, memoryBytes: m.memoryBytes, parentIndex: m.parentIndex },
      })),
    ]);
  }

  get migInstances(): MigInstance[] {
    return this.gpus.flatMap((g) => g.migs);
  }

  gpu(index: number): Gpu | undefined {
    return this.gpus.find((g) => g.index === index);
  }
}

export interface DiscoveryOptions {
  /** The nvidia-smi command (default `nvidia-smi`, found on PATH). */
  readonly command?: string;
  /** The longest one nvidia-smi call may take (default 10 s). */
  readonly timeoutMs?: number;
  /** CUDA_VISIBLE_DEVICES as the server's environment has it (undefined: not set). */
  readonly visibleDevices?: string | undefined;
  readonly logger: Logger;
}

export const DEFAULT_NVIDIA_SMI_TIMEOUT_MS = 10_000;

/** Runs nvidia-smi and returns the GPUs and MIG instances the server may use. Never throws. */
export async function discoverDevices(options: DiscoveryOptions): Promise<DeviceList> {
  const command = options.command ?? 'nvidia-smi';
  const timeoutMs = options.timeoutMs ?? DEFAULT_NVIDIA_SMI_TIMEOUT_MS;
  const logger = options.logger;
  const failed = (reason: string) => {
    logger.error(`GPU discovery failed, the server runs without GPUs: ${reason}`);
    return DeviceList.NONE;
  };
  const gpusOut = await runNvidiaSmi(command, QUERY_GPUS, timeoutMs);
  if (!gpusOut.ok) {
    if (gpusOut.missing) {
      logger.info(`GPU discovery: ${gpusOut.reason}; no GPUs`);
      return DeviceList.NONE;
    }
    if (/No devices were found/.test(gpusOut.reason)) {
      logger.info(`GPU discovery: ${command} found no devices; no GPUs`);
      return DeviceList.NONE;
    }
    return failed(gpusOut.reason);
  }
  let rows: GpuRow[];
  try {
    rows = parseGpuRows(gpusOut.stdout);
  } catch (err) {
    return failed((err as Error).message);
  }
  let migs: Omit<MigInstance, 'parentIndex'>[][] = rows.map(() => []);
  if (rows.some((r) => r.migEnabled)) {
    const [list, xml] = await Promise.all([runNvidiaSmi(command, LIST_DEVICES, timeoutMs), runNvidiaSmi(command, QUERY_XML, timeoutMs)]);
    if (!list.ok) return failed(list.reason);
    const memory = xml.ok ? parseMigMemory(xml.stdout) : new Map<string, Map<number, number>>();
    if (!xml.ok) logger.warning(`GPU discovery: the sizes of MIG instances are unknown: ${xml.reason}`);
    const listed = parseMigList(list.stdout);
    migs = rows.map((r) =>
      r.migEnabled
        ? listed
            .filter((m) => m.parentIndex === r.index)
            .map((m) => ({ profile: m.profile, uuid: m.uuid, migIndex: m.migIndex, memoryBytes: memory.get(r.uuid)?.get(m.migIndex) ?? 0 }))
        : [],
    );
  }
  const all = rows.map((r, i) => ({ row: r, migs: migs[i]! }));
  const visible = restrictToVisible(all, options.visibleDevices, logger);
  return new DeviceList(
    visible.map(({ row, migs: m }, index) => ({
      index,
      smiIndex: row.index,
      uuid: row.uuid,
      name: row.name,
      memoryTotalBytes: row.memoryTotalBytes,
      memoryUsedBytes: row.memoryUsedBytes,
      migEnabled: row.migEnabled,
      migs: m.map((x) => ({ ...x, parentIndex: index })),
    })),
  );
}

interface Found {
  readonly row: GpuRow;
  readonly migs: readonly Omit<MigInstance, 'parentIndex'>[];
}

/**
 * CUDA_VISIBLE_DEVICES as CUDA reads it: a comma-separated list of device indices, GPU UUIDs
 * (or unique prefixes of them) and MIG UUIDs, in the order the devices are to be numbered;
 * the list ends at the first entry that names no device; set but empty hides every GPU. A MIG
 * UUID keeps its GPU with only the MIG instances named.
 */
export function restrictToVisible<T extends Found>(found: readonly T[], visible: string | undefined, logger?: Logger): T[] {
  if (visible === undefined) return [...found];
  const out: T[] = [];
  for (const raw of visible.split(',')) {
    const entry = raw.trim();
    let pick: T | undefined;
    if (/^\d+$/.test(entry)) {
      pick = found.find((f) => f.row.index === Number(entry));
    } else if (entry.startsWith('MIG-')) {
      const parent = found.find((f) => f.migs.some((m) => m.uuid === entry));
      if (parent) {
        const mig = parent.migs.find((m) => m.uuid === entry)!;
        const already = out.findIndex((o) => o.row.uuid === parent.row.uuid);
        if (already >= 0) {
          if (!out[already]!.migs.includes(mig)) out[already] = { ...out[already]!, migs: [...out[already]!.migs, mig] };
          continue;
        }
        pick = { ...parent, migs: [mig] };
      }
    } else if (entry.startsWith('GPU-')) {
      const matches = found.filter((f) => f.row.uuid.startsWith(entry));
      pick = matches.length === 1 ? matches[0] : undefined;
    }
    if (pick === undefined) {
      if (entry !== '') logger?.warning(`CUDA_VISIBLE_DEVICES entry '${entry}' names no device; it and the entries after it are ignored, as CUDA does`);
      break;
    }
    if (!out.some((o) => o.row.uuid === pick!.row.uuid)) out.push(pick);
  }
  return out;
}

/** Start-up lines naming each device found (one line when there is none). */
export function describeDevices(list: DeviceList): string[] {
  if (!list.hasGpu) return ['GPUs: none'];
  const gib = (b: number) => `${(b / 1024 ** 3).toFixed(1)} GiB`;
  return list.gpus.flatMap((g) => [
    `GPU ${g.index}: ${g.name} (${g.uuid}), ${gib(g.memoryTotalBytes)}${g.migEnabled ? `, MIG mode with ${g.migs.length} instance(s)` : ''}`,
    ...g.migs.map((m) => `  MIG ${m.profile} device ${m.migIndex} (${m.uuid}), ${gib(m.memoryBytes)}`),
  ]);
}
