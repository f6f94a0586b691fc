/**
 * Bad Python and PyTorch models (issue: "Bad input"): each gives a load or request error naming
 * the model and what to fix, and the server keeps serving the other models.
 *
 * Needs /usr/bin/python3 with numpy (the TorchScript case also torch; npm test installs both);
 * fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import type { Server } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { IDENTITY_PY, PYTHON, identityConfig, requirePython } from '../../helpers/python.js';

/** A model whose execute misbehaves as request parameter `how` says. */
const MISBEHAVES_PY = String.raw`
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        how = json.loads(requests[0].parameters()).get("how", "")
        x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
        if how == "raise":
            raise pb_utils.TritonModelException("the model refuses: bad INPUT0")
        if how == "count":
            return []
        if how == "none":
            return None
        if how == "dtype":
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x.astype(np.float64))])]
        if how == "shape":
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.zeros((1, 2, 2), dtype=np.float32))])]
        if how == "name":
            return [pb_utils.InferenceResponse([pb_utils.Tensor("NOPE", x)])]
        if how == "error":
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError("bad value", pb_utils.TritonError.INVALID_ARG))]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)])]
`;

const X = [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [1, 2], data: new Float32Array([1, 2]) }];

async function stillServes(server: Server): Promise<void> {
  const r = await server.infer({ model: 'good', inputs: X });
  assert.deepEqual([...new Float32Array(new Uint8Array(r.outputs[0]!.data).buffer)], [1, 2]);
}

function reasonOf(server: Server, model: string): string {
  const s = server.modelStatuses().find((m) => m.name === model);
  assert.ok(s, `no status for ${model}`);
  assert.equal(s.state, 'UNAVAILABLE');
  return s.reason;
}

describe('Python backend: bad models', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      good: { 'config.pbtxt': identityConfig('good', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
      misbehaves: { 'config.pbtxt': identityConfig('misbehaves', 'TYPE_FP32'), '1/model.py': MISBEHAVES_PY },
      syntax_error: { 'config.pbtxt': identityConfig('syntax_error', 'TYPE_FP32'), '1/model.py': 'class TritonPythonModel:\n    def execute(self, requests)\n        return []\n' },
      no_class: { 'config.pbtxt': identityConfig('no_class', 'TYPE_FP32'), '1/model.py': 'class Model:\n    pass\n' },
      init_raises: {
        'config.pbtxt': identityConfig('init_raises', 'TYPE_FP32'),
        '1/model.py': 'import triton_python_backend_utils as pb_utils\nclass TritonPythonModel:\n    def initialize(self, args):\n        raise pb_utils.TritonModelException("missing weights file")\n    def execute(self, requests):\n        return []\n',
      },
      no_numpy: {
        'config.pbtxt': identityConfig('no_numpy', 'TYPE_FP32', { extra: 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }' }),
        '1/model.py': IDENTITY_PY,
      },
      not_torchscript: {
        'config.pbtxt': `name: "not_torchscript"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\ninput [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\noutput [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n`,
        '1/model.pt': 'this is not a TorchScript archive',
      },
    });
    // An environment whose interpreter cannot see numpy: the system Python without site-packages.
    await mkdir(join(repo, 'no_numpy', 'env', 'bin'), { recursive: true });
    const wrapper = join(repo, 'no_numpy', 'env', 'bin', 'python3');
    await writeFile(wrapper, `#!/bin/sh\nexec ${PYTHON} -S "$@"\n`);
    await chmod(wrapper, 0o755);
    srv = await startServer({ modelRepositories: [repo], strictReadiness: false });
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('refuses a model.py with a syntax error, naming the file and line', () => {
    const reason = reasonOf(srv.server, 'syntax_error');
    assert.match(reason, /model 'syntax_error'/);
    assert.match(reason, /model\.py' has a syntax error at line 2/);
  });

  it('refuses a model.py without TritonPythonModel', () => {
    assert.match(reasonOf(srv.server, 'no_class'), /does not define class TritonPythonModel/);
  });

  it('fails the load when initialize raises, with the model message', () => {
    const reason = reasonOf(srv.server, 'init_raises');
    assert.match(reason, /model 'init_raises' instance 'init_raises_0': initialize failed: missing weights file/);
  });

  it('says so when the interpreter cannot import numpy', () => {
    assert.match(reasonOf(srv.server, 'no_numpy'), /numpy cannot be imported by .*install numpy/);
  });

  it('refuses a model.pt that is not TorchScript', async () => {
    await requirePython(['numpy', 'torch']);
    const reason = reasonOf(srv.server, 'not_torchscript');
    assert.match(reason, /model 'not_torchscript'.*is not a TorchScript model/);
  });

  const cases: [string, RegExp, string][] = [
    // An execute that raises: Triton's text, naming the instance.
    ['raise', /^Failed to process the request\(s\) for model 'misbehaves_0', message: .*the model refuses: bad INPUT0/, 'BACKEND_ERROR'],
    ['count', /execute returned 0 response\(s\) for 1 request\(s\)/, 'BACKEND_ERROR'],
    ['none', /execute returned None; a model that is not decoupled must return a list/, 'BACKEND_ERROR'],
    ['dtype', /model 'misbehaves' returned output 'OUTPUT0' as FP64, but its configuration says TYPE_FP32/, 'BACKEND_ERROR'],
    ['shape', /model 'misbehaves' returned output 'OUTPUT0' with shape \[1,2,2\], but its configuration expects \[1,-1\]/, 'BACKEND_ERROR'],
    ['name', /model 'misbehaves' returned output 'NOPE', which is not in its configuration/, 'BACKEND_ERROR'],
    // The model's own error response: its message unchanged, as Triton passes it on.
    ['error', /^bad value$/, 'MODEL_ERROR_INVALID_ARG'],
  ];
  for (const [how, message, code] of cases) {
    it(`answers a clear request error when execute misbehaves (${how}) and keeps serving`, async () => {
      await assert.rejects(srv.server.infer({ model: 'misbehaves', parameters: { how }, inputs: X }), (err: NereidError) => {
        assert.match(err.message, message);
        assert.equal(err.code, code);
        return true;
      });
      const ok = await srv.server.infer({ model: 'misbehaves', inputs: X });
      assert.equal(ok.outputs.length, 1);
      await stillServes(srv.server);
    });
  }

  it('an execute that raises still has its compute input and output time in the batch statistics, as in Triton', async () => {
    const batch = () => srv.server.modelStatistics('misbehaves')[0]!.batch_stats.find((b) => b.batch_size === 1)!;
    const before = batch();
    await assert.rejects(srv.server.infer({ model: 'misbehaves', parameters: { how: 'raise' }, inputs: X }));
    const after = batch();
    assert.equal(after.compute_input.count, before.compute_input.count + 1);
    assert.ok(after.compute_input.ns > before.compute_input.ns, 'compute_input time recorded');
    assert.ok(after.compute_output.ns > before.compute_output.ns, 'compute_output time recorded');
  });

  it('names a missing interpreter in the load error', async () => {
    const other = await makeRepository({ good: { 'config.pbtxt': identityConfig('good', 'TYPE_FP32'), '1/model.py': IDENTITY_PY } });
    const bad = await startServer({
      modelRepositories: [other],
      strictReadiness: false,
      backendConfig: new Map([['python', { 'python-executable': '/nonexistent/bin/python3' }]]),
    });
    try {
      assert.match(reasonOf(bad.server, 'good'), /the Python interpreter '\/nonexistent\/bin\/python3' was not found.*python-executable/);
    } finally {
      await bad.stop();
      await removeDir(other);
    }
  });
});
