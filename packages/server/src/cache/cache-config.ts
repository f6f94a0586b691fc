/**
 * `--cache-config` (models-and-scheduling.md §8.2): Triton's `<cache name>,<setting>=<value>`
 * settings, repeatable, gathered into one cache's settings. Only one cache may be configured
 * (`local` or `redis`), as in Triton 2.51. The errors use Triton's wording where it has one.
 */
import { NereidError } from '@nereid/protocol';

/** The cache implementations Nereid has. */
export const CACHE_NAMES = ['local', 'redis'] as const;
export type CacheName = (typeof CACHE_NAMES)[number];

/** One configured cache: its name and its settings as given (values are strings, as Triton's JSON). */
export interface CacheConfig {
  readonly name: CacheName;
  readonly settings: Readonly<Record<string, string>>;
}

/** The `local` cache's settings. */
export interface LocalCacheSettings {
  /** Capacity in bytes of everything stored (outputs and their descriptions). */
  readonly sizeBytes: number;
}

/** The `redis` cache's settings (the keys of Triton's Redis cache). */
export interface RedisCacheSettings {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly password: string;
  readonly db: number;
  /** Milliseconds to wait for a connection; Triton's 0 (wait forever) becomes Nereid's bound. */
  readonly connectTimeoutMs: number;
  /** Milliseconds to wait for an answer to one command before it counts as a miss. */
  readonly socketTimeoutMs: number;
  readonly poolSize: number;
  readonly waitTimeoutMs: number;
  readonly tls: { readonly cert: string; readonly key: string; readonly cacert: string; readonly cacertDir: string; readonly sni: string } | undefined;
}

/** Redis settings Triton's cache takes; any other key is refused. */
export const REDIS_KEYS = [
  'host',
  'port',
  'user',
  'password',
  'db',
  'connect_timeout',
  'socket_timeout',
  'pool_size',
  'wait_timeout',
  'cert',
  'key',
  'cacert',
  'cacert_dir',
  'sni',
] as const;

/**
 * The bound on a Redis command when `socket_timeout` is absent or 0 (Triton: wait forever):
 * a cache that does not answer must not hold a request, so Nereid always bounds the wait.
 */
export const DEFAULT_REDIS_TIMEOUT_MS = 100;
/** The bound on connecting when `connect_timeout` is absent or 0. */
export const DEFAULT_REDIS_CONNECT_TIMEOUT_MS = 5000;

const bad = (message: string): NereidError => new NereidError('REQUEST_PARAMETER', message);

/** Splits one `--cache-config` value into (cache, setting, value). */
export function splitCacheSetting(text: string): { cache: string; setting: string; value: string } {
  const comma = text.indexOf(',');
  if (comma <= 0) throw bad(`No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got ${text}`);
  const eq = text.indexOf('=', comma + 1);
  if (eq < 0) throw bad(`--cache-config option format is '<cache name>,<setting>=<value>'. Got ${text}`);
  const setting = text.slice(comma + 1, eq);
  const value = text.slice(eq + 1);
  if (setting === '' || value === '') throw bad(`--cache-config option format is '<cache name>,<setting>=<value>'. Got ${text}`);
  return { cache: text.slice(0, comma), setting, value };
}

/**
 * The cache the given `--cache-config` values (and `--response-cache-byte-size`, the older
 * spelling of `local,size=`) configure, or undefined for none. Checks the cache name, that
 * only one cache is named, and each implementation's settings (`localSettings`,
 * `redisSettings`), so a bad setting stops the server at start.
 */
export function parseCacheConfig(values: readonly string[], responseCacheByteSize?: number): CacheConfig | undefined {
  const caches = new Map<string, Record<string, string>>();
  if (responseCacheByteSize !== undefined && responseCacheByteSize > 0) caches.set('local', { size: String(responseCacheByteSize) });
  for (const text of values) {
    const { cache, setting, value } = splitCacheSetting(text);
    const settings = caches.get(cache) ?? {};
    settings[setting] = value;
    caches.set(cache, settings);
  }
  if (caches.size === 0) return undefined;
  if (caches.size > 1) throw bad('found multiple cache configurations, but only a single cache is currently supported');
  const [name, settings] = [...caches][0]!;
  if (!(CACHE_NAMES as readonly string[]).includes(name)) {
    throw bad(`--cache-config names cache '${name}', which Nereid does not have; the caches are: ${CACHE_NAMES.join(', ')}`);
  }
  const config: CacheConfig = { name: name as CacheName, settings };
  if (config.name === 'local') localSettings(config);
  else redisSettings(config);
  return config;
}

function integer(cache: string, key: string, text: string, min: number): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(n) || n < min) {
    throw bad(`--cache-config ${cache},${key} expects an integer >= ${min}, got '${text}'`);
  }
  return n;
}

export function localSettings(config: CacheConfig): LocalCacheSettings {
  const size = config.settings.size;
  if (size === undefined) throw bad("Failed to initialize LocalCache: config didn't contain a valid 'size' field.");
  for (const key of Object.keys(config.settings)) {
    if (key !== 'size') throw bad(`--cache-config local has no setting '${key}'; the local cache takes only size=<bytes>`);
  }
  return { sizeBytes: integer('local', 'size', size, 1) };
}

export function redisSettings(config: CacheConfig): RedisCacheSettings {
  const s = config.settings;
  if (s.host === undefined || s.port === undefined) {
    throw bad(
      "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port' in the configuration - " +
        'e.g. tritonserver --cache-config redis,host=redis --cache-config redis,port=6379 --model-repository=/models ...',
    );
  }
  for (const key of Object.keys(s)) {
    if (!(REDIS_KEYS as readonly string[]).includes(key)) {
      throw bad(`--cache-config redis has no setting '${key}'; the settings are: ${REDIS_KEYS.join(', ')}`);
    }
  }
  const ms = (key: string, fallback: number): number => {
    const v = s[key];
    if (v === undefined) return fallback;
    const n = integer('redis', key, v, 0);
    return n === 0 ? fallback : n;
  };
  const tlsGiven = ['cert', 'key', 'cacert', 'cacert_dir', 'sni'].some((k) => s[k] !== undefined && s[k] !== '');
  return {
    host: s.host,
    port: integer('redis', 'port', s.port, 1),
    user: s.user ?? '',
    password: s.password ?? '',
    db: s.db === undefined ? 0 : integer('redis', 'db', s.db, 0),
    connectTimeoutMs: ms('connect_timeout', DEFAULT_REDIS_CONNECT_TIMEOUT_MS),
    socketTimeoutMs: ms('socket_timeout', DEFAULT_REDIS_TIMEOUT_MS),
    poolSize: s.pool_size === undefined ? 1 : integer('redis', 'pool_size', s.pool_size, 1),
    waitTimeoutMs: ms('wait_timeout', 100),
    tls: tlsGiven
      ? { cert: s.cert ?? '', key: s.key ?? '', cacert: s.cacert ?? '', cacertDir: s.cacert_dir ?? '', sni: s.sni ?? '' }
      : undefined,
  };
}
