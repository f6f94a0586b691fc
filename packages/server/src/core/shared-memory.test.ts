import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { closeSync, ftruncateSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { afterEach, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { requireMapping } from './test-support.js';
import { SharedMemoryManager, shmKeyPath, type CudaOpenResult, type CudaRuntime } from './shared-memory.js';

const created: string[] = [];

function object(byteSize: number): { key: string; path: string } {
  const name = `nereid_unit_${randomUUID()}`;
  const path = `/dev/shm/${name}`;
  const fd = openSync(path, 'w+');
  ftruncateSync(fd, byteSize);
  writeSync(fd, Buffer.from(Array.from({ length: byteSize }, (_, i) => i & 0xff)), 0, byteSize, 0);
  closeSync(fd);
  created.push(path);
  return { key: `/${name}`, path };
}

afterEach(() => {
  for (const p of created.splice(0)) {
    try {
      unlinkSync(p);
    } catch {
      // already removed by the test
    }
  }
});

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof NereidError, String(err));
    return err.code;
  }
  assert.fail('expected a NereidError');
}

describe('shmKeyPath', () => {
  it('maps /name and name into /dev/shm and refuses anything with a path in it', () => {
    assert.equal(shmKeyPath('/abc', 'r'), '/dev/shm/abc');
    assert.equal(shmKeyPath('abc', 'r'), '/dev/shm/abc');
    for (const bad of ['', '/', '/..', '..', '.', '../x', '/a/b', 'a/b', '/a\0b', `/${'x'.repeat(256)}`]) {
      assert.equal(code(() => shmKeyPath(bad, 'r')), 'SHM_REGISTER_INVALID', JSON.stringify(bad));
    }
  });
});


for (const map of [true, false]) describe(`SharedMemoryManager (${map ? 'mapped regions' : 'positioned I/O'})`, () => {
  if (map) before(requireMapping);
  it('refuses registration unless client shared memory is allowed; status works either way', () => {
    const m = new SharedMemoryManager({ map });
    const { key } = object(16);
    assert.equal(code(() => m.registerSystem('r', key, 0, 16)), 'SHM_DISABLED');
    assert.equal(code(() => m.unregisterSystem()), 'SHM_DISABLED');
    assert.deepEqual(m.systemStatus(), []);
    assert.deepEqual(m.cudaStatus(), []);
  });

  it('reads and writes inside the region only, at the region offset within the object', () => {
    const m = new SharedMemoryManager({ allowClient: true, map });
    const { key, path } = object(64);
    m.registerSystem('r', key, 16, 32);
    const lease = m.acquire('r');
    assert.deepEqual([...lease.read(0, 4)], [16, 17, 18, 19]);
    lease.write(28, Uint8Array.of(0xee, 0xee, 0xee, 0xee));
    const bytes = readFileSync(path);
    assert.deepEqual([...bytes.subarray(44, 48)], [0xee, 0xee, 0xee, 0xee]);
    assert.equal(bytes[48], 48);
    assert.equal(code(() => lease.read(32, 1)), 'SHM_RANGE');
    assert.equal(code(() => lease.read(28, 5)), 'SHM_RANGE');
    assert.equal(code(() => lease.write(30, new Uint8Array(4))), 'SHM_RANGE');
    lease.release();
    m.close();
  });

  it('keeps an unregistered region usable by the requests that hold it, and frees the name at once', () => {
    const m = new SharedMemoryManager({ allowClient: true, map });
    const { key } = object(8);
    m.registerSystem('r', key, 0, 8);
    const lease = m.acquire('r');
    m.unregisterSystem('r');
    assert.equal(code(() => m.acquire('r')), 'SHM_REGION_NOT_FOUND');
    assert.deepEqual([...lease.read(0, 2)], [0, 1]);
    m.registerSystem('r', key, 0, 4);
    assert.deepEqual(m.systemStatus('r'), [{ name: 'r', key, offset: 0, byte_size: 4 }]);
    lease.release();
    lease.release();
    m.close();
  });

  it('refuses use of an object that shrank or was replaced after registration', () => {
    const m = new SharedMemoryManager({ allowClient: true, map });
    const a = object(32);
    m.registerSystem('r', a.key, 0, 32);
    const fd = openSync(a.path, 'r+');
    ftruncateSync(fd, 16);
    closeSync(fd);
    const lease = m.acquire('r');
    assert.equal(code(() => lease.read(0, 4)), 'SHM_REGION_CHANGED');
    unlinkSync(a.path);
    const fd2 = openSync(a.path, 'w+');
    ftruncateSync(fd2, 32);
    closeSync(fd2);
    assert.equal(code(() => lease.read(0, 4)), 'SHM_REGION_CHANGED');
    lease.release();
    m.close();
  });

  it('CUDA registration without a CUDA runtime answers that GPUs are not supported', async () => {
    const m = new SharedMemoryManager({ allowClient: true, map });
    await assert.rejects(m.registerCuda('g', new Uint8Array(64), 0, 16), { code: 'CUDA_SHM_UNSUPPORTED' });
    await assert.rejects(m.registerCuda('g', new Uint8Array(8), 0, 16), { code: 'SHM_REGISTER_INVALID' });
    assert.equal(code(() => m.cudaStatus('g')), 'SHM_REGION_NOT_FOUND');
    const logged: string[] = [];
    const none = new SharedMemoryManager({ allowClient: true, map, cuda: async () => 'cupy: no CUDA device', logError: (l) => logged.push(l) });
    await assert.rejects(none.registerCuda('g', new Uint8Array(64), 0, 16), {
      code: 'CUDA_SHM_UNSUPPORTED',
      message: "failed to register CUDA shared memory region: 'g', GPUs not supported",
    });
    assert.match(logged[0]!, /cupy: no CUDA device/);
  });
});

/**
 * A CUDA runtime over host memory, standing in for the device in these unit tests: a handle's
 * first byte is its allocation's size in KiB (0: a handle that cannot be opened).
 */
class HostCuda implements CudaRuntime {
  readonly runtime = 'host';
  readonly devices = 1;
  readonly regions = new Map<string, Uint8Array>();
  readonly closed: string[] = [];
  readonly #lost: { resolve(why: string): void };
  readonly lost: Promise<string>;
  constructor() {
    let resolve!: (why: string) => void;
    this.lost = new Promise((r) => (resolve = r));
    this.#lost = { resolve };
  }
  async open(name: string, handle: Uint8Array, deviceId: number, byteSize: number): Promise<CudaOpenResult> {
    if (deviceId >= this.devices) return { ok: false, why: `device ${deviceId} does not exist`, size: false };
    if (handle[0] === 0) return { ok: false, why: 'invalid handle', size: false };
    if (handle[0]! * 1024 < byteSize) return { ok: false, why: 'allocation too small', size: true };
    this.regions.set(name, new Uint8Array(handle[0]! * 1024).map((_, i) => i & 0xff));
    return { ok: true };
  }
  async read(name: string, offset: number, byteSize: number): Promise<Uint8Array> {
    return this.regions.get(name)!.slice(offset, offset + byteSize);
  }
  async write(name: string, offset: number, data: Uint8Array): Promise<void> {
    this.regions.get(name)!.set(data, offset);
  }
  async close(name: string): Promise<void> {
    this.regions.delete(name);
    this.closed.push(name);
  }
  stop(): void {
    this.#lost.resolve('was stopped');
  }
  die(): void {
    this.#lost.resolve('exited with code 1');
  }
}

const handle = (kib: number): Uint8Array => new Uint8Array(64).fill(kib, 0, 1);

describe('SharedMemoryManager: CUDA regions through a CUDA runtime', () => {
  it('registers, answers status, refuses as Triton does, and closes handles once unused', async () => {
    const cuda = new HostCuda();
    let starts = 0;
    const logged: string[] = [];
    const m = new SharedMemoryManager({ allowClient: true, cuda: async () => (starts++, cuda), logError: (l) => logged.push(l) });
    await m.registerCuda('g', handle(4), 0, 4096);
    await m.registerCuda('h', handle(1), 0, 512);
    assert.equal(starts, 1);
    assert.deepEqual(m.cudaStatus(), [
      { name: 'g', device_id: 0, byte_size: 4096 },
      { name: 'h', device_id: 0, byte_size: 512 },
    ]);
    assert.deepEqual(m.cudaStatus('g'), [{ name: 'g', device_id: 0, byte_size: 4096 }]);
    assert.deepEqual(m.systemStatus(), []);
    assert.throws(() => m.systemStatus('g'), { code: 'SHM_REGION_NOT_FOUND', message: "The region named 'g' is registered as CUDA shared memory, not system shared memory" });
    await assert.rejects(m.registerCuda('g', handle(4), 0, 16), { code: 'SHM_REGION_EXISTS', message: "shared memory region 'g' already in manager" });
    const sys = object(64);
    assert.throws(() => m.registerSystem('g', sys.key, 0, 64), { code: 'SHM_REGION_EXISTS' });
    m.registerSystem('s', sys.key, 0, 64);
    assert.throws(() => m.cudaStatus('s'), { message: "The region named 's' is registered as system shared memory, not CUDA shared memory" });
    await assert.rejects(m.registerCuda('s', handle(4), 0, 16), { code: 'SHM_REGION_EXISTS' });
    await assert.rejects(m.registerCuda('x', handle(0), 0, 16), { code: 'SHM_REGISTER_INVALID', message: 'failed to register shared memory region: invalid args' });
    await assert.rejects(m.registerCuda('x', handle(4), 3, 16), { code: 'SHM_REGISTER_INVALID', message: 'failed to register shared memory region: invalid args' });
    await assert.rejects(m.registerCuda('x', handle(1), 0, 2048), { code: 'SHM_REGISTER_INVALID', message: "failed to register shared memory region 'x': invalid args" });
    assert.equal(logged.length, 3);
    assert.match(logged[1]!, /device 3 does not exist/);

    const lease = m.acquire('g');
    assert.ok(lease.cuda);
    assert.deepEqual([...(await lease.cuda.fetch(4, 4))], [4, 5, 6, 7]);
    await lease.cuda.store(8, Uint8Array.of(9, 9));
    assert.deepEqual([...cuda.regions.get('g')!.subarray(8, 10)], [9, 9]);
    assert.throws(() => lease.cuda!.fetch(4096, 1), { code: 'SHM_RANGE', message: /^Invalid offset for shared memory region: 'g'/ });
    assert.throws(() => lease.cuda!.fetch(4000, 100), { code: 'SHM_RANGE', message: /^Invalid offset \+ byte size for shared memory region: 'g'/ });

    // A system region's name and an unknown one are left alone by CUDA unregistration.
    await m.unregisterCuda('s');
    await m.unregisterCuda('nothing');
    assert.equal(m.systemStatus().length, 1);
    // 'g' is in use: gone from the manager at once, its handle closed on release.
    await m.unregisterCuda('g');
    assert.deepEqual(m.cudaStatus(), [{ name: 'h', device_id: 0, byte_size: 512 }]);
    assert.deepEqual(cuda.closed, []);
    lease.release();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(cuda.closed, ['g']);
    await m.unregisterCuda();
    assert.deepEqual(cuda.closed, ['g', 'h']);
    // Stopping the runtime at close is not a loss worth an error line.
    const before = logged.length;
    m.close();
    await new Promise((r) => setImmediate(r));
    assert.equal(logged.length, before);
  });

  it('drops the regions of a runtime that died, and starts a new one for the next registration', async () => {
    const runtimes: HostCuda[] = [];
    const logged: string[] = [];
    const m = new SharedMemoryManager({ allowClient: true, cuda: async () => runtimes[runtimes.push(new HostCuda()) - 1]!, logError: (l) => logged.push(l) });
    await m.registerCuda('g', handle(4), 0, 16);
    runtimes[0]!.die();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(m.cudaStatus(), []);
    assert.match(logged.pop()!, /the host helper exited with code 1; its regions were unregistered/);
    await m.registerCuda('g', handle(4), 0, 16);
    assert.equal(runtimes.length, 2);
    m.close();
  });
});

describe('SharedMemoryManager (mapped regions): views instead of copies', () => {
  before(requireMapping);
  it('reads are views of the region itself, and outputs can be written through a target view', () => {
    const m = new SharedMemoryManager({ allowClient: true });
    const { key, path } = object(8192);
    m.registerSystem('r', key, 4096, 4096);
    const lease = m.acquire('r');
    assert.equal(lease.mapped, true);
    const view = lease.read(4, 8);
    assert.deepEqual([...view], [4, 5, 6, 7, 8, 9, 10, 11]);
    // What the client writes later shows through the view, as the region's own bytes.
    const fd = openSync(path, 'r+');
    writeSync(fd, Uint8Array.of(0x77), 0, 1, 4096 + 4);
    closeSync(fd);
    assert.equal(view[0], 0x77);
    const target = lease.target(16, 4)!;
    assert.equal(target.byteLength, 4);
    target.set([1, 2, 3, 4]);
    assert.deepEqual([...readFileSync(path).subarray(4096 + 16, 4096 + 20)], [1, 2, 3, 4]);
    assert.equal(code(() => lease.target(4090, 8)), 'SHM_RANGE');
    lease.confirm(16, 4);
    lease.verify();
    // An object replaced while an output was written into its view: the output is refused.
    unlinkSync(path);
    const fd2 = openSync(path, 'w+');
    ftruncateSync(fd2, 8192);
    closeSync(fd2);
    lease.target(16, 4)!.set([5, 6, 7, 8]);
    assert.equal(code(() => lease.confirm(16, 4)), 'SHM_REGION_CHANGED');
    lease.release();
    m.close();
  });

  it('an object shrunk under a view in use: the access reads zeros instead of crashing, the request fails, the region stays refused', () => {
    const m = new SharedMemoryManager({ allowClient: true });
    const { key, path } = object(64 * 1024);
    m.registerSystem('r', key, 0, 64 * 1024);
    const lease = m.acquire('r');
    const view = lease.read(0, 64 * 1024);
    assert.equal(view[40_000], 40_000 & 0xff);
    const fd = openSync(path, 'r+');
    ftruncateSync(fd, 0);
    // Without the addon's handler this access ends the process with SIGBUS.
    assert.equal(view[40_000], 0);
    assert.equal(code(() => lease.verify()), 'SHM_REGION_CHANGED');
    // Large again: still refused, the mapping no longer shows the object.
    ftruncateSync(fd, 64 * 1024);
    closeSync(fd);
    assert.equal(code(() => lease.read(0, 4)), 'SHM_REGION_CHANGED');
    assert.equal(code(() => lease.write(0, new Uint8Array(4))), 'SHM_REGION_CHANGED');
    lease.release();
    // Registered again, it works.
    m.unregisterSystem('r');
    m.registerSystem('r', key, 0, 64 * 1024);
    const again = m.acquire('r');
    again.write(0, Uint8Array.of(9));
    assert.equal(again.read(0, 1)[0], 9);
    again.verify();
    again.release();
    m.close();
  });
});
