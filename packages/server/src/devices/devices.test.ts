import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { completeModelConfig, parseModelConfigText } from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import { silentLogger } from '../observability/logger.js';
import { DeviceList, GpuSampler, MigHolds, checkDevicePlacement, describeDevices, discoverDevices, parseComputeApps, parseGpuRows, parseGpuSamples, parseMigList, parseMigMemory } from './index.js';

const HELPERS = fileURLToPath(new URL('../../../../test/helpers/nvidia-smi/', import.meta.url));
const FAKE = `${HELPERS}bin/nvidia-smi`;
const fixture = (set: string, file: string) => readFileSync(`${HELPERS}fixtures/${set}/${file}`, 'utf8');
const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

/** A logger that keeps its lines. */
function recording(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const base = silentLogger();
  return Object.assign(Object.create(base) as Logger, {
    lines,
    info: (m: string) => lines.push(`I ${m}`),
    warning: (m: string) => lines.push(`W ${m}`),
    error: (m: string) => lines.push(`E ${m}`),
  });
}

/** Runs discovery against the fake nvidia-smi with fixture set `set`. */
async function discover(set: string, visibleDevices?: string, extraEnv: Record<string, string> = {}): Promise<{ list: DeviceList; lines: string[] }> {
  const saved = { ...process.env };
  Object.assign(process.env, { FAKE_NVIDIA_SMI_FIXTURE: set, ...extraEnv });
  try {
    const logger = recording();
    const list = await discoverDevices({ command: FAKE, timeoutMs: 5000, visibleDevices, logger });
    return { list, lines: logger.lines };
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

describe('nvidia-smi parsers on the recorded fixtures', () => {
  it('reads the GPUs of every fixture', () => {
    assert.deepEqual(
      parseGpuRows(fixture('two-gpus', 'query-gpus.csv')).map((g) => [g.index, g.name, g.memoryTotalBytes / MIB, g.memoryUsedBytes / MIB, g.migEnabled]),
      [
        [0, 'Tesla T4', 15360, 3, false],
        [1, 'Tesla T4', 15360, 1027, false],
      ],
    );
    assert.deepEqual(parseGpuRows(fixture('a100-mig', 'query-gpus.csv')).map((g) => [g.uuid, g.migEnabled]), [['GPU-1c6f1f7e-2b8a-4c3d-9e5f-0a1b2c3d4e5f', true]]);
    assert.deepEqual(parseGpuRows(fixture('h100-mig', 'query-gpus.csv')).map((g) => [g.name, g.migEnabled]), [
      ['NVIDIA H100 80GB HBM3', true],
      ['NVIDIA H100 80GB HBM3', false],
    ]);
    assert.throws(() => parseGpuRows('0, not-a-uuid, X, 1, 1, Disabled\n'), /unexpected nvidia-smi --query-gpu line/);
  });

  it('reads the MIG devices of nvidia-smi -L and their memory from the XML report', () => {
    const a100 = parseMigList(fixture('a100-mig', 'list.txt'));
    assert.deepEqual(a100.map((m) => [m.parentIndex, m.migIndex, m.profile]), [
      [0, 0, '3g.20gb'],
      [0, 1, '1g.5gb'],
      [0, 2, '1g.5gb'],
    ]);
    assert.ok(a100.every((m) => m.uuid.startsWith('MIG-')));
    assert.deepEqual(parseMigList(fixture('two-gpus', 'list.txt')), []);
    // R450/R460 drivers named MIG devices by their GPU, GPU instance and compute instance.
    assert.deepEqual(parseMigList('GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n'), [
      { parentIndex: 0, migIndex: 0, profile: '1g.5gb', uuid: 'MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0' },
    ]);
    const h100 = parseMigList(fixture('h100-mig', 'list.txt'));
    assert.deepEqual(h100.map((m) => m.profile), ['3g.40gb', '1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb']);
    const memory = parseMigMemory(fixture('h100-mig', 'query.xml'));
    assert.deepEqual([...memory.get('GPU-5e0d3b9a-7c2f-4e1b-a6d8-9f0e1d2c3b4a')!].map(([i, b]) => [i, b / MIB]), [
      [0, 40192],
      [1, 9856],
      [2, 9856],
      [3, 9856],
      [4, 9856],
    ]);
    assert.equal(memory.get('GPU-c4b3a291-8f7e-4d6c-b5a4-3e2f1d0c9b8a')!.size, 0);
    assert.deepEqual([...parseMigMemory(fixture('a100-mig', 'query.xml')).values()].map((m) => [...m.values()].map((b) => b / MIB)), [[19968, 4864, 4864]]);
  });

  it('reads metric samples, with [N/A] as no value, and compute apps', () => {
    const [mig] = parseGpuSamples(fixture('a100-mig', 'query-metrics.csv'));
    assert.deepEqual(mig, { uuid: 'GPU-1c6f1f7e-2b8a-4c3d-9e5f-0a1b2c3d4e5f', utilization: undefined, memoryTotalBytes: 40960 * MIB, memoryUsedBytes: 37 * MIB, powerWatts: 54.12, powerLimitWatts: 400 });
    assert.equal(parseGpuSamples(fixture('two-gpus', 'query-metrics.csv'))[0]!.utilization, 0.37);
    assert.deepEqual(parseComputeApps('4242, GPU-1, 1536\n77, GPU-2, [N/A]\n'), [
      { pid: 4242, gpuUuid: 'GPU-1', usedBytes: 1536 * MIB },
      { pid: 77, gpuUuid: 'GPU-2', usedBytes: undefined },
    ]);
    assert.deepEqual(parseComputeApps(''), []);
  });
});

describe('discovery through the fake nvidia-smi', () => {
  it('finds two plain GPUs', async () => {
    const { list } = await discover('two-gpus');
    assert.ok(list.hasGpu);
    assert.deepEqual(list.devices, [
      { index: 0, uuid: 'GPU-3f1c9a52-6b1e-4d8a-9c0e-1a2b3c4d5e60', name: 'Tesla T4', memoryTotalBytes: 15 * GIB },
      { index: 1, uuid: 'GPU-8e2d7b41-0c3f-4a9b-8d1e-6f5a4b3c2d10', name: 'Tesla T4', memoryTotalBytes: 15 * GIB },
    ]);
  });

  it('finds the A100 MIG instances with their profiles, UUIDs and memory', async () => {
    const { list } = await discover('a100-mig');
    assert.deepEqual(
      list.devices.map((d) => [d.index, d.uuid.slice(0, 4), d.mig?.profile, d.mig ? d.mig.memoryBytes / MIB : d.memoryTotalBytes / MIB, d.mig?.parentIndex]),
      [
        [0, 'GPU-', undefined, 40960, undefined],
        [0, 'MIG-', '3g.20gb', 19968, 0],
        [0, 'MIG-', '1g.5gb', 4864, 0],
        [0, 'MIG-', '1g.5gb', 4864, 0],
      ],
    );
    assert.deepEqual(describeDevices(list)[0], 'GPU 0: NVIDIA A100-SXM4-40GB (GPU-1c6f1f7e-2b8a-4c3d-9e5f-0a1b2c3d4e5f), 40.0 GiB, MIG mode with 3 instance(s)');
  });

  it('honours CUDA_VISIBLE_DEVICES: indices, UUID prefixes and MIG UUIDs, renumbered from 0, up to the first bad entry', async () => {
    const reordered = await discover('h100-mig', '1,0');
    assert.deepEqual(reordered.list.gpus.map((g) => [g.index, g.smiIndex, g.migEnabled, g.migs.length]), [
      [0, 1, false, 0],
      [1, 0, true, 5],
    ]);
    assert.ok(reordered.list.gpus[1]!.migs.every((m) => m.parentIndex === 1));
    const prefix = await discover('two-gpus', 'GPU-8e2d');
    assert.deepEqual(prefix.list.gpus.map((g) => [g.index, g.smiIndex]), [[0, 1]]);
    const mig = await discover('h100-mig', 'MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a');
    assert.deepEqual(mig.list.migInstances.map((m) => m.uuid), ['MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a']);
    const stops = await discover('two-gpus', '1,7,0');
    assert.deepEqual(stops.list.gpus.map((g) => g.smiIndex), [1]);
    assert.match(stops.lines.join('\n'), /CUDA_VISIBLE_DEVICES entry '7' names no device; it and the entries after it are ignored/);
    assert.equal((await discover('two-gpus', '')).list.hasGpu, false);
  });

  it('without nvidia-smi: no GPUs and one info line', async () => {
    const logger = recording();
    const list = await discoverDevices({ command: 'nereid-no-such-nvidia-smi', logger });
    assert.equal(list.hasGpu, false);
    assert.deepEqual(logger.lines, ['I GPU discovery: nereid-no-such-nvidia-smi was not found; no GPUs']);
  });

  it('nvidia-smi finding no devices: no GPUs, one info line', async () => {
    const { list, lines } = await discover('no-devices');
    assert.equal(list.hasGpu, false);
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /^I GPU discovery: \S*nvidia-smi found no devices; no GPUs$/);
  });

  it('a hanging or failing nvidia-smi is killed or reported, never a crash', async () => {
    const saved = process.env['FAKE_NVIDIA_SMI_HANG'];
    process.env['FAKE_NVIDIA_SMI_HANG'] = '1';
    process.env['FAKE_NVIDIA_SMI_FIXTURE'] = 'two-gpus';
    try {
      const logger = recording();
      const started = Date.now();
      const list = await discoverDevices({ command: FAKE, timeoutMs: 500, logger });
      assert.equal(list.hasGpu, false);
      assert.ok(Date.now() - started < 5000);
      assert.match(logger.lines.join('\n'), /^E GPU discovery failed, the server runs without GPUs: '.*nvidia-smi --query-gpu=.*' did not answer within 500 ms and was killed$/m);
    } finally {
      if (saved === undefined) delete process.env['FAKE_NVIDIA_SMI_HANG'];
      else process.env['FAKE_NVIDIA_SMI_HANG'] = saved;
      delete process.env['FAKE_NVIDIA_SMI_FIXTURE'];
    }
    const { list, lines } = await discover('no-such-fixture-set');
    assert.equal(list.hasGpu, false);
    assert.match(lines.join('\n'), /^E GPU discovery failed, the server runs without GPUs: '.*' failed \(exit code 9\): fake nvidia-smi: no recorded output .*no-such-fixture-set\/query-gpus.csv$/m);
  });

  it('samples the metric values and integrates power into energy', async () => {
    process.env['FAKE_NVIDIA_SMI_FIXTURE'] = 'two-gpus';
    try {
      const { list } = await discover('two-gpus');
      const sampler = new GpuSampler(list, { command: FAKE, timeoutMs: 5000 });
      await sampler.sample();
      assert.deepEqual(sampler.samples.map((s) => [s.utilization, s.powerWatts, s.powerLimitWatts]), [
        [0.37, 27.53, 70],
        [0, 9.87, 70],
      ]);
      assert.equal(sampler.energyJoules(list.gpus[0]!.uuid), 0);
      await new Promise((r) => setTimeout(r, 200));
      await sampler.sample();
      const joules = sampler.energyJoules(list.gpus[0]!.uuid)!;
      assert.ok(joules > 27.53 * 0.15 && joules < 27.53 * 5, `${joules} J`);
    } finally {
      delete process.env['FAKE_NVIDIA_SMI_FIXTURE'];
    }
  });
});

/** A config as a load has it after instance-group normalisation (groups given complete). */
function config(text: string): ModelConfig {
  return completeModelConfig(parseModelConfigText(`name: "m" backend: "python" ${text}`));
}

function requested(c: ModelConfig): Map<string, number[]> {
  return new Map(c.instance_group.map((g) => [g.name, [...g.gpus]]));
}

describe('placement', () => {
  it('places count instances on each listed GPU, seeing only its own', async () => {
    const { list } = await discover('two-gpus');
    const c = config('instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]');
    checkDevicePlacement(c, list, requested(c));
    const placement = new MigHolds().place(c, list);
    assert.deepEqual(
      placement.groups.get('g')!.map((d) => [d.index, d.cudaVisibleDevices]),
      [
        [0, 'GPU-3f1c9a52-6b1e-4d8a-9c0e-1a2b3c4d5e60'],
        [1, 'GPU-8e2d7b41-0c3f-4a9b-8d1e-6f5a4b3c2d10'],
      ],
    );
    const shared = config('instance_group [ { name: "g" kind: KIND_GPU gpus: [ 1 ] } ] parameters { key: "cuda_visible_devices" value { string_value: "server" } }');
    assert.equal(new MigHolds().place(shared, list).groups.get('g')![0]!.cudaVisibleDevices, 'GPU-3f1c9a52-6b1e-4d8a-9c0e-1a2b3c4d5e60,GPU-8e2d7b41-0c3f-4a9b-8d1e-6f5a4b3c2d10');
  });

  it('refuses a whole GPU in MIG mode, unknown MIG UUIDs and profiles, and malformed items', async () => {
    const { list } = await discover('h100-mig');
    const whole = config('instance_group [ { name: "g" kind: KIND_GPU gpus: [ 0 ] } ]');
    assert.throws(() => checkDevicePlacement(whole, list, requested(whole)), /GPU 0 \(NVIDIA H100 80GB HBM3\), which is in MIG mode: .*parameter 'mig_devices' .*'3g.40gb'/);
    const unknown = config('instance_group [ { name: "g" kind: KIND_GPU } ] parameters { key: "mig_devices" value { string_value: "MIG-0000" } }');
    assert.throws(() => checkDevicePlacement(unknown, list, requested(unknown)), /names MIG instance MIG-0000, which the server does not see; its MIG instances are: MIG-2f4a/);
    const tooMany = config('instance_group [ { name: "g" kind: KIND_GPU } ] parameters { key: "mig_devices.g" value { string_value: "3g.40gb:2" } }');
    assert.throws(() => checkDevicePlacement(tooMany, list, requested(tooMany)), /asks for 2 MIG instance\(s\) of profile 3g.40gb, but the server has 1; profiles there: 3g.40gb, 1g.10gb/);
    const bad = config('instance_group [ { name: "g" kind: KIND_GPU } ] parameters { key: "mig_devices" value { string_value: "big" } }');
    assert.throws(() => checkDevicePlacement(bad, list, requested(bad)), /'big', which is neither a MIG UUID/);
    const noGroup = config('instance_group [ { name: "g" kind: KIND_GPU } ] parameters { key: "mig_devices.h" value { string_value: "1g.10gb" } }');
    assert.throws(() => checkDevicePlacement(noGroup, list, requested(noGroup)), /parameter 'mig_devices.h' names no instance group/);
  });

  it('gives two groups of one model distinct instances of a profile', async () => {
    const { list } = await discover('a100-mig');
    const c = config(
      'instance_group [ { name: "a" kind: KIND_GPU }, { name: "b" kind: KIND_GPU } ] parameters { key: "mig_devices" value { string_value: "1g.5gb" } }',
    );
    checkDevicePlacement(c, list, requested(c));
    const placed = new MigHolds().place(c, list);
    const a = placed.groups.get('a')![0]!.mig!.uuid;
    const b = placed.groups.get('b')![0]!.mig!.uuid;
    assert.notEqual(a, b);
  });

  it('holds MIG instances for one model: by UUID, by profile, freed at release', async () => {
    const { list } = await discover('h100-mig');
    const holds = new MigHolds();
    const byUuid = config('instance_group [ { name: "g" kind: KIND_GPU count: 1 } ] parameters { key: "mig_devices" value { string_value: "MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a" } }');
    checkDevicePlacement(byUuid, list, requested(byUuid));
    assert.deepEqual(byUuid.instance_group[0]!.gpus, [0]);
    const first = holds.place(byUuid, list);
    assert.deepEqual(first.groups.get('g')!.map((d) => [d.index, d.mig?.profile, d.cudaVisibleDevices]), [[0, '1g.10gb', 'MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a']]);
    const other = { ...structuredClone(byUuid), name: 'other' };
    assert.throws(() => holds.place(other, list), /model 'other': MIG instance MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a \(1g.10gb on GPU 0\) is held by model 'm'/);
    const byProfile = config('instance_group [ { name: "g" kind: KIND_GPU } ] parameters { key: "mig_devices" value { string_value: "1g.10gb:3" } }');
    byProfile.name = 'p';
    checkDevicePlacement(byProfile, list, requested(byProfile));
    const p = holds.place(byProfile, list);
    assert.deepEqual(p.groups.get('g')!.map((d) => d.mig?.uuid.slice(0, 8)), ['MIG-4b6d', 'MIG-5c7e', 'MIG-6d8f']);
    assert.ok(!p.groups.get('g')!.some((d) => d.mig?.uuid === 'MIG-3a5c7e9a-1c3e-5a5b-8d7f-9c1e3a5c7e9a'));
    assert.equal(new Set(p.groups.get('g')!.map((d) => d.mig?.uuid)).size, 3);
    const fourth = { ...structuredClone(byProfile), name: 'q' };
    assert.throws(() => holds.place(fourth, list), /model 'q': instance group 'g' needs 3 free MIG instance\(s\) of profile 1g.10gb, 0 free; held: .* by model 'm', .* by model 'p'/);
    first.release();
    p.release();
    assert.equal(holds.place(other, list).groups.get('g')!.length, 1);
  });
});
