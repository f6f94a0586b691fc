/**
 * The configuration as the generated protobuf `inference.ModelConfig` (protocol.md §4.5), for
 * the gRPC ModelConfig RPC.
 *
 * `model_config.proto` is generated with snake_case fields, enums as their names and 64-bit
 * integers as numbers, so a complete `ModelConfig` already has that message's shape; only the
 * enum typing differs (TypeScript enums on one side, string unions on the other). The round trip
 * over the fixtures is tested in `config-proto.test.ts`, over the reference corpus in
 * `triton-configs.corpus.test.ts`.
 */
import type { configPb } from '@nereid/protocol';
import type { ModelConfig } from './model-config.js';

export function toProtoModelConfig(config: ModelConfig): configPb.ModelConfig {
  return config as unknown as configPb.ModelConfig;
}

export function fromProtoModelConfig(message: configPb.ModelConfig): ModelConfig {
  return message as unknown as ModelConfig;
}
