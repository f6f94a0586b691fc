/**
 * The redis response cache against a real Redis server (docs/cache.md#the-redis-cache): hits
 * byte-identical to computed responses, entries shared by two servers, Triton's settings (password,
 * db), and the guarantees when Redis fails: a server that is down or does not answer makes every
 * lookup a miss within the socket timeout, logged, and never fails a request; the server does not
 * start without a Redis that answers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import type { CacheConfig } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { recordingLogger } from '../../helpers/python.js';
import { startRedis, type RunningRedis } from '../../helpers/redis.js';
import { StepBackend, stepConfig } from '../ensemble/step-backend.js';

const PASSWORD = 'cache-secret';
const CACHED = 'response_cache { enable: true }\n';

let redis: RunningRedis;
let repo: string;

const config = (port: number, extra: Record<string, string> = {}): CacheConfig => ({
  name: 'redis',
  settings: { host: '127.0.0.1', port: String(port), password: PASSWORD, db: '3', ...extra },
});

async function infer(srv: RunningServer, values: number[]): Promise<{ status: number; bytes: Buffer; ms: number }> {
  const start = performance.now();
  const r = await fetch(`${srv.url}/v2/models/add1/infer`, {
    method: 'POST',
    body: JSON.stringify({ inputs: [{ name: 'IN', datatype: 'FP32', shape: [values.length], data: values }] }),
  });
  return { status: r.status, bytes: Buffer.from(await r.arrayBuffer()), ms: performance.now() - start };
}

async function cacheStats(srv: RunningServer): Promise<{ hit: number; miss: number }> {
  const s = ((await (await fetch(`${srv.url}/v2/models/add1/stats`)).json()) as { model_stats: { inference_stats: Record<string, { count: number }> }[] }).model_stats[0]!;
  return { hit: s.inference_stats.cache_hit!.count, miss: s.inference_stats.cache_miss!.count };
}

before(async () => {
  redis = await startRedis({ password: PASSWORD });
  repo = await makeRepository({ add1: { 'config.pbtxt': stepConfig('add1') + CACHED, '1/.keep': '' } });
});

after(async () => {
  await redis?.stop();
  if (repo) await removeDir(repo);
});

describe('the redis cache with a Redis server that answers', () => {
  it('answers repeated requests from Redis, byte for byte, and two servers share the entries', async () => {
    const stepsA = new StepBackend();
    const stepsB = new StepBackend();
    const a = await startServer({ modelRepositories: [repo], backends: [stepsA.backend], cache: config(redis.port) });
    const b = await startServer({ modelRepositories: [repo], backends: [stepsB.backend], cache: config(redis.port) });
    const client = new Redis({ port: redis.port, host: '127.0.0.1', password: PASSWORD, db: 3, lazyConnect: true });
    try {
      await client.connect();
      const miss = await infer(a, [1, 2, 3]);
      assert.equal(miss.status, 200, miss.bytes.toString());
      const hit = await infer(a, [1, 2, 3]);
      assert.ok(hit.bytes.equals(miss.bytes), `${hit.bytes} vs ${miss.bytes}`);
      assert.equal(stepsA.of('add1').length, 1);
      assert.deepEqual(await cacheStats(a), { hit: 1, miss: 1 });
      // The entry is in db 3 under Nereid's prefix.
      const keys = await client.keys('nereid:*');
      assert.equal(keys.length, 1);
      // Another server on the same Redis answers from the entry the first one stored.
      const shared = await infer(b, [1, 2, 3]);
      assert.ok(shared.bytes.equals(miss.bytes));
      assert.equal(stepsB.of('add1').length, 0);
      assert.deepEqual(await cacheStats(b), { hit: 1, miss: 0 });
      // An entry Redis dropped (eviction, FLUSHDB) is computed again and stored again.
      await client.flushdb();
      const again = await infer(b, [1, 2, 3]);
      assert.ok(again.bytes.equals(miss.bytes));
      assert.equal(stepsB.of('add1').length, 1);
      assert.equal((await client.keys('nereid:*')).length, 1);
      const text = await a.server.metrics.text();
      assert.match(text, /nv_cache_num_hits_per_model\{model="add1",version="1"\} 1/);
    } finally {
      client.disconnect();
      await a.stop();
      await b.stop();
    }
  });
});

describe('the redis cache when Redis fails', () => {
  it('computes every request while Redis does not answer, each within the socket timeout, and logs it', async () => {
    const own = await startRedis({ password: PASSWORD });
    const logger = recordingLogger();
    const steps = new StepBackend();
    const srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], logger, cache: config(own.port, { socket_timeout: '50' }) });
    try {
      assert.equal((await infer(srv, [4])).status, 200);
      own.pause();
      for (let i = 0; i < 3; i++) {
        const r = await infer(srv, [4]);
        assert.equal(r.status, 200, r.bytes.toString());
        assert.deepEqual(JSON.parse(r.bytes.toString()).outputs[0].data, [5]);
        // A lookup and an insert, each bounded by 50 ms; generous for a loaded machine.
        assert.ok(r.ms < 3000, `a request took ${r.ms} ms while Redis was stopped`);
      }
      assert.equal(steps.of('add1').length, 4);
      assert.ok(srv.server.responseCache!.counters.errors >= 3);
      assert.match(logger.lines.join('\n'), /response cache: redis at 127\.0\.0\.1:\d+ (lookup|insert) failed: .*requests are computed meanwhile/);
      own.resume();
    } finally {
      await own.stop();
      await srv.stop();
    }
  });

  it('computes every request once Redis is gone, without waiting', async () => {
    const own = await startRedis({ password: PASSWORD });
    const steps = new StepBackend();
    const srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], cache: config(own.port) });
    try {
      assert.equal((await infer(srv, [8])).status, 200);
      await own.stop();
      for (let i = 0; i < 3; i++) {
        const r = await infer(srv, [8]);
        assert.equal(r.status, 200, r.bytes.toString());
        assert.ok(r.ms < 3000, `a request took ${r.ms} ms with Redis gone`);
      }
      assert.equal(steps.of('add1').length, 4);
      assert.deepEqual(await cacheStats(srv), { hit: 0, miss: 4 });
    } finally {
      await srv.stop();
    }
  });

  it('does not start without a Redis that answers, or with a wrong password', async () => {
    const gone = await startRedis();
    const port = gone.port;
    await gone.stop();
    await assert.rejects(startServer({ modelRepositories: [repo], backends: [new StepBackend().backend], cache: config(port, { connect_timeout: '500' }) }), (err: Error) => {
      assert.match(err.message, new RegExp(`^Failed to initialize RedisCache: .*\\(redis at 127\\.0\\.0\\.1:${port}, db 3\\)`));
      return true;
    });
    await assert.rejects(
      startServer({ modelRepositories: [repo], backends: [new StepBackend().backend], cache: config(redis.port, { password: 'wrong' }) }),
      /^NereidError: Failed to initialize RedisCache: WRONGPASS|Failed to initialize RedisCache: WRONGPASS/,
    );
  });
});
