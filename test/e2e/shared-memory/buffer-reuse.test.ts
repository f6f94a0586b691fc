/**
 * Buffers reused across requests (core/buffer-pool.ts) and memory the server shares with clients:
 * the ONNX Runtime instance's output buffers (worker runs), the HTTP frontend's request bodies,
 * and shared-memory regions, whose bytes models read where they lie and whose outputs the worker
 * writes in place. A reused buffer must never change what an earlier response holds, concurrent
 * requests of different sizes must each get their own bytes back, and an input a model echoes as
 * its output must not be reused or rewritten under the response.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, SystemSharedMemoryRegion, type InferResult } from '@nereid/client';
import { identityModel } from '@nereid/testkit';
import { executeModule } from '../backends/modules.js';
import { serveRepository, type RunningGrpcServer, type ServedRepository } from '../../helpers/harness.js';
import { postFp32, type StalledResponse } from '../../helpers/http.js';
import { modelFiles } from '../../helpers/models.js';

/** FP32 identity [1, -1] on its worker thread (execution_thread "worker"), one instance. */
const IDENTITY_CONFIG = `name: "identity"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
parameters { key: "execution_thread" value { string_value: "worker" } }
`;

/** FP32 identity [-1, -1] with dynamic batching: large inputs of a batch are gathered into a slab. */
const BATCHED_CONFIG = `name: "identity_batched"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 50000 }
parameters { key: "execution_thread" value { string_value: "worker" } }
`;

/** A custom backend that answers with its input's bytes as they are (a view, not a copy). */
const ECHO_MODULE = executeModule(
  'echo',
  `for (const r of requests) {
    const x = r.inputs.get('X');
    r.respond({ outputs: [{ name: 'Y', datatype: 'FP32', shape: x.shape, data: x.data }] });
  }`,
);
const ECHO_CONFIG = `name: "echo"
backend: "echo"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
`;

/** Large enough to be pooled (64 KiB and up). */
const N = 256 * 1024;

let served: ServedRepository;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;
const regions: SystemSharedMemoryRegion[] = [];

function filled(n: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = seed * 1000 + (i % 997);
  return a;
}

function postEcho(data: Float32Array, stall: boolean): Promise<StalledResponse> {
  return postFp32(srv.url, 'echo', 'X', 'Y', [data.length], data, stall);
}

function postBinary(model: string, input: string, output: string, shape: number[], data: Float32Array, stall: boolean): Promise<StalledResponse> {
  return postFp32(srv.url, model, input, output, shape, data, stall);
}

function region(byteSize: number): SystemSharedMemoryRegion {
  const r = SystemSharedMemoryRegion.create(`/nereid_test_${randomUUID()}`, byteSize, { exclusive: true });
  regions.push(r);
  return r;
}

function assertFloats(actual: Float32Array, expected: Float32Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    if (actual[i] !== expected[i]) assert.fail(`${what}: element ${i} is ${actual[i]}, expected ${expected[i]}`);
  }
}

before(async () => {
  served = await serveRepository(
    {
      identity: modelFiles(identityModel('FP32', [1, -1], { name: 'identity' }), { config: IDENTITY_CONFIG }),
      identity_batched: modelFiles(identityModel('FP32', [-1, -1], { name: 'identity_batched' }), { config: BATCHED_CONFIG }),
      echo: { 'config.pbtxt': ECHO_CONFIG, '1/model.mjs': ECHO_MODULE },
    },
    { allowClientShm: true },
  );
  ({ srv, http, grpc } = served);
});

after(async () => {
  await served?.close();
  for (const r of regions) r.destroy();
});

describe('buffers reused across requests', () => {
  it('later requests through reused buffers leave an earlier response as it was', async () => {
    const first = filled(N, 1);
    const second = filled(N, 2);
    const a = await http.infer({ model: 'identity', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, N], data: first }] });
    const before = a.typed('OUTPUT0') as Float32Array;
    const copy = before.slice();
    for (let i = 0; i < 3; i++) {
      const b = await grpc.infer({ model: 'identity', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, N], data: second }] });
      assertFloats(b.typed('OUTPUT0') as Float32Array, second, `second request ${i}`);
    }
    assertFloats(before, copy, 'first response after the buffer was reused');
    assertFloats(copy, first, 'first response');
  });

  it('concurrent requests of different sizes each get their own bytes back, over HTTP, gRPC and shared memory', async () => {
    const sizes = [N, N / 2, 2 * N, N + 4, N, 3 * N / 2, 16, N * 2 - 8];
    const calls: Promise<[Float32Array, Float32Array, string]>[] = [];
    for (let round = 0; round < 3; round++) {
      sizes.forEach((n, i) => {
        const seed = round * 100 + i + 1;
        const data = filled(n, seed);
        const kind = (round + i) % 3;
        const inputs = [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [1, n], data }];
        if (kind === 0) {
          calls.push(http.infer({ model: 'identity', inputs }).then((r: InferResult) => [r.typed('OUTPUT0') as Float32Array, data, `http ${seed}`]));
        } else if (kind === 1) {
          calls.push(grpc.infer({ model: 'identity', inputs }).then((r: InferResult) => [r.typed('OUTPUT0') as Float32Array, data, `grpc ${seed}`]));
        } else {
          const input = region(n * 4);
          const output = region(n * 4);
          input.write(data);
          const inName = `in_${randomUUID()}`;
          const outName = `out_${randomUUID()}`;
          calls.push(
            (async (): Promise<[Float32Array, Float32Array, string]> => {
              await http.registerSystemSharedMemory(inName, input.key, n * 4);
              await http.registerSystemSharedMemory(outName, output.key, n * 4);
              await http.infer({
                model: 'identity',
                inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, n], sharedMemory: { region: inName, byteSize: n * 4 } }],
                outputs: [{ name: 'OUTPUT0', sharedMemory: { region: outName, byteSize: n * 4 } }],
              });
              await http.unregisterSystemSharedMemory(inName);
              await http.unregisterSystemSharedMemory(outName);
              return [output.read('FP32', [n]) as Float32Array, data, `shared memory ${seed}`];
            })(),
          );
        }
      });
    }
    for (const [got, expected, what] of await Promise.all(calls)) assertFloats(got, expected, what);
  });

  it('batches of large inputs, gathered into reused memory, give every request its own rows back', async () => {
    for (let round = 0; round < 3; round++) {
      const calls: Promise<[Float32Array, Float32Array, string]>[] = [];
      for (let i = 0; i < 6; i++) {
        const seed = 50 + round * 10 + i;
        const rows = 1 + (i % 2);
        const data = filled(rows * N, seed);
        const inputs = [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [rows, N], data }];
        const client = i % 2 === 0 ? http : grpc;
        calls.push(client.infer({ model: 'identity_batched', inputs }).then((r: InferResult) => [r.typed('OUTPUT0') as Float32Array, data, `round ${round} request ${i}`]));
      }
      for (const [got, expected, what] of await Promise.all(calls)) assertFloats(got, expected, what);
    }
    const stats = srv.server.modelStatistics('identity_batched')[0]!;
    assert.ok(
      stats.batch_stats.some((s) => s.batch_size > 2),
      `expected batches of several requests: ${JSON.stringify(stats.batch_stats.map((s) => s.batch_size))}`,
    );
  });

  it('an HTTP request body is not reused while a response that views it is still being sent', async () => {
    // The echo model answers with views over the request body. The first client stops reading
    // its 16 MiB response, so the server still holds part of it when a second request of the
    // same size arrives on another connection and needs a body buffer.
    const n = 4 << 20;
    const first = filled(n, 21);
    const second = filled(n, 22);
    const a = await postEcho(first, true);
    const b = await postEcho(second, false);
    assertFloats(await b.body(), second, 'second response');
    assertFloats(await a.body(), first, 'first response, read after the second request');
  });

  it("an ONNX Runtime output buffer is not reused while a response that carries it is still being sent", async () => {
    // Outputs of worker runs come back to the instance once their response was written out and
    // are reused for later outputs; the first client stops reading, later requests must not
    // land in the buffer its response still sends from.
    const n = 4 << 20;
    const first = filled(n, 31);
    const a = await postBinary('identity', 'INPUT0', 'OUTPUT0', [1, n], first, true);
    for (let i = 0; i < 3; i++) {
      const data = filled(n, 32 + i);
      const b = await postBinary('identity', 'INPUT0', 'OUTPUT0', [1, n], data, false);
      assertFloats(await b.body(), data, `later request ${i}`);
    }
    assertFloats(await a.body(), first, 'first response, read after the later requests');
  });

  it('a large output lands in its region at its offset, written where it is produced, the bytes around it untouched', async () => {
    const data = filled(N, 41);
    const input = region(N * 4);
    input.write(data);
    const output = region(N * 4 + 8192);
    output.write(new Uint8Array(N * 4 + 8192).fill(0xab));
    const inName = `in_${randomUUID()}`;
    const outName = `out_${randomUUID()}`;
    await http.registerSystemSharedMemory(inName, input.key, N * 4);
    await http.registerSystemSharedMemory(outName, output.key, N * 4 + 8192);
    const request = (client: HttpClient | GrpcClient, byteSize: number) =>
      client.infer({
        model: 'identity',
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, N], sharedMemory: { region: inName, byteSize: N * 4 } }],
        outputs: [{ name: 'OUTPUT0', sharedMemory: { region: outName, byteSize, offset: 4096 } }],
      });
    for (const client of [http, grpc]) {
      const result = await request(client, N * 4 + 4096);
      assert.deepEqual(result.shape('OUTPUT0'), [1, N]);
      const bytes = output.read('UINT8', [N * 4 + 8192]) as Uint8Array;
      assertFloats(new Float32Array(bytes.slice(4096, 4096 + N * 4).buffer), data, 'the output in the region');
      assert.ok(bytes.subarray(0, 4096).every((b) => b === 0xab), 'the bytes before the offset');
      assert.ok(bytes.subarray(4096 + N * 4).every((b) => b === 0xab), 'the bytes after the output');
      output.write(new Uint8Array(N * 4 + 8192).fill(0xab));
    }
    // Too small for the output: refused, and the region is left as it was.
    await assert.rejects(request(http, N * 4 - 4), /should be at least 1048576 bytes to hold the results/);
    assert.ok((output.read('UINT8', [N * 4 + 8192]) as Uint8Array).every((b) => b === 0xab), 'a refused output writes nothing');
    await http.unregisterSystemSharedMemory(inName);
    await http.unregisterSystemSharedMemory(outName);
  });

  it('an input read from shared memory that a model echoes is not reused or rewritten under its response', async () => {
    const first = filled(N, 7);
    const second = filled(N, 8);
    const names: string[] = [];
    const written: SystemSharedMemoryRegion[] = [];
    const register = async (data: Float32Array): Promise<string> => {
      const r = region(N * 4);
      r.write(data);
      written.push(r);
      const name = `echo_${randomUUID()}`;
      await http.registerSystemSharedMemory(name, r.key, N * 4);
      names.push(name);
      return name;
    };
    const one = await register(first);
    const two = await register(second);
    const ask = (name: string) =>
      srv.server.infer({ model: 'echo', inputs: [{ name: 'X', datatype: 'FP32', shape: [N], sharedMemory: { region: name, byteSize: N * 4 } }] });
    // Through the facade the response outlives its request: its output views the buffer the
    // region was read into, which later requests must not get.
    const a = await ask(one);
    const view = new Float32Array(a.outputs[0]!.data.slice().buffer);
    assertFloats(view, first, 'echoed first input');
    for (let i = 0; i < 3; i++) await ask(two);
    // The model read the region itself; what the client writes there afterwards is not the response's.
    written[0]!.write(filled(N, 9));
    const again = a.outputs[0]!.data;
    assertFloats(new Float32Array(again.buffer, again.byteOffset, again.byteLength / 4), first, 'first response after later requests');
    const viaGrpc = await grpc.infer({ model: 'echo', inputs: [{ name: 'X', datatype: 'FP32', shape: [N], sharedMemory: { region: two, byteSize: N * 4 } }] });
    assertFloats(viaGrpc.typed('Y') as Float32Array, second, 'echoed second input over gRPC');
    for (const name of names) await http.unregisterSystemSharedMemory(name);
  });
});
