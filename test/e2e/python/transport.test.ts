/**
 * The shared-memory rings between the server and a stub (backends/python/shm-ring.ts,
 * python/nereid_stub/transport.py) with a ring small enough that tensors wrap around it and the
 * largest go through files of their own: every byte must come back as sent, in order, under
 * concurrent requests.
 *
 * Needs /usr/bin/python3 with numpy; skipped with the reason printed otherwise.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { postFp32 } from '../../helpers/http.js';
import { IDENTITY_PY, identityConfig, pythonSkipReason } from '../../helpers/python.js';

const skip = await pythonSkipReason(['numpy']);
if (skip) console.log(`# skipping Python transport tests: ${skip}`);

const RING = 6 * 1024 * 1024;

/**
 * Identity that fails unless its input is a view over the ring itself (the root of the array's
 * `base` chain, under numpy's memoryview, is the stub's mapping): no copy on the way in, and ring space given back after
 * each execute, or later requests would go through spill files instead.
 */
const RING_VIEW_PY = `
import mmap

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            root = x
            while isinstance(root, np.ndarray) and root.base is not None:
                root = root.base
            if isinstance(root, memoryview):
                root = root.obj
            if not isinstance(root, mmap.mmap):
                raise pb_utils.TritonModelException("input is held by a %s, not a view over the ring" % type(root).__name__)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
`;

function pattern(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed * 7) & 0xff;
  return out;
}

describe('Python backend: shared-memory transport', { skip }, () => {
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      identity_u8: { 'config.pbtxt': identityConfig('identity_u8', 'TYPE_UINT8', { extra: 'dynamic_batching { }' }), '1/model.py': IDENTITY_PY },
      ring_view: { 'config.pbtxt': identityConfig('ring_view', 'TYPE_UINT8'), '1/model.py': RING_VIEW_PY },
      identity_f32: { 'config.pbtxt': identityConfig('identity_f32', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
    });
    srv = await startServer({ modelRepositories: [repo], backendConfig: new Map([['python', { 'shm-region-byte-size': String(RING) }]]) });
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('returns every byte through ring wrap-arounds and spill files, in order', async () => {
    // Sizes chosen so that ranges wrap (4 + 3 MiB > 6 MiB) and some cannot fit at all (7 MiB).
    const sizes = [1024, 4 << 20, 3 << 20, 7 << 20, 0, 5, 2 << 20, 4 << 20, 6 << 20, 100];
    for (let round = 0; round < 2; round++) {
      const results = await Promise.all(
        sizes.map(async (size, i) => {
          const data = pattern(size, i + round * 17);
          const r = await srv.server.infer({ model: 'identity_u8', inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [1, size], data }] });
          return { data, out: r.outputs[0]! };
        }),
      );
      for (const { data, out } of results) {
        assert.deepEqual(out.shape, [1, data.byteLength]);
        assert.ok(Buffer.from(out.data).equals(Buffer.from(data)), `a ${data.byteLength}-byte tensor came back changed`);
      }
    }
  });

  it('hands a model its inputs as views over the ring, and frees the ring after each execute', async () => {
    // Twelve 2 MiB tensors through a 6 MiB ring: without space given back, the third would
    // already go through a file of its own.
    for (let i = 0; i < 12; i++) {
      const data = pattern(2 << 20, i);
      const r = await srv.server.infer({ model: 'ring_view', inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [1, data.byteLength], data }] });
      assert.ok(Buffer.from(r.outputs[0]!.data).equals(Buffer.from(data)), `request ${i}: the tensor came back changed`);
    }
  });

  it('does not reuse the buffer a response was read into while that response is still being sent', async () => {
    // Outputs read from the stub's ring go into buffers reused once their HTTP response was
    // written out; the first client stops reading its 4 MiB response meanwhile (4 MiB: through
    // the 6 MiB ring, not a spill file).
    const n = 1 << 20;
    const fill = (seed: number) => Float32Array.from({ length: n }, (_, i) => seed * 1000 + (i % 997));
    const first = fill(1);
    const a = await postFp32(srv.url, 'identity_f32', 'INPUT0', 'OUTPUT0', [1, n], first, true);
    for (let i = 2; i < 5; i++) {
      const data = fill(i);
      const got = await (await postFp32(srv.url, 'identity_f32', 'INPUT0', 'OUTPUT0', [1, n], data, false)).body();
      assert.ok(Buffer.from(got.buffer).equals(Buffer.from(data.buffer)), `request ${i}: the tensor came back changed`);
    }
    const got = await a.body();
    assert.ok(Buffer.from(got.buffer).equals(Buffer.from(first.buffer)), 'the first response changed while it was being sent');
  });

  it('leaves no ring or spill file in /dev/shm by name', () => {
    const leftovers = readdirSync('/dev/shm').filter((n) => n.startsWith(`nereid-${process.pid}-`));
    assert.deepEqual(leftovers, []);
  });
});
