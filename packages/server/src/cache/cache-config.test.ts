import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCacheConfig, redisSettings, DEFAULT_REDIS_TIMEOUT_MS } from './cache-config.js';

const message = (f: () => unknown): string => {
  try {
    f();
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail('expected an error');
};

describe('--cache-config', () => {
  it('gathers the settings of one cache, in any number of options', () => {
    assert.equal(parseCacheConfig([]), undefined);
    assert.deepEqual(parseCacheConfig(['local,size=1048576']), { name: 'local', settings: { size: '1048576' } });
    assert.deepEqual(parseCacheConfig(['redis,host=localhost', 'redis,port=6379', 'redis,password=a=b']), {
      name: 'redis',
      settings: { host: 'localhost', port: '6379', password: 'a=b' },
    });
  });

  it('takes --response-cache-byte-size as local,size=', () => {
    assert.deepEqual(parseCacheConfig([], 4096), { name: 'local', settings: { size: '4096' } });
    assert.deepEqual(parseCacheConfig(['local,size=10'], 4096), { name: 'local', settings: { size: '10' } });
  });

  it("refuses malformed values with Triton's words", () => {
    assert.equal(message(() => parseCacheConfig(['size=100'])), 'No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got size=100');
    assert.equal(message(() => parseCacheConfig(['local'])), 'No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got local');
    assert.equal(message(() => parseCacheConfig(['local,size'])), "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size");
    assert.equal(
      message(() => parseCacheConfig(['local,size=1000', 'redis,host=x'])),
      'found multiple cache configurations, but only a single cache is currently supported',
    );
    assert.equal(message(() => parseCacheConfig(['local,foo=1'])), "Failed to initialize LocalCache: config didn't contain a valid 'size' field.");
    assert.match(message(() => parseCacheConfig(['redis,host=x'])), /^Failed to initialize RedisCache, didn't specify address\. Must at a minimum specify 'host' and 'port'/);
  });

  it('refuses what Triton would take and then fail on, naming the setting', () => {
    for (const size of ['abc', '0', '-5', '10MB']) {
      assert.equal(message(() => parseCacheConfig([`local,size=${size}`])), `--cache-config local,size expects an integer >= 1, got '${size}'`);
    }
    assert.match(message(() => parseCacheConfig(['local,size=10', 'local,ttl=5'])), /local has no setting 'ttl'; the local cache takes only size=<bytes>/);
    assert.match(message(() => parseCacheConfig(['memcached,size=10'])), /names cache 'memcached', which Nereid does not have; the caches are: local, redis/);
    assert.match(message(() => parseCacheConfig(['redis,host=h', 'redis,port=1', 'redis,tls=1'])), /redis has no setting 'tls'; the settings are: host, port/);
    assert.match(message(() => parseCacheConfig(['redis,host=h', 'redis,port=x'])), /redis,port expects an integer >= 1, got 'x'/);
  });

  it("reads Triton's Redis settings, bounding every wait", () => {
    const s = redisSettings({ name: 'redis', settings: { host: 'h', port: '6380', db: '2', user: 'u', password: 'p', socket_timeout: '0', cacert: '/ca.pem' } });
    assert.equal(s.host, 'h');
    assert.equal(s.port, 6380);
    assert.equal(s.db, 2);
    assert.equal(s.user, 'u');
    assert.equal(s.password, 'p');
    assert.equal(s.socketTimeoutMs, DEFAULT_REDIS_TIMEOUT_MS);
    assert.deepEqual(s.tls, { cert: '', key: '', cacert: '/ca.pem', cacertDir: '', sni: '' });
    assert.equal(redisSettings({ name: 'redis', settings: { host: 'h', port: '1', socket_timeout: '25' } }).socketTimeoutMs, 25);
    assert.equal(redisSettings({ name: 'redis', settings: { host: 'h', port: '1' } }).tls, undefined);
  });
});
