/**
 * A data-driven description of the `inference.ModelConfig` message and every message and enum it
 * contains (protocol.md §4.5, models-and-scheduling.md §2). The text-format parser and printer,
 * the JSON mapping and the defaults filler are all driven by this table; no per-field code.
 *
 * Fields are listed in the declaration order of `model_config.proto` (which is the order the
 * reference JSON printer uses), not by field number.
 */

/** Scalar wire types used by ModelConfig. */
export type ScalarType = 'string' | 'bool' | 'int32' | 'int64' | 'uint32' | 'uint64' | 'float' | 'double';

/** Scalar types allowed as map keys (protobuf forbids floats, enums and messages). */
export type MapKeyType = 'string' | 'bool' | 'int32' | 'int64' | 'uint32' | 'uint64';

export interface EnumValueSchema {
  readonly name: string;
  readonly number: number;
}

export interface EnumSchema {
  /** Name relative to package `inference`, e.g. `ModelInstanceGroup.Kind`. */
  readonly name: string;
  /** In declaration order; the first value (number 0) is the proto3 default. */
  readonly values: readonly EnumValueSchema[];
  byName(name: string): EnumValueSchema | undefined;
  byNumber(number: number): EnumValueSchema | undefined;
}

/** The type of one value: an element of a repeated field, a singular field's value, or a map value. */
export type ValueSchema =
  | { readonly type: ScalarType }
  | { readonly type: 'enum'; readonly enum: EnumSchema }
  | { readonly type: 'message'; readonly message: MessageSchema };

interface FieldCommon {
  /** Original snake_case proto name (the JSON name Nereid emits). */
  readonly name: string;
  readonly number: number;
  /** lowerCamelCase proto3 JSON name (accepted on input). */
  readonly jsonName: string;
  /** Name of the containing oneof, if any; oneof members have presence. */
  readonly oneof?: string;
}

export type ScalarFieldSchema = FieldCommon & { readonly type: ScalarType; readonly repeated: boolean };
export type EnumFieldSchema = FieldCommon & {
  readonly type: 'enum';
  readonly repeated: boolean;
  readonly enum: EnumSchema;
};
export type MessageFieldSchema = FieldCommon & {
  readonly type: 'message';
  readonly repeated: boolean;
  readonly message: MessageSchema;
};
export type MapFieldSchema = FieldCommon & {
  readonly type: 'map';
  readonly repeated: false;
  readonly key: MapKeyType;
  readonly value: ValueSchema;
  /** The synthetic `<Field>Entry { key = 1; value = 2; }` message of the text format. */
  readonly entry: MessageSchema;
};

export type FieldSchema = ScalarFieldSchema | EnumFieldSchema | MessageFieldSchema | MapFieldSchema;
export type FieldType = FieldSchema['type'];

export interface MessageSchema {
  /** Name relative to package `inference`, e.g. `ModelSequenceBatching.State`. */
  readonly name: string;
  readonly fields: readonly FieldSchema[];
  /** Names of the oneof groups, in declaration order. */
  readonly oneofs: readonly string[];
  /** True for the synthetic entry message of a map field. */
  readonly mapEntry: boolean;
  /** Field by its proto (snake_case) name. */
  field(name: string): FieldSchema | undefined;
  /** Field by its proto name or its lowerCamelCase JSON name. */
  fieldByJsonName(name: string): FieldSchema | undefined;
}

// ---------------------------------------------------------------------------------------------
// Builders

type FieldSpec =
  | { kind: 'scalar'; name: string; number: number; type: ScalarType; repeated?: boolean; oneof?: string }
  | { kind: 'enum'; name: string; number: number; enum: EnumSchema; repeated?: boolean; oneof?: string }
  | { kind: 'message'; name: string; number: number; message: MessageSchema; repeated?: boolean; oneof?: string }
  | { kind: 'map'; name: string; number: number; key: MapKeyType; value: ValueSchema };

type Extra = { repeated?: boolean; oneof?: string };

const scalar = (name: string, number: number, type: ScalarType, extra: Extra = {}): FieldSpec => ({
  kind: 'scalar',
  name,
  number,
  type,
  ...extra,
});
const repeated = (name: string, number: number, type: ScalarType): FieldSpec =>
  scalar(name, number, type, { repeated: true });
const enumField = (name: string, number: number, e: EnumSchema, extra: Extra = {}): FieldSpec => ({
  kind: 'enum',
  name,
  number,
  enum: e,
  ...extra,
});
const messageField = (name: string, number: number, m: MessageSchema, extra: Extra = {}): FieldSpec => ({
  kind: 'message',
  name,
  number,
  message: m,
  ...extra,
});
const mapField = (name: string, number: number, key: MapKeyType, value: ValueSchema): FieldSpec => ({
  kind: 'map',
  name,
  number,
  key,
  value,
});

/** proto3 JSON name: underscores removed, the following letter upper-cased. */
export function toJsonName(name: string): string {
  return name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

function defineEnum(name: string, values: ReadonlyArray<readonly [string, number]>): EnumSchema {
  const list = values.map(([n, v]) => Object.freeze({ name: n, number: v }));
  const byName = new Map(list.map((v) => [v.name, v]));
  const byNumber = new Map(list.map((v) => [v.number, v]));
  return Object.freeze({
    name,
    values: Object.freeze(list),
    byName: (n: string) => byName.get(n),
    byNumber: (n: number) => byNumber.get(n),
  });
}

function entryName(fieldName: string): string {
  const camel = toJsonName(fieldName);
  return `${camel.charAt(0).toUpperCase()}${camel.slice(1)}Entry`;
}

function defineMessage(name: string, specs: readonly FieldSpec[], mapEntry = false): MessageSchema {
  const fields: FieldSchema[] = specs.map((spec) => {
    const common = { name: spec.name, number: spec.number, jsonName: toJsonName(spec.name) };
    switch (spec.kind) {
      case 'scalar':
        return { ...common, type: spec.type, repeated: spec.repeated ?? false, ...oneofOf(spec.oneof) };
      case 'enum':
        return { ...common, type: 'enum', enum: spec.enum, repeated: spec.repeated ?? false, ...oneofOf(spec.oneof) };
      case 'message':
        return {
          ...common,
          type: 'message',
          message: spec.message,
          repeated: spec.repeated ?? false,
          ...oneofOf(spec.oneof),
        };
      case 'map': {
        const entry = defineMessage(
          `${name}.${entryName(spec.name)}`,
          [
            { kind: 'scalar', name: 'key', number: 1, type: spec.key },
            valueSpec('value', 2, spec.value),
          ],
          true,
        );
        return { ...common, type: 'map', repeated: false, key: spec.key, value: spec.value, entry };
      }
    }
  });
  const byName = new Map<string, FieldSchema>();
  const byJson = new Map<string, FieldSchema>();
  for (const f of fields) {
    byName.set(f.name, Object.freeze(f));
    byJson.set(f.name, f);
    byJson.set(f.jsonName, f);
  }
  const oneofs = [...new Set(fields.flatMap((f) => (f.oneof === undefined ? [] : [f.oneof])))];
  return Object.freeze({
    name,
    fields: Object.freeze(fields),
    oneofs: Object.freeze(oneofs),
    mapEntry,
    field: (n: string) => byName.get(n),
    fieldByJsonName: (n: string) => byJson.get(n),
  });
}

function oneofOf(oneof: string | undefined): { oneof?: string } {
  return oneof === undefined ? {} : { oneof };
}

function valueSpec(name: string, number: number, value: ValueSchema): FieldSpec {
  switch (value.type) {
    case 'enum':
      return enumField(name, number, value.enum);
    case 'message':
      return messageField(name, number, value.message);
    default:
      return scalar(name, number, value.type);
  }
}

const msgValue = (message: MessageSchema): ValueSchema => ({ type: 'message', message });
const STRING_VALUE: ValueSchema = { type: 'string' };

// ---------------------------------------------------------------------------------------------
// Enums (protocol.md §4.5)

export const DATA_TYPE_ENUM = defineEnum('DataType', [
  ['TYPE_INVALID', 0],
  ['TYPE_BOOL', 1],
  ['TYPE_UINT8', 2],
  ['TYPE_UINT16', 3],
  ['TYPE_UINT32', 4],
  ['TYPE_UINT64', 5],
  ['TYPE_INT8', 6],
  ['TYPE_INT16', 7],
  ['TYPE_INT32', 8],
  ['TYPE_INT64', 9],
  ['TYPE_FP16', 10],
  ['TYPE_FP32', 11],
  ['TYPE_FP64', 12],
  ['TYPE_STRING', 13],
  ['TYPE_BF16', 14],
]);

export const INSTANCE_GROUP_KIND_ENUM = defineEnum('ModelInstanceGroup.Kind', [
  ['KIND_AUTO', 0],
  ['KIND_GPU', 1],
  ['KIND_CPU', 2],
  ['KIND_MODEL', 3],
]);

export const SECONDARY_DEVICE_KIND_ENUM = defineEnum('ModelInstanceGroup.SecondaryDevice.SecondaryDeviceKind', [
  ['KIND_NVDLA', 0],
]);

export const INPUT_FORMAT_ENUM = defineEnum('ModelInput.Format', [
  ['FORMAT_NONE', 0],
  ['FORMAT_NHWC', 1],
  ['FORMAT_NCHW', 2],
]);

export const BATCH_INPUT_KIND_ENUM = defineEnum('BatchInput.Kind', [
  ['BATCH_ELEMENT_COUNT', 0],
  ['BATCH_ACCUMULATED_ELEMENT_COUNT', 1],
  ['BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO', 2],
  ['BATCH_MAX_ELEMENT_COUNT_AS_SHAPE', 3],
  ['BATCH_ITEM_SHAPE', 4],
  ['BATCH_ITEM_SHAPE_FLATTEN', 5],
]);

export const BATCH_OUTPUT_KIND_ENUM = defineEnum('BatchOutput.Kind', [['BATCH_SCATTER_WITH_INPUT_SHAPE', 0]]);

export const MODEL_PRIORITY_ENUM = defineEnum('ModelOptimizationPolicy.ModelPriority', [
  ['PRIORITY_DEFAULT', 0],
  ['PRIORITY_MAX', 1],
  ['PRIORITY_MIN', 2],
]);

export const TIMEOUT_ACTION_ENUM = defineEnum('ModelQueuePolicy.TimeoutAction', [
  ['REJECT', 0],
  ['DELAY', 1],
]);

export const CONTROL_KIND_ENUM = defineEnum('ModelSequenceBatching.Control.Kind', [
  ['CONTROL_SEQUENCE_START', 0],
  ['CONTROL_SEQUENCE_READY', 1],
  ['CONTROL_SEQUENCE_END', 2],
  ['CONTROL_SEQUENCE_CORRID', 3],
]);

const dataType = (name: string, number: number, extra: Extra = {}): FieldSpec =>
  enumField(name, number, DATA_TYPE_ENUM, extra);

// ---------------------------------------------------------------------------------------------
// Messages, leaves first (protocol.md §4.5)

const RateLimiterResource = defineMessage('ModelRateLimiter.Resource', [
  scalar('name', 1, 'string'),
  scalar('global', 2, 'bool'),
  scalar('count', 3, 'uint32'),
]);

const RateLimiter = defineMessage('ModelRateLimiter', [
  messageField('resources', 1, RateLimiterResource, { repeated: true }),
  scalar('priority', 2, 'uint32'),
]);

const SecondaryDevice = defineMessage('ModelInstanceGroup.SecondaryDevice', [
  enumField('kind', 1, SECONDARY_DEVICE_KIND_ENUM),
  scalar('device_id', 2, 'int64'),
]);

const InstanceGroup = defineMessage('ModelInstanceGroup', [
  scalar('name', 1, 'string'),
  enumField('kind', 4, INSTANCE_GROUP_KIND_ENUM),
  scalar('count', 2, 'int32'),
  messageField('rate_limiter', 6, RateLimiter),
  repeated('gpus', 3, 'int32'),
  messageField('secondary_devices', 8, SecondaryDevice, { repeated: true }),
  repeated('profile', 5, 'string'),
  scalar('passive', 7, 'bool'),
  scalar('host_policy', 9, 'string'),
]);

const TensorReshape = defineMessage('ModelTensorReshape', [repeated('shape', 1, 'int64')]);

const Input = defineMessage('ModelInput', [
  scalar('name', 1, 'string'),
  dataType('data_type', 2),
  enumField('format', 3, INPUT_FORMAT_ENUM),
  repeated('dims', 4, 'int64'),
  messageField('reshape', 5, TensorReshape),
  scalar('is_shape_tensor', 6, 'bool'),
  scalar('allow_ragged_batch', 7, 'bool'),
  scalar('optional', 8, 'bool'),
  scalar('is_non_linear_format_io', 9, 'bool'),
]);

const Output = defineMessage('ModelOutput', [
  scalar('name', 1, 'string'),
  dataType('data_type', 2),
  repeated('dims', 3, 'int64'),
  messageField('reshape', 5, TensorReshape),
  scalar('label_filename', 4, 'string'),
  scalar('is_shape_tensor', 6, 'bool'),
  scalar('is_non_linear_format_io', 7, 'bool'),
]);

const BatchInput = defineMessage('BatchInput', [
  enumField('kind', 1, BATCH_INPUT_KIND_ENUM),
  repeated('target_name', 2, 'string'),
  dataType('data_type', 3),
  repeated('source_input', 4, 'string'),
]);

const BatchOutput = defineMessage('BatchOutput', [
  repeated('target_name', 1, 'string'),
  enumField('kind', 2, BATCH_OUTPUT_KIND_ENUM),
  repeated('source_input', 3, 'string'),
]);

const VersionLatest = defineMessage('ModelVersionPolicy.Latest', [scalar('num_versions', 1, 'uint32')]);
const VersionAll = defineMessage('ModelVersionPolicy.All', []);
const VersionSpecific = defineMessage('ModelVersionPolicy.Specific', [repeated('versions', 1, 'int64')]);

const VersionPolicy = defineMessage('ModelVersionPolicy', [
  messageField('latest', 1, VersionLatest, { oneof: 'policy_choice' }),
  messageField('all', 2, VersionAll, { oneof: 'policy_choice' }),
  messageField('specific', 3, VersionSpecific, { oneof: 'policy_choice' }),
]);

const OptGraph = defineMessage('ModelOptimizationPolicy.Graph', [scalar('level', 1, 'int32')]);

const GraphSpecShape = defineMessage('ModelOptimizationPolicy.Cuda.GraphSpec.Shape', [repeated('dim', 1, 'int64')]);

const GraphSpecLowerBound = defineMessage('ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound', [
  scalar('batch_size', 1, 'int32'),
  mapField('input', 2, 'string', msgValue(GraphSpecShape)),
]);

const GraphSpec = defineMessage('ModelOptimizationPolicy.Cuda.GraphSpec', [
  scalar('batch_size', 1, 'int32'),
  mapField('input', 2, 'string', msgValue(GraphSpecShape)),
  messageField('graph_lower_bound', 3, GraphSpecLowerBound),
]);

const OptCuda = defineMessage('ModelOptimizationPolicy.Cuda', [
  scalar('graphs', 1, 'bool'),
  scalar('busy_wait_events', 2, 'bool'),
  messageField('graph_spec', 3, GraphSpec, { repeated: true }),
  scalar('output_copy_stream', 4, 'bool'),
]);

const Accelerator = defineMessage('ModelOptimizationPolicy.ExecutionAccelerators.Accelerator', [
  scalar('name', 1, 'string'),
  mapField('parameters', 2, 'string', STRING_VALUE),
]);

const ExecutionAccelerators = defineMessage('ModelOptimizationPolicy.ExecutionAccelerators', [
  messageField('gpu_execution_accelerator', 1, Accelerator, { repeated: true }),
  messageField('cpu_execution_accelerator', 2, Accelerator, { repeated: true }),
]);

const PinnedMemoryBuffer = defineMessage('ModelOptimizationPolicy.PinnedMemoryBuffer', [scalar('enable', 1, 'bool')]);

const OptimizationPolicy = defineMessage('ModelOptimizationPolicy', [
  messageField('graph', 1, OptGraph),
  enumField('priority', 2, MODEL_PRIORITY_ENUM),
  messageField('cuda', 3, OptCuda),
  messageField('execution_accelerators', 4, ExecutionAccelerators),
  messageField('input_pinned_memory', 5, PinnedMemoryBuffer),
  messageField('output_pinned_memory', 6, PinnedMemoryBuffer),
  scalar('gather_kernel_buffer_threshold', 7, 'uint32'),
  scalar('eager_batching', 8, 'bool'),
]);

const QueuePolicy = defineMessage('ModelQueuePolicy', [
  enumField('timeout_action', 1, TIMEOUT_ACTION_ENUM),
  scalar('default_timeout_microseconds', 2, 'uint64'),
  scalar('allow_timeout_override', 3, 'bool'),
  scalar('max_queue_size', 4, 'uint32'),
]);

const DynamicBatching = defineMessage('ModelDynamicBatching', [
  repeated('preferred_batch_size', 1, 'int32'),
  scalar('max_queue_delay_microseconds', 2, 'uint64'),
  scalar('preserve_ordering', 3, 'bool'),
  scalar('priority_levels', 4, 'uint64'),
  scalar('default_priority_level', 5, 'uint64'),
  messageField('default_queue_policy', 6, QueuePolicy),
  mapField('priority_queue_policy', 7, 'uint64', msgValue(QueuePolicy)),
]);

const SeqControl = defineMessage('ModelSequenceBatching.Control', [
  enumField('kind', 1, CONTROL_KIND_ENUM),
  repeated('int32_false_true', 2, 'int32'),
  repeated('fp32_false_true', 3, 'float'),
  repeated('bool_false_true', 5, 'bool'),
  dataType('data_type', 4),
]);

const SeqControlInput = defineMessage('ModelSequenceBatching.ControlInput', [
  scalar('name', 1, 'string'),
  messageField('control', 2, SeqControl, { repeated: true }),
]);

const SeqInitialState = defineMessage('ModelSequenceBatching.InitialState', [
  dataType('data_type', 1),
  repeated('dims', 2, 'int64'),
  scalar('zero_data', 3, 'bool', { oneof: 'state_data' }),
  scalar('data_file', 4, 'string', { oneof: 'state_data' }),
  scalar('name', 5, 'string'),
]);

const SeqState = defineMessage('ModelSequenceBatching.State', [
  scalar('input_name', 1, 'string'),
  scalar('output_name', 2, 'string'),
  dataType('data_type', 3),
  repeated('dims', 4, 'int64'),
  messageField('initial_state', 5, SeqInitialState, { repeated: true }),
  scalar('use_same_buffer_for_input_output', 6, 'bool'),
  scalar('use_growable_memory', 7, 'bool'),
]);

const SeqStrategyDirect = defineMessage('ModelSequenceBatching.StrategyDirect', [
  scalar('max_queue_delay_microseconds', 1, 'uint64'),
  scalar('minimum_slot_utilization', 2, 'float'),
]);

const SeqStrategyOldest = defineMessage('ModelSequenceBatching.StrategyOldest', [
  scalar('max_candidate_sequences', 1, 'int32'),
  repeated('preferred_batch_size', 2, 'int32'),
  scalar('max_queue_delay_microseconds', 3, 'uint64'),
  scalar('preserve_ordering', 4, 'bool'),
]);

const SequenceBatching = defineMessage('ModelSequenceBatching', [
  messageField('direct', 3, SeqStrategyDirect, { oneof: 'strategy_choice' }),
  messageField('oldest', 4, SeqStrategyOldest, { oneof: 'strategy_choice' }),
  scalar('max_sequence_idle_microseconds', 1, 'uint64'),
  messageField('control_input', 2, SeqControlInput, { repeated: true }),
  messageField('state', 5, SeqState, { repeated: true }),
  scalar('iterative_sequence', 6, 'bool'),
]);

const EnsembleStep = defineMessage('ModelEnsembling.Step', [
  scalar('model_name', 1, 'string'),
  scalar('model_version', 2, 'int64'),
  mapField('input_map', 3, 'string', STRING_VALUE),
  mapField('output_map', 4, 'string', STRING_VALUE),
  scalar('model_namespace', 5, 'string'),
]);

const Ensembling = defineMessage('ModelEnsembling', [
  messageField('step', 1, EnsembleStep, { repeated: true }),
  scalar('max_inflight_requests', 2, 'uint32'),
]);

const Parameter = defineMessage('ModelParameter', [scalar('string_value', 1, 'string')]);

const WarmupInput = defineMessage('ModelWarmup.Input', [
  dataType('data_type', 1),
  repeated('dims', 2, 'int64'),
  scalar('zero_data', 3, 'bool', { oneof: 'input_data_type' }),
  scalar('random_data', 4, 'bool', { oneof: 'input_data_type' }),
  scalar('input_data_file', 5, 'string', { oneof: 'input_data_type' }),
]);

const Warmup = defineMessage('ModelWarmup', [
  scalar('name', 1, 'string'),
  scalar('batch_size', 2, 'uint32'),
  mapField('inputs', 3, 'string', msgValue(WarmupInput)),
  scalar('count', 4, 'uint32'),
]);

const Operations = defineMessage('ModelOperations', [repeated('op_library_filename', 1, 'string')]);

const TransactionPolicy = defineMessage('ModelTransactionPolicy', [scalar('decoupled', 1, 'bool')]);

const RepositoryAgent = defineMessage('ModelRepositoryAgents.Agent', [
  scalar('name', 1, 'string'),
  mapField('parameters', 2, 'string', STRING_VALUE),
]);

const RepositoryAgents = defineMessage('ModelRepositoryAgents', [
  messageField('agents', 1, RepositoryAgent, { repeated: true }),
]);

const ResponseCache = defineMessage('ModelResponseCache', [scalar('enable', 1, 'bool')]);

const MetricIdentifier = defineMessage('ModelMetrics.MetricControl.MetricIdentifier', [scalar('family', 1, 'string')]);

const HistogramOptions = defineMessage('ModelMetrics.MetricControl.HistogramOptions', [
  repeated('buckets', 1, 'double'),
]);

const MetricControl = defineMessage('ModelMetrics.MetricControl', [
  messageField('metric_identifier', 1, MetricIdentifier),
  messageField('histogram_options', 2, HistogramOptions, { oneof: 'metric_options' }),
]);

const Metrics = defineMessage('ModelMetrics', [messageField('metric_control', 1, MetricControl, { repeated: true })]);

/** The root message of `config.pbtxt`. */
export const MODEL_CONFIG_SCHEMA: MessageSchema = defineMessage('ModelConfig', [
  scalar('name', 1, 'string'),
  scalar('platform', 2, 'string'),
  scalar('backend', 17, 'string'),
  scalar('runtime', 25, 'string'),
  messageField('version_policy', 3, VersionPolicy),
  scalar('max_batch_size', 4, 'int32'),
  messageField('input', 5, Input, { repeated: true }),
  messageField('output', 6, Output, { repeated: true }),
  messageField('batch_input', 20, BatchInput, { repeated: true }),
  messageField('batch_output', 21, BatchOutput, { repeated: true }),
  messageField('optimization', 12, OptimizationPolicy),
  messageField('dynamic_batching', 11, DynamicBatching, { oneof: 'scheduling_choice' }),
  messageField('sequence_batching', 13, SequenceBatching, { oneof: 'scheduling_choice' }),
  messageField('ensemble_scheduling', 15, Ensembling, { oneof: 'scheduling_choice' }),
  messageField('instance_group', 7, InstanceGroup, { repeated: true }),
  scalar('default_model_filename', 8, 'string'),
  mapField('cc_model_filenames', 9, 'string', STRING_VALUE),
  mapField('metric_tags', 10, 'string', STRING_VALUE),
  mapField('parameters', 14, 'string', msgValue(Parameter)),
  messageField('model_warmup', 16, Warmup, { repeated: true }),
  messageField('model_operations', 18, Operations),
  messageField('model_transaction_policy', 19, TransactionPolicy),
  messageField('model_repository_agents', 23, RepositoryAgents),
  messageField('response_cache', 24, ResponseCache),
  messageField('model_metrics', 26, Metrics),
]);

// ---------------------------------------------------------------------------------------------
// Helpers shared by the parser, printer and JSON mapping

/** The type of one value of `field`: the element type of a repeated field, the value type of a map. */
export function valueSchemaOf(field: FieldSchema): ValueSchema {
  switch (field.type) {
    case 'map':
      return field.value;
    case 'enum':
      return { type: 'enum', enum: field.enum };
    case 'message':
      return { type: 'message', message: field.message };
    default:
      return { type: field.type };
  }
}

/** Whether JSON writers of the standard proto3 mapping quote this type (64-bit integers). */
export function is64BitType(type: string): type is 'int64' | 'uint64' {
  return type === 'int64' || type === 'uint64';
}

export function isIntegerType(type: string): type is 'int32' | 'int64' | 'uint32' | 'uint64' {
  return type === 'int32' || type === 'int64' || type === 'uint32' || type === 'uint64';
}

/** Inclusive value range of each integer type (64-bit limits as BigInt). */
export const INTEGER_RANGE: Readonly<Record<'int32' | 'int64' | 'uint32' | 'uint64', readonly [bigint, bigint]>> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

/** proto3 default of a scalar or enum value ("", false, 0, first enum name). Messages have none. */
export function defaultValueOf(value: ValueSchema): string | number | boolean | undefined {
  switch (value.type) {
    case 'string':
      return '';
    case 'bool':
      return false;
    case 'enum':
      return value.enum.values[0]?.name;
    case 'message':
      return undefined;
    default:
      return 0;
  }
}

/**
 * Rounds a number to IEEE single precision and returns the shortest decimal that reads back to
 * the same single (what protobuf prints for a `float` field, e.g. 0.1 rather than
 * 0.10000000149011612).
 */
export function toFloat32(value: number): number {
  const f = Math.fround(value);
  if (!Number.isFinite(f) || f === 0) return f;
  for (let digits = 1; digits <= 9; digits++) {
    const candidate = Number(f.toPrecision(digits));
    if (Math.fround(candidate) === f) return candidate;
  }
  return f;
}

/** Every message reachable from `root` (map entry messages excluded), each once, root first. */
export function reachableMessages(root: MessageSchema = MODEL_CONFIG_SCHEMA): MessageSchema[] {
  const seen = new Set<MessageSchema>();
  const visit = (m: MessageSchema): void => {
    if (seen.has(m)) return;
    seen.add(m);
    for (const f of m.fields) {
      const v = valueSchemaOf(f);
      if (v.type === 'message') visit(v.message);
    }
  };
  visit(root);
  return [...seen];
}
