/**
 * Stamps of directory trees, to tell whether a model changed on disk (models-and-scheduling.md
 * §1.9 "What poll detects", §1.10 versions per load).
 *
 * Triton compares the newest modification time in the tree; a stamp here covers every entry's
 * relative path, and every file's size and modification time, so that a removed file or a file
 * replaced by an older copy counts as a change too. Symbolic links are followed (repositories
 * often link model files); the walk stops at a fixed depth so that a link loop cannot hang it.
 */
import { createHash } from 'node:crypto';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

const MAX_DEPTH = 32;

/**
 * The stamp of the tree under `dir`. `skip(name)` leaves out top-level entries. Entries that
 * vanish during the walk (a copy in progress) are left out; a missing `dir` gives the stamp of
 * an empty tree.
 */
export async function directoryStamp(dir: string, skip?: (name: string, isDirectory: boolean) => boolean): Promise<string> {
  const hash = createHash('sha1');
  await walk(dir, '', 0, hash, skip);
  return hash.digest('hex');
}

async function walk(
  dir: string,
  prefix: string,
  depth: number,
  hash: ReturnType<typeof createHash>,
  skip: ((name: string, isDirectory: boolean) => boolean) | undefined,
): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return;
  }
  names.sort();
  for (const name of names) {
    const path = join(dir, name);
    let info;
    try {
      info = await stat(path);
    } catch {
      continue;
    }
    const isDirectory = info.isDirectory();
    if (depth === 0 && skip?.(name, isDirectory)) continue;
    const rel = prefix + name;
    if (isDirectory) {
      hash.update(`d ${rel}\n`);
      if (depth < MAX_DEPTH) await walk(path, `${rel}/`, depth + 1, hash, skip);
    } else {
      hash.update(`f ${rel} ${info.size} ${info.mtimeMs}\n`);
    }
  }
}
