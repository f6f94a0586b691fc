/**
 * Copies between JavaScript buffers and a file of /dev/shm (a Python stub's tensor ring; a
 * client's shared-memory region where the addon is missing, else the region is a shared mapping
 * of slabs.ts): through a memory mapping when the server's native addon is built
 * (`native.ts`: packages/server/native/addon.c, compiled by `npm run build`), else with positioned
 * `read`/`write` on the descriptor.
 *
 * Why both: on the machines measured, positioned I/O on /dev/shm moved 16 MiB in 10-14 ms (read)
 * and 6 ms (write) where copies through a mapping took about 3 ms each (docs/benchmarks.md,
 * shared memory). The mapping is never exposed as a JavaScript buffer: every access is a copy
 * inside the addon under a SIGBUS guard, so another process shrinking the file underneath makes
 * that one copy report failure (`false`) instead of crashing the server. Positioned I/O needs
 * no native code and fails the same way (a short read).
 *
 * `NEREID_SHM_MAPPING=off` in the environment turns mappings off (positioned I/O everywhere).
 */
import { readSync, writeSync } from 'node:fs';
import { nativeAddon, nativeAddonMissing, type NativeAddon, type NativeMapping } from './native.js';

type ShmMapAddon = Pick<NativeAddon, 'map' | 'unmap' | 'copy'>;

function loadAddon(): ShmMapAddon | undefined {
  if (process.env.NEREID_SHM_MAPPING === 'off') return undefined;
  return nativeAddon();
}

/** Why mappings are not used (positioned I/O instead), or undefined when they are. */
export function mappingUnavailableReason(): string | undefined {
  if (process.env.NEREID_SHM_MAPPING === 'off') return 'turned off by NEREID_SHM_MAPPING=off';
  return nativeAddonMissing();
}

/** Byte access to `[0, length)` of a file. */
export interface FileBytes {
  /** Whether copies go through a memory mapping (else positioned I/O). */
  readonly mapped: boolean;
  readonly length: number;
  /**
   * Copies bytes `[position, position + out.byteLength)` of the file into `out`. False when the
   * file no longer holds them (shrunk by another process); `out` is then partly written.
   */
  read(position: number, out: Uint8Array): boolean;
  /** Writes `data` at `position`. False when the file no longer holds that range. */
  write(position: number, data: Uint8Array): boolean;
  /** Releases the mapping (the descriptor stays the caller's). Later calls throw. */
  close(): void;
}

export interface FileBytesOptions {
  /** Writes allowed (the descriptor must be open for writing). */
  writable: boolean;
  /** Use a mapping when the addon is available (default true). */
  map?: boolean;
}

function checkRange(length: number, position: number, size: number): void {
  if (!Number.isSafeInteger(position) || position < 0 || position + size > length) {
    throw new RangeError(`file access [${position}, ${position + size}) outside [0, ${length})`);
  }
}

class MappedBytes implements FileBytes {
  readonly mapped = true;
  readonly length: number;
  readonly #addon: ShmMapAddon;
  #mapping: NativeMapping | undefined;

  constructor(native: ShmMapAddon, mapping: NativeMapping, length: number) {
    this.#addon = native;
    this.#mapping = mapping;
    this.length = length;
  }

  #live(): NativeMapping {
    if (this.#mapping === undefined) throw new Error('file mapping used after close');
    return this.#mapping;
  }

  read(position: number, out: Uint8Array): boolean {
    checkRange(this.length, position, out.byteLength);
    return this.#addon.copy(this.#live(), position, out, false);
  }

  write(position: number, data: Uint8Array): boolean {
    checkRange(this.length, position, data.byteLength);
    return this.#addon.copy(this.#live(), position, data, true);
  }

  close(): void {
    if (this.#mapping === undefined) return;
    this.#addon.unmap(this.#mapping);
    this.#mapping = undefined;
  }
}

class PositionedBytes implements FileBytes {
  readonly mapped = false;
  readonly length: number;
  readonly #fd: number;
  #closed = false;

  constructor(fd: number, length: number) {
    this.#fd = fd;
    this.length = length;
  }

  read(position: number, out: Uint8Array): boolean {
    checkRange(this.length, position, out.byteLength);
    if (this.#closed) throw new Error('file access used after close');
    let done = 0;
    while (done < out.byteLength) {
      const n = readSync(this.#fd, out, done, out.byteLength - done, position + done);
      if (n === 0) return false;
      done += n;
    }
    return true;
  }

  write(position: number, data: Uint8Array): boolean {
    checkRange(this.length, position, data.byteLength);
    if (this.#closed) throw new Error('file access used after close');
    let done = 0;
    while (done < data.byteLength) done += writeSync(this.#fd, data, done, data.byteLength - done, position + done);
    return true;
  }

  close(): void {
    this.#closed = true;
  }
}

/**
 * Access to `[0, length)` of the file open as `fd`: mapped when possible, else positioned I/O.
 * Mapping failures (an address space limit, a file system without mmap) fall back quietly.
 */
export function fileBytes(fd: number, length: number, options: FileBytesOptions): FileBytes {
  const native = options.map === false || length <= 0 ? undefined : loadAddon();
  if (native !== undefined) {
    try {
      return new MappedBytes(native, native.map(fd, length, options.writable), length);
    } catch {
      // fall through to positioned I/O
    }
  }
  return new PositionedBytes(fd, length);
}
