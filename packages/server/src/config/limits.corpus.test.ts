// The corpus tier: the configuration limits and path rules against 410 real config.pbtxt files of
// Triton's repository (test-support.ts). Every one of them stays within the default limits, and
// only the one Triton itself refuses for its path (qa's runtime_escape) breaks the path rules.
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { completeModelConfig, DEFAULT_CONFIG_LIMITS, parseModelConfigText, validateConfigLimits, validateConfigPaths } from './index.js';
import { referenceCorpus } from './test-support.js';

test('corpus: every reference config is within the default configuration limits', () => {
  const { configsDir, files } = referenceCorpus();
  assert.equal(files.length, 410, `expected 410 corpus files in ${configsDir}`);
  const failures: string[] = [];
  for (const file of files) {
    const config = completeModelConfig(parseModelConfigText(readFileSync(join(configsDir, file), 'utf8'), { fileName: file }));
    try {
      validateConfigLimits(config, DEFAULT_CONFIG_LIMITS);
    } catch (err) {
      failures.push(`${file}: ${(err as Error).message}`);
    }
  }
  assert.deepEqual(failures, []);
});

test("corpus: every reference config keeps to the path rules, except the one Triton refuses for its runtime's '..'", () => {
  const { configsDir, files } = referenceCorpus();
  const refused: string[] = [];
  for (const file of files) {
    const config = completeModelConfig(parseModelConfigText(readFileSync(join(configsDir, file), 'utf8'), { fileName: file }));
    try {
      validateConfigPaths(config);
    } catch (err) {
      refused.push(`${file}: ${(err as Error).message}`);
    }
  }
  assert.equal(refused.length, 1, refused.join('\n'));
  assert.match(refused[0]!, /^qa_L0_model_config_special_cases_runtime_escape_config\.pbtxt: .*runtime '\.\.\/dummy_runtime\/libtriton_identity\.so' is refused: a '\.\.' segment/);
});
