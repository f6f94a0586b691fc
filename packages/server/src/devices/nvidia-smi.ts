/**
 * `nvidia-smi`: the command lines Nereid runs and the parsers of their output. Every call is
 * bounded in time (nvidia-smi can hang on a wedged driver) and never throws past `runNvidiaSmi`'s
 * result: callers log the failure and carry on without GPUs or without a sample.
 */
import { execFile } from 'node:child_process';

/** The GPUs: one CSV line each, `index, uuid, name, memory.total [MiB], memory.used [MiB], mig.mode.current`. */
export const QUERY_GPUS = ['--query-gpu=index,uuid,name,memory.total,memory.used,mig.mode.current', '--format=csv,noheader,nounits'] as const;
/** GPUs and MIG devices with their UUIDs and profiles. */
export const LIST_DEVICES = ['-L'] as const;
/** The full XML report: MIG devices' memory (`mig_devices/mig_device/fb_memory_usage`). */
export const QUERY_XML = ['-q', '-x'] as const;
/** The metric families' sample: `uuid, utilization.gpu [%], memory.total, memory.used [MiB], power.draw, power.limit [W]`. */
export const QUERY_METRICS = [
  '--query-gpu=uuid,utilization.gpu,memory.total,memory.used,power.draw,power.limit',
  '--format=csv,noheader,nounits',
] as const;
/** Processes using a GPU: `pid, gpu_uuid, used_memory [MiB]`. */
export const QUERY_COMPUTE_APPS = ['--query-compute-apps=pid,gpu_uuid,used_memory', '--format=csv,noheader,nounits'] as const;

const MIB = 1024 * 1024;

export type NvidiaSmiResult = { readonly ok: true; readonly stdout: string } | { readonly ok: false; readonly missing: boolean; readonly reason: string };

/**
 * Runs `command args…` for at most `timeoutMs` (killed with SIGKILL after that). `missing` is true
 * when the command does not exist (a machine without the NVIDIA driver): not an error.
 */
export function runNvidiaSmi(command: string, args: readonly string[], timeoutMs: number): Promise<NvidiaSmiResult> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 * MIB, windowsHide: true }, (err, stdout, stderr) => {
      if (err === null) {
        resolve({ ok: true, stdout });
        return;
      }
      const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: string | number };
      const line = `${command} ${args.join(' ')}`;
      if (e.code === 'ENOENT') resolve({ ok: false, missing: true, reason: `${command} was not found` });
      else if (e.killed) resolve({ ok: false, missing: false, reason: `'${line}' did not answer within ${timeoutMs} ms and was killed` });
      else {
        const said = `${stderr}`.trim() || `${stdout}`.trim();
        resolve({ ok: false, missing: false, reason: `'${line}' failed (${typeof e.code === 'number' ? `exit code ${e.code}` : e.message})${said ? `: ${said.slice(0, 500)}` : ''}` });
      }
    });
  });
}

/** A CSV field nvidia-smi prints for a value it does not have: `[N/A]`, `[Not Supported]`, `N/A`, … */
function number(field: string | undefined): number | undefined {
  if (field === undefined) return undefined;
  const v = Number(field.trim());
  return field.trim() !== '' && Number.isFinite(v) ? v : undefined;
}

/** Lines of `--format=csv,noheader`, split into trimmed fields (names hold no commas). */
function csvRows(text: string): string[][] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .map((l) => l.split(',').map((f) => f.trim()));
}

export interface GpuRow {
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  readonly memoryTotalBytes: number;
  readonly memoryUsedBytes: number;
  /** `mig.mode.current` is `Enabled` (`Disabled` or `[N/A]` on a GPU without MIG). */
  readonly migEnabled: boolean;
}

/** Output of `QUERY_GPUS`. Throws an Error naming the line it cannot read. */
export function parseGpuRows(text: string): GpuRow[] {
  return csvRows(text).map((f) => {
    const index = number(f[0]);
    if (f.length < 6 || index === undefined || !f[1]!.startsWith('GPU-')) throw new Error(`unexpected nvidia-smi --query-gpu line: '${f.join(', ')}'`);
    return {
      index,
      uuid: f[1]!,
      name: f[2]!,
      memoryTotalBytes: (number(f[3]) ?? 0) * MIB,
      memoryUsedBytes: (number(f[4]) ?? 0) * MIB,
      migEnabled: f[5] === 'Enabled',
    };
  });
}

export interface ListedMig {
  readonly parentIndex: number;
  /** The MIG device's index on its GPU (`Device  N` in `nvidia-smi -L`, `<index>` in the XML). */
  readonly migIndex: number;
  readonly profile: string;
  readonly uuid: string;
}

/**
 * Output of `nvidia-smi -L`: the MIG devices under each GPU line.
 *
 *     GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-…)
 *       MIG 3g.20gb     Device  0: (UUID: MIG-…)
 */
export function parseMigList(text: string): ListedMig[] {
  const out: ListedMig[] = [];
  let parent: number | undefined;
  for (const line of text.split('\n')) {
    const gpu = /^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)/.exec(line);
    if (gpu) {
      parent = Number(gpu[1]);
      continue;
    }
    const mig = /^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)/.exec(line);
    if (mig && parent !== undefined) out.push({ parentIndex: parent, migIndex: Number(mig[2]), profile: mig[1]!, uuid: mig[3]! });
  }
  return out;
}

/** From `nvidia-smi -q -x`: each GPU's MIG devices' total memory in bytes, by GPU UUID, then MIG index. */
export function parseMigMemory(xml: string): Map<string, Map<number, number>> {
  const out = new Map<string, Map<number, number>>();
  for (const gpu of xml.split(/<gpu id="/).slice(1)) {
    const uuid = /<uuid>(GPU-[^<]+)<\/uuid>/.exec(gpu)?.[1];
    if (uuid === undefined) continue;
    const sizes = new Map<number, number>();
    for (const device of gpu.split('<mig_device>').slice(1)) {
      const index = /<index>(\d+)<\/index>/.exec(device)?.[1];
      const total = /<fb_memory_usage>\s*<total>(\d+) MiB<\/total>/.exec(device)?.[1];
      if (index !== undefined && total !== undefined) sizes.set(Number(index), Number(total) * MIB);
    }
    out.set(uuid, sizes);
  }
  return out;
}

export interface GpuSample {
  readonly uuid: string;
  /** 0.0–1.0; undefined where nvidia-smi has none (a GPU in MIG mode reports `[N/A]`). */
  readonly utilization: number | undefined;
  readonly memoryTotalBytes: number | undefined;
  readonly memoryUsedBytes: number | undefined;
  readonly powerWatts: number | undefined;
  readonly powerLimitWatts: number | undefined;
}

/** Output of `QUERY_METRICS`. Throws an Error naming the line it cannot read. */
export function parseGpuSamples(text: string): GpuSample[] {
  return csvRows(text).map((f) => {
    if (f.length < 6 || !f[0]!.startsWith('GPU-')) throw new Error(`unexpected nvidia-smi --query-gpu line: '${f.join(', ')}'`);
    const util = number(f[1]);
    const total = number(f[2]);
    const used = number(f[3]);
    return {
      uuid: f[0]!,
      utilization: util === undefined ? undefined : util / 100,
      memoryTotalBytes: total === undefined ? undefined : total * MIB,
      memoryUsedBytes: used === undefined ? undefined : used * MIB,
      powerWatts: number(f[4]),
      powerLimitWatts: number(f[5]),
    };
  });
}

export interface ComputeApp {
  readonly pid: number;
  /** The GPU's UUID (nvidia-smi names the parent GPU for a process on a MIG device). */
  readonly gpuUuid: string;
  /** Undefined where nvidia-smi has none (`[N/A]`, as some drivers print on MIG devices). */
  readonly usedBytes: number | undefined;
}

/** Output of `QUERY_COMPUTE_APPS` (empty when no process uses a GPU). */
export function parseComputeApps(text: string): ComputeApp[] {
  return csvRows(text)
    .filter((f) => f.length >= 3 && number(f[0]) !== undefined)
    .map((f) => {
      const used = number(f[2]);
      return { pid: number(f[0])!, gpuUuid: f[1]!, usedBytes: used === undefined ? undefined : used * MIB };
    });
}
