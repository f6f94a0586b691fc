/**
 * The `redis` cache (`--cache-config redis,host=…,port=…`): entries live in a Redis server,
 * shared by every Nereid (or any process) that uses the same server and db. Each entry is one
 * string value (response-cache.ts `encodeEntry`) under `nereid:<key>`, written with SET NX (an
 * existing entry is kept, as Triton's insert skips a present key) and no expiry: size and
 * eviction are the Redis server's (`maxmemory`, `maxmemory-policy allkeys-lru`).
 *
 * A Redis that is down or slow never fails or holds a request: every command is bounded by
 * `socket_timeout` (default 100 ms; Triton's 0, wait forever, is replaced by that bound),
 * commands are not queued while the connection is down, and a failed lookup is a miss, a failed
 * insert is skipped, each counted and logged (at most one line per 10 s, with how many failed
 * meanwhile). The client reconnects in the background. At start the server must answer a PING
 * within `connect_timeout`, or the server does not start (as Triton).
 *
 * Client: ioredis (docs/architecture.md).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Redis, type RedisOptions } from 'ioredis';
import { NereidError } from '@nereid/protocol';
import type { BackendResponse } from '../backends/spi.js';
import type { Logger } from '../observability/logger.js';
import { redisSettings, type CacheConfig, type RedisCacheSettings } from './cache-config.js';
import { decodeEntry, encodeEntry, newCounters, type CacheCounters, type ResponseCache } from './response-cache.js';

const KEY_PREFIX = 'nereid:';
const LOG_INTERVAL_MS = 10_000;

function tlsOptions(tls: NonNullable<RedisCacheSettings['tls']>): NonNullable<RedisOptions['tls']> {
  const ca: Buffer[] = [];
  if (tls.cacert !== '') ca.push(readFileSync(tls.cacert));
  if (tls.cacertDir !== '') for (const f of readdirSync(tls.cacertDir)) if (/\.(pem|crt)$/.test(f)) ca.push(readFileSync(join(tls.cacertDir, f)));
  return {
    ...(tls.cert !== '' ? { cert: readFileSync(tls.cert) } : {}),
    ...(tls.key !== '' ? { key: readFileSync(tls.key) } : {}),
    ...(ca.length > 0 ? { ca } : {}),
    ...(tls.sni !== '' ? { servername: tls.sni } : {}),
  };
}

export class RedisCache implements ResponseCache {
  readonly name = 'redis' as const;
  readonly capacityBytes = 0;
  readonly counters: CacheCounters = newCounters();
  readonly settings: RedisCacheSettings;
  readonly #client: Redis;
  readonly #logger: Logger;
  #lastLog = 0;
  #unlogged = 0;
  /** While connecting at start: the client's last error (a refused AUTH closes the connection with a vaguer one). */
  #connectError: Error | undefined;
  #connecting = true;

  constructor(settings: RedisCacheSettings, logger: Logger) {
    this.settings = settings;
    this.#logger = logger;
    this.#client = new Redis({
      host: settings.host,
      port: settings.port,
      ...(settings.user !== '' ? { username: settings.user } : {}),
      ...(settings.password !== '' ? { password: settings.password } : {}),
      db: settings.db,
      connectTimeout: settings.connectTimeoutMs,
      commandTimeout: settings.socketTimeoutMs,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      lazyConnect: true,
      // Reconnect in the background, every second at most.
      retryStrategy: (times) => Math.min(times * 100, 1000),
      ...(settings.tls !== undefined ? { tls: tlsOptions(settings.tls) } : {}),
    });
    this.#client.on('error', (err: Error) => {
      if (this.#connecting) this.#connectError = err;
      else this.#failed('connection', err);
    });
  }

  /** Connects and checks the server answers a PING; rejects with CACHE_UNAVAILABLE otherwise. */
  async connect(): Promise<void> {
    const s = this.settings;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${s.connectTimeoutMs} ms`)), s.connectTimeoutMs);
    });
    try {
      await Promise.race([this.#client.connect().then(() => this.#client.ping()), timeout]);
    } catch (err) {
      this.#client.disconnect();
      const cause = this.#connectError ?? (err as Error);
      throw new NereidError(
        'CACHE_UNAVAILABLE',
        `Failed to initialize RedisCache: ${cause.message} (redis at ${s.host}:${s.port}, db ${s.db}); ` +
          'start Redis there or fix --cache-config redis,host=…/port=…',
      );
    } finally {
      clearTimeout(timer);
      this.#connecting = false;
    }
  }

  #failed(what: string, err: unknown): void {
    this.counters.errors++;
    const now = Date.now();
    if (now - this.#lastLog < LOG_INTERVAL_MS) {
      this.#unlogged++;
      return;
    }
    const more = this.#unlogged > 0 ? ` (${this.#unlogged} more cache errors since the last report)` : '';
    this.#lastLog = now;
    this.#unlogged = 0;
    const s = this.settings;
    this.#logger.error(
      `response cache: redis at ${s.host}:${s.port} ${what} failed: ${(err as Error)?.message ?? String(err)}; requests are computed meanwhile${more}`,
    );
  }

  async lookup(key: string): Promise<BackendResponse | undefined> {
    const start = process.hrtime.bigint();
    const c = this.counters;
    c.lookups++;
    let response: BackendResponse | undefined;
    try {
      const value = await this.#client.getBuffer(KEY_PREFIX + key);
      if (value !== null) response = decodeEntry(value);
    } catch (err) {
      this.#failed('lookup', err);
    }
    if (response === undefined) c.misses++;
    else c.hits++;
    c.lookupNs += Number(process.hrtime.bigint() - start);
    return response;
  }

  async insert(key: string, response: BackendResponse): Promise<void> {
    const start = process.hrtime.bigint();
    try {
      const reply = await this.#client.set(KEY_PREFIX + key, encodeEntry(response), 'NX');
      if (reply === 'OK') this.counters.inserts++;
    } catch (err) {
      this.#failed('insert', err);
    }
    this.counters.insertNs += Number(process.hrtime.bigint() - start);
  }

  async close(): Promise<void> {
    try {
      await this.#client.quit();
    } catch {
      this.#client.disconnect();
    }
  }
}

export async function connectRedisCache(config: CacheConfig, logger: Logger): Promise<RedisCache> {
  const settings = redisSettings(config);
  const cache = new RedisCache(settings, logger);
  await cache.connect();
  logger.info(`response cache: redis at ${settings.host}:${settings.port}, db ${settings.db}`);
  return cache;
}
