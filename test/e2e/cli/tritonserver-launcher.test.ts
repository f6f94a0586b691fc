/**
 * The `tritonserver` launcher (packages/server/bin/tritonserver) as tools run it: --version and
 * --help answer, a command line it cannot map is refused with exit 3, and Model Analyzer's
 * local-mode command line serves until SIGTERM or SIGINT, which end it cleanly with exit 0.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { EXAMPLE_REPOSITORY, NereidProcess, TRITONSERVER_BIN, stopAllNereid } from '../../helpers/cli.js';
import { httpRequest } from '../../helpers/harness.js';

after(stopAllNereid);

const launcher = (args: readonly string[], env: Record<string, string> = {}) => new NereidProcess(args, env, TRITONSERVER_BIN);

/** Model Analyzer 1.44's local-mode arguments (values as separate arguments), on 127.0.0.1 and OS-chosen ports. */
const MODEL_ANALYZER_ARGS = [
  '--model-repository', EXAMPLE_REPOSITORY,
  '--model-control-mode', 'explicit',
  '--http-port', '0',
  '--grpc-port', '0',
  '--metrics-port', '0',
  '--metrics-interval-ms', '1000',
  '--strict-model-config', 'false',
  '--http-address', '127.0.0.1',
  '--grpc-address', '127.0.0.1',
];

describe('tritonserver launcher', () => {
  it('--version prints the launcher and Nereid version and exits 0', async () => {
    const p = launcher(['--version']);
    assert.deepEqual(await p.waitForExit(), { code: 0, signal: null }, p.output);
    assert.match(p.stdout, /^tritonserver \(Nereid\) \d+\.\d+\.\d+\n$/);
  });

  it("--help describes the launcher and lists nereid serve's options", async () => {
    const p = launcher(['--help']);
    assert.deepEqual(await p.waitForExit(), { code: 0, signal: null }, p.output);
    assert.match(p.stdout, /^Usage: tritonserver --model-repository=<path> \[options\]/);
    assert.match(p.stdout, /--model-control-mode/);
    assert.match(p.stdout, /--cuda-memory-pool-byte-size/);
  });

  it('refuses an unknown option and a bad value with exit 3, under its own name', async () => {
    const unknown = launcher(['--model-repository', EXAMPLE_REPOSITORY, '--no-such-option=1']);
    assert.deepEqual(await unknown.waitForExit(), { code: 3, signal: null }, unknown.output);
    assert.match(unknown.stderr, /^tritonserver: unrecognized option '--no-such-option'; run 'tritonserver --help'/);
    const bad = launcher(['--model-repository', EXAMPLE_REPOSITORY, '--http-port', 'eighty']);
    assert.deepEqual(await bad.waitForExit(), { code: 3, signal: null }, bad.output);
    assert.match(bad.stderr, /^tritonserver: --http-port expects an integer >= 0, got 'eighty'/);
  });

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`serves Model Analyzer's command line, then stops cleanly on ${signal}`, async () => {
      const p = launcher([...MODEL_ANALYZER_ARGS, '--pinned-memory-pool-byte-size', '0'], { CUDA_VISIBLE_DEVICES: 'GPU-0' });
      const http = await p.waitFor(/Started HTTPService at (127\.0\.0\.1:\d+)/);
      await p.waitFor(/Started Metrics Service at 127\.0\.0\.1:\d+/);
      const ready = await httpRequest(`http://${http[1]}/v2/health/ready`);
      assert.equal(ready.status, 200, ready.text);
      assert.doesNotMatch(p.stderr, /CUDA_VISIBLE_DEVICES/);
      assert.match(p.stderr, /option --pinned-memory-pool-byte-size is not supported by this version of Nereid and has no effect/);
      assert.deepEqual(await p.stop(signal), { code: 0, signal: null }, p.output);
      assert.match(p.stdout, new RegExp(`received ${signal}: no longer ready`));
      assert.match(p.stdout, /all models unloaded; exiting/);
    });
  }
});
