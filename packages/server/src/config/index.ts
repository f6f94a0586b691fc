/**
 * The model configuration layer (models-and-scheduling.md §1.4, §2, §3; protocol.md §3.6, §4.5):
 * parsing, printing and JSON mapping of `inference.ModelConfig`, server-side derivation,
 * normalisation and validation. The only way into this folder from outside.
 */
export type * from './model-config.js';
export type { JsonObject, JsonValue } from './message-object.js';

export {
  MODEL_CONFIG_SCHEMA,
  reachableMessages,
  valueSchemaOf,
  type EnumSchema,
  type EnumValueSchema,
  type FieldSchema,
  type FieldType,
  type MapKeyType,
  type MessageSchema,
  type ScalarType,
  type ValueSchema,
} from './schema.js';
export { parseModelConfigText, type TextParseOptions } from './pbtxt-parser.js';
export { printModelConfigText, type TextPrintOptions } from './pbtxt-printer.js';
export { configProvenance, type ConfigOrigin, type ConfigStages } from './provenance.js';
export { completeModelConfig, modelConfigFromJson, modelConfigToJson, type ModelConfigJsonOptions } from './config-json.js';
export { deriveModelConfig, type FirstSubdirectoryEntries } from './derive.js';
export { readFirstSubdirectoryEntries } from './model-directory.js';
export {
  DEFAULT_MAX_SEQUENCE_IDLE_MICROSECONDS,
  normalizeInstanceGroups,
  normalizeModelConfig,
  type InstanceGroupEnvironment,
} from './normalize.js';
export {
  validateInstanceGroups,
  validateModelConfig,
  validateModelIO,
  validateRateLimiterResources,
  type InstanceGroupValidationOptions,
} from './validate.js';
export {
  CONFIG_LIMIT_NAMES,
  DEFAULT_CONFIG_LIMITS,
  InstanceBudget,
  parseConfigLimit,
  validateConfigLimits,
  type ConfigLimitName,
  type ConfigLimits,
} from './limits.js';
export { checkConfigPath, MODEL_DIRECTORY_VARIABLE, unsafeName, unsafeRelativePath, validateConfigPaths } from './paths.js';
export { isInsideDirectory, loadLabelFiles, resolveBatchStrategyPath } from './validate-files.js';
export { fromProtoModelConfig, toProtoModelConfig } from './config-proto.js';
