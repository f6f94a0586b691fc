import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import { type ModelConfig, loadLabelFiles, normalizeModelConfig, parseModelConfigText, resolveBatchStrategyPath } from './index.js';

async function modelDir(t: { after: (fn: () => Promise<void>) => void }): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'nereid-labels-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  const dir = join(root, 'classifier');
  await mkdir(join(dir, '1'), { recursive: true });
  await writeFile(join(dir, 'labels.txt'), 'cat\ndog\n\nbird');
  await writeFile(join(dir, '1', 'crlf.txt'), 'a\r\nb\r\n');
  await writeFile(join(root, 'outside.txt'), 'x\n');
  await writeFile(join(dir, 'libbatch.so'), '');
  return dir;
}

const config = (text: string): ModelConfig => normalizeModelConfig(parseModelConfigText(`name: "classifier" backend: "onnxruntime" ${text}`));
const labelled = (...files: string[]): ModelConfig =>
  config(files.map((f, i) => `output { name: "out${i}" data_type: TYPE_FP32 dims: [ 4 ] label_filename: ${JSON.stringify(f)} }`).join(' '));

async function rejection(promise: Promise<unknown>): Promise<NereidError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof NereidError, `expected a NereidError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected a rejection');
}

test('label files are read relative to the model directory, one label per line', async (t) => {
  const dir = await modelDir(t);
  const labels = await loadLabelFiles(labelled('labels.txt', '1/crlf.txt', ''), dir);
  assert.deepEqual(labels, new Map([['out0', ['cat', 'dog', '', 'bird']], ['out1', ['a', 'b']]]));
  assert.deepEqual(await loadLabelFiles(config(''), dir), new Map());
});

test('a label file outside the model directory is UNSUPPORTED', async (t) => {
  const dir = await modelDir(t);
  for (const path of ['../outside.txt', join(dir, '..', 'outside.txt'), '1/../../outside.txt', '.']) {
    const err = await rejection(loadLabelFiles(labelled(path), dir));
    assert.equal(err.code, 'CONFIG_UNSUPPORTED');
    assert.equal(err.kind, 'UNSUPPORTED');
    assert.equal(
      err.message,
      `model 'classifier': output 'out0' label file '${path}' is outside the model directory; label files must be inside '${dir}'`,
    );
  }
  assert.deepEqual(await loadLabelFiles(labelled(join(dir, 'labels.txt')), dir), new Map([['out0', ['cat', 'dog', '', 'bird']]]));
});

test('an unreadable label file is a load error', async (t) => {
  const dir = await modelDir(t);
  const err = await rejection(loadLabelFiles(labelled('missing.txt'), dir));
  assert.equal(err.code, 'CONFIG_INVALID');
  assert.match(err.message, /^model 'classifier': output 'out0' label file 'missing\.txt' cannot be read: ENOENT/);
  const isDir = await rejection(loadLabelFiles(labelled('1'), dir));
  assert.match(isDir.message, /label file '1' cannot be read: EISDIR/);
});

test('TRITON_BATCH_STRATEGY_PATH must name an existing file inside the model directory', async (t) => {
  const dir = await modelDir(t);
  const strategy = (path: string): ModelConfig =>
    config(`dynamic_batching { } parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: ${JSON.stringify(path)} } }`);
  assert.equal(await resolveBatchStrategyPath(config(''), dir), undefined);
  assert.equal(await resolveBatchStrategyPath(strategy('libbatch.so'), dir), join(dir, 'libbatch.so'));
  assert.equal(await resolveBatchStrategyPath(strategy(join(dir, 'libbatch.so')), dir), join(dir, 'libbatch.so'));
  const outside = await rejection(resolveBatchStrategyPath(strategy('../outside.txt'), dir));
  assert.equal(outside.code, 'CONFIG_INVALID');
  assert.equal(
    outside.message,
    `model 'classifier': parameter TRITON_BATCH_STRATEGY_PATH '../outside.txt' must name a file inside the model directory '${dir}'`,
  );
  const missing = await rejection(resolveBatchStrategyPath(strategy('nope.so'), dir));
  assert.equal(missing.message, "model 'classifier': parameter TRITON_BATCH_STRATEGY_PATH 'nope.so' does not name an existing file");
  const directory = await rejection(resolveBatchStrategyPath(strategy('1'), dir));
  assert.equal(directory.message, "model 'classifier': parameter TRITON_BATCH_STRATEGY_PATH '1' does not name an existing file");
});
