import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { modelKey, parseS3Uri } from './s3-location.js';
import { parseManifest } from './s3-mirror.js';

describe('parseS3Uri', () => {
  it('takes s3://bucket[/prefix] and the endpoint forms', () => {
    assert.deepEqual(parseS3Uri('s3://models'), { uri: 's3://models', bucket: 'models', prefix: '', endpoint: undefined });
    assert.deepEqual(parseS3Uri('s3://models/a/b/'), { uri: 's3://models/a/b/', bucket: 'models', prefix: 'a/b/', endpoint: undefined });
    assert.deepEqual(parseS3Uri('s3://localhost:9000/models/repo'), { uri: 's3://localhost:9000/models/repo', bucket: 'models', prefix: 'repo/', endpoint: 'http://localhost:9000' });
    assert.equal(parseS3Uri('s3://https://s3.example.com:443/models').endpoint, 'https://s3.example.com:443');
    assert.equal(parseS3Uri('s3://127.0.0.1:8333/models').prefix, '');
  });

  it('refuses what is not a bucket and prefix', () => {
    for (const bad of ['s3://', 's3://UPPER/x', 's3://models/a/../b', 's3://models/a//b', 's3://models/a\\b', 's3://https://host/models']) {
      assert.throws(() => parseS3Uri(bad), (err: unknown) => err instanceof NereidError && err.code === 'REPOSITORY_INVALID' && err.message.includes(bad), bad);
    }
  });
});

describe('modelKey', () => {
  it('splits a key into its model and path', () => {
    assert.deepEqual(modelKey('simple/1/model.onnx'), { model: 'simple', path: '1/model.onnx' });
    assert.equal(modelKey('README.md'), undefined);
    assert.deepEqual(modelKey('ensemble/1/'), { model: 'ensemble', path: '1/' });
    assert.equal(modelKey('ensemble/'), undefined);
  });

  it('refuses keys that could leave the model directory', () => {
    for (const bad of ['m/../../x', 'm/./x', '../x', '/etc/passwd', 'm//x', 'm\\..\\x', 'm/a\0b', 'm/a\nb', 'm/../']) {
      assert.throws(() => modelKey(bad), (err: unknown) => err instanceof NereidError && err.code === 'REPOSITORY_INVALID', JSON.stringify(bad));
    }
  });
});

describe('parseManifest', () => {
  it('reads sha256sum output, with ./ prefixes and binary markers', () => {
    const a = 'a'.repeat(64);
    const b = 'B'.repeat(64);
    assert.deepEqual(parseManifest(`${a}  ./config.pbtxt\n${b} *1/model.onnx\n\n`), new Map([['config.pbtxt', a], ['1/model.onnx', 'b'.repeat(64)]]));
  });

  it('refuses malformed lines and escaping paths', () => {
    assert.throws(() => parseManifest('not a checksum line\n'), /is not a '<sha256>  <path>' line/);
    assert.throws(() => parseManifest(`${'a'.repeat(64)}  ../x\n`), /refused/);
  });
});
