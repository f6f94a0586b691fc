/**
 * The shared-memory extensions (protocol.md §3.17, §4.8): register/status/unregister over HTTP and
 * gRPC, tensors read from and written into regions on every inference path (unary, stream,
 * batched, an ensemble, the Python backend), every refusal, the `--allow-client-shm` gate and the
 * CUDA endpoints of a server without GPUs.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ftruncateSync, openSync, closeSync, symlinkSync, unlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import {
  GrpcClient,
  HttpClient,
  SystemSharedMemoryRegion,
  type ClientInferOptions,
  type InferResult,
} from '@nereid/client';
import { simpleModel } from '@nereid/testkit';
import { refusal, serveRepository, startServer, type RunningGrpcServer, type ServedRepository } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { ADD_SUB_PY, requirePython } from '../../helpers/python.js';
import { A, assertNoDataOutputs, assertOutputsAt, B, DIFF, ENSEMBLE_CONFIG, int32, PYTHON_CONFIG, range, SENTINEL, shmRequest, SUM } from './common.js';

const BATCHED_CONFIG = `${simpleModel({ name: 'simple_batched' }).config!}
dynamic_batching {
  max_queue_delay_microseconds: 200000
  preferred_batch_size: [ 4 ]
}
`;

let served: ServedRepository;
let repo: string;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;
const regions: SystemSharedMemoryRegion[] = [];

/** A fresh object in /dev/shm filled with the sentinel byte, removed after the tests. */
function createRegion(byteSize: number): SystemSharedMemoryRegion {
  const region = SystemSharedMemoryRegion.create(`/nereid_test_${randomUUID()}`, byteSize, { exclusive: true });
  region.write(new Uint8Array(byteSize).fill(SENTINEL));
  regions.push(region);
  return region;
}

before(async () => {
  await requirePython(['numpy']);
  served = await serveRepository(
    {
      simple: modelFiles(simpleModel()),
      simple_batched: modelFiles(simpleModel({ name: 'simple_batched' }), { config: BATCHED_CONFIG }),
      simple_ensemble: { 'config.pbtxt': ENSEMBLE_CONFIG, '1/.keep': '' },
      add_sub_py: { 'config.pbtxt': PYTHON_CONFIG, '1/model.py': ADD_SUB_PY },
    },
    { allowClientShm: true },
  );
  ({ repo, srv, http, grpc } = served);
});

after(async () => {
  await served?.close();
  for (const r of regions) r.destroy();
});

const plainRequest: ClientInferOptions = {
  model: 'simple',
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: B },
  ],
};

/** Registers an input region holding A and B and a 176-byte output region; returns their names. */
async function inputOutputRegions(client: HttpClient | GrpcClient): Promise<{ input: string; output: string; out: SystemSharedMemoryRegion }> {
  const inRegion = createRegion(128);
  inRegion.write(A, 0);
  inRegion.write(B, 64);
  const out = createRegion(176);
  const input = `in_${randomUUID()}`;
  const output = `out_${randomUUID()}`;
  await client.registerSystemSharedMemory(input, inRegion.key, 128);
  await client.registerSystemSharedMemory(output, out.key, 176);
  return { input, output, out };
}

function assertOutputsInRegion(out: SystemSharedMemoryRegion): void {
  assertOutputsAt((byteSize, offset) => out.readBytes(byteSize, offset));
}

describe('the same inference through JSON, binary, gRPC and shared memory', () => {
  it('gives identical results, and shared-memory outputs land in the region at their offsets', async () => {
    const json = await http.infer({
      ...plainRequest,
      inputs: plainRequest.inputs.map((i) => ({ ...i, json: true })),
      outputs: [{ name: 'OUTPUT0', binary: false }, { name: 'OUTPUT1', binary: false }],
    });
    const binary = await http.infer(plainRequest);
    const viaGrpc = await grpc.infer(plainRequest);
    for (const r of [json, binary, viaGrpc]) {
      assert.deepEqual(r.typed('OUTPUT0'), SUM);
      assert.deepEqual(r.typed('OUTPUT1'), DIFF);
    }

    const h = await inputOutputRegions(http);
    assertNoDataOutputs(await http.infer(shmRequest('simple', h.input, h.output)));
    assertOutputsInRegion(h.out);

    const g = await inputOutputRegions(grpc);
    assertNoDataOutputs(await grpc.infer(shmRequest('simple', g.input, g.output)));
    assertOutputsInRegion(g.out);
  });

  it('HTTP: a shared-memory output has neither data nor parameters in the response', async () => {
    const { input, output } = await inputOutputRegions(http);
    const req = shmRequest('simple', input, output);
    const header = JSON.stringify({
      inputs: req.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape, parameters: { shared_memory_region: input, shared_memory_byte_size: 64, shared_memory_offset: i.name === 'INPUT0' ? 0 : 64 } })),
      outputs: [
        { name: 'OUTPUT0', parameters: { binary_data: false, shared_memory_region: output, shared_memory_byte_size: 64, shared_memory_offset: 16 } },
        { name: 'OUTPUT1', parameters: { binary_data: true } },
      ],
    });
    const res = await fetch(`${srv.url}/v2/models/simple/infer`, { method: 'POST', body: header });
    assert.equal(res.status, 200);
    const headerLength = Number(res.headers.get('inference-header-content-length'));
    const body = Buffer.from(await res.arrayBuffer());
    const doc = JSON.parse(body.subarray(0, headerLength).toString()) as { outputs: Record<string, unknown>[] };
    assert.deepEqual(doc.outputs[0], { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16] });
    assert.deepEqual(doc.outputs[1], { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } });
    assert.deepEqual(int32(body.subarray(headerLength)), DIFF);
  });

  it('a gRPC stream reads and writes shared memory, in order with other requests', async () => {
    const { input, output, out } = await inputOutputRegions(grpc);
    const stream = grpc.stream();
    const results: InferResult[] = [];
    const done = (async () => {
      for await (const r of stream) {
        if (r.error) throw r.error;
        results.push(r.result!);
      }
    })();
    stream.send(shmRequest('simple', input, output));
    stream.send(plainRequest);
    stream.end();
    await done;
    assert.equal(results.length, 2);
    assertNoDataOutputs(results[0]!);
    assert.deepEqual(results[1]!.typed('OUTPUT0'), SUM);
    assertOutputsInRegion(out);
  });

  it('an ensemble and a Python model read their inputs from regions and their outputs land in regions', async () => {
    for (const model of ['simple_ensemble', 'add_sub_py']) {
      for (const client of [http, grpc]) {
        const { input, output, out } = await inputOutputRegions(client);
        const result = await client.infer(shmRequest(model, input, output));
        assertNoDataOutputs(result);
        assertOutputsInRegion(out);
        await client.unregisterSystemSharedMemory(input);
        await client.unregisterSystemSharedMemory(output);
      }
    }
  });

  it('batched requests each read and write their own region slices', async () => {
    const n = 4;
    const inRegion = createRegion(128 * n);
    const out = createRegion(128 * n);
    const input = `bin_${randomUUID()}`;
    const output = `bout_${randomUUID()}`;
    const as = range(n, (k) => k).map((k) => Int32Array.from(range(16, (i) => i + 100 * k)));
    as.forEach((a, k) => {
      inRegion.write(a, 128 * k);
      inRegion.write(B, 128 * k + 64);
    });
    await http.registerSystemSharedMemory(input, inRegion.key, inRegion.byteSize);
    await grpc.registerSystemSharedMemory(output, out.key, out.byteSize);
    const before = srv.server.modelStatistics('simple_batched')[0]!.execution_count;
    await Promise.all(
      as.map((_, k) =>
        (k % 2 === 0 ? http : grpc).infer({
          model: 'simple_batched',
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64, offset: 128 * k } },
            { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64, offset: 128 * k + 64 } },
          ],
          outputs: [
            { name: 'OUTPUT0', sharedMemory: { region: output, byteSize: 64, offset: 128 * k } },
            { name: 'OUTPUT1', sharedMemory: { region: output, byteSize: 64, offset: 128 * k + 64 } },
          ],
        }),
      ),
    );
    const executions = srv.server.modelStatistics('simple_batched')[0]!.execution_count - before;
    assert.ok(executions < n, `expected batching, got ${executions} executions for ${n} requests`);
    as.forEach((a, k) => {
      assert.deepEqual(int32(out.readBytes(64, 128 * k)), Int32Array.from(a, (x, i) => x + B[i]!));
      assert.deepEqual(int32(out.readBytes(64, 128 * k + 64)), Int32Array.from(a, (x, i) => x - B[i]!));
    });
  });
});

describe('register, status, unregister', () => {
  it('status lists regions as the protocol shows them, over HTTP and gRPC', async () => {
    const r = createRegion(256);
    const name = `st_${randomUUID()}`;
    await http.registerSystemSharedMemory(name, r.key, 128, 64);
    assert.deepEqual(await http.systemSharedMemoryStatus(name), [{ name, key: r.key, offset: 64, byte_size: 128 }]);
    assert.deepEqual(await grpc.systemSharedMemoryStatus(name), [{ name, key: r.key, offset: 64, byte_size: 128 }]);
    assert.ok((await http.systemSharedMemoryStatus()).some((s) => s.name === name));
    await http.unregisterSystemSharedMemory(name);
    const err = await refusal(http.systemSharedMemoryStatus(name));
    assert.equal(err.status, 404);
    assert.equal(err.message, `Unable to find system shared memory region: '${name}'`);
    const gerr = await refusal(grpc.systemSharedMemoryStatus(name));
    assert.equal(gerr.grpcCode, status.NOT_FOUND);
  });

  it('a name registered twice is refused with ALREADY_EXISTS; unregistering frees the name', async () => {
    const r = createRegion(64);
    const name = `dup_${randomUUID()}`;
    await http.registerSystemSharedMemory(name, r.key, 64);
    const err = await refusal(http.registerSystemSharedMemory(name, r.key, 64));
    assert.equal(err.status, 400);
    assert.equal(err.message, `shared memory region '${name}' already in manager`);
    const gerr = await refusal(grpc.registerSystemSharedMemory(name, r.key, 64));
    assert.equal(gerr.grpcCode, status.ALREADY_EXISTS);
    await grpc.unregisterSystemSharedMemory(name);
    await http.registerSystemSharedMemory(name, r.key, 32);
    assert.deepEqual(await http.systemSharedMemoryStatus(name), [{ name, key: r.key, offset: 0, byte_size: 32 }]);
    await http.unregisterSystemSharedMemory(name);
  });

  it('unregistering an unknown name succeeds; unregister-all removes every system region', async () => {
    await http.unregisterSystemSharedMemory('never_registered');
    await grpc.unregisterSystemSharedMemory('never_registered');
    const r = createRegion(64);
    await http.registerSystemSharedMemory(`all1_${randomUUID()}`, r.key, 64);
    await http.registerSystemSharedMemory(`all2_${randomUUID()}`, r.key, 32);
    await grpc.unregisterSystemSharedMemory();
    assert.deepEqual(await http.systemSharedMemoryStatus(), []);
  });

  it('the register body needs key and byte_size; a register without region name is refused', async () => {
    const r = createRegion(64);
    for (const body of [{ byte_size: 64 }, { key: r.key }, { key: r.key, byte_size: -1 }]) {
      const res = await fetch(`${srv.url}/v2/systemsharedmemory/region/x/register`, { method: 'POST', body: JSON.stringify(body) });
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(((await res.json()) as { error: string }).error, /register request for region 'x'/);
    }
    const res = await fetch(`${srv.url}/v2/systemsharedmemory/register`, { method: 'POST', body: JSON.stringify({ key: r.key, byte_size: 64 }) });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { error: string }).error, /needs a region name/);
  });
});

describe('keys that are not shared-memory objects are refused', () => {
  const outside = join(tmpdir(), `nereid_outside_${randomUUID()}`);
  const link = `nereid_link_${randomUUID()}`;
  before(() => {
    writeFileSync(outside, Buffer.alloc(4096, 7));
    symlinkSync(outside, `/dev/shm/${link}`);
  });
  after(() => {
    unlinkSync(`/dev/shm/${link}`);
    unlinkSync(outside);
  });

  const cases: [string, () => string, RegExp, number?][] = [
    ['a ../ path', () => '../../etc/passwd', /is not a POSIX shared memory object name/],
    ['an absolute path', () => outside, /is not a POSIX shared memory object name/],
    ['a name with a slash', () => '/dir/name', /is not a POSIX shared memory object name/],
    ['..', () => '/..', /is not a POSIX shared memory object name/],
    ['an empty key', () => '/', /is not a POSIX shared memory object name/],
    ['a symlink to a file', () => `/${link}`, /symbolic link/],
    // Triton's answer to a key it cannot open: INTERNAL.
    ['an object that does not exist', () => `/nereid_missing_${randomUUID()}`, /^Unable to open shared memory region: '\/nereid_missing_.*no such object/, 500],
  ];
  for (const [what, key, message, httpStatus = 400] of cases) {
    it(`${what}`, async () => {
      const err = await refusal(http.registerSystemSharedMemory('bad', key(), 64));
      assert.equal(err.status, httpStatus);
      assert.match(err.message, message);
      const gerr = await refusal(grpc.registerSystemSharedMemory('bad', key(), 64));
      assert.equal(gerr.grpcCode, httpStatus === 500 ? status.INTERNAL : status.INVALID_ARGUMENT);
      assert.match(gerr.message, message);
      await assert.rejects(http.systemSharedMemoryStatus('bad'), /Unable to find/);
    });
  }

  it('a region larger than its object', async () => {
    const r = createRegion(64);
    const err = await refusal(http.registerSystemSharedMemory('big', r.key, 64, 1));
    // Triton's answer: INTERNAL 'Invalid shared memory region: '<key>'', Nereid's detail after it.
    assert.equal(err.status, 500);
    assert.match(err.message, /^Invalid shared memory region: '.*': region 'big' at offset 1 \+ byte size 64 exceeds the 64 bytes of the object/);
  });
});

describe('every use is checked against the region', () => {
  it('unknown region, offset past the end, offset + size past the end, output too small', async () => {
    const { input, output } = await inputOutputRegions(http);
    const unknown = shmRequest('simple', 'no_such_region', output);
    let err = await refusal(http.infer(unknown));
    assert.equal(err.status, 404);
    assert.equal(err.message, "Unable to find shared memory region: 'no_such_region'");
    err = await refusal(grpc.infer(unknown));
    assert.equal(err.grpcCode, status.NOT_FOUND);

    const base = shmRequest('simple', input, output);
    const withInput0 = (offset: number, byteSize: number): ClientInferOptions => ({
      ...base,
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize, offset } }, base.inputs[1]!],
    });
    for (const client of [http, grpc]) {
      err = await refusal(client.infer(withInput0(128, 64)));
      assert.match(err.message, new RegExp(`^Invalid offset for shared memory region: '${input}'`));
      err = await refusal(client.infer(withInput0(100, 64)));
      assert.match(err.message, new RegExp(`^Invalid offset \\+ byte size for shared memory region: '${input}'`));
      assert.equal(client === http ? err.status : err.grpcCode, client === http ? 400 : status.INVALID_ARGUMENT);
    }

    const small = { ...base, outputs: [{ name: 'OUTPUT0', sharedMemory: { region: output, byteSize: 32 } }] };
    err = await refusal(http.infer(small));
    assert.equal(err.status, 500);
    assert.equal(err.message, "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results");
    err = await refusal(grpc.infer(small));
    assert.equal(err.grpcCode, status.INTERNAL);

    // An input byte size that does not match its shape is the ordinary validation error.
    err = await refusal(http.infer(withInput0(0, 60)));
    assert.equal(err.status, 400);
    assert.match(err.message, /INPUT0/);

    // The server keeps serving.
    assertNoDataOutputs(await http.infer(base));
  });

  it('an object shrunk underneath is refused until it is large enough again', async () => {
    const { input, output } = await inputOutputRegions(http);
    const path = `/dev/shm/${srv.server.sharedMemory.systemStatus(input)[0]!.key.slice(1)}`;
    const fd = openSync(path, 'r+');
    try {
      ftruncateSync(fd, 32);
      for (const client of [http, grpc]) {
        const err = await refusal(client.infer(shmRequest('simple', input, output)));
        assert.equal(client === http ? err.status : err.grpcCode, client === http ? 400 : status.INVALID_ARGUMENT);
        assert.match(err.message, new RegExp(`shared memory region '${input}': the object '.*' shrank to 32 bytes`));
      }
      ftruncateSync(fd, 128);
      await http.infer(shmRequest('simple', input, output));
    } finally {
      closeSync(fd);
    }
  });

  it('an object deleted underneath is refused; the server keeps serving', async () => {
    const { input, output } = await inputOutputRegions(http);
    const key = srv.server.sharedMemory.systemStatus(input)[0]!.key;
    unlinkSync(`/dev/shm/${key.slice(1)}`);
    assert.equal(existsSync(`/dev/shm/${key.slice(1)}`), false);
    const err = await refusal(http.infer(shmRequest('simple', input, output)));
    assert.equal(err.status, 400);
    assert.match(err.message, /was deleted or replaced after registration/);
    assert.deepEqual((await http.infer(plainRequest)).typed('OUTPUT0'), SUM);
  });

  it('a region unregistered while a request uses it stays valid for that request', async () => {
    const { input, output, out } = await inputOutputRegions(http);
    const req = shmRequest('simple_batched', input, output);
    // Server.infer binds the regions synchronously, before its first await.
    const pending = srv.server.infer({
      model: 'simple_batched',
      inputs: req.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape, sharedMemory: (i as { sharedMemory: { region: string; byteSize: number; offset?: number } }).sharedMemory })),
      outputs: req.outputs!.map((o) => ({ name: o.name, sharedMemory: o.sharedMemory! })),
    });
    await http.unregisterSystemSharedMemory(input);
    await http.unregisterSystemSharedMemory(output);
    assert.deepEqual((await http.systemSharedMemoryStatus()).filter((s) => s.name === input || s.name === output), []);
    // New requests no longer find them.
    assert.equal((await refusal(http.infer(shmRequest('simple', input, output)))).status, 404);
    const response = await pending;
    assert.equal(response.outputs[0]!.data.byteLength, 0);
    assertOutputsInRegion(out);
  });

  it('an input with shared memory and data is refused', async () => {
    const { input } = await inputOutputRegions(http);
    const res = await fetch(`${srv.url}/v2/models/simple/infer`, {
      method: 'POST',
      body: JSON.stringify({
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [...A], parameters: { shared_memory_region: input, shared_memory_byte_size: 64 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: [...B] },
        ],
      }),
    });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { error: string }).error, /must set only one of the following fields/);
  });
});

describe('CUDA shared memory on a server without GPUs', () => {
  it('register says GPUs are not supported; status is empty; unknown status is NOT_FOUND', async () => {
    let err = await refusal(http.registerCudaSharedMemory('gpu_region', new Uint8Array(64), 0, 1024));
    assert.equal(err.status, 400);
    assert.equal(err.message, "failed to register CUDA shared memory region: 'gpu_region', GPUs not supported");
    err = await refusal(grpc.registerCudaSharedMemory('gpu_region', new Uint8Array(64), 0, 1024));
    assert.equal(err.grpcCode, status.INVALID_ARGUMENT);
    assert.match(err.message, /GPUs not supported/);
    err = await refusal(http.registerCudaSharedMemory('gpu_region', new Uint8Array(10), 0, 1024));
    assert.equal(err.status, 400);
    assert.match(err.message, /raw_handle holds 10 bytes/);
    assert.deepEqual(await http.cudaSharedMemoryStatus(), []);
    assert.deepEqual(await grpc.cudaSharedMemoryStatus(), []);
    err = await refusal(http.cudaSharedMemoryStatus('gpu_region'));
    assert.equal(err.status, 404);
    assert.equal(err.message, "Unable to find cuda shared memory region: 'gpu_region'");
    await http.unregisterCudaSharedMemory('gpu_region');
    await grpc.unregisterCudaSharedMemory();
  });
});

describe('client shared memory is off by default (--allow-client-shm)', () => {
  let off: RunningGrpcServer;
  let offGrpc: GrpcClient;
  before(async () => {
    off = await startServer({ modelRepositories: [repo], grpc: true });
    offGrpc = new GrpcClient(off.grpcTarget);
  });
  after(async () => {
    offGrpc?.close();
    await off?.stop();
  });

  it('register and unregister answer 501 / UNIMPLEMENTED with the protocol message; status works', async () => {
    const message = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
    const offHttp = new HttpClient(off.url);
    const r = createRegion(64);
    for (const call of [
      () => offHttp.registerSystemSharedMemory('r', r.key, 64),
      () => offHttp.unregisterSystemSharedMemory('r'),
      () => offHttp.unregisterSystemSharedMemory(),
      () => offHttp.registerCudaSharedMemory('r', new Uint8Array(64), 0, 64),
      () => offHttp.unregisterCudaSharedMemory(),
    ]) {
      const err = await refusal(call());
      assert.equal(err.status, 501);
      assert.equal(err.message, message);
    }
    // The gate comes before the body is looked at.
    const res = await fetch(`${off.url}/v2/systemsharedmemory/region/r/register`, { method: 'POST', body: '{}' });
    assert.equal(res.status, 501);
    const gerr = await refusal(offGrpc.registerSystemSharedMemory('r', r.key, 64));
    assert.equal(gerr.grpcCode, status.UNIMPLEMENTED);
    assert.equal(gerr.message, message);
    assert.deepEqual(await offHttp.systemSharedMemoryStatus(), []);
    assert.deepEqual(await offGrpc.systemSharedMemoryStatus(), []);
    assert.deepEqual(await offHttp.cudaSharedMemoryStatus(), []);
  });
});
