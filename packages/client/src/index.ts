/**
 * @nereid/client — TypeScript client for Nereid and Triton inference servers.
 */
export {
  HttpClient,
  type GenerateOptions,
  type GenerateResponse,
  type HttpClientOptions,
  type HttpModelStatisticsResponse,
} from './http-client.js';
export { isRetryable, type CallOptions, type ClientDefaults, type LogSettings, type RetryPolicy } from './call-options.js';
export {
  GrpcClient,
  GRPC_MAX_MESSAGE_SIZE,
  type GrpcCallOptions,
  type GrpcClientOptions,
  type GrpcInferOptions,
  type GrpcKeepaliveOptions,
  type GrpcStreamOptions,
  type HealthStatus,
  type ModelConfig,
  type ModelMetadata,
  type ModelStatistics,
  type ModelStatisticsResponse,
  type ServerMetadata,
  type TensorMetadata,
} from './grpc-client.js';
export type { GrpcInferStream, GrpcStreamInferOptions, StreamResult } from './grpc-infer-stream.js';
export { InferResult, type InferResultInit, type ResultOutput } from './infer-result.js';
export { InferenceServerError } from './errors.js';
export type {
  LoadModelOptions,
  ModelState,
  RepositoryIndexEntry,
  RepositoryIndexOptions,
  UnloadModelOptions,
  VersionPolicy,
} from './repository.js';
export {
  SystemSharedMemoryRegion,
  type CreateSharedMemoryOptions,
  type CudaSharedMemoryStatus,
  type SharedMemoryTensor,
  type SystemSharedMemoryStatus,
} from './shared-memory.js';
export {
  type BaseInferOptions,
  type ClientSharedMemoryInput,
  type ClientInferOptions,
  type ClientInput,
  type ClientRequestedOutput,
  type InferTiming,
  type TypedTensorData,
} from './infer-options.js';
