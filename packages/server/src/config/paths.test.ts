import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { completeModelConfig } from './config-json.js';
import type { ModelConfig, Sparse } from './model-config.js';
import { unsafeName, unsafeRelativePath, validateConfigPaths } from './paths.js';

const config = (fields: Sparse<ModelConfig>): ModelConfig => completeModelConfig({ name: 'm', backend: 'python', ...fields });
const env = (value: string): ModelConfig => config({ parameters: { EXECUTION_ENV_PATH: { string_value: value } } });

describe('path rules', () => {
  it('accepts relative paths that stay inside, "." segments included', () => {
    for (const path of ['model.onnx', 'sub/model.onnx', './model.onnx', 'model.savedmodel/', 'a..b', '..x/y']) {
      assert.equal(unsafeRelativePath(path), undefined, path);
    }
  });

  it('refuses absolute paths, ".." segments, NUL, backslashes, drive letters and empty paths, saying why', () => {
    assert.match(unsafeRelativePath('/etc/hostname')!, /absolute/);
    assert.match(unsafeRelativePath('../x')!, /'\.\.'/);
    assert.match(unsafeRelativePath('a/../../x')!, /'\.\.'/);
    assert.match(unsafeRelativePath('a/..')!, /'\.\.'/);
    assert.match(unsafeRelativePath('a\0b')!, /NUL/);
    assert.match(unsafeRelativePath('..\\x')!, /backslash/);
    assert.match(unsafeRelativePath('C:x')!, /drive/);
    assert.match(unsafeRelativePath('')!, /empty/);
  });

  it('takes EXECUTION_ENV_PATH inside the model directory, with or without $$TRITON_MODEL_DIRECTORY', () => {
    for (const value of ['env.tar.gz', '$$TRITON_MODEL_DIRECTORY/env.tar.gz', '$$TRITON_MODEL_DIRECTORY/envs/py310', '']) {
      assert.doesNotThrow(() => validateConfigPaths(env(value)), value);
    }
    assert.throws(() => validateConfigPaths(env('/opt/conda/envs/x')), /model 'm': parameter EXECUTION_ENV_PATH '\/opt\/conda\/envs\/x' is refused: absolute paths are not allowed/);
    assert.throws(() => validateConfigPaths(env('$$TRITON_MODEL_DIRECTORY/../x')), /'\.\.' segment/);
    assert.throws(() => validateConfigPaths(env('$$TRITON_MODEL_DIRECTORY')), /names the model directory itself/);
  });

  it('checks every path field and the backend name', () => {
    assert.throws(() => validateConfigPaths(config({ default_model_filename: '../x' })), /default_model_filename '\.\.\/x' is refused/);
    assert.throws(() => validateConfigPaths(config({ cc_model_filenames: { '8.0': '/x' } })), /cc_model_filenames\['8\.0'\] '\/x' is refused/);
    assert.throws(() => validateConfigPaths(config({ runtime: '../r.so' })), /runtime '\.\.\/r\.so' is refused/);
    assert.throws(() => validateConfigPaths(config({ backend: 'a/b' })), /backend 'a\/b' is refused: only letters, digits/);
    assert.throws(() => validateConfigPaths(config({ backend: '..' })), /backend '\.\.' is refused/);
    assert.throws(() => validateConfigPaths(config({ parameters: { TRITON_BATCH_STRATEGY_PATH: { string_value: '/lib.so' } } })), /TRITON_BATCH_STRATEGY_PATH/);
    assert.equal(unsafeName('tensorrtllm'), undefined);
    assert.equal(unsafeName('my-backend_2.1'), undefined);
  });

  it('shows a value with control characters escaped and cut at 200 characters', () => {
    const err = (() => {
      try {
        validateConfigPaths(config({ default_model_filename: `/${'a'.repeat(5000)}\n` }));
      } catch (e) {
        return (e as Error).message;
      }
      return '';
    })();
    assert.ok(err.length < 600, err);
    assert.match(err, /'\/a+…' is refused/);
  });
});
