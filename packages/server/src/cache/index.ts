/**
 * The response cache (models-and-scheduling.md §8.2): `--cache-config` parsing, the request key,
 * the `local` and `redis` implementations. The facade (core/server.ts) looks requests up and
 * inserts responses; nothing else reaches a cache.
 */
import type { Logger } from '../observability/logger.js';
import { localSettings, type CacheConfig } from './cache-config.js';
import { LocalCache } from './local-cache.js';
import type { ResponseCache } from './response-cache.js';

export {
  parseCacheConfig,
  splitCacheSetting,
  localSettings,
  redisSettings,
  CACHE_NAMES,
  REDIS_KEYS,
  type CacheConfig,
  type CacheName,
  type LocalCacheSettings,
  type RedisCacheSettings,
} from './cache-config.js';
export { LocalCache } from './local-cache.js';
export { requestKey } from './request-key.js';
export { encodeEntry, decodeEntry, type CacheCounters, type ResponseCache } from './response-cache.js';

/**
 * Creates the configured cache. A Redis cache connects first and rejects (NereidError
 * CACHE_UNAVAILABLE) when the server does not answer, as Triton does not start without it.
 */
export async function createCache(config: CacheConfig, logger: Logger): Promise<ResponseCache> {
  if (config.name === 'local') {
    const cache = new LocalCache(localSettings(config).sizeBytes);
    logger.info(`response cache: local, ${cache.capacityBytes} bytes`);
    return cache;
  }
  const { connectRedisCache } = await import('./redis-cache.js');
  return connectRedisCache(config, logger);
}
