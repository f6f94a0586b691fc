import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { closeSync, ftruncateSync, openSync, unlinkSync, writeSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { nativeAddon } from './native.js';
import { requireNativeAddon } from './test-support.js';
import { giveSlab, shareFile, sharedFileDamaged, slabId, slabView, takeSlab, unshareFile } from './slabs.js';


/** Runs `body` (an ES module's text) on a worker thread with `data`; resolves with its one message. */
function onWorker(body: string, data: unknown): Promise<unknown> {
  const slabs = new URL('./slabs.js', import.meta.url).href;
  const source = `import { workerData, parentPort } from 'node:worker_threads';\nimport * as slabs from '${slabs}';\n${body}`;
  const worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(source)}`), { workerData: data });
  return new Promise((resolve, reject) => {
    worker.once('message', (m) => {
      resolve(m);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

describe('slabs', () => {
  before(requireNativeAddon);
  it('are one memory for every thread: a worker reads what this thread wrote and writes what it reads', async () => {
    const view = takeSlab(1 << 20)!;
    assert.ok(view.byteLength >= 1 << 20);
    const id = slabId(view)!;
    assert.equal(typeof id, 'number');
    assert.equal(slabView(id), view, "a thread's view of a slab is created once");
    const bytes = new Uint8Array(view);
    bytes[0] = 17;
    bytes[(1 << 20) - 1] = 42;
    const seen = await onWorker(
      `const bytes = new Uint8Array(slabs.slabView(workerData));
       const seen = [bytes[0], bytes[(1 << 20) - 1], slabs.slabId(bytes.buffer) === workerData];
       bytes[1] = 99;
       parentPort.postMessage(seen);`,
      id,
    );
    assert.deepEqual(seen, [17, 42, true]);
    assert.equal(bytes[1], 99, "the worker's write is visible here");
    giveSlab(view);
  });

  it('a slab given back is the next one taken of a fitting size, and not before', () => {
    const a = takeSlab(3 << 20)!;
    const b = takeSlab(3 << 20)!;
    assert.notEqual(slabId(a), slabId(b), 'a taken slab is not handed out twice');
    giveSlab(a);
    const c = takeSlab(3 << 20)!;
    assert.equal(slabId(c), slabId(a));
    assert.equal(c, a);
    giveSlab(b);
    giveSlab(c);
    // More than twice the size asked: not reused for it.
    const small = takeSlab(64 * 1024)!;
    assert.notEqual(slabId(small), slabId(a));
    giveSlab(small);
  });

  it('ordinary buffers are not slabs, and giving one back does nothing', () => {
    const plain = new ArrayBuffer(1 << 20);
    assert.equal(slabId(plain), undefined);
    giveSlab(plain);
    assert.equal(takeSlab(0), undefined);
  });

  it('unknown ids are range errors, not crashes', () => {
    const addon = nativeAddon()!;
    assert.throws(() => addon.slabView(1 << 30), RangeError);
    assert.throws(() => addon.slabView(-1), RangeError);
    assert.throws(() => addon.slabGive(1 << 30), RangeError);
    assert.throws(() => addon.slabTake(0), TypeError);
  });
});

describe('shared file mappings', () => {
  before(requireNativeAddon);
  it('are viewed by id from every thread; a fault after the file shrank is survived in any thread and marked', async () => {
    const path = `/dev/shm/nereid_slabs_${process.pid}_${Date.now()}`;
    const fd = openSync(path, 'w+');
    try {
      ftruncateSync(fd, 1 << 20);
      writeSync(fd, Uint8Array.of(5, 6, 7), 0, 3, 100_000);
      const mapping = shareFile(fd, 1 << 20)!;
      assert.equal(slabView(mapping.id), mapping.view);
      assert.equal(slabId(mapping.view), mapping.id);
      assert.deepEqual([...new Uint8Array(mapping.view, 100_000, 3)], [5, 6, 7]);
      assert.equal(sharedFileDamaged(mapping.id), false);
      ftruncateSync(fd, 0);
      const seen = await onWorker(
        `const bytes = new Uint8Array(slabs.slabView(workerData));
         parentPort.postMessage([bytes[100_000], bytes[900_000], slabs.sharedFileDamaged(workerData)]);`,
        mapping.id,
      );
      assert.deepEqual(seen, [0, 0, true], 'the worker read zeros where the file was cut, and the mapping is marked');
      assert.equal(sharedFileDamaged(mapping.id), true);
      unshareFile(mapping.id);
      assert.equal(slabId(mapping.view), undefined);
      assert.throws(() => nativeAddon()!.slabView(mapping.id), RangeError, 'an unmapped id is refused');
      const next = shareFile(fd, 4096);
      assert.ok(next !== undefined);
      assert.notEqual(next.id, mapping.id, 'ids are not handed out again');
      assert.throws(() => nativeAddon()!.slabGive(next.id), RangeError, 'a mapping is not a slab to give back');
      unshareFile(next.id);
    } finally {
      closeSync(fd);
      unlinkSync(path);
    }
  });
});
