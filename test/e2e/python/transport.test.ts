/**
 * The shared-memory rings between the server and a stub (backends/python/shm-ring.ts,
 * python/nereid_stub/transport.py) with a ring small enough that tensors wrap around it and the
 * largest go through files of their own: every byte must come back as sent, in order, under
 * concurrent requests.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { postFp32 } from '../../helpers/http.js';
import { IDENTITY_PY, identityConfig, requirePython } from '../../helpers/python.js';

const RING = 6 * 1024 * 1024;

/** Identity that says, in the response parameter `view`, whether its input was a view over shared memory. */
const VIEW_PROBE_PY = `
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            root = x
            while isinstance(root.base, np.ndarray):
                root = root.base
            # A copy owns its memory; a view hangs from the mapping it views.
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)], parameters={"view": root.base is not None}))
        return out
`;

/**
 * A model that keeps `kept` (its first input, or an array derived from it) for good and answers
 * every request with it, as a model caching a reference tensor would.
 */
const KEEPS_PY = (kept: string) => `
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.kept = None

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if self.kept is None:
                self.kept = ${kept}
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(self.kept))]))
        return out
`;

function pattern(bytes: number, seed: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed * 7) & 0xff;
  return out;
}

describe('Python backend: shared-memory transport', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      identity_u8: { 'config.pbtxt': identityConfig('identity_u8', 'TYPE_UINT8', { extra: 'dynamic_batching { }' }), '1/model.py': IDENTITY_PY },
      identity_f32: { 'config.pbtxt': identityConfig('identity_f32', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
      view_probe: { 'config.pbtxt': identityConfig('view_probe', 'TYPE_UINT8'), '1/model.py': VIEW_PROBE_PY },
      keeps_first: { 'config.pbtxt': identityConfig('keeps_first', 'TYPE_UINT8'), '1/model.py': KEEPS_PY('x') },
      keeps_slices: { 'config.pbtxt': identityConfig('keeps_slices', 'TYPE_UINT8'), '1/model.py': KEEPS_PY('x[:, ::2]') },
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

  it('hands large inputs to the model as views over the ring, small ones as copies', async () => {
    const viewed = async (size: number) => {
      const r = await srv.server.infer({ model: 'view_probe', inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [1, size], data: pattern(size, size) }] });
      assert.ok(Buffer.from(r.outputs[0]!.data).equals(Buffer.from(pattern(size, size))));
      return r.parameters?.['view'];
    };
    assert.equal(await viewed(1 << 20), true);
    assert.equal(await viewed(1000), false);
  });

  for (const model of ['keeps_first', 'keeps_slices']) {
    it(`a model that keeps an input for good (${model}) sees it intact while the ring wraps`, async () => {
      // 1.5 MiB per request through the 6 MiB ring: unless the kept range stays reserved, the
      // fifth request overwrites it. Once it is reserved, the ring fills and later requests go
      // through files of their own.
      const size = 3 << 19;
      const first = pattern(size, 100);
      const kept = model === 'keeps_first' ? first : first.filter((_, i) => i % 2 === 0);
      for (let i = 0; i < 12; i++) {
        const data = i === 0 ? first : pattern(size, 100 + i);
        const r = await srv.server.infer({ model, inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [1, size], data }] });
        assert.ok(Buffer.from(r.outputs[0]!.data).equals(Buffer.from(kept)), `request ${i}: what the model kept changed`);
      }
    });
  }

  it('leaves no ring or spill file in /dev/shm by name', () => {
    const leftovers = readdirSync('/dev/shm').filter((n) => n.startsWith(`nereid-${process.pid}-`));
    assert.deepEqual(leftovers, []);
  });
});
