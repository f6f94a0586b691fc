/**
 * Reads the layout of local model repositories (models-and-scheduling.md §1.1, §1.2): which
 * directories are models, which subdirectories are versions.
 */
import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { Logger } from '../observability/logger.js';

export interface ModelLocation {
  name: string;
  /** The repository root the model was found in. */
  repository: string;
  /** `<repository>/<name>` */
  directory: string;
}

export interface RepositoryScan {
  /** Models found in exactly one repository. */
  models: Map<string, ModelLocation>;
  /** Model names found in two or more repositories (§1.1): never loaded. */
  duplicates: Map<string, string[]>;
}

/** Directories of a model directory that are never versions (§1.2). */
const NON_VERSION_DIRS = new Set(['warmup', 'initial_state', 'configs']);

/** Checks that every repository root exists and is a directory. */
export async function checkRepositories(roots: readonly string[]): Promise<void> {
  if (roots.length === 0) {
    throw new NereidError(
      'REPOSITORY_INVALID',
      'no model repository given: pass --model-repository=<directory> (repeatable)',
    );
  }
  for (const root of roots) {
    let info;
    try {
      info = await stat(root);
    } catch {
      throw new NereidError(
        'REPOSITORY_INVALID',
        `model repository '${root}' does not exist: pass an existing directory to --model-repository`,
      );
    }
    if (!info.isDirectory()) {
      throw new NereidError('REPOSITORY_INVALID', `model repository '${root}' is not a directory`);
    }
  }
}

/** Lists the models of every root. Regular files at a root are ignored (§1.1). */
export async function scanRepositories(roots: readonly string[]): Promise<RepositoryScan> {
  const found = new Map<string, ModelLocation[]>();
  for (const root of roots) {
    const repository = resolve(root);
    const entries = await readdir(repository, { withFileTypes: true });
    for (const entry of entries) {
      if (entry.name.startsWith('.')) continue;
      let isDir = entry.isDirectory();
      if (entry.isSymbolicLink()) isDir = (await stat(join(repository, entry.name)).catch(() => undefined))?.isDirectory() ?? false;
      if (!isDir) continue;
      const list = found.get(entry.name) ?? [];
      list.push({ name: entry.name, repository, directory: join(repository, entry.name) });
      found.set(entry.name, list);
    }
  }
  const models = new Map<string, ModelLocation>();
  const duplicates = new Map<string, string[]>();
  for (const [name, list] of [...found].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (list.length === 1) models.set(name, list[0]!);
    else duplicates.set(name, list.map((l) => l.repository));
  }
  return { models, duplicates };
}

/**
 * The numeric version directories of a model, ascending. Accepts `^[1-9][0-9]*$` and `0`
 * (§1.2); other subdirectories (except warmup/, initial_state/, configs/) are ignored with a
 * warning.
 */
export async function listVersions(modelDirectory: string, logger?: Logger): Promise<number[]> {
  const entries = await readdir(modelDirectory, { withFileTypes: true });
  const versions: number[] = [];
  for (const entry of entries) {
    let isDir = entry.isDirectory();
    if (entry.isSymbolicLink()) isDir = (await stat(join(modelDirectory, entry.name)).catch(() => undefined))?.isDirectory() ?? false;
    if (!isDir || NON_VERSION_DIRS.has(entry.name) || entry.name.startsWith('.')) continue;
    if (/^(0|[1-9][0-9]*)$/.test(entry.name) && Number.isSafeInteger(Number(entry.name))) {
      versions.push(Number(entry.name));
    } else {
      logger?.warning(`ignoring '${join(modelDirectory, entry.name)}': a version directory name must be a positive integer without leading zeros`);
    }
  }
  return versions.sort((a, b) => a - b);
}
