import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import { OPENVINO, RUNTIMES_SETUP_COMMAND, RUNTIMES_VENV, TENSORFLOW, defaultRuntimePython, requireRuntime } from './framework-backends.js';

const VENV_PYTHON = join(RUNTIMES_VENV, 'bin', 'python3');

test('the runtimes environment is the default interpreter of the framework backends once it exists', () => {
  assert.ok(existsSync(VENV_PYTHON), `${VENV_PYTHON} is missing: the test profile makes it (${RUNTIMES_SETUP_COMMAND})`);
  assert.equal(defaultRuntimePython(), VENV_PYTHON);
});

test('requireRuntime finds TensorFlow and OpenVINO in the runtimes environment', async () => {
  await requireRuntime('m', VENV_PYTHON, TENSORFLOW, 'tensorflow');
  await requireRuntime('m', VENV_PYTHON, OPENVINO, 'openvino');
});

test('a missing runtime is a load error naming the model, the interpreter and the install command', async () => {
  const absent = { ...TENSORFLOW, module: 'nereid_no_such_runtime', what: 'NoSuch' };
  await assert.rejects(requireRuntime('tf_model', VENV_PYTHON, absent, 'tensorflow'), (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'MODEL_LOAD_FAILED');
    assert.match(err.message, /^model 'tf_model': the tensorflow backend runs models with NoSuch \(PyPI tensorflow-cpu\), and it is not installed for the Python interpreter /);
    assert.ok(err.message.includes(VENV_PYTHON));
    assert.ok(err.message.includes(`with: ${RUNTIMES_SETUP_COMMAND} `));
    assert.ok(err.message.includes('--backend-config=tensorflow,python-executable=<path>'));
    return true;
  });
  await assert.rejects(requireRuntime('tf_model', '/nonexistent/python3', TENSORFLOW, 'tensorflow'), /the Python interpreter \/nonexistent\/python3 cannot run/);
});
