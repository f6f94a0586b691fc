/**
 * The `--model-repository` list with its S3 repositories mirrored locally
 * (docs/model-repository-s3.md): each `s3://` repository gets a mirror root under one cache
 * directory of the server's own (`--model-repository-cache-dir`, default the OS temp directory),
 * removed at shutdown and at process exit; local repositories are used as they are.
 *
 * Concurrency: syncs run one at a time (a later one waits for the one under way).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { toNereidError } from '@nereid/protocol';
import type { Logger } from '../observability/logger.js';
import { isS3Uri, parseS3Uri } from './s3-location.js';
import { S3Mirror, type SyncProblems, type Turn } from './s3-mirror.js';

export interface RepositoryMirrorOptions {
  /** Where the cache directory is made; default the OS temp directory. */
  readonly cacheDir?: string;
  /** `--repository-settle-secs`; default 2. */
  readonly settleSecs?: number;
  readonly logger: Logger;
}

export const DEFAULT_SETTLE_SECS = 2;

/** Whether any repository of the list is remote (needs mirrors). */
export function hasRemoteRepositories(repositories: readonly string[]): boolean {
  return repositories.some(isS3Uri);
}

export class RepositoryMirrors {
  readonly #repositories: readonly string[];
  readonly #options: RepositoryMirrorOptions;
  #mirrors: S3Mirror[] = [];
  #cache: string | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  readonly #atExit = () => {
    if (this.#cache !== undefined) rmSync(this.#cache, { recursive: true, force: true });
  };

  constructor(repositories: readonly string[], options: RepositoryMirrorOptions) {
    for (const r of repositories) if (isS3Uri(r)) parseS3Uri(r);
    this.#repositories = repositories;
    this.#options = options;
  }

  /** The S3 mirror whose root is `root`, if any (for messages). */
  uriOf(root: string): string | undefined {
    return this.#mirrors.find((m) => resolve(m.root) === resolve(root))?.location.uri;
  }

  /**
   * Makes the cache directory and checks every S3 repository; returns the local root of each
   * repository in order. Throws REPOSITORY_INVALID naming the repository and the fix.
   */
  async open(): Promise<string[]> {
    const base = this.#options.cacheDir ?? tmpdir();
    await mkdir(base, { recursive: true });
    await removeStaleMirrors(base, this.#options.logger);
    this.#cache = mkdtempSync(join(base, CACHE_PREFIX));
    await writeFile(join(this.#cache, OWNER_FILE), processIdentity(process.pid) ?? String(process.pid));
    process.once('exit', this.#atExit);
    const roots: string[] = [];
    try {
      for (const [i, r] of this.#repositories.entries()) {
        if (!isS3Uri(r)) {
          roots.push(r);
          continue;
        }
        const mirror = new S3Mirror(parseS3Uri(r), { root: join(this.#cache, String(i)), settleSecs: this.#options.settleSecs ?? DEFAULT_SETTLE_SECS, logger: this.#options.logger });
        this.#mirrors.push(mirror);
        await mirror.open();
        roots.push(mirror.root);
      }
    } catch (err) {
      await this.close();
      throw err;
    }
    return roots;
  }

  /**
   * Syncs every mirror for the models of `scope` (see `S3Mirror.sync`). With `strict` a store
   * that cannot be listed rejects (start-up, a load by name); otherwise it is logged once per
   * distinct failure and the mirror stays as it was. Returns each model's reason for not being up to date.
   */
  sync(scope: ReadonlySet<string> | 'all', turn: Turn, options: { wait?: boolean; strict?: boolean } = {}): Promise<SyncProblems> {
    const run = this.#queue.then(async () => {
      const problems: SyncProblems = new Map();
      for (const mirror of this.#mirrors) {
        try {
          const found = await mirror.sync(scope, turn, options.wait ?? false);
          mirror.reportSyncFailure(undefined);
          for (const [name, why] of found) problems.set(name, why);
        } catch (err) {
          const error = toNereidError(err, 'REPOSITORY_INVALID');
          if (options.strict) throw error;
          mirror.reportSyncFailure(error);
        }
      }
      return problems;
    });
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /** Removes the cache directory. */
  async close(): Promise<void> {
    await this.#queue;
    for (const m of this.#mirrors) m.close();
    process.removeListener('exit', this.#atExit);
    if (this.#cache !== undefined) await rm(this.#cache, { recursive: true, force: true });
    this.#cache = undefined;
  }
}

const CACHE_PREFIX = 'nereid-repositories-';
/** The file of a cache directory naming the process that owns it. */
const OWNER_FILE = '.owner';

/**
 * `<pid> <start time>` of a running process (Linux: field 22 of /proc/<pid>/stat), so that a pid
 * reused after a restart (a container's pid 1) is not taken for the process that made a directory;
 * undefined when the process does not exist or /proc cannot be read.
 */
function processIdentity(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return `${pid} ${fields[19]}`;
  } catch {
    return undefined;
  }
}

function isAlive(owner: string): boolean {
  const pid = Number(owner.split(' ')[0]);
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  if (owner.includes(' ')) return processIdentity(pid) === owner;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the cache directories in `base` left by servers that ended without cleaning up (killed,
 * or a container restarted with the same volume), whose owning process no longer runs.
 */
async function removeStaleMirrors(base: string, logger: Logger): Promise<void> {
  const names = await readdir(base).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(CACHE_PREFIX)) continue;
    const dir = join(base, name);
    const owner = await readFile(join(dir, OWNER_FILE), 'utf8').catch(() => undefined);
    if (owner === undefined || isAlive(owner.trim())) continue;
    logger.info(`removing '${dir}': the mirror of a server that no longer runs`);
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
