/**
 * `nereid config MODEL_DIR` (docs/configuration.md): the configuration a load would use, as
 * annotated protobuf text or JSON, with the origin of every field. It goes through the load
 * pipeline itself, so its errors are the load's.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { runNereid } from '../../helpers/cli.js';

interface Report {
  name: string;
  version: string;
  source: string;
  directory: string;
  config_file?: string;
  config: { max_batch_size: number; input: { name: string }[]; dynamic_batching?: unknown };
  provenance: Record<string, string>;
}

describe('nereid config', () => {
  let repo: string;

  before(async () => {
    const onnx = simpleModel().onnx.bytes;
    repo = await makeRepository({
      partial: modelFiles(simpleModel({ name: 'partial' }), { config: 'max_batch_size: 4\n' }),
      bare: { '1/model.onnx': onnx, '3/model.onnx': onnx },
      custom: { 'config.pbtxt': 'max_batch_size: 4\n', 'configs/small.pbtxt': 'max_batch_size: 1\n', '1/model.onnx': onnx },
      broken: { 'config.pbtxt': 'name: "broken"\nmax_batch_size: 4\ninstance_group [ { count: -1 kind: KIND_GPUS } ]\n', '1/model.onnx': onnx },
      mismatch: { 'config.pbtxt': 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\nmax_batch_size: 4\n', '1/model.onnx': onnx },
    });
  });
  after(async () => {
    await removeDir(repo);
  });

  async function config(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const { exit, stdout, stderr } = await runNereid(['config', ...args]);
    assert.equal(exit.signal, null);
    return { code: exit.code, stdout, stderr };
  }

  it('prints annotated protobuf text that parses back: a header, then each value with its origin', async () => {
    const { code, stdout, stderr } = await config([join(repo, 'partial')]);
    assert.equal(code, 0, stderr);
    const lines = stdout.split('\n');
    assert.equal(lines[0], `# Effective configuration of model 'partial' version 1 (${join(repo, 'partial')})`);
    assert.equal(lines[1], `# Read from: ${join(repo, 'partial', 'config.pbtxt')}`);
    assert.match(stdout, /^name: "partial" {2}# default$/m);
    assert.match(stdout, /^max_batch_size: 4 {2}# file$/m);
    assert.match(stdout, /^ {2}name: "INPUT0" {2}# auto-complete$/m);
    assert.match(stdout, /^ {2}dims: \[ 16 \] {2}# auto-complete$/m);
    assert.match(stdout, /^ {2}count: 2 {2}# default$/m);
    // Every value line carries an origin.
    for (const line of lines.slice(3)) {
      if (line === '' || /[{[]$/.test(line) || line.trim() === '}' || /^\s*key: /.test(line)) continue;
      assert.match(line, /  # (file|auto-complete|default)$/, line);
    }
  });

  it('--json: the configuration, as the config endpoint writes it, and a provenance map', async () => {
    const { code, stdout, stderr } = await config([join(repo, 'partial'), '--json']);
    assert.equal(code, 0, stderr);
    const report = JSON.parse(stdout) as Report;
    assert.equal(report.name, 'partial');
    assert.equal(report.version, '1');
    assert.equal(report.source, 'file');
    assert.equal(report.config.max_batch_size, 4);
    assert.deepEqual(report.config.input.map((i) => i.name), ['INPUT0', 'INPUT1']);
    assert.equal(report.provenance['max_batch_size'], 'file');
    assert.equal(report.provenance['input[1].data_type'], 'auto-complete');
  });

  it('without a config file: the newest version, auto-complete and --backend-config', async () => {
    let { code, stdout, stderr } = await config([join(repo, 'bare'), '--json']);
    assert.equal(code, 0, stderr);
    let report = JSON.parse(stdout) as Report;
    assert.equal(report.version, '3');
    assert.equal(report.source, 'none');
    assert.equal(report.config_file, undefined);
    assert.equal(report.config.max_batch_size, 4);
    assert.equal(report.provenance['max_batch_size'], 'auto-complete');
    // Auto-complete's choice is reported as a warning, as a load reports it.
    assert.match(stderr, /auto-complete set max_batch_size to 4/);

    ({ code, stdout, stderr } = await config([join(repo, 'bare'), '--json', '--backend-config=onnxruntime,default-max-batch-size=2', '--model-version', '1']));
    assert.equal(code, 0, stderr);
    report = JSON.parse(stdout) as Report;
    assert.deepEqual([report.version, report.config.max_batch_size], ['1', 2]);
  });

  it('--config-override: the load parameter replaces the file', async () => {
    const { code, stdout, stderr } = await config([join(repo, 'partial'), '--config-override', '{"max_batch_size": 2, "dynamic_batching": {"max_queue_delay_microseconds": 500}}']);
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^# Read from: the --config-override JSON$/m);
    assert.match(stdout, /^max_batch_size: 2 {2}# override$/m);
    assert.match(stdout, /^ {2}max_queue_delay_microseconds: 500 {2}# override$/m);
  });

  it('--model-config-name picks configs/<name>.pbtxt', async () => {
    const { code, stdout, stderr } = await config([join(repo, 'custom'), '--model-config-name=small', '--json']);
    assert.equal(code, 0, stderr);
    const report = JSON.parse(stdout) as Report;
    assert.equal(report.config_file, join(repo, 'custom', 'configs', 'small.pbtxt'));
    assert.equal(report.config.max_batch_size, 1);
  });

  it('fails as a load would, exit 1 with the reason on stderr and nothing on stdout', async () => {
    const cases: [string[], RegExp][] = [
      [[join(repo, 'nope')], /^nereid config: model directory '.*nope' does not exist or is not a directory$/m],
      [[join(repo, 'broken')], /^nereid config: .*broken\/config\.pbtxt:3:\d+: .*KIND_GPUS/m],
      [[join(repo, 'mismatch')], /^nereid config: unable to load model 'mismatch', configuration expects 1 inputs, model provides 2/m],
      [[join(repo, 'partial'), '--model-version=7'], /^nereid config: model 'partial' has no version 7: it has versions 1$/m],
      [[join(repo, 'partial'), '--disable-auto-complete-config'], /^nereid config: .*partial/m],
      [[join(repo, 'partial'), '--config-override', '{"max_batch_size": "x"}'], /^nereid config: model configuration JSON at 'max_batch_size'/m],
      [[join(repo, 'partial'), '--backend-config=nonsense'], /^nereid config: --backend-config expects/m],
    ];
    for (const [args, error] of cases) {
      const { code, stdout, stderr } = await config(args);
      assert.equal(code, 1, `${args.join(' ')}: ${stdout}`);
      assert.equal(stdout, '', args.join(' '));
      assert.match(stderr, error, args.join(' '));
    }
  });
});
