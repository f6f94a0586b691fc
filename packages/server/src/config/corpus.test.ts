// The reference corpus: 410 real config.pbtxt files and what the reference protobuf parser
// produces for them (../shared/testdata/triton-configs/README.md).
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { modelConfigToJson, parseModelConfigText, printModelConfigText } from './index.js';
import { projectRoot } from './test-support.js';

const corpusDir = resolve(projectRoot(), '../shared/testdata/triton-configs');
const configsDir = join(corpusDir, 'configs');

function loadCorpus(): { files: string[]; expected: Record<string, unknown> } {
  if (!existsSync(configsDir) || !existsSync(join(corpusDir, 'expected.json'))) {
    assert.fail(`the reference config corpus is missing: looked for ${configsDir} and ${join(corpusDir, 'expected.json')}`);
  }
  const files = readdirSync(configsDir).sort();
  const expected = JSON.parse(readFileSync(join(corpusDir, 'expected.json'), 'utf8')) as Record<string, unknown>;
  return { files, expected };
}

function describeFailure(err: unknown): string {
  if (err instanceof assert.AssertionError) return err.message.split('\n').slice(0, 12).join('\n    ');
  return err instanceof Error ? err.message : String(err);
}

test('corpus: every reference config parses to the reference protobuf JSON', () => {
  const { files, expected } = loadCorpus();
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
  const { files } = loadCorpus();
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
