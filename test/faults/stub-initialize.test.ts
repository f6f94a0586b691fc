/**
 * A Python or PyTorch model whose `initialize` fails or hangs (docs/backends.md, Faults): the load
 * fails with Triton's "load failed for model …: version 1 is at UNAVAILABLE state:" and the Python
 * error, the repository index shows the model UNAVAILABLE with that reason, and nothing is left:
 * no stub process, no /dev/shm file, no restart (a failed load is never retried behind the
 * caller's back, however often it is asked for).
 *
 * Needs /usr/bin/python3 with numpy (and torch for the PyTorch case; npm test installs them);
 * fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { addModels, httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningServer } from '../helpers/harness.js';
import { recordingLogger, requirePython, waitUntil } from '../helpers/python.js';
import { shmEntries, stubs, stubsSeenDuring } from './census.js';

const SYNTAX_ERROR_PY = 'import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n    def execute(self, requests:\n        return []\n';

const RAISES_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.load_weights("/nonexistent/weights.bin")

    def load_weights(self, path):
        raise FileNotFoundError("no weights at " + path)

    def execute(self, requests):
        return []
`;

const HANGS_PY = String.raw`
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
`;

function pythonConfig(name: string, extra = ''): string {
  return `
name: "${name}"
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
${extra}
`;
}

const TORCH_CONFIG = `
name: "not_torchscript"
platform: "pytorch_libtorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
`;

interface IndexEntry {
  name: string;
  version?: string;
  state?: string;
  reason?: string;
}

describe('faults: a stub whose initialize fails', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;
  const logger = recordingLogger();

  before(async () => {
    repo = await makeRepository({});
    await addModels(repo, {
      syntax_error: { 'config.pbtxt': pythonConfig('syntax_error'), '1/model.py': SYNTAX_ERROR_PY },
      init_raises: { 'config.pbtxt': pythonConfig('init_raises'), '1/model.py': RAISES_PY },
      init_hangs: {
        'config.pbtxt': pythonConfig('init_hangs', 'parameters { key: "INITIALIZE_TIMEOUT_SECS" value: { string_value: "1" } }'),
        '1/model.py': HANGS_PY,
      },
      not_torchscript: { 'config.pbtxt': TORCH_CONFIG, '1/model.pt': 'this is not a TorchScript archive' },
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', logger });
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  const load = async (name: string): Promise<string> => {
    const reply = await httpRequest(`${srv.url}/v2/repository/models/${name}/load`, { method: 'POST' });
    assert.equal(reply.status, 400, reply.text);
    return (jsonBody(reply) as { error: string }).error;
  };

  const indexEntry = async (name: string): Promise<IndexEntry> => {
    const reply = await httpRequest(`${srv.url}/v2/repository/index`, { method: 'POST' });
    const entry = (jsonBody(reply) as IndexEntry[]).find((e) => e.name === name);
    assert.ok(entry, `'${name}' is not in the repository index`);
    return entry;
  };

  /** No stub is left, none is started again, no ring file is left, and the log says no restart. */
  const nothingLeft = async (name: string): Promise<void> => {
    await waitUntil(() => stubs().length === 0, 'the failed stub to be gone', 10_000);
    const respawned = await stubsSeenDuring(1500);
    assert.deepEqual([...respawned], [], `stubs were started again after the failed load of '${name}'`);
    assert.deepEqual(shmEntries(), []);
    const restarts = logger.lines.filter((l) => l.includes(`model '${name}'`) && /restart/i.test(l));
    assert.deepEqual(restarts, [], 'the log speaks of a restart that must not happen');
  };

  const failsCleanly = async (name: string, python: RegExp): Promise<void> => {
    // Loaded twice: a second failed load must not leave anything more than the first.
    for (let attempt = 0; attempt < 2; attempt++) {
      const error = await load(name);
      assert.match(error, new RegExp(`^load failed for model '${name}': version 1 is at UNAVAILABLE state: model '${name}' instance '${name}_0': initialize failed: `));
      assert.match(error, python);
      const entry = await indexEntry(name);
      assert.equal(entry.state, 'UNAVAILABLE');
      assert.match(entry.reason ?? '', python);
      await nothingLeft(name);
    }
    const unload = await httpRequest(`${srv.url}/v2/repository/models/${name}/unload`, { method: 'POST' });
    assert.equal(unload.status, 200, unload.text);
    await nothingLeft(name);
  };

  it('a model.py with a syntax error: the load fails naming the file and line, no stub is left or restarted', { timeout: 90_000 }, async () => {
    await failsCleanly('syntax_error', /model\.py' has a syntax error at line 4: /);
  });

  it('an initialize that raises: the load fails with the exception and where the model raised it', { timeout: 90_000 }, async () => {
    await failsCleanly('init_raises', /FileNotFoundError: no weights at \/nonexistent\/weights\.bin\n\nAt:\n {2}\S+model\.py\(10\): load_weights\n {2}\S+model\.py\(7\): initialize/);
  });

  it('an initialize that never returns: the load fails after INITIALIZE_TIMEOUT_SECS and the stub is killed', { timeout: 90_000 }, async () => {
    const started = Date.now();
    await failsCleanly('init_hangs', /the Python stub did not answer within 1 s \(initialize-timeout-secs\)/);
    // Two loads of one second each, and not the hour the model sleeps.
    assert.ok(Date.now() - started < 120_000);
  });

  describe('PyTorch', () => {
    before(() => requirePython(['numpy', 'torch']));

    it('a model.pt that is not TorchScript: the load fails saying so, no stub is left or restarted', { timeout: 120_000 }, async () => {
      await failsCleanly('not_torchscript', /model 'not_torchscript': '.*model\.pt' is not a TorchScript model that torch \S+ can load/);
    });
  });
});
