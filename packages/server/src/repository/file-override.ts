/**
 * File overrides of a load request (models-and-scheduling.md §1.10, protocol.md §3.13): the files
 * of a model directory sent with the request are written into a fresh directory that the server
 * creates and owns, and the model is loaded from there instead of the repository.
 *
 * Every path stays inside that directory: absolute paths, `..`, `.` and empty segments, NUL and
 * backslashes are refused, files are created exclusively (never through an existing entry) and
 * without following symbolic links, and each parent directory is checked to resolve inside the
 * directory after it was made.
 */
import { constants } from 'node:fs';
import { mkdir, mkdtemp, open, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { ModelLocation } from './repository-scanner.js';

/**
 * The segments of an override file path (`1/model.onnx` → ['1', 'model.onnx']), or a
 * FILE_OVERRIDE_INVALID error naming the path when it could leave the override directory.
 */
export function overridePathSegments(path: string): string[] {
  const refuse = (why: string) =>
    new NereidError('FILE_OVERRIDE_INVALID', `file override 'file:${path}' is refused: ${why}; give a relative path such as 'file:1/model.onnx'`);
  if (path.length === 0) throw refuse('the path is empty');
  if (path.includes('\0')) throw refuse('the path contains a NUL character');
  if (path.includes('\\')) throw refuse('the path contains a backslash');
  if (path.startsWith('/')) throw refuse('absolute paths are not allowed');
  const segments = path.split('/');
  for (const s of segments) {
    if (s === '..') throw refuse("'..' would leave the model directory");
    if (s === '.' || s === '') throw refuse("empty and '.' path segments are not allowed");
  }
  return segments;
}

/**
 * A model directory built from a load request's files, in a temporary directory of the server's
 * own. Reference-counted: the creating load holds one reference and each model version loaded
 * from it another; the directory is removed when the last one is released.
 */
export class OverrideDirectory {
  /** The temporary root; the model directory is `<root>/<model>`. */
  readonly root: string;
  readonly location: ModelLocation;
  #refs = 1;
  #removed: Promise<void> | undefined;

  private constructor(root: string, model: string) {
    this.root = root;
    this.location = { name: model, repository: root, directory: join(root, model) };
  }

  /**
   * Writes `files` (path relative to the model directory → contents) into a fresh directory.
   * Fails with FILE_OVERRIDE_INVALID (and leaves nothing behind) when a path could escape it or
   * two paths collide.
   */
  static async create(model: string, files: ReadonlyMap<string, Uint8Array>): Promise<OverrideDirectory> {
    const checked = [...files].map(([path, bytes]) => ({ path, segments: overridePathSegments(path), bytes }));
    const root = await realpath(await mkdtemp(join(tmpdir(), 'nereid-override-')));
    const dir = new OverrideDirectory(root, model);
    try {
      const modelDir = dir.location.directory;
      await mkdir(modelDir, { mode: 0o700 });
      for (const { path, segments, bytes } of checked) {
        const target = join(modelDir, ...segments);
        const parent = dirname(target);
        try {
          await mkdir(parent, { recursive: true, mode: 0o700 });
          const real = await realpath(parent);
          if (real !== modelDir && !real.startsWith(modelDir + sep)) {
            throw new NereidError('FILE_OVERRIDE_INVALID', `file override 'file:${path}' is refused: it resolves outside the model directory`);
          }
          const handle = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
          try {
            await handle.writeFile(bytes);
          } finally {
            await handle.close();
          }
        } catch (err) {
          if (err instanceof NereidError) throw err;
          const code = (err as NodeJS.ErrnoException).code;
          const why =
            code === 'EEXIST' || code === 'ENOTDIR' || code === 'EISDIR'
              ? 'it collides with another file of the override'
              : code === 'ELOOP'
                ? 'it would be written through a symbolic link'
                : (err as Error).message;
          throw new NereidError('FILE_OVERRIDE_INVALID', `file override 'file:${path}' is refused: ${why}`, { cause: err });
        }
      }
    } catch (err) {
      await rm(root, { recursive: true, force: true });
      throw err;
    }
    return dir;
  }

  /** Another holder (a version loaded from this directory). */
  retain(): void {
    this.#refs++;
  }

  /** Drops one reference; the last one removes the directory. Never rejects. */
  release(): Promise<void> {
    if (--this.#refs > 0) return Promise.resolve();
    this.#removed ??= rm(this.root, { recursive: true, force: true }).catch(() => undefined);
    return this.#removed;
  }
}
