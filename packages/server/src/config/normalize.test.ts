import test from 'node:test';
import assert from 'node:assert/strict';
import {
  type ModelConfig,
  deriveModelConfig,
  modelConfigToJson,
  normalizeInstanceGroups,
  normalizeModelConfig,
  parseModelConfigText,
  validateInstanceGroups,
  validateModelConfig,
  validateModelIO,
} from './index.js';

const normalize = (text: string): ModelConfig => normalizeModelConfig(parseModelConfigText(text));
const groups = (text: string, gpus: number[] = [], preferredGroups: Parameters<typeof normalizeInstanceGroups>[1]['preferredGroups'] = []) =>
  normalizeInstanceGroups(parseModelConfigText(text), { gpus, preferredGroups }).instance_group;

test('§3.2: version policy defaults to latest 1, and an explicit one is kept', () => {
  assert.deepEqual(normalize('name: "m"').version_policy, { latest: { num_versions: 1 } });
  assert.deepEqual(normalize('version_policy { all { } }').version_policy, { all: {} });
  assert.deepEqual(normalize('version_policy { latest { num_versions: 0 } }').version_policy, { latest: { num_versions: 0 } });
});

test('§3.2: dynamic batching preferred_batch_size becomes [max_batch_size] when empty and batching', () => {
  assert.deepEqual(normalize('max_batch_size: 8 dynamic_batching { }').dynamic_batching?.preferred_batch_size, [8]);
  assert.deepEqual(normalize('max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 4 ] }').dynamic_batching?.preferred_batch_size, [2, 4]);
  assert.deepEqual(normalize('max_batch_size: 0 dynamic_batching { }').dynamic_batching?.preferred_batch_size, []);
  assert.equal(normalize('max_batch_size: 8').dynamic_batching, undefined);
});

test('§3.2: sequence batching idle time and oldest preferred sizes', () => {
  const sb = normalize('max_batch_size: 4 sequence_batching { oldest { } }').sequence_batching;
  assert.equal(sb?.max_sequence_idle_microseconds, 1_000_000);
  assert.deepEqual(sb?.oldest?.preferred_batch_size, [4]);
  assert.equal(sb?.oldest?.max_candidate_sequences, 0, 'max_candidate_sequences is resolved by the scheduler, not here');
  const kept = normalize('max_batch_size: 4 sequence_batching { max_sequence_idle_microseconds: 5 oldest { preferred_batch_size: 2 } }').sequence_batching;
  assert.equal(kept?.max_sequence_idle_microseconds, 5);
  assert.deepEqual(kept?.oldest?.preferred_batch_size, [2]);
  assert.deepEqual(normalize('sequence_batching { oldest { } }').sequence_batching?.oldest?.preferred_batch_size, []);
  assert.equal(normalize('max_batch_size: 4 sequence_batching { }').sequence_batching?.direct, undefined);
});

test('§3.2: pinned memory is enabled unless set, and not for ensembles', () => {
  assert.deepEqual(normalize('name: "m"').optimization, {
    priority: 'PRIORITY_DEFAULT',
    input_pinned_memory: { enable: true },
    output_pinned_memory: { enable: true },
    gather_kernel_buffer_threshold: 0,
    eager_batching: false,
  });
  const o = normalize('optimization { input_pinned_memory { enable: false } eager_batching: true }').optimization;
  assert.deepEqual(o?.input_pinned_memory, { enable: false });
  assert.deepEqual(o?.output_pinned_memory, { enable: true });
  assert.equal(o?.eager_batching, true);
  assert.equal(normalize('platform: "ensemble" ensemble_scheduling { }').optimization, undefined);
});

test('normalisation returns a new complete config and leaves its input alone', () => {
  const input = parseModelConfigText('max_batch_size: 2 dynamic_batching { }');
  const out = normalizeModelConfig(input);
  assert.deepEqual(input, { max_batch_size: 2, dynamic_batching: {} });
  assert.equal(out.name, '');
  assert.deepEqual(out.input, []);
  const again = normalizeInstanceGroups(out, { gpus: [] });
  assert.deepEqual(out.instance_group, []);
  assert.equal(again.instance_group.length, 1);
});

test('§3.3: a missing group is added, named after the model, CPU on a CPU-only server', () => {
  const base = { secondary_devices: [], profile: [], passive: false, host_policy: '', gpus: [] };
  assert.deepEqual(groups('name: "simple" backend: "python"'), [{ ...base, name: 'simple', kind: 'KIND_CPU', count: 1 }]);
  assert.deepEqual(groups('name: "simple" backend: "onnxruntime"'), [{ ...base, name: 'simple', kind: 'KIND_CPU', count: 2 }]);
  assert.deepEqual(groups('name: "simple" backend: "tensorflow"'), [{ ...base, name: 'simple', kind: 'KIND_CPU', count: 2 }]);
  assert.deepEqual(groups('name: "simple" backend: "onnxruntime"', [0, 1]), [{ ...base, name: 'simple', kind: 'KIND_GPU', count: 1, gpus: [0, 1] }]);
});

test('§3.3: names, AUTO resolution, counts and GPUs of listed groups', () => {
  const g = groups(
    'name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_CPU }, { name: "named" count: 3 }, { kind: KIND_MODEL count: -1 }, { kind: KIND_AUTO gpus: [ 5 ] } ]',
  );
  assert.deepEqual(
    g.map((x) => [x.name, x.kind, x.count, x.gpus]),
    [
      ['m_0', 'KIND_CPU', 2, []],
      ['named', 'KIND_CPU', 3, []],
      ['m_2', 'KIND_MODEL', 1, []],
      ['m_3', 'KIND_CPU', 2, [5]],
    ],
  );
  const gpu = groups('name: "m" backend: "python" instance_group [ { kind: KIND_GPU }, { gpus: [ 1 ] }, { gpus: [ 1, 7 ] } ]', [0, 1]);
  assert.deepEqual(
    gpu.map((x) => [x.name, x.kind, x.count, x.gpus]),
    [
      ['m_0', 'KIND_GPU', 1, [0, 1]],
      ['m_1', 'KIND_GPU', 1, [1]],
      ['m_2', 'KIND_CPU', 1, [1, 7]],
    ],
  );
});

test('§3.3: backend-preferred groups', () => {
  const gpuThenCpu = [{ kind: 'KIND_GPU' as const, count: 3, gpus: [1, 2] }, { kind: 'KIND_CPU' as const, count: 4 }];
  assert.deepEqual(
    groups('name: "m" backend: "onnxruntime"', [], gpuThenCpu).map((x) => [x.name, x.kind, x.count, x.gpus]),
    [['m', 'KIND_CPU', 4, []]],
    'a GPU preference is skipped without GPUs',
  );
  assert.deepEqual(
    groups('name: "m" backend: "onnxruntime"', [0, 1], gpuThenCpu).map((x) => [x.name, x.kind, x.count, x.gpus]),
    [['m', 'KIND_GPU', 3, [1]]],
    'preferred GPUs are intersected with the available ones',
  );
  assert.deepEqual(
    groups('name: "m" backend: "onnxruntime" instance_group [ { kind: KIND_CPU }, { kind: KIND_CPU count: 1 } ]', [], gpuThenCpu).map((x) => x.count),
    [4, 1],
    'count < 1 takes the count of a preferred group of the same kind',
  );
  assert.deepEqual(
    groups('name: "m" backend: "python"', [], [{ kind: 'KIND_MODEL', count: 0 }]).map((x) => [x.kind, x.count]),
    [['KIND_MODEL', 1]],
  );
});

test('§3.3: the backend may declare the default CPU instance count', () => {
  const config = parseModelConfigText('name: "m" backend: "custom" instance_group [ { kind: KIND_CPU }, { kind: KIND_MODEL } ]');
  assert.deepEqual(normalizeInstanceGroups(config, { gpus: [], defaultCpuCount: 4 }).instance_group.map((g) => g.count), [4, 1]);
  assert.deepEqual(normalizeInstanceGroups(config, { gpus: [] }).instance_group.map((g) => g.count), [1, 1]);
  const onnx = parseModelConfigText('name: "m" backend: "onnxruntime"');
  assert.equal(normalizeInstanceGroups(onnx, { gpus: [], defaultCpuCount: 1 }).instance_group[0]?.count, 1);
});

test('§3.3: ensembles get no instance group', () => {
  assert.deepEqual(groups('name: "e" platform: "ensemble" ensemble_scheduling { }'), []);
});

test('the load pipeline on the protocol.md §3.6 model: derive → normalise → validate → JSON', () => {
  const parsed = parseModelConfigText(`
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    dynamic_batching { }
    instance_group [ { kind: KIND_CPU count: 1 } ]
  `);
  const derived = deriveModelConfig(parsed, 'simple', new Map([['model.onnx', 'file']]));
  const config = normalizeInstanceGroups(normalizeModelConfig(derived), { gpus: [] });
  validateModelConfig(config);
  validateInstanceGroups(config, { gpus: [] });
  validateModelIO(config);
  const json = modelConfigToJson(config, { emitDefaults: true, int64AsString: false });
  assert.equal(json.name, 'simple');
  assert.equal(json.platform, 'onnxruntime_onnx');
  assert.equal(json.default_model_filename, 'model.onnx');
  assert.deepEqual(json.version_policy, { latest: { num_versions: 1 } });
  assert.deepEqual((json.dynamic_batching as Record<string, unknown>).preferred_batch_size, [8]);
  assert.deepEqual(json.instance_group, [
    { name: 'simple_0', kind: 'KIND_CPU', count: 1, gpus: [], secondary_devices: [], profile: [], passive: false, host_policy: '' },
  ]);
});
