/**
 * A local mirror of one S3 model repository (docs/model-repository-s3.md). The store is listed
 * (ListObjectsV2, every page); the objects of a model directory (key, size, ETag) form the
 * model's revision. A revision that is complete (see `#complete`) is downloaded into a fresh
 * directory, each object checked against its ETag (MD5 of a single-part upload) and, where the
 * model directory carries a `SHA256SUMS` manifest, against that; only then is the model's entry
 * of the mirror root, a symbolic link, switched to it with one rename. The scanner and the loaders
 * read the mirror root as a local repository.
 *
 * Concurrency: the caller runs `sync` calls one at a time per mirror (the repository mirrors
 * serialise them); every switch of a model's link runs inside the model's turn (the `turn`
 * callback), so that no load of that model reads a directory that changes under it.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, symlink, readlink } from 'node:fs/promises';
import { dirname, join, sep } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, ListObjectsV2Command, S3Client, type ListObjectsV2CommandOutput } from '@aws-sdk/client-s3';
import { NereidError } from '@nereid/protocol';
import type { Logger } from '../observability/logger.js';
import { modelKey, type S3Location } from './s3-location.js';

/** The checksum manifest a model directory may carry: `sha256sum` output, paths relative to the model directory. */
export const MANIFEST = 'SHA256SUMS';

/** Runs `job` in `model`'s turn (after the model's operations queued before it). */
export type Turn = <T>(model: string, job: () => Promise<T>) => Promise<T>;

interface StoreObject {
  readonly key: string;
  /** Path inside the model directory. */
  readonly path: string;
  readonly size: number;
  readonly etag: string;
  /** Milliseconds since the epoch, by the store's clock. */
  readonly modified: number;
}

interface Listing {
  readonly models: Map<string, StoreObject[]>;
  /** The store's clock when the listing ended (the Date header), ms. */
  readonly now: number;
}

export interface MirrorOptions {
  readonly root: string;
  /** Seconds every object of a model without a manifest must have existed unchanged before its revision is taken. */
  readonly settleSecs: number;
  readonly logger: Logger;
  readonly env?: NodeJS.ProcessEnv;
}

/** What a sync found for the models it was asked about: the reason each one is not up to date. */
export type SyncProblems = Map<string, string>;

export class S3Mirror {
  readonly location: S3Location;
  readonly root: string;
  readonly #client: S3Client;
  readonly #endpointText: string;
  readonly #options: MirrorOptions;
  /** Revision id and directory of each model's link target. */
  readonly #current = new Map<string, { id: string; dir: string }>();
  /** Directories of earlier revisions, kept while a copy loaded from them may still be draining. */
  readonly #previous = new Map<string, string>();
  /** Revisions that failed their checks, by model: not fetched again by a poll until the listing changes. */
  readonly #failed = new Map<string, { id: string; reason: string }>();
  /** When each model's current listing was first seen, by the store's clock (the settle rule). */
  readonly #firstSeen = new Map<string, { id: string; at: number }>();
  /** Models whose link is an empty placeholder (listed, never fetched). */
  readonly #placeholders = new Set<string>();
  /** Failures already logged (each distinct one once). */
  readonly #logged = new Set<string>();
  /** Store clock minus local clock, ms, from the last response's Date header. */
  #skew = 0;
  #counter = 0;

  constructor(location: S3Location, options: MirrorOptions) {
    this.location = location;
    this.root = options.root;
    this.#options = options;
    const env = options.env ?? process.env;
    // The SDK warns on every start under Node.js 20 that its releases after January 2027 will need
    // Node.js 22; the version Nereid installs is fixed by its lockfile, so the warning only adds noise.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    const endpoint = location.endpoint ?? (env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL || undefined);
    const region = env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1';
    this.#endpointText = endpoint ?? `AWS S3 (region ${region})`;
    this.#client = new S3Client({
      region,
      ...(endpoint !== undefined ? { endpoint, forcePathStyle: true } : {}),
      maxAttempts: 3,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: { connectionTimeout: 5000, requestTimeout: 120_000 },
    });
    this.#client.middlewareStack.add(
      (next) => async (args) => {
        const result = await next(args);
        const date = (result.response as { headers?: Record<string, string> }).headers?.date;
        const at = date === undefined ? NaN : Date.parse(date);
        if (Number.isFinite(at)) this.#skew = at - Date.now();
        return result;
      },
      { step: 'deserialize', name: 'nereidStoreClock' },
    );
  }

  /** Creates the mirror root and checks that the bucket can be listed; throws REPOSITORY_INVALID saying how to fix it. */
  async open(): Promise<void> {
    await mkdir(join(this.root, '.revisions'), { recursive: true });
    await mkdir(join(this.root, '.empty'), { recursive: true });
    try {
      await this.#client.send(new ListObjectsV2Command({ Bucket: this.location.bucket, Prefix: this.location.prefix, MaxKeys: 1 }));
    } catch (err) {
      throw this.#storeError(err);
    }
  }

  close(): void {
    this.#client.destroy();
  }

  /**
   * Brings the mirror up to date with the store for the models in `scope` ('all': every model):
   * complete new revisions are downloaded and switched in, models gone from the store are removed.
   * Models outside the scope that the mirror does not hold get an empty placeholder, so that the
   * repository index lists them. With `wait`, a revision still settling is waited for (bounded);
   * without, it is left for the next sync. Rejects (REPOSITORY_INVALID) when the store cannot be
   * listed; per-model failures are returned and logged once each.
   */
  async sync(scope: ReadonlySet<string> | 'all', turn: Turn, wait = false): Promise<SyncProblems> {
    const problems: SyncProblems = new Map();
    let listing = await this.#list();
    const inScope = (name: string) => scope === 'all' || scope.has(name);
    for (const name of [...this.#current.keys()]) {
      if (listing.models.has(name) || !inScope(name)) continue;
      this.#options.logger.info(`model '${name}' is no longer in ${this.location.uri}`);
      await turn(name, () => this.#unlink(name));
    }
    if (scope !== 'all') {
      for (const name of scope) if (!listing.models.has(name) && (await this.#linked(name))) await turn(name, () => this.#unlink(name));
    }
    for (const name of [...this.#placeholders]) if (!listing.models.has(name)) await turn(name, () => this.#unlink(name));
    for (const name of listing.models.keys()) {
      if (!inScope(name) && !this.#current.has(name) && !(await this.#linked(name))) await this.#placeholder(name);
    }
    const names = [...listing.models.keys()].filter(inScope);
    const deadline = Date.now() + Math.max(5, this.#options.settleSecs * 4) * 1000;
    for (const name of names) {
      for (;;) {
        const outcome = await this.#update(name, listing, turn, wait);
        if (outcome.pendingMs === undefined) {
          if (outcome.problem !== undefined) problems.set(name, outcome.problem);
          break;
        }
        if (!wait || Date.now() + outcome.pendingMs > deadline) {
          problems.set(name, outcome.problem ?? 'its upload has not settled yet');
          break;
        }
        await new Promise((r) => setTimeout(r, outcome.pendingMs));
        listing = await this.#list();
        if (!listing.models.has(name)) {
          problems.set(name, `no model directory '${name}' in ${this.location.uri}`);
          break;
        }
      }
    }
    return problems;
  }

  /** One model: its revision taken when complete. `pendingMs`: not yet complete, worth a new listing after that long. */
  async #update(name: string, listing: Listing, turn: Turn, force: boolean): Promise<{ problem?: string; pendingMs?: number }> {
    const objects = listing.models.get(name)!;
    const id = revisionId(objects);
    if (this.#current.get(name)?.id === id) return {};
    const failed = this.#failed.get(name);
    if (!force && failed?.id === id) return { problem: failed.reason };
    const manifest = objects.find((o) => o.path === MANIFEST);
    let files = objects;
    let sums: Map<string, string> | undefined;
    if (manifest === undefined) {
      // Without a manifest: every object must be at least the settle interval old, and listings
      // that far apart must have shown the same revision (a deletion changes no object's age).
      const settle = this.#options.settleSecs * 1000;
      const newest = Math.max(...objects.map((o) => o.modified));
      const age = listing.now - newest;
      const seen = this.#firstSeen.get(name);
      if (seen?.id !== id) this.#firstSeen.set(name, { id, at: listing.now });
      const stable = listing.now - (seen?.id === id ? seen.at : listing.now);
      if (age < settle || stable < settle) {
        const why = age < settle ? `its newest object is ${Math.max(0, Math.floor(age / 1000))} s old` : `its listing has been the same for ${Math.floor(stable / 1000)} s`;
        return { problem: `${why}, under --repository-settle-secs=${this.#options.settleSecs} (upload in progress?)`, pendingMs: settle - Math.min(age, stable) + 500 };
      }
    } else {
      let text: string;
      try {
        text = (await this.#getObject(manifest)).toString('utf8');
        sums = parseManifest(text);
      } catch (err) {
        return this.#revisionFailed(name, id, err instanceof NereidError ? err.message : String(err));
      }
      const byPath = new Map(objects.map((o) => [o.path, o]));
      const missing = [...sums.keys()].filter((p) => !byPath.has(p));
      if (missing.length > 0) {
        return this.#revisionFailed(name, id, `incomplete: ${missing.join(', ')} listed in its ${MANIFEST} ${missing.length === 1 ? 'is' : 'are'} not in the store (upload in progress?)`);
      }
      files = [...sums.keys()].map((p) => byPath.get(p)!).concat(manifest, objects.filter((o) => o.path.endsWith('/')));
    }
    const dir = join(this.root, '.revisions', `${name}.${++this.#counter}`);
    try {
      await mkdir(dir, { recursive: true });
      for (const object of files) await this.#download(object, dir, object === manifest ? undefined : sums?.get(object.path));
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      return this.#revisionFailed(name, id, err instanceof NereidError ? err.message : String(err));
    }
    await turn(name, async () => {
      const tmp = join(this.root, `.link-${name}.${this.#counter}`);
      await symlink(dir, tmp);
      await rename(tmp, join(this.root, name));
      this.#placeholders.delete(name);
      const before = this.#current.get(name);
      this.#current.set(name, { id, dir });
      const older = this.#previous.get(name);
      if (before !== undefined) this.#previous.set(name, before.dir);
      if (older !== undefined) await rm(older, { recursive: true, force: true });
    });
    this.#failed.delete(name);
    this.#firstSeen.delete(name);
    this.#logged.delete(`model:${name}`);
    this.#options.logger.info(`model '${name}': mirrored revision of ${this.location.uri}${name}/ (${files.length} objects)`);
    return {};
  }

  #revisionFailed(name: string, id: string, reason: string): { problem: string } {
    const problem = `revision in ${this.location.uri} not taken: ${reason}`;
    this.#failed.set(name, { id, reason: problem });
    this.#logOnce(`model:${name}`, `model '${name}': ${problem}; what serves keeps serving`);
    return { problem };
  }

  /** Logs `message` unless the same message was the last one logged under `key`. */
  #logOnce(key: string, message: string): void {
    const k = `${key}\n${message}`;
    if (this.#logged.has(k)) return;
    for (const old of this.#logged) if (old.startsWith(`${key}\n`)) this.#logged.delete(old);
    this.#logged.add(k);
    this.#options.logger.error(message);
  }

  /** Logs a failure of a whole sync (a poll) once per distinct failure; `undefined` records success. */
  reportSyncFailure(error: NereidError | undefined): void {
    if (error === undefined) {
      if ([...this.#logged].some((k) => k.startsWith('store\n'))) this.#options.logger.info(`model repository ${this.location.uri} answers again`);
      for (const old of this.#logged) if (old.startsWith('store\n')) this.#logged.delete(old);
      return;
    }
    this.#logOnce('store', `${error.message}; the server keeps serving the models it has`);
  }

  async #linked(name: string): Promise<boolean> {
    return readlink(join(this.root, name)).then(
      () => true,
      () => false,
    );
  }

  async #placeholder(name: string): Promise<void> {
    const tmp = join(this.root, `.link-${name}.${++this.#counter}`);
    await symlink(join(this.root, '.empty'), tmp);
    await rename(tmp, join(this.root, name));
    this.#placeholders.add(name);
  }

  async #unlink(name: string): Promise<void> {
    await rm(join(this.root, name), { force: true });
    this.#placeholders.delete(name);
    const current = this.#current.get(name);
    this.#current.delete(name);
    this.#failed.delete(name);
    this.#firstSeen.delete(name);
    for (const dir of [current?.dir, this.#previous.get(name)]) if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    this.#previous.delete(name);
  }

  /** Every object of the repository, by model; keys that could escape a model directory are logged once and left out. */
  async #list(): Promise<Listing> {
    const models = new Map<string, StoreObject[]>();
    let token: string | undefined;
    try {
      do {
        const page: ListObjectsV2CommandOutput = await this.#client.send(
          new ListObjectsV2Command({ Bucket: this.location.bucket, Prefix: this.location.prefix, ContinuationToken: token }),
        );
        for (const o of page.Contents ?? []) {
          if (o.Key === undefined) continue;
          let parsed;
          try {
            parsed = modelKey(o.Key.slice(this.location.prefix.length));
          } catch (err) {
            this.#logOnce(`key:${o.Key}`, `${this.location.uri}: ${(err as Error).message}; it is never written to the mirror`);
            continue;
          }
          if (parsed === undefined || parsed.model.startsWith('.')) continue;
          const list = models.get(parsed.model) ?? [];
          list.push({ key: o.Key, path: parsed.path, size: o.Size ?? 0, etag: (o.ETag ?? '').replace(/"/g, ''), modified: o.LastModified?.getTime() ?? 0 });
          models.set(parsed.model, list);
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token !== undefined);
    } catch (err) {
      throw this.#storeError(err);
    }
    return { models, now: Date.now() + this.#skew };
  }

  async #getObject(object: StoreObject): Promise<Buffer> {
    const chunks: Buffer[] = [];
    const body = await this.#body(object);
    for await (const chunk of body) chunks.push(chunk as Buffer);
    const data = Buffer.concat(chunks);
    checkEtag(object, createHash('md5').update(data).digest('hex'));
    return data;
  }

  async #body(object: StoreObject): Promise<Readable> {
    try {
      const res = await this.#client.send(new GetObjectCommand({ Bucket: this.location.bucket, Key: object.key, IfMatch: `"${object.etag}"` }));
      return res.Body as Readable;
    } catch (err) {
      const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
      if (e.$metadata?.httpStatusCode === 412 || e.name === 'PreconditionFailed' || e.name === 'NoSuchKey') {
        throw new NereidError('REPOSITORY_INVALID', `'${object.key}' changed or vanished while it was being fetched (upload in progress?)`);
      }
      throw this.#storeError(err);
    }
  }

  /** Writes one object under `dir`, checked against its ETag and its manifest checksum; a directory marker makes the directory. */
  async #download(object: StoreObject, dir: string, sha256: string | undefined): Promise<void> {
    const file = join(dir, ...object.path.split('/'));
    if (!file.startsWith(dir + sep)) throw new NereidError('REPOSITORY_INVALID', `object key '${object.key}' refused: it leaves the model directory`);
    if (object.path.endsWith('/')) {
      await mkdir(file, { recursive: true });
      return;
    }
    await mkdir(dirname(file), { recursive: true });
    const md5 = createHash('md5');
    const sha = createHash('sha256');
    let size = 0;
    const body = await this.#body(object);
    await pipeline(
      body,
      async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          md5.update(chunk);
          sha.update(chunk);
          size += chunk.length;
          yield chunk;
        }
      },
      createWriteStream(file, { flags: 'wx' }),
    );
    if (size !== object.size) throw new NereidError('REPOSITORY_INVALID', `'${object.key}' has ${size} bytes, the listing said ${object.size} (changed while fetched?)`);
    checkEtag(object, md5.digest('hex'));
    if (sha256 !== undefined && sha.digest('hex') !== sha256) {
      throw new NereidError('REPOSITORY_INVALID', `'${object.key}' does not match its ${MANIFEST} checksum (upload in progress?)`);
    }
  }

  /** A store failure as a REPOSITORY_INVALID error naming the repository and the fix. */
  #storeError(err: unknown): NereidError {
    if (err instanceof NereidError) return err;
    const e = err as { name?: string; code?: string; message?: string; $metadata?: { httpStatusCode?: number } };
    const at = `model repository '${this.location.uri}' (${this.#endpointText})`;
    const name = e.name ?? '';
    const code = e.code ?? (err as { cause?: { code?: string } }).cause?.code ?? '';
    let text: string;
    if (name === 'NoSuchBucket') text = `bucket '${this.location.bucket}' does not exist; create it or correct the bucket in --model-repository`;
    else if (name === 'SignatureDoesNotMatch' || name === 'InvalidAccessKeyId' || name === 'InvalidToken' || name === 'ExpiredToken') {
      text = `the store refused the credentials (${name}); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN`;
    } else if (name === 'AccessDenied' || e.$metadata?.httpStatusCode === 403) {
      text = `access denied (${name || 'HTTP 403'}); the credentials need s3:ListBucket on the bucket and s3:GetObject on its objects`;
    } else if (name === 'CredentialsProviderError') text = `no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`;
    else if (/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNRESET|EHOSTUNREACH/.test(`${code} ${e.message ?? ''}`) || name === 'TimeoutError') {
      text = `cannot reach the S3 endpoint (${(code || name || e.message) ?? 'unreachable'}); check the host and port of the URI, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL`;
    } else text = `the store answered ${name || 'an error'}: ${e.message ?? String(err)}`;
    return new NereidError('REPOSITORY_INVALID', `${at}: ${text}`);
  }
}

/** The identity of a revision: every object's path, size and ETag. */
function revisionId(objects: readonly StoreObject[]): string {
  const lines = objects.map((o) => `${o.path}\0${o.size}\0${o.etag}`).sort();
  return createHash('sha1').update(lines.join('\n')).digest('hex');
}

/** A single-part upload's ETag is the MD5 of its content; a multipart one (`…-N`) is not checked. */
function checkEtag(object: StoreObject, md5: string): void {
  if (/^[0-9a-f]{32}$/i.test(object.etag) && object.etag.toLowerCase() !== md5) {
    throw new NereidError('REPOSITORY_INVALID', `'${object.key}' does not match its ETag (changed while fetched?)`);
  }
}

/** `sha256sum` output: `<64 hex> <space or *><path>` per line; `./` prefixes dropped. */
export function parseManifest(text: string): Map<string, string> {
  const sums = new Map<string, string>();
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    if (line.trim() === '' || line.startsWith('#')) continue;
    const m = /^([0-9a-fA-F]{64}) [ *](.+)$/.exec(line);
    if (m === null) throw new NereidError('REPOSITORY_INVALID', `${MANIFEST}: '${line}' is not a '<sha256>  <path>' line`);
    const path = m[2]!.replace(/^(\.\/)+/, '');
    const key = modelKey(`m/${path}`);
    if (key === undefined || path === MANIFEST) continue;
    sums.set(key.path, m[1]!.toLowerCase());
  }
  return sums;
}
