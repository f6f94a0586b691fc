/**
 * The `inference.ModelConfig` message (models-and-scheduling.md §2, protocol.md §4.5) as
 * TypeScript types.
 *
 * Field names are the original snake_case protobuf names, so the JSON form of a config is the
 * object itself. 64-bit integer fields are JS numbers (the parser refuses values that are not
 * exactly representable). Enums are their names.
 *
 * `ModelConfig` is the *complete* form: every scalar, repeated and map field is present (holding
 * its proto3 default when unset); sub-message fields are optional because they have presence.
 * `Sparse<ModelConfig>` is what the parsers produce: only the fields the text actually set.
 */
import type { ConfigDataType } from '@nereid/protocol';

/** A message with only the fields that were set (parser output). */
export type Sparse<T> = T extends readonly (infer U)[]
  ? Sparse<U>[]
  : T extends object
    ? { [K in keyof T]?: Sparse<T[K]> }
    : T;

export type DataTypeName = ConfigDataType;

export interface ModelTensorReshape {
  shape: number[];
}

export type InputFormat = 'FORMAT_NONE' | 'FORMAT_NHWC' | 'FORMAT_NCHW';

export interface ModelInput {
  name: string;
  data_type: DataTypeName;
  format: InputFormat;
  dims: number[];
  reshape?: ModelTensorReshape;
  is_shape_tensor: boolean;
  allow_ragged_batch: boolean;
  optional: boolean;
  is_non_linear_format_io: boolean;
}

export interface ModelOutput {
  name: string;
  data_type: DataTypeName;
  dims: number[];
  reshape?: ModelTensorReshape;
  label_filename: string;
  is_shape_tensor: boolean;
  is_non_linear_format_io: boolean;
}

export type BatchInputKind =
  | 'BATCH_ELEMENT_COUNT'
  | 'BATCH_ACCUMULATED_ELEMENT_COUNT'
  | 'BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO'
  | 'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE'
  | 'BATCH_ITEM_SHAPE'
  | 'BATCH_ITEM_SHAPE_FLATTEN';

export interface BatchInput {
  kind: BatchInputKind;
  target_name: string[];
  data_type: DataTypeName;
  source_input: string[];
}

export type BatchOutputKind = 'BATCH_SCATTER_WITH_INPUT_SHAPE';

export interface BatchOutput {
  target_name: string[];
  kind: BatchOutputKind;
  source_input: string[];
}

export interface ModelVersionPolicy {
  /** oneof policy_choice */
  latest?: { num_versions: number };
  all?: Record<string, never>;
  specific?: { versions: number[] };
}

export interface ModelRateLimiterResource {
  name: string;
  global: boolean;
  count: number;
}

export interface ModelRateLimiter {
  resources: ModelRateLimiterResource[];
  priority: number;
}

export type InstanceGroupKind = 'KIND_AUTO' | 'KIND_GPU' | 'KIND_CPU' | 'KIND_MODEL';

export interface ModelInstanceGroupSecondaryDevice {
  kind: 'KIND_NVDLA';
  device_id: number;
}

export interface ModelInstanceGroup {
  name: string;
  kind: InstanceGroupKind;
  count: number;
  rate_limiter?: ModelRateLimiter;
  gpus: number[];
  secondary_devices: ModelInstanceGroupSecondaryDevice[];
  profile: string[];
  passive: boolean;
  host_policy: string;
}

export interface GraphSpecShape {
  dim: number[];
}

export interface GraphSpecLowerBound {
  batch_size: number;
  input: Record<string, GraphSpecShape>;
}

export interface GraphSpec {
  batch_size: number;
  input: Record<string, GraphSpecShape>;
  graph_lower_bound?: GraphSpecLowerBound;
}

export interface ExecutionAccelerator {
  name: string;
  parameters: Record<string, string>;
}

export type ModelPriority = 'PRIORITY_DEFAULT' | 'PRIORITY_MAX' | 'PRIORITY_MIN';

export interface ModelOptimizationPolicy {
  graph?: { level: number };
  priority: ModelPriority;
  cuda?: {
    graphs: boolean;
    busy_wait_events: boolean;
    graph_spec: GraphSpec[];
    output_copy_stream: boolean;
  };
  execution_accelerators?: {
    gpu_execution_accelerator: ExecutionAccelerator[];
    cpu_execution_accelerator: ExecutionAccelerator[];
  };
  input_pinned_memory?: { enable: boolean };
  output_pinned_memory?: { enable: boolean };
  gather_kernel_buffer_threshold: number;
  eager_batching: boolean;
}

export type TimeoutAction = 'REJECT' | 'DELAY';

export interface ModelQueuePolicy {
  timeout_action: TimeoutAction;
  default_timeout_microseconds: number;
  allow_timeout_override: boolean;
  max_queue_size: number;
}

export interface ModelDynamicBatching {
  preferred_batch_size: number[];
  max_queue_delay_microseconds: number;
  preserve_ordering: boolean;
  priority_levels: number;
  default_priority_level: number;
  default_queue_policy?: ModelQueuePolicy;
  /** map<uint64, ModelQueuePolicy>; keys are decimal strings. */
  priority_queue_policy: Record<string, ModelQueuePolicy>;
}

export type ControlKind =
  | 'CONTROL_SEQUENCE_START'
  | 'CONTROL_SEQUENCE_READY'
  | 'CONTROL_SEQUENCE_END'
  | 'CONTROL_SEQUENCE_CORRID';

export interface SequenceControl {
  kind: ControlKind;
  int32_false_true: number[];
  fp32_false_true: number[];
  bool_false_true: boolean[];
  data_type: DataTypeName;
}

export interface SequenceControlInput {
  name: string;
  control: SequenceControl[];
}

export interface SequenceInitialState {
  data_type: DataTypeName;
  dims: number[];
  /** oneof state_data */
  zero_data?: boolean;
  data_file?: string;
  name: string;
}

export interface SequenceState {
  input_name: string;
  output_name: string;
  data_type: DataTypeName;
  dims: number[];
  initial_state: SequenceInitialState[];
  use_same_buffer_for_input_output: boolean;
  use_growable_memory: boolean;
}

export interface SequenceStrategyDirect {
  max_queue_delay_microseconds: number;
  minimum_slot_utilization: number;
}

export interface SequenceStrategyOldest {
  max_candidate_sequences: number;
  preferred_batch_size: number[];
  max_queue_delay_microseconds: number;
  preserve_ordering: boolean;
}

export interface ModelSequenceBatching {
  /** oneof strategy_choice */
  direct?: SequenceStrategyDirect;
  oldest?: SequenceStrategyOldest;
  max_sequence_idle_microseconds: number;
  control_input: SequenceControlInput[];
  state: SequenceState[];
  iterative_sequence: boolean;
}

export interface EnsembleStep {
  model_name: string;
  model_version: number;
  input_map: Record<string, string>;
  output_map: Record<string, string>;
  model_namespace: string;
}

export interface ModelEnsembling {
  step: EnsembleStep[];
  max_inflight_requests: number;
}

export interface ModelParameter {
  string_value: string;
}

export interface ModelWarmupInput {
  data_type: DataTypeName;
  dims: number[];
  /** oneof input_data_type */
  zero_data?: boolean;
  random_data?: boolean;
  input_data_file?: string;
}

export interface ModelWarmup {
  name: string;
  batch_size: number;
  inputs: Record<string, ModelWarmupInput>;
  count: number;
}

export interface ModelOperations {
  op_library_filename: string[];
}

export interface ModelTransactionPolicy {
  decoupled: boolean;
}

export interface ModelRepositoryAgent {
  name: string;
  parameters: Record<string, string>;
}

export interface ModelRepositoryAgents {
  agents: ModelRepositoryAgent[];
}

export interface ModelResponseCache {
  enable: boolean;
}

export interface ModelMetricControl {
  metric_identifier?: { family: string };
  /** oneof metric_options */
  histogram_options?: { buckets: number[] };
}

export interface ModelMetrics {
  metric_control: ModelMetricControl[];
}

export interface ModelConfig {
  name: string;
  platform: string;
  backend: string;
  runtime: string;
  version_policy?: ModelVersionPolicy;
  max_batch_size: number;
  input: ModelInput[];
  output: ModelOutput[];
  batch_input: BatchInput[];
  batch_output: BatchOutput[];
  optimization?: ModelOptimizationPolicy;
  /** oneof scheduling_choice */
  dynamic_batching?: ModelDynamicBatching;
  sequence_batching?: ModelSequenceBatching;
  ensemble_scheduling?: ModelEnsembling;
  instance_group: ModelInstanceGroup[];
  default_model_filename: string;
  cc_model_filenames: Record<string, string>;
  metric_tags: Record<string, string>;
  parameters: Record<string, ModelParameter>;
  model_warmup: ModelWarmup[];
  model_operations?: ModelOperations;
  model_transaction_policy?: ModelTransactionPolicy;
  model_repository_agents?: ModelRepositoryAgents;
  response_cache?: ModelResponseCache;
  model_metrics?: ModelMetrics;
}
