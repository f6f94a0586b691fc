// The corpus tier: 410 real config.pbtxt files from Triton's repository and what protobuf's
// reference parser produces for them, kept outside the project at
// ../shared/testdata/triton-configs (test-support.ts). These tests run only in that tier
// (`*.corpus.test.ts`); there a missing corpus is a failure that names the path.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { modelConfigToJson, parseModelConfigText, printModelConfigText } from './index.js';
import { canonicalFloats, parseWithReference, type ReferenceResult, toReferenceDialect } from './protobuf-reference.js';
import { protoRoundTripFailures, referenceCorpus } from './test-support.js';

function describeFailure(err: unknown): string {
  if (err instanceof assert.AssertionError) return err.message.split('\n').slice(0, 12).join('\n    ');
  return err instanceof Error ? err.message : String(err);
}

test('corpus: every reference config parses to the reference protobuf JSON', () => {
  const { configsDir, files, expected } = referenceCorpus();
  assert.equal(files.length, 410, `expected 410 corpus files in ${configsDir}`);
  const failures: string[] = [];
  for (const file of files) {
    try {
      const parsed = parseModelConfigText(readFileSync(join(configsDir, file), 'utf8'), { fileName: file });
      assert.ok(file in expected, 'no entry in expected.json');
      assert.deepStrictEqual(modelConfigToJson(parsed, { emitDefaults: false, int64AsString: true }), expected[file]);
    } catch (err) {
      failures.push(`${file}: ${describeFailure(err)}`);
    }
  }
  assert.equal(failures.length, 0, `${failures.length} of ${files.length} corpus files failed:\n  ${failures.join('\n  ')}`);
});

test('corpus: every reference config round-trips parse → print → parse', () => {
  const { configsDir, files } = referenceCorpus();
  const failures: string[] = [];
  for (const file of files) {
    try {
      const parsed = parseModelConfigText(readFileSync(join(configsDir, file), 'utf8'), { fileName: file });
      const printed = printModelConfigText(parsed);
      assert.deepStrictEqual(parseModelConfigText(printed, { fileName: `${file} (printed)` }), parsed);
    } catch (err) {
      failures.push(`${file}: ${describeFailure(err)}`);
    }
  }
  assert.equal(failures.length, 0, `${failures.length} of ${files.length} corpus files failed to round-trip:\n  ${failures.join('\n  ')}`);
});

test('corpus: every reference config round-trips through the protobuf ModelConfig', () => {
  const { configsDir, files } = referenceCorpus();
  assert.deepEqual(protoRoundTripFailures(files.map((f) => join(configsDir, f))), []);
});

test("corpus: protobuf's reference parser, run now, reads every config as Nereid does", async () => {
  const { configsDir, files } = referenceCorpus();
  const texts = files.map((f) => readFileSync(join(configsDir, f), 'utf8'));
  const { results } = await parseWithReference(texts.map(toReferenceDialect));
  const failures: string[] = [];
  files.forEach((file, i) => {
    const reference = results[i] as ReferenceResult;
    if ('error' in reference) {
      failures.push(`${file}: the reference parser refuses it: ${reference.error}`);
      return;
    }
    try {
      const ours = modelConfigToJson(parseModelConfigText(texts[i] as string, { fileName: file }), { emitDefaults: false, int64AsString: true });
      assert.deepStrictEqual(canonicalFloats(ours), canonicalFloats(reference.ok));
    } catch (err) {
      failures.push(`${file}: ${describeFailure(err)}`);
    }
  });
  assert.equal(failures.length, 0, `${failures.length} of ${files.length} corpus files disagree:\n  ${failures.join('\n  ')}`);
});
