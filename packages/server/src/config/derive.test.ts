import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import { type ModelConfig, type Sparse, deriveModelConfig, normalizeModelConfig, readFirstSubdirectoryEntries } from './index.js';

type Entry = readonly [string, 'file' | 'directory'];
const file = (name: string): Entry => [name, 'file'];
const dir = (name: string): Entry => [name, 'directory'];

/** Derives for model directory `m` (or `modelDirName`) whose first version directory holds `entries`. */
function derive(config: Sparse<ModelConfig>, entries?: Entry[], modelDirName = 'm'): Sparse<ModelConfig> {
  return deriveModelConfig(config, modelDirName, entries === undefined ? undefined : new Map(entries));
}

const identity = (c: Sparse<ModelConfig>) => [c.backend ?? '', c.platform ?? '', c.default_model_filename ?? ''];

test('rule 1: name is filled from the directory only when empty', () => {
  assert.equal(derive({ backend: 'onnxruntime' }).name, 'm');
  assert.equal(derive({ name: '', backend: 'onnxruntime' }).name, 'm');
  assert.equal(derive({ name: 'other', backend: 'onnxruntime' }).name, 'other');
});

test('rule 2: TensorFlow from file name, savedmodel directory or graphdef file', () => {
  assert.deepEqual(identity(derive({ default_model_filename: 'model.savedmodel' })), ['tensorflow', 'tensorflow_savedmodel', 'model.savedmodel']);
  assert.deepEqual(identity(derive({ default_model_filename: 'model.graphdef' })), ['tensorflow', 'tensorflow_graphdef', 'model.graphdef']);
  assert.deepEqual(identity(derive({}, [dir('model.savedmodel')])), ['tensorflow', 'tensorflow_savedmodel', 'model.savedmodel']);
  assert.deepEqual(identity(derive({ backend: 'tensorflow' }, [file('model.graphdef')])), ['tensorflow', 'tensorflow_graphdef', 'model.graphdef']);
  assert.deepEqual(identity(derive({}, [dir('model.savedmodel'), file('model.graphdef')])), ['tensorflow', 'tensorflow_graphdef', 'model.graphdef']);
  assert.deepEqual(identity(derive({ platform: 'tensorflow_savedmodel' })), ['tensorflow', 'tensorflow_savedmodel', 'model.savedmodel']);
  // a savedmodel *file* or a graphdef *directory* does not count
  assert.throws(() => derive({}, [file('model.savedmodel'), dir('model.graphdef')]), /Could not determine backend/);
  // backend tensorflow with nothing to go on: platform stays empty (validation rejects it)
  assert.deepEqual(identity(derive({ backend: 'tensorflow' }, [])), ['tensorflow', '', '']);
});

test('rule 3: TensorRT from platform, file name or a model.plan file', () => {
  assert.deepEqual(identity(derive({ platform: 'tensorrt_plan' })), ['tensorrt', 'tensorrt_plan', 'model.plan']);
  assert.deepEqual(identity(derive({ default_model_filename: 'model.plan' })), ['tensorrt', 'tensorrt_plan', 'model.plan']);
  assert.deepEqual(identity(derive({}, [file('model.plan'), file('model.onnx')])), ['tensorrt', 'tensorrt_plan', 'model.plan']);
  assert.deepEqual(identity(derive({ backend: 'tensorrt', default_model_filename: 'b.plan' })), ['tensorrt', 'tensorrt_plan', 'b.plan']);
  assert.deepEqual(identity(derive({}, [dir('model.plan'), file('model.onnx')])), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
});

test('rule 4: ONNX Runtime from platform, file name, or a model.onnx file or directory', () => {
  assert.deepEqual(identity(derive({ platform: 'onnxruntime_onnx' })), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
  assert.deepEqual(identity(derive({ default_model_filename: 'model.onnx' })), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
  assert.deepEqual(identity(derive({}, [file('model.onnx')])), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
  assert.deepEqual(identity(derive({}, [dir('model.onnx')])), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
  assert.deepEqual(identity(derive({ backend: 'onnxruntime', default_model_filename: 'net.onnx' })), ['onnxruntime', 'onnxruntime_onnx', 'net.onnx']);
  // a file is only looked for when neither platform nor file name is given
  assert.deepEqual(identity(derive({ default_model_filename: 'x.bin' }, [file('model.onnx')], 'y.custom')), ['', '', 'x.bin']);
});

test('rule 5: OpenVINO from file name or a model.xml entry', () => {
  assert.deepEqual(identity(derive({ default_model_filename: 'model.xml' })), ['openvino', '', 'model.xml']);
  assert.deepEqual(identity(derive({}, [file('model.xml'), file('model.bin')])), ['openvino', '', 'model.xml']);
  assert.deepEqual(identity(derive({ backend: 'openvino' })), ['openvino', '', 'model.xml']);
});

test('rule 6: PyTorch (libtorch and AOT-Inductor)', () => {
  assert.deepEqual(identity(derive({ platform: 'pytorch_libtorch' })), ['pytorch', 'pytorch_libtorch', '']);
  assert.deepEqual(identity(derive({ default_model_filename: 'model.pt' })), ['pytorch', 'pytorch_libtorch', 'model.pt']);
  // as the reference: a detected model.pt sets the platform, and the file name stays empty
  assert.deepEqual(identity(derive({}, [file('model.pt')])), ['pytorch', 'pytorch_libtorch', '']);
  assert.deepEqual(identity(derive({}, [file('model.pt2')])), ['pytorch', 'torch_aoti', 'model.pt2']);
  assert.deepEqual(identity(derive({ platform: 'torch_aoti' })), ['pytorch', 'torch_aoti', 'model.pt2']);
  // as the reference: an empty platform becomes pytorch_libtorch even for a model.pt2 file name
  assert.deepEqual(identity(derive({ default_model_filename: 'model.pt2' })), ['pytorch', 'pytorch_libtorch', 'model.pt2']);
  assert.deepEqual(identity(derive({ backend: 'pytorch' })), ['pytorch', 'pytorch_libtorch', 'model.pt']);
  // quirk: 'libtorch' selects pytorch here and fails the platform/backend pairing later
  assert.deepEqual(identity(derive({ platform: 'libtorch' })), ['pytorch', 'libtorch', '']);
  // a model.pt directory is not a TorchScript file, and hides model.pt2 (as the reference)
  assert.throws(() => derive({}, [dir('model.pt'), file('model.pt2')]), /Could not determine backend/);
});

test('rule 7: Python from file name or a model.py entry', () => {
  assert.deepEqual(identity(derive({}, [file('model.py')])), ['python', '', 'model.py']);
  assert.deepEqual(identity(derive({ default_model_filename: 'model.py' })), ['python', '', 'model.py']);
  assert.deepEqual(identity(derive({ backend: 'python', default_model_filename: 'main.py' })), ['python', '', 'main.py']);
});

test('rule 8: a custom backend named by the directory, else a load error', () => {
  assert.deepEqual(identity(derive({}, [], 'foo.identity')), ['identity', '', 'model.identity']);
  assert.deepEqual(identity(derive({}, undefined, 'a.b.c')), ['b.c', '', 'model.b.c']);
  assert.deepEqual(identity(derive({ backend: 'custom' }, [])), ['custom', '', '']);
  assert.throws(
    () => derive({}, [file('weights.bin')], 'plain'),
    (err: unknown) =>
      err instanceof NereidError &&
      err.code === 'CONFIG_INVALID' &&
      err.message ===
        "Invalid model name: Could not determine backend for model 'plain' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'.",
  );
});

test('ensembles are left alone; derivation does not modify its input', () => {
  const config: Sparse<ModelConfig> = { platform: 'ensemble', input: [{ name: 'x' }] };
  const out = derive(config, []);
  assert.deepEqual(out, { name: 'm', platform: 'ensemble', input: [{ name: 'x' }] });
  assert.deepEqual(config, { platform: 'ensemble', input: [{ name: 'x' }] });
});

test('a complete config stays complete', () => {
  const complete: ModelConfig = normalizeModelConfig({});
  const out: ModelConfig = deriveModelConfig(complete, 'm', new Map([file('model.onnx')]));
  assert.deepEqual(identity(out), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);
  assert.equal(out.name, 'm');
  assert.deepEqual(out.input, []);
  assert.equal(complete.name, '');
});

test('readFirstSubdirectoryEntries lists the byte-wise first sub-directory, following links', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'nereid-derive-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  const model = join(root, 'densenet');
  await mkdir(join(model, '2', 'model.savedmodel'), { recursive: true });
  await mkdir(join(model, '10', 'model.onnx'), { recursive: true });
  await writeFile(join(model, '10', 'model.onnx', 'model.onnx'), '');
  await writeFile(join(model, '10', 'extra.txt'), '');
  await writeFile(join(model, 'config.pbtxt'), '');
  await symlink(join(model, '10', 'extra.txt'), join(model, '10', 'link.txt'));
  await symlink(join(model, 'missing'), join(model, '10', 'dangling'));
  const entries = await readFirstSubdirectoryEntries(model);
  assert.deepEqual(new Map([...entries].sort()), new Map([file('extra.txt'), file('link.txt'), dir('model.onnx')]));
  assert.deepEqual(identity(deriveModelConfig({}, 'densenet', entries)), ['onnxruntime', 'onnxruntime_onnx', 'model.onnx']);

  const empty = join(root, 'empty.python');
  await mkdir(empty);
  assert.deepEqual(await readFirstSubdirectoryEntries(empty), new Map());
  const err = await readFirstSubdirectoryEntries(join(root, 'nope')).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof NereidError && err.code === 'MODEL_LOAD_FAILED' && err.message.startsWith(`unable to list directory '${join(root, 'nope')}'`));
});
