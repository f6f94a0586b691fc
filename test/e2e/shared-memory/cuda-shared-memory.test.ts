/**
 * CUDA shared memory (protocol.md §3.17.2) through the CUDA helper, end to end over HTTP and
 * gRPC: registration, status, refusals, unregistration, and tensors read from and written into
 * CUDA regions on every inference path (unary, stream, an ensemble, the Python backend, a
 * decoupled model).
 *
 * This machine has no GPU: the helper's CUDA runtime is a stand-in `cupy` (test/helpers/
 * fake-cupy.ts) whose device memory is a host shared-memory object and whose IPC handle names
 * it. Everything above the import boundary (the helper process, its channel, the server, the
 * frontends) is the real code; scripts/gpu-check.sh runs the same round trip on a real GPU.
 * The refusal of a server whose interpreter has no usable CUDA runtime runs for real
 * (shared-memory.test.ts, "CUDA shared memory on a server without GPUs").
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { InferResult } from '@nereid/client';
import { simpleModel } from '@nereid/testkit';
import { refusal, serveRepository, type ServedRepository } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { ADD_SUB_PY, REPEAT_CONFIG, REPEAT_PY, requirePython } from '../../helpers/python.js';
import { FakeDeviceBuffer, installFakeCupy, type FakeCupy } from '../../helpers/fake-cupy.js';
import { A, assertNoDataOutputs, assertOutputsAt, B, ENSEMBLE_CONFIG, int32, PYTHON_CONFIG, SENTINEL, shmRequest } from './common.js';

/** Answers how many requests it has executed, counting this one: the order requests were queued in. */
const ORDER_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        responses = []
        for _ in requests:
            self.count += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", np.array([self.count], dtype=np.int64))]))
        return responses
`;
const ORDER_CONFIG = `name: "order"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
`;

let fake: FakeCupy;
let served: ServedRepository;
const buffers: FakeDeviceBuffer[] = [];

function deviceBuffer(byteSize: number): FakeDeviceBuffer {
  const b = new FakeDeviceBuffer(byteSize, SENTINEL);
  buffers.push(b);
  return b;
}

before(async () => {
  await requirePython(['numpy']);
  fake = await installFakeCupy(2);
  served = await serveRepository(
    {
      simple: modelFiles(simpleModel()),
      simple_ensemble: { 'config.pbtxt': ENSEMBLE_CONFIG, '1/.keep': '' },
      add_sub_py: { 'config.pbtxt': PYTHON_CONFIG, '1/model.py': ADD_SUB_PY },
      repeat: { 'config.pbtxt': REPEAT_CONFIG, '1/model.py': REPEAT_PY },
      order: { 'config.pbtxt': ORDER_CONFIG, '1/model.py': ORDER_PY },
    },
    { allowClientShm: true, backendConfig: new Map([['python', { 'python-executable': fake.python }]]) },
  );
});

after(async () => {
  await served?.close();
  for (const b of buffers) b.destroy();
});

/** A and B in a device buffer registered as `input`, a 176-byte output buffer registered as `output`. */
async function cudaRegions(client: ServedRepository['http'] | ServedRepository['grpc'], device = 0): Promise<{ input: string; output: string; out: FakeDeviceBuffer }> {
  const inBuffer = deviceBuffer(128);
  inBuffer.write(A, 0);
  inBuffer.write(B, 64);
  const out = deviceBuffer(176);
  const input = `cin_${randomUUID()}`;
  const output = `cout_${randomUUID()}`;
  await client.registerCudaSharedMemory(input, inBuffer.handle, device, 128);
  await client.registerCudaSharedMemory(output, out.handle, device, 176);
  return { input, output, out };
}

function assertOutputsInBuffer(out: FakeDeviceBuffer): void {
  assertOutputsAt((byteSize, offset) => out.read(byteSize, offset));
}

const helperLog = (): string[] => readFileSync(fake.log, 'utf8').trim().split('\n');

describe('CUDA shared memory through the helper (stand-in CUDA runtime: this machine has no GPU)', () => {
  it('register, status over HTTP and gRPC, unregister closes the handle', async () => {
    const { http, grpc } = served;
    const b = deviceBuffer(256);
    const name = `st_${randomUUID()}`;
    await http.registerCudaSharedMemory(name, b.handle, 1, 200);
    assert.deepEqual(await http.cudaSharedMemoryStatus(name), [{ name, device_id: 1, byte_size: 200 }]);
    assert.deepEqual(await grpc.cudaSharedMemoryStatus(name), [{ name, device_id: 1, byte_size: 200 }]);
    assert.ok((await http.cudaSharedMemoryStatus()).some((s) => s.name === name));
    assert.ok(!(await http.systemSharedMemoryStatus()).some((s) => s.name === name));
    let err = await refusal(http.systemSharedMemoryStatus(name));
    assert.equal(err.status, 404);
    assert.equal(err.message, `The region named '${name}' is registered as CUDA shared memory, not system shared memory`);
    assert.ok(helperLog().includes(`open ${b.name} device 1`));
    await grpc.unregisterCudaSharedMemory(name);
    assert.ok(helperLog().includes(`close ${b.name}`));
    err = await refusal(http.cudaSharedMemoryStatus(name));
    assert.equal(err.status, 404);
    assert.equal(err.message, `Unable to find cuda shared memory region: '${name}'`);
  });

  it('refuses as Triton does: duplicate name, bad handle, unknown device, size beyond the allocation', async () => {
    const { http, grpc } = served;
    const b = deviceBuffer(64);
    const name = `dup_${randomUUID()}`;
    await grpc.registerCudaSharedMemory(name, b.handle, 0, 64);
    let err = await refusal(http.registerCudaSharedMemory(name, b.handle, 0, 64));
    assert.equal(err.status, 400);
    assert.equal(err.message, `shared memory region '${name}' already in manager`);
    err = await refusal(grpc.registerCudaSharedMemory(name, b.handle, 0, 64));
    assert.equal(err.grpcCode, status.ALREADY_EXISTS);
    await http.unregisterCudaSharedMemory(name);

    const bogus = new Uint8Array(64).fill(7);
    for (const [handle, device] of [
      [bogus, 0],
      [b.handle, 2],
    ] as const) {
      err = await refusal(http.registerCudaSharedMemory('bad', handle, device, 64));
      assert.equal(err.status, 400);
      assert.equal(err.message, 'failed to register shared memory region: invalid args');
      err = await refusal(grpc.registerCudaSharedMemory('bad', handle, device, 64));
      assert.equal(err.grpcCode, status.INVALID_ARGUMENT);
    }
    err = await refusal(http.registerCudaSharedMemory('big', b.handle, 0, 65));
    assert.equal(err.status, 400);
    assert.equal(err.message, "failed to register shared memory region 'big': invalid args");
    err = await refusal(http.registerCudaSharedMemory('short', new Uint8Array(10), 0, 64));
    assert.equal(err.status, 400);
    assert.match(err.message, /raw_handle holds 10 bytes/);
    // Failed registrations left nothing open.
    assert.ok(!(await http.cudaSharedMemoryStatus()).some((s) => ['bad', 'big', 'short'].includes(s.name)));
    const log = helperLog();
    assert.equal(log.filter((l) => l === `open ${b.name} device 0`).length, log.filter((l) => l === `close ${b.name}`).length);
  });

  it('unary inference over HTTP and gRPC reads inputs from and writes outputs into CUDA regions', async () => {
    for (const client of [served.http, served.grpc]) {
      const { input, output, out } = await cudaRegions(client);
      assertNoDataOutputs(await client.infer(shmRequest('simple', input, output)));
      assertOutputsInBuffer(out);
      await client.unregisterCudaSharedMemory(input);
      await client.unregisterCudaSharedMemory(output);
    }
  });

  it('an ensemble and a Python model, on device 1', async () => {
    for (const model of ['simple_ensemble', 'add_sub_py']) {
      for (const client of [served.http, served.grpc]) {
        const { input, output, out } = await cudaRegions(client, 1);
        assertNoDataOutputs(await client.infer(shmRequest(model, input, output)));
        assertOutputsInBuffer(out);
      }
    }
  });

  it('a gRPC stream: a request after one whose input is copied from a CUDA region is queued after it', async () => {
    const b = deviceBuffer(4);
    const name = `ord_${randomUUID()}`;
    await served.grpc.registerCudaSharedMemory(name, b.handle, 0, 4);
    const stream = served.grpc.stream();
    const counts = new Map<string, bigint>();
    const done = (async () => {
      for await (const r of stream) {
        if (r.error) throw r.error;
        counts.set(r.result!.id ?? '', (r.result!.typed('COUNT') as BigInt64Array)[0]!);
      }
    })();
    for (let i = 0; i < 3; i++) {
      stream.send({ model: 'order', id: `cuda${i}`, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], sharedMemory: { region: name, byteSize: 4 } }] });
      stream.send({ model: 'order', id: `plain${i}`, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: Int32Array.of(1) }] });
    }
    stream.end();
    await done;
    const order = [...counts].sort((x, y) => Number(x[1] - y[1])).map(([id]) => id);
    assert.deepEqual(order, ['cuda0', 'plain0', 'cuda1', 'plain1', 'cuda2', 'plain2']);
  });

  it('a gRPC stream: CUDA-region requests keep their order among themselves', async () => {
    const { input, output, out } = await cudaRegions(served.grpc);
    const stream = served.grpc.stream();
    const results: InferResult[] = [];
    const done = (async () => {
      for await (const r of stream) {
        if (r.error) throw r.error;
        results.push(r.result!);
      }
    })();
    for (let i = 0; i < 3; i++) stream.send({ ...shmRequest('simple', input, output), id: `r${i}` });
    stream.end();
    await done;
    assert.deepEqual(
      results.map((r) => r.id),
      ['r0', 'r1', 'r2'],
    );
    assertOutputsInBuffer(out);
  });

  it('a decoupled model: each response is copied into the CUDA region before the next is sent', async () => {
    const input = deviceBuffer(12);
    input.write(Int32Array.of(5, 6, 7));
    const out = deviceBuffer(4);
    const inName = `din_${randomUUID()}`;
    const outName = `dout_${randomUUID()}`;
    await served.grpc.registerCudaSharedMemory(inName, input.handle, 0, 12);
    await served.grpc.registerCudaSharedMemory(outName, out.handle, 0, 4);
    const stream = served.grpc.stream();
    let responses = 0;
    const done = (async () => {
      for await (const r of stream) {
        if (r.error) throw r.error;
        if (r.result) responses++;
      }
    })();
    stream.send({
      model: 'repeat',
      inputs: [{ name: 'IN', datatype: 'INT32', shape: [3], sharedMemory: { region: inName, byteSize: 12 } }],
      outputs: [{ name: 'OUT', sharedMemory: { region: outName, byteSize: 4 } }],
    });
    stream.end();
    await done;
    assert.ok(responses >= 3, `got ${responses} responses`);
    assert.deepEqual([...int32(out.read(4))], [7]);
  });

  it('range and size errors at inference match the system-memory ones', async () => {
    const { http } = served;
    const { input, output } = await cudaRegions(http);
    let err = await refusal(
      http.infer({
        ...shmRequest('simple', input, output),
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64, offset: 128 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64 } },
        ],
      }),
    );
    assert.equal(err.status, 400);
    assert.match(err.message, new RegExp(`^Invalid offset for shared memory region: '${input}'`));
    err = await refusal(
      http.infer({ ...shmRequest('simple', input, output), outputs: [{ name: 'OUTPUT0', sharedMemory: { region: output, byteSize: 64, offset: 150 } }] }),
    );
    assert.equal(err.status, 400);
    assert.match(err.message, /^Invalid offset \+ byte size for shared memory region/);
    err = await refusal(
      http.infer({ ...shmRequest('simple', input, output), outputs: [{ name: 'OUTPUT0', sharedMemory: { region: output, byteSize: 32 } }] }),
    );
    assert.equal(err.status, 500);
    assert.match(err.message, /should be at least 64 bytes to hold the results/);
  });

  it('unregister all closes every handle', async () => {
    const { http } = served;
    await cudaRegions(http);
    await http.unregisterCudaSharedMemory();
    assert.deepEqual(await http.cudaSharedMemoryStatus(), []);
    const log = helperLog();
    assert.equal(log.filter((l) => l.startsWith('open ')).length, log.filter((l) => l.startsWith('close ')).length);
  });
});
