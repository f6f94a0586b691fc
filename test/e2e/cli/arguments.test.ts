/**
 * `nereid` command-line handling (protocol.md §6): bad arguments end the process with a non-zero
 * code and a message that names the problem; `--version` works (help: help.test.ts).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NEREID_VERSION } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { runNereid, stopAllNereid } from '../../helpers/cli.js';

let repo: string;

before(async () => {
  repo = await makeRepository({ simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes } });
});

after(async () => {
  await stopAllNereid();
  await removeDir(repo);
});

describe('nereid', () => {
  it('--version prints the version and exits 0', async () => {
    const { exit, stdout } = await runNereid(['--version']);
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(stdout.trim(), NEREID_VERSION);
  });

  it('an unknown command fails naming it', async () => {
    const { exit, stderr } = await runNereid(['bogus']);
    assert.notEqual(exit.code, 0);
    assert.match(stderr, /unknown command 'bogus'/);
  });
});

describe('nereid serve: argument errors', () => {
  it('without --model-repository exits non-zero with a clear message', async () => {
    const { exit, stderr } = await runNereid(['serve', '--http-port=0']);
    assert.notEqual(exit.code, 0);
    assert.equal(exit.signal, null);
    assert.match(stderr, /no model repository given: pass --model-repository=<directory>/);
  });

  it('with a repository that does not exist exits non-zero naming the path', async () => {
    const missing = join(repo, 'does-not-exist');
    const { exit, stderr } = await runNereid(['serve', `--model-repository=${missing}`, '--http-port=0', '--http-address=127.0.0.1']);
    assert.notEqual(exit.code, 0);
    assert.ok(stderr.includes(`model repository '${missing}' does not exist`), stderr);
  });

  it('with a repository that is a file exits non-zero naming the path', async () => {
    const file = join(repo, 'simple', 'config.pbtxt');
    const { exit, stderr } = await runNereid(['serve', '--model-repository', file, '--http-port=0', '--http-address=127.0.0.1']);
    assert.notEqual(exit.code, 0);
    assert.ok(stderr.includes(`'${file}' is not a directory`), stderr);
  });

  it('an unknown option exits non-zero naming the option', async () => {
    const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, '--no-such-option=1']);
    assert.notEqual(exit.code, 0);
    assert.match(stderr, /unrecognized option '--no-such-option'/);
  });

  it('a positional argument is refused', async () => {
    const { exit, stderr } = await runNereid(['serve', repo]);
    assert.notEqual(exit.code, 0);
    assert.ok(stderr.includes(`unexpected argument '${repo}'`), stderr);
  });

  it('a boolean option with a bad value exits non-zero, naming option and value', async () => {
    for (const [arg, option] of [
      ['--strict-readiness=maybe', 'strict-readiness'],
      ['--exit-on-error=yes please', 'exit-on-error'],
      ['--allow-grpc=2', 'allow-grpc'],
    ] as const) {
      const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, arg]);
      assert.notEqual(exit.code, 0, arg);
      assert.ok(stderr.includes(`--${option} expects a boolean (true/false, on/off, 1/0), got '${arg.slice(arg.indexOf('=') + 1)}'`), stderr);
    }
  });

  it('an integer option with a bad value, or an option without its value, is refused', async () => {
    let r = await runNereid(['serve', `--model-repository=${repo}`, '--http-port=eighty']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--http-port expects an integer >= 0, got 'eighty'/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--exit-on-error']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /option '--exit-on-error' needs a value/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--decoupled-response-timeout-secs=-1']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--decoupled-response-timeout-secs expects a number of seconds >= 0 \(0: no limit\), got '-1'/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--disable-auto-complete-config=false']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /option '--disable-auto-complete-config' takes no value, got '--disable-auto-complete-config=false'/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--http-thread-count=often']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--http-thread-count expects an integer, got 'often'/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--trace-rate=often']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--trace-rate=often: Unable to parse 'trace_rate', got: often/);
  });

  it('--model-namespacing=true is refused as not supported; false (the default) is accepted', async () => {
    const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, '--model-namespacing=true']);
    assert.notEqual(exit.code, 0);
    assert.match(stderr, /--model-namespacing=true is not supported by this version of Nereid: a model name must be unique across the --model-repository roots/);
    const r = await runNereid(['serve', `--model-repository=${repo}`, '--model-namespacing=false', '--model-load-retry-count=-1']);
    assert.notEqual(r.exit.code, 0);
    assert.doesNotMatch(r.stderr, /model-namespacing/);
    assert.match(r.stderr, /--model-load-retry-count expects an integer >= 0, got '-1'/);
  });

  it('an HTTP port already in use exits non-zero naming the address', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    try {
      const port = (blocker.address() as { port: number }).port;
      const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, '--http-address=127.0.0.1', `--http-port=${port}`, '--grpc-address=127.0.0.1', '--grpc-port=0']);
      assert.notEqual(exit.code, 0);
      assert.ok(stderr.includes(`HTTP service could not listen on 127.0.0.1:${port}`), stderr);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it('an unknown model control mode, and --load-model outside explicit mode, are refused', async () => {
    let r = await runNereid(['serve', `--model-repository=${repo}`, '--model-control-mode=sometimes']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--model-control-mode must be 'none', 'poll' or 'explicit', got 'sometimes'/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--load-model=simple']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--load-model is only valid with --model-control-mode=explicit/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=*', '--load-model=simple']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--load-model=\* loads every model and must be the only --load-model/);
    r = await runNereid(['serve', `--model-repository=${repo}`, '--model-control-mode=poll', '--repository-poll-secs=0']);
    assert.notEqual(r.exit.code, 0);
    assert.match(r.stderr, /--repository-poll-secs must be > 0 in mode poll/);
  });
});
