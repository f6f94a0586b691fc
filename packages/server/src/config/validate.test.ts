import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import {
  type ModelConfig,
  completeModelConfig,
  deriveModelConfig,
  normalizeInstanceGroups,
  normalizeModelConfig,
  parseModelConfigText,
  validateInstanceGroups,
  validateModelConfig,
  validateModelIO,
  validateRateLimiterResources,
} from './index.js';
import { fixturesDir } from './test-support.js';

/** parse → derive (directory `m`, or the config's name) → normalise → instance groups, CPU-only. */
function prepare(text: string): ModelConfig {
  const parsed = parseModelConfigText(text);
  const derived = deriveModelConfig(parsed, parsed.name || 'm');
  return normalizeInstanceGroups(normalizeModelConfig(derived), { gpus: [] });
}

function failure(fn: () => void, code = 'CONFIG_INVALID'): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof NereidError, `expected a NereidError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err.message;
  }
  assert.fail('expected a validation error');
}

const configError = (text: string): string => failure(() => validateModelConfig(prepare(text)));
const ioError = (text: string): string => failure(() => validateModelIO(prepare(text)));
const groupError = (text: string, gpus: number[] = []): string => failure(() => validateInstanceGroups(prepare(text), { gpus }));

const IO = `
  input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
  output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]`;
const BASE = `name: "m" backend: "onnxruntime" max_batch_size: 8 ${IO}`;

function validateAll(config: ModelConfig): void {
  validateModelConfig(config);
  validateInstanceGroups(config, { gpus: [] });
  validateModelIO(config);
}

test('valid configurations pass every group', () => {
  validateAll(prepare(BASE));
  const fixtures = fixturesDir();
  for (const file of ['01-onnx-classifier', '02-stateful-direct', '03-ensemble-pipeline', '09-ragged-batching', '13-oldest-strategy', '14-sequence-controls', '15-implicit-state', '16-warmup', '23-ensemble-namespace', '24-priority-map-list']) {
    const text = readFileSync(join(fixtures, `${file}.pbtxt`), 'utf8');
    assert.doesNotThrow(() => validateAll(prepare(text)), file);
  }
});

test('config group: name, platform and backend', () => {
  assert.equal(failure(() => validateModelConfig(normalizeModelConfig({ backend: 'onnxruntime' }))), "model configuration must specify 'name'");
  assert.equal(failure(() => validateModelConfig(normalizeModelConfig({ name: 'm' }))), "model 'm': must specify 'platform' or 'backend'");
  assert.equal(
    failure(() => validateModelConfig(normalizeModelConfig({ name: 'm', platform: 'my_format' }))),
    "model 'm': unexpected platform type 'my_format': 'backend' must be set unless the platform is 'ensemble'",
  );
  assert.equal(
    configError('name: "e" platform: "ensemble" backend: "onnxruntime" ensemble_scheduling { }'),
    "model 'e': an ensemble (platform 'ensemble') must have an empty 'backend', got 'onnxruntime'",
  );
  assert.equal(
    configError('name: "m" platform: "libtorch"'),
    "model 'm': unexpected 'platform' and 'backend' pair, got: 'libtorch', 'pytorch'; backend 'pytorch' requires platform 'pytorch_libtorch' or 'torch_aoti'",
  );
  assert.equal(
    configError('name: "m" backend: "onnxruntime" platform: "tensorrt_plan"'),
    "model 'm': unexpected 'platform' and 'backend' pair, got: 'tensorrt_plan', 'onnxruntime'; backend 'onnxruntime' requires platform 'onnxruntime_onnx'",
  );
  assert.equal(
    configError('name: "m" backend: "tensorflow"'),
    "model 'm': unexpected 'platform' and 'backend' pair, got: '', 'tensorflow'; backend 'tensorflow' requires platform 'tensorflow_graphdef' or 'tensorflow_savedmodel'",
  );
  assert.doesNotThrow(() => validateModelConfig(prepare('name: "m" backend: "my_backend" platform: "anything"')));
});

test('config group: max_batch_size and version_policy', () => {
  assert.equal(configError('name: "m" backend: "python" max_batch_size: -2'), "model 'm': 'max_batch_size' must be non-negative, got -2");
  assert.equal(
    failure(() => validateModelConfig(completeModelConfig({ name: 'm', backend: 'python' }))),
    "model 'm': must specify 'version_policy'",
  );
});

test('config group: dynamic batching sizes and priorities', () => {
  assert.equal(
    configError(`${BASE} dynamic_batching { preferred_batch_size: [ 4, 0 ] }`),
    "model 'm': dynamic_batching.preferred_batch_size 0 must be positive",
  );
  assert.equal(
    configError(`${BASE} dynamic_batching { preferred_batch_size: [ 16 ] }`),
    "model 'm': dynamic_batching.preferred_batch_size 16 must be <= max_batch_size (8)",
  );
  assert.equal(
    configError('name: "m" backend: "python" dynamic_batching { preferred_batch_size: 1 }'),
    "model 'm': dynamic_batching.preferred_batch_size 1 must be <= max_batch_size (0)",
  );
  assert.equal(
    configError(`${BASE} dynamic_batching { priority_levels: 2 }`),
    "model 'm': dynamic_batching.default_priority_level 0 must be in range [1, 2] (priority_levels is 2)",
  );
  assert.equal(
    configError(`${BASE} dynamic_batching { priority_levels: 2 default_priority_level: 3 }`),
    "model 'm': dynamic_batching.default_priority_level 3 must be in range [1, 2] (priority_levels is 2)",
  );
  assert.equal(
    configError(`${BASE} dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value { } } }`),
    "model 'm': dynamic_batching.priority_queue_policy has priority level 3, which must be in range [1, 2]",
  );
  assert.doesNotThrow(() => validateModelConfig(prepare(`${BASE} dynamic_batching { priority_queue_policy { key: 9 value { } } }`)));
});

test('config group: preserve_ordering conflicts', () => {
  assert.equal(
    configError(`${BASE} dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }`),
    "model 'm': only one priority level is allowed when 'preserve_ordering' is true, got priority_levels 2",
  );
  assert.equal(
    configError(`${BASE} dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }`),
    "model 'm': dynamic_batching.default_queue_policy cannot combine timeout_action DELAY with a non-zero default_timeout_microseconds when 'preserve_ordering' is true",
  );
  assert.equal(
    configError(
      `${BASE} dynamic_batching { preserve_ordering: true priority_levels: 1 default_priority_level: 1 priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 10 } } }`,
    ),
    "model 'm': dynamic_batching.priority_queue_policy[1] cannot combine timeout_action DELAY with a non-zero default_timeout_microseconds when 'preserve_ordering' is true",
  );
  assert.doesNotThrow(() =>
    validateModelConfig(prepare(`${BASE} dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY } }`)),
  );
});

test('config group: response cache with sequence batching or decoupled models', () => {
  assert.equal(
    configError(`${BASE} sequence_batching { } response_cache { enable: true }`),
    "Response Cache does not currently support model m with sequence batching scheduler. Please disable the response cache.",
  );
  assert.equal(
    configError(`${BASE} model_transaction_policy { decoupled: true } response_cache { enable: true }`),
    "Response Cache does not currently support model m with 'decoupled' transaction policy. Please disable the response cache.",
  );
});

test('config group: sequence batching controls', () => {
  const seq = (controls: string): string => configError(`${BASE} sequence_batching { ${controls} }`);
  assert.equal(
    seq('control_input { control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } }'),
    "model 'm': sequence_batching.control_input[0] must have a name",
  );
  assert.equal(
    seq(
      'control_input { name: "S" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } } control_input { name: "S" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } }',
    ),
    "model 'm': sequence batching control tensor 'S' is specified in more than one control_input",
  );
  assert.equal(
    seq(
      'control_input { name: "A" control { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } } control_input { name: "B" control { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } }',
    ),
    "model 'm': sequence batching specifies multiple CONTROL_SEQUENCE_READY controls (tensors 'A' and 'B'); each control kind may appear at most once",
  );
  assert.equal(
    seq('control_input { name: "S" control { kind: CONTROL_SEQUENCE_START } }'),
    "model 'm': control CONTROL_SEQUENCE_START of sequence batching tensor 'S' must specify one of 'int32_false_true', 'fp32_false_true' or 'bool_false_true'",
  );
  assert.equal(
    seq('control_input { name: "E" control { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } }'),
    "model 'm': control CONTROL_SEQUENCE_END of sequence batching tensor 'E' specifies more than one of 'int32_false_true', 'fp32_false_true' and 'bool_false_true' (int32_false_true, fp32_false_true)",
  );
  assert.equal(
    seq('control_input { name: "E" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 1 ] } }'),
    "model 'm': control CONTROL_SEQUENCE_END of sequence batching tensor 'E': 'fp32_false_true' must have exactly 2 entries [false_value, true_value], got 1",
  );
  assert.equal(
    seq('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 bool_false_true: [ false, true ] } }'),
    "model 'm': control CONTROL_SEQUENCE_CORRID of sequence batching tensor 'C' must not specify 'int32_false_true', 'fp32_false_true' or 'bool_false_true'; it uses 'data_type'",
  );
  assert.equal(
    seq('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } }'),
    "model 'm': control CONTROL_SEQUENCE_CORRID of sequence batching tensor 'C' has data_type TYPE_FP32; allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
  );
  assert.match(seq('control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID } }'), /has data_type TYPE_INVALID; allowed/);
});

test('config group: sequence strategies', () => {
  assert.equal(
    configError(`${BASE} sequence_batching { oldest { preferred_batch_size: [ 9 ] } }`),
    "model 'm': sequence_batching.oldest.preferred_batch_size 9 must be <= max_batch_size (8)",
  );
  assert.equal(
    configError(`${BASE} sequence_batching { oldest { preferred_batch_size: [ -1 ] } }`),
    "model 'm': sequence_batching.oldest.preferred_batch_size -1 must be positive",
  );
  assert.equal(
    configError(`${BASE} sequence_batching { direct { minimum_slot_utilization: 1.5 } }`),
    "model 'm': sequence_batching.direct.minimum_slot_utilization 1.5 must be in range [0.0, 1.0]",
  );
  assert.match(configError(`${BASE} sequence_batching { direct { minimum_slot_utilization: nan } }`), /minimum_slot_utilization NaN must be in range/);
  assert.doesNotThrow(() => validateModelConfig(prepare(`${BASE} sequence_batching { direct { minimum_slot_utilization: 1 } }`)));
});

test('config group: model metrics and the custom batching parameter', () => {
  const metrics = (control: string): string => configError(`${BASE} model_metrics { metric_control { ${control} } }`);
  assert.equal(
    metrics('histogram_options { buckets: [ 1 ] }'),
    "model 'm': model_metrics.metric_control[0] must specify 'metric_identifier'",
  );
  assert.equal(
    metrics('metric_identifier { } histogram_options { buckets: [ 1 ] }'),
    "model 'm': model_metrics.metric_control[0].metric_identifier must specify a non-empty 'family'",
  );
  assert.equal(metrics('metric_identifier { family: "f" }'), "model 'm': model_metrics.metric_control[0] must specify 'histogram_options'");
  assert.equal(
    metrics('metric_identifier { family: "f" } histogram_options { }'),
    "model 'm': model_metrics.metric_control[0].histogram_options must specify non-empty 'buckets'",
  );
  assert.equal(
    configError(`${BASE} sequence_batching { } parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: "b.so" } }`),
    "model 'm': parameter 'TRITON_BATCH_STRATEGY_PATH' (custom batching) is not allowed with sequence batching",
  );
});

test('config group: ensemble static checks (§6.1, §6.2)', () => {
  const ens = (body: string, io = 'input { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }') =>
    configError(`name: "e" platform: "ensemble" ${io} ${body}`);
  const step = (model: string, inputs: Record<string, string>, outputs: Record<string, string>): string =>
    `step { model_name: "${model}" ${Object.entries(inputs)
      .map(([k, v]) => `input_map { key: "${k}" value: "${v}" }`)
      .join(' ')} ${Object.entries(outputs)
      .map(([k, v]) => `output_map { key: "${k}" value: "${v}" }`)
      .join(' ')} }`;

  assert.equal(
    configError(`${BASE} ensemble_scheduling { }`),
    "model 'm': 'ensemble_scheduling' cannot be set for a model whose platform is not 'ensemble' (platform is 'onnxruntime_onnx')",
  );
  assert.equal(
    configError('name: "e" platform: "ensemble"'),
    "model 'e': platform is 'ensemble' but 'ensemble_scheduling' is not set; an ensemble must specify its steps",
  );
  assert.equal(
    failure(() => validateModelConfig(completeModelConfig({ ...parseModelConfigText('name: "e" platform: "ensemble" version_policy { all { } } ensemble_scheduling { } instance_group { }') }))),
    "model 'e': 'instance_group' must not be specified for an ensemble",
  );
  assert.equal(ens('ensemble_scheduling { } optimization { }'), "model 'e': 'optimization' must not be specified for an ensemble");
  assert.equal(ens('ensemble_scheduling { } model_warmup { }'), "model 'e': 'model_warmup' must not be specified for an ensemble");
  assert.equal(ens('ensemble_scheduling { }'), "model 'e': ensemble_scheduling must specify one or more 'step's");
  assert.equal(ens('ensemble_scheduling { step { input_map { key: "a" value: "IN" } } }'), "model 'e': ensemble step 0 must specify 'model_name'");
  assert.equal(
    ens('ensemble_scheduling { step { model_name: "x" output_map { key: "a" value: "OUT" } } }'),
    "model 'e': ensemble step 0 (model 'x') must specify a non-empty 'input_map'",
  );
  assert.equal(
    ens('ensemble_scheduling { step { model_name: "x" input_map { key: "a" value: "IN" } } }'),
    "model 'e': ensemble step 0 (model 'x') must specify a non-empty 'output_map'",
  );
  assert.equal(
    ens(`ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'OUT' })} ${step('b', { x: 'IN' }, { y: 'OUT' })} }`),
    "model 'e': ensemble tensor 'OUT' can appear in an output map only once (again in ensemble step 1)",
  );
  assert.equal(
    ens(
      `ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'OUT' })} }`,
      'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "UNUSED" data_type: TYPE_FP32 dims: [ 1 ] } ] output { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }',
    ),
    "model 'e': ensemble input 'UNUSED' is not used: no step maps it into a composing model",
  );
  assert.equal(
    ens(`ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'OTHER' })} }`),
    "model 'e': output 'OUT' for ensemble 'e' is not written: no step maps an output to it",
  );
  assert.equal(
    ens(`ensemble_scheduling { ${step('a', { x: 'IN', z: 'MISSING' }, { y: 'MID' })} ${step('b', { x: 'MID' }, { y: 'OUT' })} }`),
    "model 'e': output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, 'MISSING', is not connected",
  );
  assert.equal(
    ens(`ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'OUT', z: 'EXTRA' })} }`),
    "model 'e': ensemble tensor 'EXTRA' is unused in ensemble 'e': it must be produced from the ensemble inputs and consumed by a step",
  );
  assert.equal(
    ens(`ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'OUT' })} ${step('b', { x: 'LOOSE' }, { y: 'SIDE' })} ${step('c', { x: 'SIDE' }, { y: 'SINK' })} }`),
    "model 'e': ensemble tensor 'SIDE' is unused in ensemble 'e': it must be produced from the ensemble inputs and consumed by a step",
  );
  assert.doesNotThrow(() =>
    validateModelConfig(prepare(`name: "e" platform: "ensemble" input { name: "IN" } output { name: "OUT" } ensemble_scheduling { ${step('a', { x: 'IN' }, { y: 'MID' })} ${step('b', { x: 'MID', w: 'IN' }, { y: 'OUT' })} }`)),
  );
});

test('instance-group group', () => {
  assert.equal(
    groupError(`${BASE} instance_group { kind: KIND_GPU }`),
    "model 'm': instance group 'm_0' has kind KIND_GPU but server does not support GPUs (no GPU was found: see the server's start-up log); " +
      'use KIND_CPU, or KIND_AUTO to run on a GPU where there is one',
  );
  assert.equal(
    groupError(`${BASE} instance_group { name: "auto" gpus: [ 5 ] }`),
    "model 'm': instance group 'auto' has kind KIND_CPU but specifies one or more GPUs (gpus: [5])",
  );
  assert.equal(
    groupError(`${BASE} instance_group { kind: KIND_MODEL gpus: [ 0 ] }`),
    "model 'm': instance group 'm_0' has kind KIND_MODEL but specifies one or more GPUs (gpus: [0])",
  );
  const withGpus = normalizeInstanceGroups(normalizeModelConfig(parseModelConfigText(`${BASE} instance_group { kind: KIND_GPU gpus: [ 0, 3 ] }`)), { gpus: [0, 1] });
  assert.equal(
    failure(() => validateInstanceGroups(withGpus, { gpus: [0, 1] })),
    "model 'm': instance group 'm_0' specifies invalid or unsupported gpu id 3; available GPUs are: 0, 1",
  );
  const noGpuList = completeModelConfig(parseModelConfigText(`${BASE} instance_group { name: "g" kind: KIND_GPU count: 1 }`));
  assert.equal(failure(() => validateInstanceGroups(noGpuList, { gpus: [0] })), "model 'm': instance group 'g' has kind KIND_GPU but specifies no GPUs");
  assert.equal(
    failure(() => validateInstanceGroups(completeModelConfig(parseModelConfigText(BASE)), { gpus: [] })),
    "model 'm': must specify one or more 'instance_group's",
  );
  assert.equal(
    failure(() => validateInstanceGroups(completeModelConfig(parseModelConfigText(`${BASE} instance_group { name: "g" }`)), { gpus: [] })),
    "model 'm': instance group 'g' has unexpected kind KIND_AUTO; instance groups must be normalised first",
  );
  assert.equal(
    groupError(`${BASE} instance_group { profile: "0" }`),
    "model 'm': instance group 'm_0' specifies 'profile', which is only supported for TensorRT models (platform 'tensorrt_plan'), but the platform is 'onnxruntime_onnx'",
  );
  assert.equal(
    groupError(`name: "t" platform: "tensorrt_plan" ${IO} instance_group { kind: KIND_CPU profile: [ "0", "-1" ] }`),
    "model 't': instance group 't_0' specifies invalid profile '-1'; a profile must be the string form of a non-negative integer",
  );
  assert.doesNotThrow(() => validateInstanceGroups(prepare(`name: "t" platform: "tensorrt_plan" ${IO} instance_group { kind: KIND_CPU profile: [ "0", "12" ] }`), { gpus: [] }));
  assert.doesNotThrow(() => validateInstanceGroups(prepare('name: "e" platform: "ensemble" ensemble_scheduling { }'), { gpus: [] }));
});

test('instance-group group: rate-limiter resources are global or per-device everywhere', () => {
  const config = prepare(
    `${BASE} instance_group [ { kind: KIND_CPU rate_limiter { resources [ { name: "R" global: true count: 1 }, { name: "D" count: 2 } ] } } ]`,
  );
  assert.deepEqual(validateRateLimiterResources(config, new Map()), new Map([['R', true], ['D', false]]));
  assert.equal(
    failure(() => validateRateLimiterResources(config, new Map([['D', true]]))),
    "model 'm': rate limiter resource 'D' of instance group 'm_0' is per-device here but global elsewhere; a resource must be either global or per-device everywhere",
  );
  const inner = prepare(
    `${BASE} instance_group [ { name: "a" kind: KIND_CPU rate_limiter { resources { name: "R" global: true } } }, { name: "b" kind: KIND_CPU rate_limiter { resources { name: "R" } } } ]`,
  );
  assert.equal(
    failure(() => validateRateLimiterResources(inner, new Map())),
    "model 'm': rate limiter resource 'R' of instance group 'b' is per-device here but global elsewhere; a resource must be either global or per-device everywhere",
  );
});

test('I/O group: names, types and dims', () => {
  assert.equal(ioError('name: "m" backend: "python" input { data_type: TYPE_FP32 dims: 1 }'), "model 'm': input 0 must specify 'name'");
  assert.equal(
    ioError('name: "m" backend: "python" input { name: "x" dims: 1 }'),
    "model 'm': input 'x' must specify 'data_type' (TYPE_INVALID is not allowed)",
  );
  assert.equal(
    ioError('name: "m" backend: "python" output { name: "y" data_type: TYPE_FP32 }'),
    "model 'm': output 'y' must specify 'dims'; for one value per batch item use dims: [ 1 ] with reshape: { shape: [ ] }",
  );
  assert.equal(
    ioError('name: "simple" backend: "onnxruntime" max_batch_size: 8 input { name: "INPUT0" data_type: TYPE_INT32 dims: [ 0 ] }'),
    "model 'simple': input 'INPUT0' dimension 0 is 0: dimension must be integer >= 1, or -1 to indicate a variable-size dimension",
  );
  assert.equal(
    ioError('name: "m" backend: "python" output { name: "y" data_type: TYPE_FP32 dims: [ 4, -2 ] }'),
    "model 'm': output 'y' dimension 1 is -2: dimension must be integer >= 1, or -1 to indicate a variable-size dimension",
  );
});

test('I/O group: reshape rules (§2.7)', () => {
  const reshape = (mbs: number, dims: string, shape: string): string =>
    ioError(`name: "m" backend: "python" max_batch_size: ${mbs} input { name: "x" data_type: TYPE_FP32 dims: ${dims} reshape { shape: ${shape} } }`);
  const ok = (mbs: number, dims: string, shape: string): void =>
    validateModelIO(prepare(`name: "m" backend: "python" max_batch_size: ${mbs} input { name: "x" data_type: TYPE_FP32 dims: ${dims} reshape { shape: ${shape} } }`));
  assert.equal(
    reshape(0, '[ 1 ]', '[ ]'),
    "model 'm': input 'x' cannot have empty reshape for non-batching model as scalar tensors are not supported",
  );
  assert.equal(
    reshape(0, '[ 2, 2 ]', '[ 4, 0 ]'),
    "model 'm': input 'x' reshape dimension 1 is 0: reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension",
  );
  assert.equal(reshape(0, '[ 2, 3 ]', '[ 5 ]'), "model 'm': input 'x' has different size for dims [2,3] and reshape [5]; their element counts must be equal");
  assert.equal(reshape(4, '[ 2 ]', '[ ]'), "model 'm': input 'x' has different size for dims [2] and reshape []; their element counts must be equal");
  assert.equal(reshape(4, '[ -1 ]', '[ ]'), "model 'm': input 'x' has different size for dims [-1] and reshape []; their element counts must be equal");
  assert.equal(reshape(0, '[ -1, 4 ]', '[ 4 ]'), "model 'm': input 'x' has different size for dims [-1,4] and reshape [4]; their element counts must be equal");
  assert.equal(
    reshape(0, '[ -1, 4 ]', '[ -1, 2, -1 ]'),
    "model 'm': input 'x' has different number of variable-size dimensions for dims [-1,4] and reshape [-1,2,-1]",
  );
  assert.equal(
    reshape(0, '[ 2, 4, -1, 6 ]', '[ 4, -1, 2, 6 ]'),
    "model 'm': input 'x' has different size for dims [2,4,-1,6] and reshape [4,-1,2,6]; their element counts must be equal",
  );
  ok(0, '[ 2, 4, -1, 6 ]', '[ 8, -1, 1, 6 ]');
  ok(4, '[ 1 ]', '[ ]');
  ok(0, '[ 2, 3 ]', '[ 3, 2 ]');
  ok(0, '[ -1 ]', '[ -1, 1 ]');
});

test('I/O group: formats and TensorRT-only flags', () => {
  assert.equal(
    ioError('name: "m" backend: "onnxruntime" input { name: "img" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 224, 224 ] }'),
    "model 'm': input 'img' has format FORMAT_NHWC, which requires exactly 3 dims, got 2",
  );
  assert.equal(
    ioError('name: "m" backend: "onnxruntime" input { name: "s" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true }'),
    "model 'm': input 's' is a shape tensor, but shape tensors are only supported for the TensorRT platform 'tensorrt_plan'",
  );
  assert.equal(
    ioError('name: "m" backend: "onnxruntime" output { name: "o" data_type: TYPE_FP32 dims: [ 3, 2, 2 ] is_non_linear_format_io: true }'),
    "model 'm': output 'o' uses non-linear IO format, which is only supported for the TensorRT platform 'tensorrt_plan'",
  );
  assert.equal(
    ioError('name: "m" platform: "tensorrt_plan" output { name: "o" data_type: TYPE_FP32 dims: [ 3, 2 ] is_non_linear_format_io: true }'),
    "model 'm': output 'o' uses non-linear IO format, which requires exactly 3 dims, got 2",
  );
  assert.doesNotThrow(() =>
    validateModelIO(prepare('name: "m" platform: "tensorrt_plan" input { name: "s" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true }')),
  );
});

test('I/O group: batch inputs and batch outputs', () => {
  const batch = (extra: string): string => ioError(`${BASE} ${extra}`);
  assert.equal(
    batch('batch_input { kind: BATCH_ELEMENT_COUNT target_name: "n" data_type: TYPE_INT32 source_input: [ "INPUT0", "INPUT0" ] }'),
    "model 'm': batch_input 0 of kind BATCH_ELEMENT_COUNT expects 1 source input, got 2",
  );
  assert.equal(
    batch('batch_input { kind: BATCH_ITEM_SHAPE target_name: "n" data_type: TYPE_INT32 source_input: "NOPE" }'),
    "model 'm': batch_input 0 has unknown source input name 'NOPE'; it must be a configured input",
  );
  assert.equal(
    batch('batch_input { target_name: "n" data_type: TYPE_FP16 source_input: "INPUT0" }'),
    "model 'm': batch_input 0 data type must be TYPE_INT32 or TYPE_FP32, got TYPE_FP16",
  );
  assert.equal(batch('batch_output { target_name: "OUTPUT0" }'), "model 'm': batch_output 0 of kind BATCH_SCATTER_WITH_INPUT_SHAPE expects 1 source input, got 0");
  assert.equal(
    batch('batch_output { target_name: "OUTPUT0" source_input: "OUTPUT0" }'),
    "model 'm': batch_output 0 has unknown source input name 'OUTPUT0'; it must be a configured input",
  );
  assert.equal(
    batch('batch_output { target_name: "MISSING" source_input: "INPUT0" }'),
    "model 'm': batch_output 0 has unknown target output name 'MISSING'; it must be a configured output",
  );
  assert.equal(
    batch('batch_output { target_name: [ "OUTPUT0", "OUTPUT0" ] source_input: "INPUT0" }'),
    "model 'm': batch_output 0: target output name 'OUTPUT0' can only be specified once",
  );
});
