/**
 * grpc-js service definitions of `inference.GRPCInferenceService` and `grpc.health.v1.Health`
 * (protocol.md §4.2, §4.4), built on the message codecs generated from `proto/*.proto`.
 *
 * Serialized messages are handed to grpc-js as Buffer views over the encoder's output (no second
 * copy); decoded `bytes` fields are views over the received message.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import * as pb from './generated/grpc_service.js';
import * as health from './generated/health.js';
import { encodeModelInferResponse, encodeModelStreamInferResponse } from './infer-response-encoder.js';

interface Codec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
}

/** Wraps bytes as a Buffer without copying. */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function method<Req, Res>(
  service: string,
  name: string,
  request: Codec<Req>,
  response: Codec<Res>,
  requestStream = false,
  responseStream = false,
  encodeResponse: (value: Res) => Buffer = (value) => asBuffer(response.encode(value).finish()),
) {
  return {
    path: `/${service}/${name}`,
    requestStream,
    responseStream,
    originalName: name,
    requestSerialize: (value: Req): Buffer => asBuffer(request.encode(value).finish()),
    requestDeserialize: (bytes: Buffer): Req => request.decode(bytes),
    responseSerialize: encodeResponse,
    responseDeserialize: (bytes: Buffer): Res => response.decode(bytes),
  };
}

const SERVICE = 'inference.GRPCInferenceService';

/** The RPCs of `inference.GRPCInferenceService`, keyed by RPC name. */
export const GRPC_INFERENCE_SERVICE = {
  ServerLive: method(SERVICE, 'ServerLive', pb.ServerLiveRequest, pb.ServerLiveResponse),
  ServerReady: method(SERVICE, 'ServerReady', pb.ServerReadyRequest, pb.ServerReadyResponse),
  ModelReady: method(SERVICE, 'ModelReady', pb.ModelReadyRequest, pb.ModelReadyResponse),
  ServerMetadata: method(SERVICE, 'ServerMetadata', pb.ServerMetadataRequest, pb.ServerMetadataResponse),
  ModelMetadata: method(SERVICE, 'ModelMetadata', pb.ModelMetadataRequest, pb.ModelMetadataResponse),
  ModelInfer: method(SERVICE, 'ModelInfer', pb.ModelInferRequest, pb.ModelInferResponse, false, false, encodeModelInferResponse),
  ModelStreamInfer: method(
    SERVICE,
    'ModelStreamInfer',
    pb.ModelInferRequest,
    pb.ModelStreamInferResponse,
    true,
    true,
    encodeModelStreamInferResponse,
  ),
  ModelConfig: method(SERVICE, 'ModelConfig', pb.ModelConfigRequest, pb.ModelConfigResponse),
  ModelStatistics: method(SERVICE, 'ModelStatistics', pb.ModelStatisticsRequest, pb.ModelStatisticsResponse),
  RepositoryIndex: method(SERVICE, 'RepositoryIndex', pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
  RepositoryModelLoad: method(SERVICE, 'RepositoryModelLoad', pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
  RepositoryModelUnload: method(SERVICE, 'RepositoryModelUnload', pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse),
  SystemSharedMemoryStatus: method(SERVICE, 'SystemSharedMemoryStatus', pb.SystemSharedMemoryStatusRequest, pb.SystemSharedMemoryStatusResponse),
  SystemSharedMemoryRegister: method(SERVICE, 'SystemSharedMemoryRegister', pb.SystemSharedMemoryRegisterRequest, pb.SystemSharedMemoryRegisterResponse),
  SystemSharedMemoryUnregister: method(SERVICE, 'SystemSharedMemoryUnregister', pb.SystemSharedMemoryUnregisterRequest, pb.SystemSharedMemoryUnregisterResponse),
  CudaSharedMemoryStatus: method(SERVICE, 'CudaSharedMemoryStatus', pb.CudaSharedMemoryStatusRequest, pb.CudaSharedMemoryStatusResponse),
  CudaSharedMemoryRegister: method(SERVICE, 'CudaSharedMemoryRegister', pb.CudaSharedMemoryRegisterRequest, pb.CudaSharedMemoryRegisterResponse),
  CudaSharedMemoryUnregister: method(SERVICE, 'CudaSharedMemoryUnregister', pb.CudaSharedMemoryUnregisterRequest, pb.CudaSharedMemoryUnregisterResponse),
  TraceSetting: method(SERVICE, 'TraceSetting', pb.TraceSettingRequest, pb.TraceSettingResponse),
  LogSettings: method(SERVICE, 'LogSettings', pb.LogSettingsRequest, pb.LogSettingsResponse),
} satisfies ServiceDefinition;

export type GrpcInferenceRpc = keyof typeof GRPC_INFERENCE_SERVICE;

/** `grpc.health.v1.Health` (Check only, as Triton). */
export const GRPC_HEALTH_SERVICE = {
  Check: method('grpc.health.v1.Health', 'Check', health.HealthCheckRequest, health.HealthCheckResponse),
} satisfies ServiceDefinition;

/**
 * One gRPC message as it travels in HTTP/2 DATA frames: the uncompressed flag (0), its length as
 * 4 bytes big-endian, then its bytes (PROTOCOL-HTTP2, Length-Prefixed-Message).
 */
export function frameGrpcMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.byteLength);
  out[0] = 0;
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}
