/**
 * The server's side of the two shared-memory rings between the server and one Python stub
 * (the stub's side: python/nereid_stub/transport.py; docs/backends.md explains the choice).
 *
 * A ring is a file in /dev/shm: a 64-byte header whose first 8 bytes hold the reader's tail
 * (little-endian), then `capacity` bytes of data. The writer appends the tensors of one message
 * as one contiguous range and names, in the message, the ring position after it (`end`); the
 * reader copies the bytes out when it takes the message and stores `end` as the tail, which frees
 * the range (the server publishes its tail once an eighth of the ring was taken, not after every
 * message). Messages are taken in the order they were written, so ranges free in order. A
 * message that does not fit in the free space goes through a file of its own (`file`), which the
 * reader deletes once read.
 *
 * The stub maps the file; the server copies through a mapping of its own when the native addon is
 * built, else with positioned I/O (`core/mapped-file.ts`). Each tensor byte is copied once on each
 * side. A stub that shrinks the file fails the message (an error, never a crash of the server).
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeFileSync, ftruncateSync } from 'node:fs';
import { BufferPool, lendViews } from '../../core/buffer-pool.js';
import { fileBytes, type FileBytes } from '../../core/mapped-file.js';

export const RING_HEADER = 64;

/** Where a message's tensor bytes are: a ring range ending at `end`, or a file of their own. */
export type ShmRef = { readonly end: number } | { readonly file: string };

/** Offset (in the ring file or the spill file) and size of one tensor's bytes. */
export interface Placement {
  readonly o: number;
  readonly n: number;
}

/** Creates a ring file of `capacity` data bytes (sparse until written) and returns its fd. */
export function createRingFile(path: string, capacity: number): number {
  const fd = openSync(path, 'w+', 0o600);
  ftruncateSync(fd, RING_HEADER + capacity);
  return fd;
}

/** The ring file no longer holds the bytes (shrunk by the stub). */
function ringChanged(what: string): Error {
  return new Error(`the shared-memory ring file was shrunk while ${what}`);
}

/** The writing side: server → stub. */
export class RingWriter {
  readonly #bytes: FileBytes;
  readonly #capacity: number;
  readonly #spillBase: string;
  readonly #tail = Buffer.alloc(8);
  #head = 0;
  /** The reader's tail as last read; re-read only when space seems short. */
  #knownTail = 0;
  #spills = 0;

  constructor(fd: number, capacity: number, spillBase: string) {
    this.#bytes = fileBytes(fd, RING_HEADER + capacity, { writable: true });
    this.#capacity = capacity;
    this.#spillBase = spillBase;
  }

  /** Writes `parts` contiguously; returns where they went. Synchronous: call it right before sending the message. */
  put(parts: readonly Uint8Array[]): { shm: ShmRef; placements: Placement[] } {
    let total = 0;
    for (const p of parts) total += p.byteLength;
    const start = this.#reserve(total);
    const placements: Placement[] = [];
    if (start === undefined) {
      const file = `${this.#spillBase}.${++this.#spills}`;
      let offset = 0;
      for (const p of parts) {
        placements.push({ o: offset, n: p.byteLength });
        offset += p.byteLength;
      }
      writeFileSync(file, Buffer.concat(parts as Uint8Array[], total), { mode: 0o600 });
      return { shm: { file }, placements };
    }
    let position = RING_HEADER + (start % this.#capacity);
    for (const p of parts) {
      placements.push({ o: position, n: p.byteLength });
      if (p.byteLength > 0 && !this.#bytes.write(position, p)) throw ringChanged('writing a message');
      position += p.byteLength;
    }
    return { shm: { end: this.#head }, placements };
  }

  /** Releases the mapping (the descriptor stays the caller's to close). */
  close(): void {
    this.#bytes.close();
  }

  #reserve(size: number): number | undefined {
    const cap = this.#capacity;
    if (size === 0) return this.#head;
    if (size > cap) return undefined;
    let start = this.#head;
    const pos = start % cap;
    if (pos + size > cap) start += cap - pos;
    const end = start + size;
    if (end - this.#knownTail > cap) {
      if (!this.#bytes.read(0, this.#tail)) throw ringChanged("reading the stub's tail");
      this.#knownTail = Number(this.#tail.readBigUInt64LE(0));
      if (end - this.#knownTail > cap) return undefined;
    }
    this.#head = end;
    return start;
  }
}

/** The reading side: stub → server. */
export class RingReader {
  readonly #bytes: FileBytes;
  readonly #tail = Buffer.alloc(8);
  /** Free space is published once this many bytes were taken (a write per message costs more than a few bytes of ring). */
  readonly #publishEvery: number;
  #published = 0;
  /** Buffers messages are read into; lent to the returned views (`lendViews`). */
  readonly #buffers: BufferPool;

  constructor(fd: number, capacity: number) {
    this.#bytes = fileBytes(fd, RING_HEADER + capacity, { writable: true });
    this.#publishEvery = Math.max(1, Math.floor(capacity / 8));
    this.#buffers = new BufferPool({ maxBytes: Math.min(capacity, 64 * 1024 * 1024) });
  }

  /**
   * Copies the tensors of one message out (one read for all of them) and frees their range.
   * The returned arrays are views over one buffer lent to them (`lendViews`): owned by whoever
   * holds them, back in this reader's pool once every view was returned (`returnView`) by the
   * final consumer of a response; views never returned leave the buffer to the garbage collector.
   */
  take(shm: ShmRef | undefined, placements: readonly Placement[]): Uint8Array[] {
    if (placements.length === 0) return [];
    if (shm !== undefined && 'file' in shm) {
      const data = readFileSync(shm.file);
      unlinkSync(shm.file);
      return placements.map((p) => data.subarray(p.o, p.o + p.n));
    }
    let first = Infinity;
    let last = 0;
    for (const p of placements) {
      if (p.n === 0) continue;
      first = Math.min(first, p.o);
      last = Math.max(last, p.o + p.n);
    }
    const buffer = first === Infinity ? undefined : this.#buffers.take(last - first);
    const data = buffer === undefined ? new Uint8Array(0) : new Uint8Array(buffer, 0, last - first);
    if (data.byteLength > 0 && !this.#bytes.read(first, data)) throw ringChanged('reading a message');
    if (shm !== undefined && shm.end - this.#published >= this.#publishEvery) {
      this.#tail.writeBigUInt64LE(BigInt(shm.end), 0);
      if (!this.#bytes.write(0, this.#tail)) throw ringChanged('publishing the tail');
      this.#published = shm.end;
    }
    const views = placements.map((p) => (p.n === 0 ? new Uint8Array(0) : data.subarray(p.o - first, p.o - first + p.n)));
    if (buffer !== undefined) lendViews(this.#buffers, buffer, views);
    return views;
  }

  /** Releases the mapping (the descriptor stays the caller's to close). */
  close(): void {
    this.#bytes.close();
  }
}

export function closeQuietly(fd: number | undefined): void {
  if (fd === undefined) return;
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

export function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
