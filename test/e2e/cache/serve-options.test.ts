/**
 * `nereid serve`'s cache options as a user runs them (docs/cache.md): `--cache-config` and the
 * deprecated `--response-cache-byte-size` turn the cache on (`cache_enabled 1` in the option
 * table, hits counted); a malformed value is refused as any bad option (status 3) with Triton's
 * message; a Redis that does not answer stops the server at start (status 1).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { runNereid, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

let repo: string;

before(async () => {
  const simple = simpleModel();
  repo = await makeRepository({ simple: modelFiles(simple, { config: simple.config + 'response_cache { enable: true }\n' }) });
});

after(async () => {
  await stopAllNereid();
  if (repo) await removeDir(repo);
});

const body = JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(1) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(2) },
  ],
});

describe('nereid serve with a response cache', () => {
  for (const [what, args] of [
    ['--cache-config local,size=N', ['--cache-config', 'local,size=1048576']],
    ['--response-cache-byte-size=N (deprecated)', ['--response-cache-byte-size=1048576']],
  ] as const) {
    it(`${what} caches the model's responses`, async () => {
      const { process: p, url } = await startNereidServe([`--model-repository=${repo}`, ...args]);
      try {
        for (let i = 0; i < 3; i++) assert.equal((await fetch(`${url}/v2/models/simple/infer`, { method: 'POST', body })).status, 200);
        const stats = (await (await fetch(`${url}/v2/models/simple/stats`)).json()) as { model_stats: { execution_count: number; inference_stats: Record<string, { count: number }> }[] };
        assert.equal(stats.model_stats[0]!.inference_stats.cache_hit!.count, 2);
        assert.equal(stats.model_stats[0]!.execution_count, 1);
        assert.match(p.stdout + p.stderr, /\| cache_enabled +\| 1 +\|/);
        if (what.startsWith('--response-cache-byte-size')) {
          assert.match(p.stderr, /'--response-cache-byte-size' has been deprecated! .* '--cache-config=local,size=1048576'/);
        }
      } finally {
        await p.stop();
      }
    });
  }

  it('refuses a malformed --cache-config as any bad option, with the message and status 3', async () => {
    const cases: [string[], RegExp][] = [
      [['--cache-config=size=100'], /No cache specified\. --cache-config option format is <cache name>,<setting>=<value>\. Got size=100/],
      [['--cache-config=local,size=1', '--cache-config=redis,host=x'], /found multiple cache configurations, but only a single cache is currently supported/],
      [['--cache-config=local,ttl=5'], /Failed to initialize LocalCache: config didn't contain a valid 'size' field\./],
    ];
    for (const [args, message] of cases) {
      const r = await runNereid(['serve', `--model-repository=${repo}`, '--http-port=0', '--grpc-port=0', '--metrics-port=0', ...args]);
      assert.equal(r.exit.code, 3, args.join(' '));
      assert.match(r.stderr, message);
    }
  });

  it('stops at start when Redis does not answer', async () => {
    const r = await runNereid([
      'serve',
      `--model-repository=${repo}`,
      '--http-address=127.0.0.1',
      '--http-port=0',
      '--grpc-port=0',
      '--metrics-port=0',
      '--cache-config=redis,host=127.0.0.1',
      '--cache-config=redis,port=1',
      '--cache-config=redis,connect_timeout=500',
    ]);
    assert.equal(r.exit.code, 1);
    assert.match(r.stderr, /Failed to initialize RedisCache: .*\(redis at 127\.0\.0\.1:1, db 0\)/);
  });
});
