/**
 * gRPC helpers for end-to-end tests: grpc-js clients built from our own service definitions
 * (`GRPC_INFERENCE_SERVICE`, `GRPC_HEALTH_SERVICE`), promise wrappers for unary calls, a stream
 * session that collects responses, and builders that fill the defaults of the generated
 * `ModelInferRequest` types (ts-proto's encoders need every field).
 */
import assert from 'node:assert/strict';
import {
  Metadata,
  credentials,
  makeGenericClientConstructor,
  type CallOptions,
  type ChannelOptions,
  type Client,
  type ClientDuplexStream,
  type ClientUnaryCall,
  type ServiceError,
  type StatusObject,
} from '@grpc/grpc-js';
import { GRPC_HEALTH_SERVICE, GRPC_INFERENCE_SERVICE, healthPb, pb } from '@nereid/protocol';

/** What the Triton clients configure on their channels (protocol.md §4.9, §7.4). */
export const MAX_MESSAGE_CHANNEL_OPTIONS: ChannelOptions = {
  'grpc.max_receive_message_length': 2147483647,
  'grpc.max_send_message_length': 2147483647,
};

const InferenceClient = makeGenericClientConstructor(GRPC_INFERENCE_SERVICE, 'GRPCInferenceService');
const HealthClient = makeGenericClientConstructor(GRPC_HEALTH_SERVICE, 'Health');

/** A client of `inference.GRPCInferenceService` on `target` (`127.0.0.1:<port>`); close it when done. */
export function inferenceClient(target: string, options: ChannelOptions = {}): Client {
  return new InferenceClient(target, credentials.createInsecure(), { ...MAX_MESSAGE_CHANNEL_OPTIONS, ...options });
}

/** A client of `grpc.health.v1.Health`; close it when done. */
export function healthClient(target: string): Client {
  return new HealthClient(target, credentials.createInsecure(), MAX_MESSAGE_CHANNEL_OPTIONS);
}

type InferenceService = typeof GRPC_INFERENCE_SERVICE;
/** Every RPC of the inference service but the one stream. */
export type UnaryRpc = Exclude<keyof InferenceService, 'ModelStreamInfer'>;
export type RequestOf<K extends keyof InferenceService> = Parameters<InferenceService[K]['requestSerialize']>[0];
export type ResponseOf<K extends keyof InferenceService> = ReturnType<InferenceService[K]['responseDeserialize']>;

export interface CallSettings {
  metadata?: Metadata;
  options?: CallOptions;
}

/** A unary call in progress: cancel it with `call.cancel()`. */
export interface PendingCall<T> {
  call: ClientUnaryCall;
  /** Resolves with the response; rejects with the grpc-js `ServiceError`. */
  response: Promise<T>;
}

/** Starts one unary call of the inference service. */
export function startUnary<K extends UnaryRpc>(client: Client, rpc: K, request: RequestOf<K>, settings: CallSettings = {}): PendingCall<ResponseOf<K>> {
  // The union of the per-RPC definitions does not narrow by key; the method is the one of `rpc`.
  const method = GRPC_INFERENCE_SERVICE[rpc] as unknown as {
    path: string;
    requestSerialize: (value: RequestOf<K>) => Buffer;
    responseDeserialize: (bytes: Buffer) => ResponseOf<K>;
  };
  let call!: ClientUnaryCall;
  const response = new Promise<ResponseOf<K>>((resolve, reject) => {
    call = client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      request,
      settings.metadata ?? new Metadata(),
      settings.options ?? {},
      (err, res) => {
        if (err) reject(err);
        else resolve(res!);
      },
    );
  });
  return { call, response };
}

/** One unary call of the inference service; rejects with the grpc-js `ServiceError`. */
export function unary<K extends UnaryRpc>(client: Client, rpc: K, request: RequestOf<K>, settings: CallSettings = {}): Promise<ResponseOf<K>> {
  return startUnary(client, rpc, request, settings).response;
}

/** The `ServiceError` of a call that must fail; fails the test if the call succeeds. */
export async function unaryError<K extends UnaryRpc>(
  client: Client,
  rpc: K,
  request: RequestOf<K>,
  settings: CallSettings = {},
): Promise<ServiceError> {
  try {
    const response = await unary(client, rpc, request, settings);
    assert.fail(`${rpc} succeeded but should have failed: ${JSON.stringify(response, bigintReplacer)}`);
  } catch (err) {
    if (err instanceof assert.AssertionError) throw err;
    return err as ServiceError;
  }
}

/** `grpc.health.v1.Health/Check`. */
export function healthCheck(client: Client): Promise<healthPb.HealthCheckResponse> {
  const method = GRPC_HEALTH_SERVICE.Check;
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize, { service: '' }, (err, response) => {
      if (err) reject(err);
      else resolve(response!);
    });
  });
}

/** The set choice(s) of a decoded oneof message (the decoder leaves the others as undefined keys). */
export function setFields<T extends object>(message: T | undefined): Partial<T> | undefined {
  if (message === undefined) return undefined;
  return Object.fromEntries(Object.entries(message).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** `JSON.stringify` replacer for messages holding bigints. */
export function bigintReplacer(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? `${value}n` : value;
}

/** Asserts a gRPC failure's status code and that its message contains every fragment. */
export function assertStatus(err: Partial<StatusObject>, code: number, ...fragments: (string | RegExp)[]): void {
  assert.equal(err.code, code, `expected status ${code}, got ${String(err.code)}: ${String(err.details)}`);
  for (const fragment of fragments) {
    if (typeof fragment === 'string') assert.ok(err.details?.includes(fragment), `'${String(err.details)}' should mention '${fragment}'`);
    else assert.match(err.details ?? '', fragment);
  }
}

// ---------------------------------------------------------------------------------------------
// Streams

export type InferStream = ClientDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>;

/** Opens `ModelStreamInfer` (our service definition's path and codecs). */
export function openStream(client: Client, settings: CallSettings = {}): InferStream {
  const method = GRPC_INFERENCE_SERVICE.ModelStreamInfer;
  return client.makeBidiStreamRequest(
    method.path,
    method.requestSerialize,
    method.responseDeserialize,
    settings.metadata ?? new Metadata(),
    settings.options ?? {},
  );
}

/** Everything a stream delivered until its call ended. */
export interface StreamResult {
  responses: pb.ModelStreamInferResponse[];
  /** The call's final status (OK on a clean finish). */
  status: StatusObject;
  /** The error the call ended with, if it did not end OK. */
  error: ServiceError | undefined;
}

/**
 * Collects every response of `stream` and resolves once its call has ended (status received,
 * and the readable side finished when the status is OK).
 */
export function collectStream(stream: InferStream): Promise<StreamResult> {
  return new Promise((resolve) => {
    const responses: pb.ModelStreamInferResponse[] = [];
    let status: StatusObject | undefined;
    let error: ServiceError | undefined;
    let ended = false;
    const settle = () => {
      if (status !== undefined && (ended || error !== undefined)) resolve({ responses, status, error });
    };
    stream.on('data', (r: pb.ModelStreamInferResponse) => responses.push(r));
    stream.on('error', (err: ServiceError) => {
      error = err;
      settle();
    });
    stream.on('status', (s: StatusObject) => {
      status = s;
      settle();
    });
    stream.on('end', () => {
      ended = true;
      settle();
    });
  });
}

/** Resolves with the next `n` responses of a stream that stays open. */
export function nextResponses(stream: InferStream, n: number): Promise<pb.ModelStreamInferResponse[]> {
  return new Promise((resolve, reject) => {
    const got: pb.ModelStreamInferResponse[] = [];
    const onData = (r: pb.ModelStreamInferResponse) => {
      got.push(r);
      if (got.length === n) {
        cleanup();
        resolve(got);
      }
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onEnd = () => {
      cleanup();
      reject(new Error(`the stream ended after ${got.length} of ${n} responses`));
    };
    const cleanup = () => {
      stream.off('data', onData);
      stream.off('error', onError);
      stream.off('end', onEnd);
    };
    stream.on('data', onData);
    stream.on('error', onError);
    stream.on('end', onEnd);
  });
}

// ---------------------------------------------------------------------------------------------
// Message builders

/** A `ModelInferRequest` with every field not given at its proto default. */
export function inferRequest(fields: Partial<pb.ModelInferRequest> & { model_name: string }): pb.ModelInferRequest {
  return { model_version: '', id: '', parameters: {}, inputs: [], outputs: [], raw_input_contents: [], ...fields };
}

/** An input tensor; `contents` fields not given are empty lists. */
export function inputTensor(
  name: string,
  datatype: string,
  shape: readonly number[],
  contents?: Partial<pb.InferTensorContents>,
  parameters: Record<string, pb.InferParameter> = {},
): pb.ModelInferRequest_InferInputTensor {
  const tensor: pb.ModelInferRequest_InferInputTensor = { name, datatype, shape: shape.map((d) => BigInt(d)), parameters };
  if (contents !== undefined) tensor.contents = tensorContents(contents);
  return tensor;
}

/** `InferTensorContents` with the lists not given empty. */
export function tensorContents(contents: Partial<pb.InferTensorContents>): pb.InferTensorContents {
  return {
    bool_contents: [],
    int_contents: [],
    int64_contents: [],
    uint_contents: [],
    uint64_contents: [],
    fp32_contents: [],
    fp64_contents: [],
    bytes_contents: [],
    ...contents,
  };
}

/** A requested output, optionally with parameters (e.g. `classification`). */
export function requestedOutput(name: string, parameters: Record<string, pb.InferParameter> = {}): pb.ModelInferRequest_InferRequestedOutputTensor {
  return { name, parameters };
}

/** The bytes of a typed array (a view, no copy). */
export function rawBytes(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** Copies `bytes` into an aligned buffer and views it as `Ctor`'s elements. */
export function viewAs<T>(bytes: Uint8Array, Ctor: { new (buffer: ArrayBuffer): T; BYTES_PER_ELEMENT: number }): T {
  assert.equal(bytes.byteLength % Ctor.BYTES_PER_ELEMENT, 0, `${bytes.byteLength} bytes is not a whole number of elements`);
  // A copy (Buffer#slice would be a view): decoded bytes are unaligned views over the message.
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Ctor(copy.buffer);
}

/** INT32 contents as an array of numbers. */
export function int32s(bytes: Uint8Array): number[] {
  return Array.from(viewAs(bytes, Int32Array));
}

/** Splits a BYTES tensor's raw layout (4-byte little-endian length, then the bytes, per element). */
export function bytesElements(raw: Uint8Array): Buffer[] {
  const buf = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  const out: Buffer[] = [];
  for (let pos = 0; pos < buf.byteLength; ) {
    const n = buf.readUInt32LE(pos);
    out.push(buf.subarray(pos + 4, pos + 4 + n));
    pos += 4 + n;
  }
  return out;
}

/** The inputs of Triton's `simple` (INT32 [batch, 16] × 2) as raw contents, and its outputs. */
export function simpleRequest(
  batch = 1,
  seed = 0,
  fields: Partial<pb.ModelInferRequest> = {},
): { request: pb.ModelInferRequest; sum: number[]; difference: number[] } {
  const n = batch * 16;
  const a = Int32Array.from({ length: n }, (_, i) => i + seed);
  const b = Int32Array.from({ length: n }, (_, i) => 1000 - 3 * i + 7 * seed);
  return {
    request: inferRequest({
      model_name: 'simple',
      inputs: [inputTensor('INPUT0', 'INT32', [batch, 16]), inputTensor('INPUT1', 'INT32', [batch, 16])],
      raw_input_contents: [rawBytes(a), rawBytes(b)],
      ...fields,
    }),
    sum: Array.from(a, (x, i) => x + b[i]!),
    difference: Array.from(a, (x, i) => x - b[i]!),
  };
}

/** Checks a `simple` response against `simpleRequest`'s expectations (both outputs, in order). */
export function assertSimpleResponse(response: pb.ModelInferResponse | undefined, expected: { sum: number[]; difference: number[] }, batch = 1): void {
  assert.ok(response, 'no infer_response');
  assert.equal(response.model_name, 'simple');
  assert.equal(response.model_version, '1');
  assert.deepEqual(
    response.outputs.map((o) => [o.name, o.datatype, o.shape]),
    [
      ['OUTPUT0', 'INT32', [BigInt(batch), 16n]],
      ['OUTPUT1', 'INT32', [BigInt(batch), 16n]],
    ],
  );
  assert.equal(response.raw_output_contents.length, 2);
  assert.deepEqual(int32s(response.raw_output_contents[0]!), expected.sum);
  assert.deepEqual(int32s(response.raw_output_contents[1]!), expected.difference);
}
