import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { closeSync, ftruncateSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { afterEach, before, describe, it } from 'node:test';
import { fileBytes } from './mapped-file.js';
import { requireMapping } from './test-support.js';

const open: { fd: number; path: string }[] = [];

/** A /dev/shm file of `size` bytes holding i & 0xff at byte i, open read-write. */
function file(size: number): { fd: number; path: string } {
  const path = `/dev/shm/nereid_unit_map_${randomUUID()}`;
  const fd = openSync(path, 'w+', 0o600);
  ftruncateSync(fd, size);
  writeSync(fd, Buffer.from(Array.from({ length: size }, (_, i) => i & 0xff)), 0, size, 0);
  const f = { fd, path };
  open.push(f);
  return f;
}

afterEach(() => {
  for (const { fd, path } of open.splice(0)) {
    closeSync(fd);
    unlinkSync(path);
  }
});

for (const map of [true, false]) {
  describe(`fileBytes (${map ? 'memory mapping' : 'positioned I/O'})`, () => {
    if (map) before(requireMapping);
    it(`copies out of and into the file${map ? ' through a mapping' : ''}`, () => {
      const { fd, path } = file(1 << 20);
      const bytes = fileBytes(fd, 1 << 20, { writable: true, map });
      assert.equal(bytes.mapped, map);
      const out = new Uint8Array(8);
      assert.equal(bytes.read(1000, out), true);
      assert.deepEqual([...out], [232, 233, 234, 235, 236, 237, 238, 239]);
      assert.equal(bytes.write((1 << 20) - 4, Uint8Array.of(9, 8, 7, 6)), true);
      assert.deepEqual([...readFileSync(path).subarray(-5)], [251, 9, 8, 7, 6]);
      // A view at an offset inside a larger buffer (pooled Buffers are such views).
      const pooled = Buffer.from('..abcd..');
      assert.equal(bytes.write(0, pooled.subarray(2, 6)), true);
      assert.equal(readFileSync(path).subarray(0, 4).toString(), 'abcd');
      bytes.close();
    });

    it('refuses ranges outside the file and use after close', () => {
      const { fd } = file(4096);
      const bytes = fileBytes(fd, 4096, { writable: true, map });
      assert.throws(() => bytes.read(4090, new Uint8Array(7)), RangeError);
      assert.throws(() => bytes.read(-1, new Uint8Array(1)), RangeError);
      assert.throws(() => bytes.write(4096, new Uint8Array(1)), RangeError);
      assert.equal(bytes.read(4096, new Uint8Array(0)), true);
      bytes.close();
      bytes.close();
      assert.throws(() => bytes.read(0, new Uint8Array(1)), /after close/);
    });

    it('a file shrunk underneath fails the copy (false) and the process carries on', () => {
      const size = 64 * 4096;
      const { fd } = file(size);
      const bytes = fileBytes(fd, size, { writable: true, map });
      ftruncateSync(fd, 4096);
      // Pages past the new end are gone: through a mapping this is a SIGBUS, caught by the guard.
      assert.equal(bytes.read(8192, new Uint8Array(4096)), false);
      assert.equal(bytes.read(0, new Uint8Array(8192)), false);
      if (map) assert.equal(bytes.write(16384, new Uint8Array(100).fill(1)), false);
      const head = new Uint8Array(16);
      assert.equal(bytes.read(0, head), true, 'bytes the file still holds copy as before');
      assert.equal(head[15], 15);
      ftruncateSync(fd, size);
      assert.equal(bytes.read(8192, new Uint8Array(4096)), true, 'grown again: usable again');
      bytes.close();
    });
  });
}

describe('fileBytes fallbacks', () => {
  it('an empty range needs no mapping', () => {
    const { fd } = file(16);
    const bytes = fileBytes(fd, 0, { writable: false });
    assert.equal(bytes.mapped, false);
    assert.equal(bytes.read(0, new Uint8Array(0)), true);
  });

  it('a descriptor that cannot be mapped falls back to positioned I/O', () => {
    const { path } = file(4096);
    const readOnly = openSync(path, 'r');
    try {
      // A writable shared mapping of a read-only descriptor fails (EACCES): positioned I/O instead.
      const bytes = fileBytes(readOnly, 4096, { writable: true });
      assert.equal(bytes.mapped, false);
      const out = new Uint8Array(2);
      assert.equal(bytes.read(300, out), true);
      assert.deepEqual([...out], [44, 45]);
    } finally {
      closeSync(readOnly);
    }
  });
});
