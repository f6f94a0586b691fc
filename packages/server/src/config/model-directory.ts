/**
 * Reads what §1.4 derivation needs from a model directory (models-and-scheduling.md §1.4): the
 * entries of its first sub-directory in byte-wise sorted order. The only file-system access of
 * derivation; deriveModelConfig itself is pure.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';

/** Byte-wise (UTF-8) order, as the reference's std::set<std::string>. */
export function compareBytewise(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/**
 * Entries (name → 'file' | 'directory') of the byte-wise first sub-directory of `modelDir`;
 * empty when it has none. Symbolic links are followed; dangling ones are skipped. File-system
 * failures throw `NereidError('MODEL_LOAD_FAILED')` naming the path.
 */
export async function readFirstSubdirectoryEntries(modelDir: string): Promise<Map<string, 'file' | 'directory'>> {
  const subdirs: string[] = [];
  for (const [name, kind] of await listEntries(modelDir)) if (kind === 'directory') subdirs.push(name);
  subdirs.sort(compareBytewise);
  const first = subdirs[0];
  return first === undefined ? new Map() : listEntries(join(modelDir, first));
}

async function listEntries(dir: string): Promise<Map<string, 'file' | 'directory'>> {
  try {
    const entries = new Map<string, 'file' | 'directory'>();
    for (const name of await readdir(dir)) {
      const info = await stat(join(dir, name)).catch(() => undefined);
      if (info !== undefined) entries.set(name, info.isDirectory() ? 'directory' : 'file');
    }
    return entries;
  } catch (err) {
    throw new NereidError('MODEL_LOAD_FAILED', `unable to list directory '${dir}': ${(err as Error).message}`, { cause: err });
  }
}
