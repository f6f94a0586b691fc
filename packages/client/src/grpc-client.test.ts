/**
 * GrpcClient against stand-in servers (no Nereid server: see test/e2e/client for that): what goes
 * on the wire (raw inputs, parameter choices, metadata, deadline, compression) and how answers a
 * Nereid server never gives are read (typed contents, decoupled-style streams, other status codes).
 */
import assert from 'node:assert/strict';
import { createServer, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { gunzipSync, inflateSync } from 'node:zlib';
import {
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE, NereidError, encodeBytesElements, pb } from '@nereid/protocol';
import { InferenceServerError } from './errors.js';
import { GrpcClient } from './grpc-client.js';
import { encodeInferParameter } from './grpc-codec.js';
import type { StreamResult } from './grpc-infer-stream.js';

function bytes(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** A decoded message's set fields only (the generated decoder gives absent oneof members as undefined). */
function set<T extends object>(message: T): Partial<T> {
  return Object.fromEntries(Object.entries(message).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function paramsOf(parameters: Record<string, pb.InferParameter>): Record<string, Partial<pb.InferParameter>> {
  return Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, set(v)]));
}

function response(fields: Partial<pb.ModelInferResponse>): pb.ModelInferResponse {
  return { model_name: 'm', model_version: '1', id: '', parameters: {}, outputs: [], raw_output_contents: [], ...fields };
}

function contents(fields: Partial<pb.InferTensorContents>): pb.InferTensorContents {
  return {
    bool_contents: [],
    int_contents: [],
    int64_contents: [],
    uint_contents: [],
    uint64_contents: [],
    fp32_contents: [],
    fp64_contents: [],
    bytes_contents: [],
    ...fields,
  };
}

/** Statistics with values past 2^53, to check they survive decoding. */
const STATISTICS: pb.ModelStatistics = (() => {
  const d = (count: bigint, ns: bigint): pb.StatisticDuration => ({ count, ns });
  const zero = d(0n, 0n);
  return {
    name: 'm',
    version: '2',
    last_inference: 2n ** 53n + 1n,
    inference_count: 2n ** 63n,
    execution_count: 3n,
    inference_stats: {
      success: d(3n, 2n ** 64n - 1n),
      fail: zero,
      queue: d(3n, 12n),
      compute_input: zero,
      compute_infer: zero,
      compute_output: zero,
      cache_hit: zero,
      cache_miss: zero,
    },
    batch_stats: [{ batch_size: 4n, compute_input: d(1n, 2n), compute_infer: d(1n, 3n), compute_output: d(1n, 4n) }],
    memory_usage: [{ type: 'CPU', id: 0n, byte_size: 1024n }],
    response_stats: {},
  };
})();

describe('request parameters as InferParameter choices (protocol.md §7.4 item 2)', () => {
  it('maps each JS value as the Python client maps its Python value', () => {
    assert.deepEqual(encodeInferParameter('flag', true), { bool_param: true });
    assert.deepEqual(encodeInferParameter('name', 'x'), { string_param: 'x' });
    assert.deepEqual(encodeInferParameter('n', 7), { int64_param: 7n });
    assert.deepEqual(encodeInferParameter('n', -7), { int64_param: -7n });
    assert.deepEqual(encodeInferParameter('sequence_id', 2n ** 63n - 1n), { int64_param: 2n ** 63n - 1n });
    assert.deepEqual(encodeInferParameter('timeout', 1000), { int64_param: 1000n });
    assert.deepEqual(encodeInferParameter('x', 0.5), { double_param: 0.5 });
    assert.deepEqual(encodeInferParameter('x', 1e300), { double_param: 1e300 });
    assert.deepEqual(encodeInferParameter('priority', 3), { uint64_param: 3n });
    assert.deepEqual(encodeInferParameter('priority', 2n ** 64n - 1n), { uint64_param: 2n ** 64n - 1n });
  });

  it('refuses what has no faithful choice', () => {
    for (const [key, value] of [
      ['priority', -1],
      ['priority', 1.5],
      ['priority', 2n ** 64n],
      ['big', 2n ** 63n],
      ['small', -(2n ** 63n) - 1n],
    ] as const) {
      assert.throws(() => encodeInferParameter(key, value), (err: unknown) => err instanceof NereidError && err.code === 'REQUEST_PARAMETER_TYPE', `${key}=${value}`);
    }
  });
});

/** A grpc-js server with our service definition and the given handlers; typed contents allowed. */
async function fakeServer(impl: UntypedServiceImplementation): Promise<{ server: Server; target: string }> {
  const server = new Server();
  const generic = (v: pb.ModelInferResponse) => Buffer.from(pb.ModelInferResponse.encode(v).finish());
  server.addService({ ...GRPC_INFERENCE_SERVICE, ModelInfer: { ...GRPC_INFERENCE_SERVICE.ModelInfer, responseSerialize: generic } }, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, target: `127.0.0.1:${port}` };
}

describe('against a stand-in gRPC server', () => {
  let server: Server;
  let client: GrpcClient;
  let captured: { request: pb.ModelInferRequest; metadata: Record<string, unknown>; deadline: number } | undefined;
  let answer: (request: pb.ModelInferRequest) => pb.ModelInferResponse | { code: number; details: string };
  let statisticsAsked: pb.ModelStatisticsRequest[] = [];

  before(async () => {
    const started = await fakeServer({
      ModelInfer(call: ServerUnaryCall<pb.ModelInferRequest, pb.ModelInferResponse>, callback: sendUnaryData<pb.ModelInferResponse>) {
        const deadline = call.getDeadline();
        captured = { request: call.request, metadata: call.metadata.getMap(), deadline: deadline instanceof Date ? deadline.getTime() : deadline };
        const a = answer(call.request);
        if ('code' in a) callback(a);
        else callback(null, a);
      },
      ModelStatistics(call: ServerUnaryCall<pb.ModelStatisticsRequest, pb.ModelStatisticsResponse>, callback: sendUnaryData<pb.ModelStatisticsResponse>) {
        statisticsAsked.push(call.request);
        callback(null, { model_stats: [STATISTICS] });
      },
      ModelStreamInfer(call: ServerDuplexStream<pb.ModelInferRequest, pb.ModelStreamInferResponse>) {
        // A decoupled-style model: two partial responses per request, then the empty final one
        // when asked for; 'bad' requests fail in-band.
        call.on('data', (r: pb.ModelInferRequest) => {
          if (r.id === 'bad') {
            call.write({ error_message: 'no such thing', infer_response: response({ id: r.id, model_version: '' }) });
            return;
          }
          for (let i = 0; i < 2; i++) {
            call.write({
              error_message: '',
              infer_response: response({
                id: r.id,
                parameters: { triton_final_response: { bool_param: false } },
                outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1n], parameters: {} }],
                raw_output_contents: [bytes(Int32Array.of(i))],
              }),
            });
          }
          if (r.parameters.triton_enable_empty_final_response?.bool_param === true) {
            call.write({ error_message: '', infer_response: response({ id: r.id, model_version: '', parameters: { triton_final_response: { bool_param: true } } }) });
          }
        });
        call.on('end', () => call.end());
      },
    });
    server = started.server;
    client = new GrpcClient(started.target);
  });

  after(() => {
    client?.close();
    server?.forceShutdown();
  });

  it('sends every input in raw_input_contents, with shapes, classification and parameters', async () => {
    answer = () => response({});
    const ints = Int32Array.of(1, -2, 3, -4);
    const before = Date.now();
    await client.infer({
      model: 'm',
      version: '3',
      id: 'req-1',
      inputs: [
        { name: 'A', datatype: 'INT32', shape: [2, 2], data: ints.subarray(0, 4) },
        { name: 'B', datatype: 'BYTES', shape: [2], data: ['héllo', Uint8Array.of(0, 255)] },
        { name: 'C', datatype: 'INT64', shape: [2], data: [-(2n ** 63n), 2n ** 63n - 1n] },
        { name: 'D', datatype: 'FP32', shape: [2], data: [0.5, -1] },
      ],
      outputs: [{ name: 'X', classCount: 3 }, { name: 'Y' }],
      parameters: { priority: 2, timeout: 500, sequence_id: 2n ** 62n, custom: 'v', flag: false, ratio: 0.25 },
      headers: { 'x-tenant': 'blue' },
      timeout: 60_000,
    });
    assert.ok(captured);
    const r = captured.request;
    assert.equal(r.model_name, 'm');
    assert.equal(r.model_version, '3');
    assert.equal(r.id, 'req-1');
    assert.deepEqual(
      r.inputs.map((i) => [i.name, i.datatype, i.shape, i.contents]),
      [
        ['A', 'INT32', [2n, 2n], undefined],
        ['B', 'BYTES', [2n], undefined],
        ['C', 'INT64', [2n], undefined],
        ['D', 'FP32', [2n], undefined],
      ],
    );
    assert.equal(r.raw_input_contents.length, 4);
    assert.deepEqual(Buffer.from(r.raw_input_contents[0]!), Buffer.from(bytes(ints)));
    assert.deepEqual(Buffer.from(r.raw_input_contents[1]!), encodeBytesElements(['héllo', Uint8Array.of(0, 255)]));
    assert.deepEqual(Buffer.from(r.raw_input_contents[2]!), Buffer.from(bytes(BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n))));
    assert.deepEqual(Buffer.from(r.raw_input_contents[3]!), Buffer.from(bytes(Float32Array.of(0.5, -1))));
    assert.deepEqual(
      r.outputs.map((o) => [o.name, paramsOf(o.parameters)]),
      [
        ['X', { classification: { int64_param: 3n } }],
        ['Y', {}],
      ],
    );
    assert.deepEqual(paramsOf(r.parameters), {
      priority: { uint64_param: 2n },
      timeout: { int64_param: 500n },
      sequence_id: { int64_param: 2n ** 62n },
      custom: { string_param: 'v' },
      flag: { bool_param: false },
      ratio: { double_param: 0.25 },
    });
    assert.equal(captured.metadata['x-tenant'], 'blue');
    assert.ok(captured.deadline >= before + 59_000 && captured.deadline <= Date.now() + 60_000, `deadline ${captured.deadline}`);
  });

  it('reads typed contents, response parameters and an empty id', async () => {
    answer = () =>
      response({
        parameters: { big: { int64_param: 2n ** 60n }, small: { uint64_param: 5n }, d: { double_param: 1.5 }, s: { string_param: 'x' } },
        outputs: [
          { name: 'S', datatype: 'BYTES', shape: [2n], parameters: {}, contents: contents({ bytes_contents: [Buffer.from('a'), Buffer.from('bc')] }) },
          { name: 'I', datatype: 'INT16', shape: [3n], parameters: {}, contents: contents({ int_contents: [-1, 2, 300] }) },
        ],
      });
    const result = await client.infer({ model: 'm', inputs: [] });
    assert.equal(result.id, undefined);
    assert.deepEqual(result.parameters, { big: 2n ** 60n, small: 5, d: 1.5, s: 'x' });
    assert.deepEqual(result.strings('S'), ['a', 'bc']);
    assert.deepEqual(Array.from(result.typed('I') as Int16Array), [-1, 2, 300]);
    assert.deepEqual(result.shape('I'), [3]);
  });

  it('turns status codes into InferenceServerError with the details and an HTTP-like status', async () => {
    for (const [code, http] of [
      [status.RESOURCE_EXHAUSTED, 429],
      [status.NOT_FOUND, 404],
      [status.UNIMPLEMENTED, 501],
      [status.INTERNAL, 500],
    ] as const) {
      answer = () => ({ code, details: `failed with ${code}` });
      await assert.rejects(client.infer({ model: 'm', inputs: [] }), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError);
        assert.equal(err.grpcCode, code);
        assert.equal(err.status, http);
        assert.equal(err.message, `failed with ${code}`);
        return true;
      });
    }
  });

  it('modelStatistics: names the model and version asked for; uint64 counters come back exact', async () => {
    statisticsAsked = [];
    assert.deepEqual(await client.modelStatistics(), { model_stats: [STATISTICS] });
    assert.deepEqual(await client.modelStatistics('m'), { model_stats: [STATISTICS] });
    const one = await client.modelStatistics('m', '2', { timeout: 10_000 });
    assert.equal(one.model_stats[0]!.inference_stats!.success!.ns, 2n ** 64n - 1n);
    assert.equal(one.model_stats[0]!.last_inference, 2n ** 53n + 1n);
    assert.deepEqual(
      statisticsAsked.map((r) => [r.name, r.version]),
      [
        ['', ''],
        ['m', ''],
        ['m', '2'],
      ],
    );
  });

  it('modelStatistics on a server without it: InferenceServerError UNIMPLEMENTED (501)', async () => {
    const bare = await fakeServer({});
    const other = new GrpcClient(bare.target);
    try {
      await assert.rejects(other.modelStatistics('m'), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError);
        assert.equal(err.grpcCode, status.UNIMPLEMENTED);
        assert.equal(err.status, 501);
        return true;
      });
    } finally {
      other.close();
      bare.server.forceShutdown();
    }
  });

  it('streams: partial and final responses, empty final responses, in-band errors', async () => {
    const stream = client.stream();
    stream.send({ model: 'm', id: 'a', inputs: [] });
    stream.send({ model: 'm', id: 'bad', inputs: [] });
    stream.send({ model: 'm', id: 'b', inputs: [], enableEmptyFinalResponse: true });
    stream.end();
    const got: StreamResult[] = [];
    for await (const r of stream) got.push(r);
    assert.deepEqual(
      got.map((r) => [r.id, r.final, r.result ? r.result.typed('OUT')[0] : null, r.error?.message ?? null]),
      [
        ['a', false, 0, null],
        ['a', false, 1, null],
        ['bad', true, null, 'no such thing'],
        ['b', false, 0, null],
        ['b', false, 1, null],
        ['b', true, null, null],
      ],
    );
    const error = got[2]!.error;
    assert.ok(error instanceof InferenceServerError);
    assert.equal(error.grpcCode, status.UNKNOWN);
    assert.throws(() => stream.send({ model: 'm', inputs: [] }), NereidError);
  });
});

describe('compression on the wire', () => {
  let server: Http2Server;
  let seen: { encoding: string | undefined; flag: number; message: pb.ModelInferRequest } | undefined;
  let target: string;

  before(async () => {
    // A bare HTTP/2 endpoint: grpc-js servers hide the request's grpc-encoding from handlers.
    server = createServer();
    server.on('stream', (stream: ServerHttp2Stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const frame = Buffer.concat(chunks);
        const flag = frame[0]!;
        const payload = frame.subarray(5, 5 + frame.readUInt32BE(1));
        const encoding = headers['grpc-encoding'] as string | undefined;
        const plain = flag === 0 ? payload : encoding === 'gzip' ? gunzipSync(payload) : inflateSync(payload);
        seen = { encoding, flag, message: pb.ModelInferRequest.decode(plain) };
        const reply = Buffer.from(pb.ModelInferResponse.encode(response({ id: seen.message.id })).finish());
        const header = Buffer.alloc(5);
        header.writeUInt32BE(reply.length, 1);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(Buffer.concat([header, reply]));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    target = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  for (const compression of ['gzip', 'deflate', 'none'] as const) {
    it(`compression '${compression}': the request message goes out ${compression === 'none' ? 'uncompressed' : `${compression}-compressed`}`, async () => {
      const client = new GrpcClient(target, { compression });
      try {
        const data = new Float64Array(4096).fill(1);
        const result = await client.infer({ model: 'm', id: compression, inputs: [{ name: 'X', datatype: 'FP64', shape: [4096], data }] });
        assert.equal(result.id, compression);
        assert.ok(seen);
        assert.equal(seen.flag, compression === 'none' ? 0 : 1);
        if (compression === 'none') assert.ok(seen.encoding === undefined || seen.encoding === 'identity');
        else assert.equal(seen.encoding, compression);
        assert.deepEqual(Buffer.from(seen.message.raw_input_contents[0]!), Buffer.from(bytes(data)));
      } finally {
        client.close();
      }
    });
  }
});
