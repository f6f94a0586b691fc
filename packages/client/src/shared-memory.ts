/**
 * Client-side system shared memory (protocol.md §3.17): a POSIX shared-memory object in /dev/shm
 * that this process creates, fills with input tensors and reads output tensors from, and that the
 * server maps once the region is registered with `registerSystemSharedMemory`.
 *
 * Access is by positioned reads and writes on the object's descriptor. A region holds its
 * descriptor until `close` (or `destroy`, which also removes the object); the server keeps its own
 * descriptor, so unregister the region on the server before or after destroying it here.
 */
import { closeSync, constants, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { NereidError, encodeBytesElements, typedArrayOf, type DataType, type TypedArray } from '@nereid/protocol';

const SHM_DIRECTORY = '/dev/shm';

/** A tensor's place in a registered region: what `ClientInput.sharedMemory` and `ClientRequestedOutput.sharedMemory` take. */
export interface SharedMemoryTensor {
  /** The name the region was registered under. */
  region: string;
  byteSize: number;
  /** Offset inside the region; default 0. */
  offset?: number;
}

function keyPath(key: string): string {
  const name = key.startsWith('/') ? key.slice(1) : key;
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new NereidError('SHM_REGISTER_INVALID', `'${key}' is not a POSIX shared memory object name: use '/name' with no further '/'`);
  }
  return `${SHM_DIRECTORY}/${name}`;
}

export interface CreateSharedMemoryOptions {
  /** Fail if the object exists already (default false: reuse it and resize it to `byteSize`). */
  exclusive?: boolean;
}

export class SystemSharedMemoryRegion {
  /** The shm_open name, e.g. `/input_simple`: pass it as `key` to `registerSystemSharedMemory`. */
  readonly key: string;
  readonly byteSize: number;
  readonly #path: string;
  #fd: number | undefined;

  private constructor(key: string, path: string, byteSize: number, fd: number) {
    this.key = key;
    this.#path = path;
    this.byteSize = byteSize;
    this.#fd = fd;
  }

  /** Creates (or opens and resizes) the object `key` with `byteSize` bytes. */
  static create(key: string, byteSize: number, options: CreateSharedMemoryOptions = {}): SystemSharedMemoryRegion {
    if (!Number.isSafeInteger(byteSize) || byteSize < 0) {
      throw new NereidError('SHM_REGISTER_INVALID', `shared memory object '${key}': byteSize must be a non-negative integer, got ${byteSize}`);
    }
    const path = keyPath(key);
    const flags = constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW | (options.exclusive ? constants.O_EXCL : 0);
    const fd = openSync(path, flags, 0o600);
    try {
      ftruncateSync(fd, byteSize);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    return new SystemSharedMemoryRegion(key, path, byteSize, fd);
  }

  #descriptor(): number {
    if (this.#fd === undefined) throw new NereidError('SHM_IO', `shared memory object '${this.key}' is closed`);
    return this.#fd;
  }

  #range(offset: number, length: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + length > this.byteSize) {
      throw new NereidError('SHM_RANGE', `shared memory object '${this.key}': ${length} bytes at offset ${offset} do not fit its ${this.byteSize} bytes`);
    }
  }

  /**
   * Writes tensor bytes at `offset`: a typed array's bytes as they are, or BYTES elements in the
   * length-prefixed layout (protocol.md §2.3). Returns the number of bytes written.
   */
  write(data: TypedArray | Uint8Array | readonly (string | Uint8Array)[], offset = 0): number {
    const bytes = Array.isArray(data)
      ? encodeBytesElements(data as (string | Uint8Array)[])
      : new Uint8Array((data as TypedArray).buffer, (data as TypedArray).byteOffset, (data as TypedArray).byteLength);
    this.#range(offset, bytes.byteLength);
    const fd = this.#descriptor();
    let done = 0;
    while (done < bytes.byteLength) done += writeSync(fd, bytes, done, bytes.byteLength - done, offset + done);
    return bytes.byteLength;
  }

  /** A copy of `byteSize` bytes at `offset`. */
  readBytes(byteSize: number, offset = 0): Uint8Array {
    this.#range(offset, byteSize);
    const fd = this.#descriptor();
    const out = new Uint8Array(byteSize);
    let done = 0;
    while (done < byteSize) {
      const n = readSync(fd, out, done, byteSize - done, offset + done);
      if (n === 0) throw new NereidError('SHM_IO', `shared memory object '${this.key}' ended before ${offset + byteSize} bytes`);
      done += n;
    }
    return out;
  }

  /** A tensor of `datatype` and `shape` read at `offset` as a typed array (not BYTES: use `readBytes`). */
  read(datatype: Exclude<DataType, 'BYTES'>, shape: readonly number[], offset = 0): TypedArray {
    const count = shape.reduce((a, b) => a * b, 1);
    const probe = typedArrayOf(datatype, new Uint8Array(0));
    return typedArrayOf(datatype, this.readBytes(count * probe.BYTES_PER_ELEMENT, offset));
  }

  /** Closes this process's descriptor; the object stays in /dev/shm. Idempotent. */
  close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
  }

  /** Closes and removes the object (shm_unlink). A server that still holds it keeps its copy until it unregisters. */
  destroy(): void {
    this.close();
    try {
      unlinkSync(this.#path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

export type { CudaSharedMemoryStatus, SystemSharedMemoryStatus } from '@nereid/protocol';
