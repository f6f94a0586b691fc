/**
 * What an inference request is made of, the same for both clients, and the encoding of an input's
 * data into tensor bytes (protocol.md §2.3).
 */
import type { SharedMemoryTensor } from './shared-memory.js';
import { encodeBytesElements, jsonToTensorData, type DataType, type ParameterValue, type TypedArray } from '@nereid/protocol';

export type TypedTensorData = TypedArray;

export interface ClientInput {
  name: string;
  datatype: DataType;
  shape: readonly number[];
  /**
   * Typed array (its bytes, sent as they are: a view, not a copy), BYTES elements (strings or
   * byte arrays), or plain values converted to the datatype.
   */
  data: TypedTensorData | readonly (string | Uint8Array)[] | readonly (number | boolean | bigint)[];
  /** HTTP only: send as JSON `data` instead of binary (default false). gRPC always sends raw bytes. */
  json?: boolean;
}

/** An input whose bytes the server reads from a registered shared-memory region (protocol.md §3.17.3). */
export interface ClientSharedMemoryInput {
  name: string;
  datatype: DataType;
  shape: readonly number[];
  sharedMemory: SharedMemoryTensor;
}

export interface ClientRequestedOutput {
  name: string;
  /**
   * Have the server write the output into this registered region instead of sending it; the
   * result then lists the output (name, datatype, shape) with no bytes: read them from the region.
   */
  sharedMemory?: SharedMemoryTensor;
  /** HTTP only: ask for binary data (default true). gRPC outputs are always raw bytes. */
  binary?: boolean;
  /** Top-k classification (protocol.md §3.11). */
  classCount?: number;
}

/** The parts of an inference request both clients take. */
export interface BaseInferOptions {
  model: string;
  /** Empty or absent: the server's version policy picks. */
  version?: string;
  id?: string;
  inputs: readonly (ClientInput | ClientSharedMemoryInput)[];
  /** Absent: all outputs. */
  outputs?: readonly ClientRequestedOutput[];
  /** Request parameters (protocol.md §3.12), e.g. `sequence_id`, `priority`, `timeout`, custom keys. */
  parameters?: Record<string, ParameterValue>;
  /** Aborting cancels the request on the server; the call then rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Milliseconds the call may take (HTTP: then aborted, InferenceServerError 504; gRPC: the
   * deadline, DEADLINE_EXCEEDED). The server-side queue timeout is `parameters.timeout` (µs).
   */
  timeout?: number;
  /** Headers (gRPC: metadata) sent with the request. */
  headers?: Readonly<Record<string, string>>;
  /**
   * When given, `HttpClient.infer` and `GrpcClient.infer` fill it in on success with where the client's own time went, for load
   * generators (perf_analyzer's "send/recv" and "(un)marshal" figures).
   */
  timing?: InferTiming;
}

/**
 * Client time of one inference, in milliseconds. `sendMs`: building the request (HTTP: the header
 * and body; gRPC: the message); the socket write itself happens inside `fetch`/grpc-js and is part
 * of the wait. `recvMs`: HTTP: reading the body after the response headers arrived and decoding it;
 * gRPC: decoding the received message (grpc-js parses it before the call completes).
 */
export interface InferTiming {
  sendMs: number;
  recvMs: number;
}

/** `HttpClient.infer` options. */
export interface ClientInferOptions extends BaseInferOptions {
  requestCompression?: 'gzip' | 'deflate';
  responseCompression?: 'gzip' | 'deflate';
}

export function isSharedMemoryInput(input: ClientInput | ClientSharedMemoryInput): input is ClientSharedMemoryInput {
  return (input as Partial<ClientSharedMemoryInput>).sharedMemory !== undefined;
}

/** The `shared_memory_*` parameters of a tensor, as numbers (HTTP JSON). */
export function sharedMemoryParameters(t: SharedMemoryTensor): Record<string, string | number> {
  const p: Record<string, string | number> = { shared_memory_region: t.region, shared_memory_byte_size: t.byteSize };
  if (t.offset) p.shared_memory_offset = t.offset;
  return p;
}

/**
 * The bytes of an input's data (protocol.md §2.3): a typed array's own bytes (a view), BYTES
 * elements length-prefixed, plain values converted. Throws NereidError for values that do not fit.
 */
export function inputBytes(input: ClientInput): Uint8Array {
  const data = input.data;
  if (Array.isArray(data)) {
    if (input.datatype === 'BYTES') return encodeBytesElements(data as (string | Uint8Array)[]);
    const count = input.shape.reduce((a, b) => a * b, 1);
    return jsonToTensorData(input.datatype, data, count, `input '${input.name}'`);
  }
  const view = data as ArrayBufferView;
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}
