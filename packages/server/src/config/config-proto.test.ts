// Every reference config, completed, survives encoding as the protobuf ModelConfig message and
// decoding back: the gRPC ModelConfig RPC sends exactly what the HTTP config endpoint shows.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { configPb } from '@nereid/protocol';
import { completeModelConfig, modelConfigToJson, parseModelConfigText } from './index.js';
import { fromProtoModelConfig, toProtoModelConfig } from './config-proto.js';
import { fixturesDir, projectRoot } from './test-support.js';

function configFiles(): string[] {
  const corpus = resolve(projectRoot(), '../shared/testdata/triton-configs/configs');
  const files = readdirSync(corpus).map((f) => join(corpus, f));
  const fixtures = readdirSync(fixturesDir()).filter((f) => f.endsWith('.pbtxt')).map((f) => join(fixturesDir(), f));
  return [...files, ...fixtures];
}

/**
 * `float` fields travel as 32-bit floats: the config layer keeps their shortest decimal (0.1), the
 * decoded message their widened value (0.10000000149011612). Both are the same float.
 */
function sameFloat32(a: unknown): unknown {
  if (typeof a === 'number' && Number.isFinite(a) && !Number.isInteger(a)) return Math.fround(a);
  if (Array.isArray(a)) return a.map(sameFloat32);
  if (typeof a === 'object' && a !== null) return Object.fromEntries(Object.entries(a).map(([k, v]) => [k, sameFloat32(v)]));
  return a;
}

test('every reference and fixture config round-trips through the protobuf ModelConfig', () => {
  const failures: string[] = [];
  const files = configFiles();
  for (const file of files) {
    const config = completeModelConfig(parseModelConfigText(readFileSync(file, 'utf8'), file));
    const bytes = configPb.ModelConfig.encode(toProtoModelConfig(config)).finish();
    const back = fromProtoModelConfig(configPb.ModelConfig.decode(bytes));
    const want = modelConfigToJson(config, { emitDefaults: true, int64AsString: false });
    const got = modelConfigToJson(completeModelConfig(back), { emitDefaults: true, int64AsString: false });
    try {
      assert.deepEqual(sameFloat32(got), sameFloat32(want));
    } catch {
      failures.push(file);
    }
  }
  assert.ok(files.length > 400, `expected the reference corpus, found ${files.length} files`);
  assert.deepEqual(failures, []);
});
