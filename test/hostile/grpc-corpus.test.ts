/**
 * The gRPC bad-input corpus: protobuf bodies that are garbage or truncated, wrong and huge
 * shapes, raw and typed contents that disagree with their shapes, absurd parameters, hostile
 * shared-memory registrations and references, path-escaping repository calls, compressed
 * messages that lie or explode, and a stream fed garbage. Each case is one line of a table: the
 * RPC, the message (or raw bytes), the status code it must get and a pattern its details must
 * match. After every case a good ModelInfer must still succeed, and resident memory must stay
 * bounded over the corpus, run several times.
 */
import assert from 'node:assert/strict';
import { connect as http2Connect, constants as h2 } from 'node:http2';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { Metadata, status as Status, type Client, type ServiceError } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE, pb } from '@nereid/protocol';
import {
  inferRequest,
  inferenceClient,
  inputTensor,
  rawBytes,
  requestedOutput,
  simpleRequest,
  assertSimpleResponse,
  unary,
  type RequestOf,
  type UnaryRpc,
} from '../helpers/grpc.js';
import { MemoryWatch, SHM_BYTES, startHostileServer, type HostileServer } from './support.js';

let srv: HostileServer;
let client: Client;

const REGION = 'hostile_grpc_region';

before(async () => {
  srv = await startHostileServer();
  client = inferenceClient(srv.srv.grpcTarget);
  await unary(client, 'SystemSharedMemoryRegister', { name: REGION, key: srv.shmKey, offset: 0n, byte_size: BigInt(SHM_BYTES) });
});

after(async () => {
  client?.close();
  await srv?.close();
});

// ---------------------------------------------------------------------------------------------
// Message builders

/** The serialized bytes of `message` for `rpc`. */
function encode<K extends UnaryRpc>(rpc: K, message: RequestOf<K>): Buffer {
  const method = GRPC_INFERENCE_SERVICE[rpc] as unknown as { requestSerialize: (value: RequestOf<K>) => Buffer };
  return method.requestSerialize(message);
}

const GOOD = simpleRequest(1, 0);
const int32 = (n: number): Uint8Array => rawBytes(Int32Array.from({ length: n }, (_, i) => i));
const I64 = (n: number | bigint): pb.InferParameter => ({ int64_param: BigInt(n) });
const U64 = (n: number | bigint): pb.InferParameter => ({ uint64_param: BigInt(n) });
const STR = (s: string): pb.InferParameter => ({ string_param: s });
const BOOL = (b: boolean): pb.InferParameter => ({ bool_param: b });
const DBL = (d: number): pb.InferParameter => ({ double_param: d });

/** `simple` with INPUT0 given as `input0` (and INPUT1 good), raw contents as given. */
function simpleWith(input0: pb.ModelInferRequest_InferInputTensor, raw: Uint8Array[] = [int32(16), int32(16)], fields: Partial<pb.ModelInferRequest> = {}): Buffer {
  return encode('ModelInfer', inferRequest({ model_name: 'simple', inputs: [input0, inputTensor('INPUT1', 'INT32', [1, 16])], raw_input_contents: raw, ...fields }));
}
const withParams = (parameters: Record<string, pb.InferParameter>): Buffer => encode('ModelInfer', { ...GOOD.request, parameters });
const shmInput = (params: Record<string, pb.InferParameter>): Buffer => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16], undefined, params), [int32(16)]);
const shmOutput = (params: Record<string, pb.InferParameter>): Buffer => encode('ModelInfer', { ...GOOD.request, outputs: [requestedOutput('OUTPUT0', params)] });
const load = (model_name: string, parameters: Record<string, pb.ModelRepositoryParameter> = {}): Buffer => encode('RepositoryModelLoad', { repository_name: '', model_name, parameters });
const SIMPLE_CONFIG = JSON.stringify({ name: 'simple', backend: 'onnxruntime', max_batch_size: 8 });
const override = (path: string): Buffer => load('simple', { config: { string_param: SIMPLE_CONFIG }, [`file:${path}`]: { bytes_param: Buffer.from('x') } });
const register = (key: string, offset: bigint, byte_size: bigint, name = 'r1'): Buffer => encode('SystemSharedMemoryRegister', { name, key, offset, byte_size });

/** A protobuf field header (tag) as a varint. */
const tag = (field: number, wire: number): Buffer => Buffer.from([(field << 3) | wire]);
const GOOD_BYTES = encode('ModelInfer', GOOD.request);

const TWO_63_1 = (1n << 63n) - 1n;
const U64_MAX = (1n << 64n) - 1n;

// ---------------------------------------------------------------------------------------------
// The corpus: [what, rpc, message bytes, status code, details pattern].

type Case = [what: string, rpc: UnaryRpc, message: () => Buffer, code: Status, details: RegExp];

const CASES: Case[] = [
  // Garbage and truncated protobuf
  ['garbage bytes', 'ModelInfer', () => Buffer.alloc(256, 0xff), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  ['truncated message', 'ModelInfer', () => GOOD_BYTES.subarray(0, GOOD_BYTES.byteLength - 40), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  ['field length 2^31', 'ModelInfer', () => Buffer.concat([tag(1, 2), Buffer.from([0xff, 0xff, 0xff, 0xff, 0x07]), Buffer.from('simple')]), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  // A field of the wrong wire type is an unknown field (as protobuf's own parsers treat it), and a
  // zero tag ends the message: both decode as a message without a model name.
  ['wrong wire type for model_name', 'ModelInfer', () => Buffer.concat([tag(1, 0), Buffer.from([5])]), Status.NOT_FOUND, /unknown model: ''/],
  ['zero tag', 'ModelInfer', () => Buffer.from([0, 0, 0, 0]), Status.NOT_FOUND, /unknown model: ''/],
  ['garbage to ModelReady', 'ModelReady', () => Buffer.alloc(64, 0xfe), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  ['garbage to RepositoryModelLoad', 'RepositoryModelLoad', () => Buffer.alloc(64, 0xfe), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  ['garbage to SystemSharedMemoryRegister', 'SystemSharedMemoryRegister', () => Buffer.alloc(64, 0xfe), Status.INTERNAL, /deserializ|parse|invalid|index out of range/i],
  ['empty ModelInfer', 'ModelInfer', () => Buffer.alloc(0), Status.NOT_FOUND, /unknown model: ''/],

  // Model names and versions
  ['unknown model', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, model_name: 'no_such_model' }), Status.NOT_FOUND, /no_such_model/],
  ['1 KB model name', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, model_name: 'm'.repeat(1000) }), Status.NOT_FOUND, /unknown model/],
  ['version -1', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, model_version: '-1' }), Status.INVALID_ARGUMENT, /version specified '-1'/],
  ['version not a number', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, model_version: 'abc' }), Status.INVALID_ARGUMENT, /abc/],
  ['version 2^70', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, model_version: '1180591620717411303424' }), Status.INVALID_ARGUMENT, /version string '1180591620717411303424'/],

  // Shapes
  ['negative dimension', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, -16])), Status.INVALID_ARGUMENT, /invalid dimension -16/],
  ['dimension -2^63', 'ModelInfer', () => simpleWith({ ...inputTensor('INPUT0', 'INT32', []), shape: [1n, -(1n << 63n)] }), Status.INVALID_ARGUMENT, /invalid dimension/],
  ['dimension 2^63-1', 'ModelInfer', () => simpleWith({ ...inputTensor('INPUT0', 'INT32', []), shape: [1n, TWO_63_1] }), Status.INVALID_ARGUMENT, /invalid dimension/],
  ['2^40 elements', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 2 ** 40])), Status.INVALID_ARGUMENT, /shape|byte size/],
  ['2^30 × 2^30 × 2^30', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [2 ** 30, 2 ** 30, 2 ** 30])), Status.INVALID_ARGUMENT, /whose element count exceeds/],
  ['10 000 dimensions', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', Array(10_000).fill(1) as number[])), Status.INVALID_ARGUMENT, /shape/],
  ['huge FP32 shape on variable dims', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'identity_fp32', inputs: [inputTensor('INPUT0', 'FP32', [1, 2 ** 40])], raw_input_contents: [int32(4)] })), Status.INVALID_ARGUMENT, /byte size|Expected 4398046511104/],
  ['unknown datatype', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT33', [1, 16])), Status.INVALID_ARGUMENT, /unknown datatype 'INT33'/],

  // Raw and typed contents
  ['raw size smaller than the shape', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16]), [int32(8), int32(16)]), Status.INVALID_ARGUMENT, /Expected 64, got 32/],
  ['raw size not whole elements', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16]), [int32(16).subarray(0, 63), int32(16)]), Status.INVALID_ARGUMENT, /Expected 64, got 63/],
  ['more raw contents than inputs', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16]), [int32(16), int32(16), int32(16)]), Status.INVALID_ARGUMENT, /3 raw_input_contents/],
  ['fewer raw contents than inputs', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16]), [int32(16)]), Status.INVALID_ARGUMENT, /INPUT1/],
  ['contents and raw both', 'ModelInfer', () => simpleWith(inputTensor('INPUT0', 'INT32', [1, 16], { int_contents: Array(16).fill(1) as number[] })), Status.INVALID_ARGUMENT, /contents field must not be specified/],
  ['typed contents of the wrong list', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'simple', inputs: [inputTensor('INPUT0', 'INT32', [1, 16], { fp32_contents: Array(16).fill(1) as number[] }), inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: Array(16).fill(1) as number[] })] })), Status.INVALID_ARGUMENT, /takes int_contents, got fp32_contents/],
  ['typed contents too short for the shape', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'simple', inputs: [inputTensor('INPUT0', 'INT32', [1, 16], { int_contents: [1] }), inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: Array(16).fill(1) as number[] })] })), Status.INVALID_ARGUMENT, /Expected 64, got 4/],
  ['typed contents for a 2^40 shape', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'identity_fp32', inputs: [inputTensor('INPUT0', 'FP32', [1, 2 ** 40], { fp32_contents: [1] })] })), Status.INVALID_ARGUMENT, /byte size|Expected/],
  ['typed contents for FP16', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'identity_fp32', inputs: [inputTensor('INPUT0', 'FP16', [1, 1], { fp32_contents: [1] })] })), Status.INVALID_ARGUMENT, /FP16/],
  ['BYTES contents fewer than the shape', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'simple_string', inputs: [inputTensor('INPUT0', 'BYTES', [1, 16], { bytes_contents: [Buffer.from('1')] }), inputTensor('INPUT1', 'BYTES', [1, 16], { bytes_contents: [Buffer.from('1')] })] })), Status.INVALID_ARGUMENT, /INPUT0/],
  ['raw BYTES element longer than its data', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'simple_string', inputs: [inputTensor('INPUT0', 'BYTES', [1, 16]), inputTensor('INPUT1', 'BYTES', [1, 16])], raw_input_contents: [Buffer.from([0xff, 0xff, 0xff, 0x7f, 1]), Buffer.from([0xff, 0xff, 0xff, 0x7f, 1])] })), Status.INVALID_ARGUMENT, /declares 2147483647 bytes/],
  ['duplicate input', 'ModelInfer', () => encode('ModelInfer', inferRequest({ model_name: 'simple', inputs: [inputTensor('INPUT0', 'INT32', [1, 16]), inputTensor('INPUT0', 'INT32', [1, 16]), inputTensor('INPUT1', 'INT32', [1, 16])], raw_input_contents: [int32(16), int32(16), int32(16)] })), Status.INVALID_ARGUMENT, /INPUT0/],
  ['unknown output', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, outputs: [requestedOutput('NOPE')] }), Status.INVALID_ARGUMENT, /NOPE/],

  // Parameters
  ['negative priority', 'ModelInfer', () => withParams({ priority: I64(-1) }), Status.INVALID_ARGUMENT, /priority/],
  ['priority a string', 'ModelInfer', () => withParams({ priority: STR('high') }), Status.INVALID_ARGUMENT, /priority/],
  ['priority 2^64-1', 'ModelInfer', () => withParams({ priority: U64(U64_MAX) }), Status.OK, /^$/],
  ['negative timeout', 'ModelInfer', () => withParams({ timeout: I64(-1) }), Status.INVALID_ARGUMENT, /timeout/],
  ['timeout a double', 'ModelInfer', () => withParams({ timeout: DBL(1.5) }), Status.INVALID_ARGUMENT, /timeout/],
  ['sequence_id a double', 'ModelInfer', () => withParams({ sequence_id: DBL(1.5) }), Status.INVALID_ARGUMENT, /sequence_id/],
  ['sequence_start an int', 'ModelInfer', () => withParams({ sequence_start: I64(1) }), Status.INVALID_ARGUMENT, /sequence_start/],
  ['parameter with no value', 'ModelInfer', () => withParams({ custom: {} }), Status.INVALID_ARGUMENT, /custom/],
  ['custom uint64 parameter', 'ModelInfer', () => withParams({ custom: U64(5) }), Status.INVALID_ARGUMENT, /custom/],
  ['reserved triton_ parameter', 'ModelInfer', () => withParams({ triton_anything: BOOL(true) }), Status.INVALID_ARGUMENT, /triton_/],
  ['classification 0', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, outputs: [requestedOutput('OUTPUT0', { classification: I64(0) })] }), Status.INVALID_ARGUMENT, /classification/],
  ['classification 2^63-1', 'ModelInfer', () => encode('ModelInfer', { ...GOOD.request, outputs: [requestedOutput('OUTPUT0', { classification: I64(TWO_63_1) })] }), Status.INVALID_ARGUMENT, /classification/],

  // Shared memory references
  ['unregistered region', 'ModelInfer', () => shmInput({ shared_memory_region: STR('no_such_region'), shared_memory_byte_size: I64(64) }), Status.NOT_FOUND, /Unable to find shared memory region: 'no_such_region'/],
  ['region name an int', 'ModelInfer', () => shmInput({ shared_memory_region: I64(1), shared_memory_byte_size: I64(64) }), Status.INVALID_ARGUMENT, /shared_memory_region/],
  ['byte size negative', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(-64) }), Status.INVALID_ARGUMENT, /shared_memory_byte_size/],
  ['byte size 2^63-1', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(TWO_63_1) }), Status.INVALID_ARGUMENT, /shared_memory_byte_size/],
  ['byte size 2^40', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(2 ** 40) }), Status.INVALID_ARGUMENT, /Invalid offset \+ byte size/],
  ['offset past the region', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(64), shared_memory_offset: I64(SHM_BYTES) }), Status.INVALID_ARGUMENT, /Invalid offset for shared memory region/],
  ['offset negative', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(64), shared_memory_offset: I64(-1) }), Status.INVALID_ARGUMENT, /shared_memory_offset/],
  ['offset + size past the region', 'ModelInfer', () => shmInput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(64), shared_memory_offset: I64(SHM_BYTES - 8) }), Status.INVALID_ARGUMENT, /Invalid offset \+ byte size/],
  ['output into an unregistered region', 'ModelInfer', () => shmOutput({ shared_memory_region: STR('no_such_region'), shared_memory_byte_size: I64(64) }), Status.NOT_FOUND, /no_such_region/],
  ['output offset 2^53', 'ModelInfer', () => shmOutput({ shared_memory_region: STR(REGION), shared_memory_byte_size: I64(64), shared_memory_offset: I64(2 ** 53) }), Status.INVALID_ARGUMENT, /shared_memory_offset/],

  // Shared memory registration
  ['register key with ..', 'SystemSharedMemoryRegister', () => register('/../../etc/passwd', 0n, 16n), Status.INVALID_ARGUMENT, /key '\/..\/..\/etc\/passwd'/],
  ['register key /..', 'SystemSharedMemoryRegister', () => register('/..', 0n, 16n), Status.INVALID_ARGUMENT, /key '\/..'/],
  ['register absolute path', 'SystemSharedMemoryRegister', () => register('/dev/shm/x', 0n, 16n), Status.INVALID_ARGUMENT, /key '\/dev\/shm\/x'/],
  ['register empty key', 'SystemSharedMemoryRegister', () => register('', 0n, 16n), Status.INVALID_ARGUMENT, /key|''/],
  ['register byte size 2^64-1', 'SystemSharedMemoryRegister', () => register(srv.shmKey, 0n, U64_MAX), Status.INVALID_ARGUMENT, /byte_size/],
  ['register offset 2^64-1', 'SystemSharedMemoryRegister', () => register(srv.shmKey, U64_MAX, 16n), Status.INVALID_ARGUMENT, /offset/],
  ['register past the object', 'SystemSharedMemoryRegister', () => register(srv.shmKey, BigInt(SHM_BYTES), 16n), Status.INTERNAL, /^Invalid shared memory region: .*exceeds the 4096 bytes/],
  ['register a taken name', 'SystemSharedMemoryRegister', () => register(srv.shmKey, 0n, 16n, REGION), Status.ALREADY_EXISTS, /already/],
  ['CUDA register with a garbage handle', 'CudaSharedMemoryRegister', () => encode('CudaSharedMemoryRegister', { name: 'c1', raw_handle: Buffer.alloc(3), device_id: 0n, byte_size: 16n }), Status.INVALID_ARGUMENT, /raw_handle|CUDA/],
  ['CUDA register device 2^63-1', 'CudaSharedMemoryRegister', () => encode('CudaSharedMemoryRegister', { name: 'c1', raw_handle: Buffer.alloc(64), device_id: TWO_63_1, byte_size: 16n }), Status.INVALID_ARGUMENT, /device|CUDA/],
  ['status of an unknown region', 'SystemSharedMemoryStatus', () => encode('SystemSharedMemoryStatus', { name: 'no_such_region' }), Status.NOT_FOUND, /no_such_region/],

  // Repository
  ['load ..', 'RepositoryModelLoad', () => load('..'), Status.INVALID_ARGUMENT, /invalid model name '..'/],
  ['load ../simple', 'RepositoryModelLoad', () => load('../simple'), Status.INVALID_ARGUMENT, /invalid model name '..\/simple'/],
  ['load /etc', 'RepositoryModelLoad', () => load('/etc'), Status.INVALID_ARGUMENT, /invalid model name '\/etc'/],
  ['load empty name', 'RepositoryModelLoad', () => load(''), Status.INVALID_ARGUMENT, /invalid model name ''/],
  ['unload ..', 'RepositoryModelUnload', () => encode('RepositoryModelUnload', { repository_name: '', model_name: '..', parameters: {} }), Status.INVALID_ARGUMENT, /invalid model name '..'/],
  ['override file:../escape', 'RepositoryModelLoad', () => override('../escape.onnx'), Status.INTERNAL, /file:..\/escape.onnx/],
  ['override file:/etc/passwd', 'RepositoryModelLoad', () => override('/etc/passwd'), Status.INTERNAL, /file:\/etc\/passwd/],
  ['override file:1/../../x', 'RepositoryModelLoad', () => override('1/../../x'), Status.INTERNAL, /file:1\/..\/..\/x/],
  ['override file as a string', 'RepositoryModelLoad', () => load('simple', { config: { string_param: SIMPLE_CONFIG }, 'file:1/model.onnx': { string_param: 'x' } }), Status.INVALID_ARGUMENT, /file:1\/model.onnx/],
  ['override config as bytes', 'RepositoryModelLoad', () => load('simple', { config: { bytes_param: Buffer.from('{') } }), Status.INVALID_ARGUMENT, /config/],
  ['override config not JSON', 'RepositoryModelLoad', () => load('simple', { config: { string_param: '{name:' } }), Status.INTERNAL, /failed to poll from model repository: model configuration JSON/],
  ['named repository', 'RepositoryModelLoad', () => encode('RepositoryModelLoad', { repository_name: 'other', model_name: 'simple', parameters: {} }), Status.UNIMPLEMENTED, /repository_name/],
];

// ---------------------------------------------------------------------------------------------

const identity = (b: Buffer): Buffer => b;

/** Sends `bytes` as the request message of `rpc`; resolves with the status and details. */
function call(rpc: UnaryRpc, bytes: Buffer): Promise<{ code: Status; details: string }> {
  return new Promise((resolve) => {
    client.makeUnaryRequest(GRPC_INFERENCE_SERVICE[rpc].path, identity, identity, bytes, new Metadata(), {}, (err: ServiceError | null) => {
      resolve(err ? { code: err.code, details: err.details } : { code: Status.OK, details: '' });
    });
  });
}

async function assertGood(after: string): Promise<void> {
  try {
    assertSimpleResponse(await unary(client, 'ModelInfer', GOOD.request), GOOD);
  } catch (err) {
    assert.fail(`after '${after}' a good ModelInfer failed: ${(err as Error).message}`);
  }
}

const PASSES = 3;

test(`gRPC corpus: ${CASES.length} bad messages × ${PASSES} passes each get their status code and details naming the fault; the server keeps answering in bounded memory`, async () => {
  await assertGood('start');
  const watch = new MemoryWatch();
  const failures: string[] = [];
  for (let pass = 0; pass < PASSES && failures.length === 0; pass++) {
    for (const [what, rpc, message, code, details] of CASES) {
      watch.begin(what);
      try {
        const got = await call(rpc, message());
        if (process.env.NEREID_HOSTILE_SHOW === '1' && pass === 0) console.log(`${what} → ${Status[got.code]} ${got.details.slice(0, 160)}`);
        assert.equal(Status[got.code], Status[code], `${what}: expected ${Status[code]}, got ${Status[got.code]}: ${got.details.slice(0, 300)}`);
        assert.match(got.details, details, `${what}: the details do not match ${String(details)}: ${got.details.slice(0, 300)}`);
        await assertGood(what);
      } catch (err) {
        failures.push(`[pass ${pass}] ${(err as Error).message}`);
      }
      if (pass === PASSES - 1) watch.sample(what);
    }
  }
  assert.deepEqual(failures, []);
  watch.check(256, 1024);
});

// ---------------------------------------------------------------------------------------------
// Compressed messages, sent as raw HTTP/2 frames so the compressed flag and encoding can lie.

/** One gRPC message frame: compressed flag, 4-byte big-endian length, the payload. */
function frame(payload: Buffer, compressed: boolean): Buffer {
  const head = Buffer.alloc(5);
  head[0] = compressed ? 1 : 0;
  head.writeUInt32BE(payload.byteLength, 1);
  return Buffer.concat([head, payload]);
}

/** Sends one ModelInfer message frame with `grpc-encoding: encoding`; resolves with grpc-status and grpc-message. */
function rawModelInfer(body: Buffer, encoding: string): Promise<{ code: number; details: string }> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(`http://${srv.srv.grpcTarget}`);
    session.on('error', reject);
    const stream = session.request({
      [h2.HTTP2_HEADER_METHOD]: 'POST',
      [h2.HTTP2_HEADER_PATH]: GRPC_INFERENCE_SERVICE.ModelInfer.path,
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-encoding': encoding,
      'grpc-accept-encoding': 'identity',
    });
    let headers: Record<string, unknown> = {};
    stream.on('response', (h) => (headers = h));
    stream.on('trailers', (t) => (headers = { ...headers, ...t }));
    stream.on('data', () => {});
    stream.on('error', reject);
    stream.on('close', () => {
      session.close();
      resolve({ code: Number(headers['grpc-status']), details: decodeURIComponent(String(headers['grpc-message'] ?? '')) });
    });
    stream.end(body);
  });
}

const MiB = 1024 * 1024;
/** A gzip stream of `mib` MiB of zeros. */
function zerosGzip(mib: number): Buffer {
  return gzipSync(Buffer.alloc(mib * MiB), { level: 9 });
}

const COMPRESSED: [what: string, body: () => Buffer, encoding: string, code: Status, details: RegExp][] = [
  ['a good gzip message', () => frame(gzipSync(GOOD_BYTES), true), 'gzip', Status.OK, /^$/],
  // Zeros decode as an empty message (a zero tag ends it): what matters is the bounded memory.
  ['gzip bomb (128 MiB of zeros)', () => frame(zerosGzip(128), true), 'gzip', Status.NOT_FOUND, /unknown model: ''/],
  ['compressed flag, payload not gzip', () => frame(GOOD_BYTES, true), 'gzip', Status.INTERNAL, /decompress/i],
  ['compressed flag without an encoding', () => frame(gzipSync(GOOD_BYTES), true), 'identity', Status.INTERNAL, /deserializ/i],
  ['unknown encoding', () => frame(gzipSync(GOOD_BYTES), true), 'br', Status.UNIMPLEMENTED, /br|compress|encoding/i],
  // grpc-js's answer to a unary call whose message never completes.
  ['frame longer than the stream', () => frame(GOOD_BYTES, false).subarray(0, 100), 'identity', Status.UNIMPLEMENTED, /Received no request message/],
];

test(`gRPC compression: ${COMPRESSED.length} compressed messages that lie or explode get a status, in bounded memory`, async () => {
  const bodies = COMPRESSED.map(([, body]) => body());
  const watch = new MemoryWatch();
  const failures: string[] = [];
  for (const [i, [what, , encoding, code, details]] of COMPRESSED.entries()) {
    watch.begin(what);
    try {
      const got = await rawModelInfer(bodies[i]!, encoding);
      if (process.env.NEREID_HOSTILE_SHOW === '1') console.log(`${what} → ${Status[got.code]} ${got.details.slice(0, 160)}`);
      assert.equal(Status[got.code], Status[code], `${what}: expected ${Status[code]}, got ${Status[got.code]}: ${got.details}`);
      if (code !== Status.OK) assert.match(got.details, details, `${what}: ${got.details}`);
      await assertGood(what);
    } catch (err) {
      failures.push((err as Error).message);
    }
    watch.sample(what);
  }
  assert.deepEqual(failures, []);
  // grpc-js inflates a compressed message whole before anything of Nereid sees it, up to the
  // 2 GiB message limit: the 128 MiB bomb costs about twice its size while it inflates (the
  // pieces, then the joined message), and the allocator may keep some of it afterwards.
  watch.check(384, 1024);
});

test('gRPC stream: a garbage message ends the stream with a status; a new stream and unary calls still work', async () => {
  const method = GRPC_INFERENCE_SERVICE.ModelStreamInfer;
  const stream = client.makeBidiStreamRequest(method.path, identity, identity);
  const ended = new Promise<ServiceError>((resolve) => {
    stream.on('error', resolve);
    stream.on('data', () => {});
  });
  stream.write(Buffer.alloc(64, 0xff));
  stream.end();
  const err = await ended;
  assert.equal(Status[err.code], 'INTERNAL', err.details);
  await assertGood('garbage on a stream');
  const good = client.makeBidiStreamRequest(method.path, method.requestSerialize, method.responseDeserialize);
  const reply = new Promise<pb.ModelStreamInferResponse>((resolve, reject) => {
    good.on('data', resolve);
    good.on('error', reject);
  });
  good.write(GOOD.request);
  const response = await reply;
  good.end();
  assert.equal(response.error_message, '');
  assertSimpleResponse(response.infer_response, GOOD);
});

test('gRPC stream corpus: every bad ModelInfer message that decodes gets its error in-band, in order, and the stream then answers a good request', async () => {
  const method = GRPC_INFERENCE_SERVICE.ModelStreamInfer;
  // Only messages protobuf decodes reach the stream's handler; the others end a stream (above).
  const cases = CASES.filter(([, rpc, message]) => {
    if (rpc !== 'ModelInfer') return false;
    try {
      pb.ModelInferRequest.decode(message());
      return true;
    } catch {
      return false;
    }
  });
  const stream = client.makeBidiStreamRequest(method.path, identity, method.responseDeserialize);
  const responses: pb.ModelStreamInferResponse[] = [];
  const all = new Promise<void>((resolve, reject) => {
    stream.on('data', (r: pb.ModelStreamInferResponse) => {
      responses.push(r);
      if (responses.length === cases.length + 1) resolve();
    });
    stream.on('error', reject);
    stream.on('end', () => reject(new Error(`the stream ended after ${responses.length} of ${cases.length + 1} responses`)));
  });
  for (const [, , message] of cases) stream.write(message());
  stream.write(GOOD_BYTES);
  await all;
  stream.end();
  const failures: string[] = [];
  cases.forEach(([what, , , code, details], i) => {
    const r = responses[i]!;
    if (code === Status.OK) {
      if (r.error_message !== '') failures.push(`${what}: expected success, got '${r.error_message}'`);
    } else if (!details.test(r.error_message)) {
      failures.push(`${what}: the in-band error '${r.error_message.slice(0, 300)}' does not match ${String(details)}`);
    }
  });
  assert.deepEqual(failures, []);
  const last = responses[cases.length]!;
  assert.equal(last.error_message, '');
  assertSimpleResponse(last.infer_response, GOOD);
});
