/**
 * The response cache with system shared memory (docs/cache.md): inputs read where they lie in a
 * client's region are the key; a hit writes its outputs into the request's output region. The
 * model (ONNX Runtime identity on its worker thread, 1 MiB) writes a computed output straight into
 * the region, so the entry must be a copy: the region is overwritten before the hit.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { SystemSharedMemoryRegion } from '@nereid/client';
import { identityModel } from '@nereid/testkit';
import { serveRepository, type ServedRepository } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

const N = 256 * 1024;
const CONFIG = `name: "identity"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, -1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
parameters { key: "execution_thread" value { string_value: "worker" } }
response_cache { enable: true }
`;

let served: ServedRepository;
const regions: SystemSharedMemoryRegion[] = [];

before(async () => {
  served = await serveRepository(
    { identity: modelFiles(identityModel('FP32', [1, -1], { name: 'identity' }), { config: CONFIG }) },
    { allowClientShm: true, cache: { name: 'local', settings: { size: String(16 << 20) } } },
  );
});

after(async () => {
  for (const r of regions) r.close();
  await served?.close();
});

const filled = (seed: number) => new Float32Array(N).map((_, i) => seed + i);

describe('the response cache with shared-memory inputs and outputs', () => {
  it('keys on the bytes in the input region and writes a hit into the output region', async () => {
    const { http, grpc } = served;
    const input = SystemSharedMemoryRegion.create(`/nereid_test_${randomUUID()}`, N * 4, { exclusive: true });
    const output = SystemSharedMemoryRegion.create(`/nereid_test_${randomUUID()}`, N * 4, { exclusive: true });
    regions.push(input, output);
    const inName = `in_${randomUUID()}`;
    const outName = `out_${randomUUID()}`;
    await http.registerSystemSharedMemory(inName, input.key, N * 4);
    await http.registerSystemSharedMemory(outName, output.key, N * 4);
    const infer = (client: typeof http | typeof grpc) =>
      client.infer({
        model: 'identity',
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, N], sharedMemory: { region: inName, byteSize: N * 4 } }],
        outputs: [{ name: 'OUTPUT0', sharedMemory: { region: outName, byteSize: N * 4 } }],
      });
    const read = () => output.read('FP32', [N]) as Float32Array;
    const junk = new Float32Array(N).fill(-1);
    const hits = async () => {
      const stats = (await (await fetch(`${served.srv.url}/v2/models/identity/stats`)).json()) as { model_stats: { inference_stats: { cache_hit: { count: number } } }[] };
      return stats.model_stats[0]!.inference_stats.cache_hit.count;
    };

    input.write(filled(1));
    await infer(http);
    assert.deepEqual(read().subarray(0, 3), new Float32Array([1, 2, 3]));
    output.write(junk);
    await infer(grpc);
    assert.equal(Number(await hits()), 1);
    const first = read();
    assert.equal(first[0], 1);
    assert.equal(first[N - 1], N);
    // New bytes in the same input region: a new key, computed.
    input.write(filled(7));
    output.write(junk);
    await infer(http);
    assert.equal(Number(await hits()), 1);
    assert.equal(read()[N - 1], N + 6);
    // Back to the first bytes: the first entry answers again.
    input.write(filled(1));
    output.write(junk);
    await infer(http);
    assert.equal(Number(await hits()), 2);
    assert.equal(read()[0], 1);
    assert.equal(read()[N - 1], N);
    await http.unregisterSystemSharedMemory(inName);
    await http.unregisterSystemSharedMemory(outName);
  });
});
