import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import type { MemoryUsageEntry } from '../backends/spi.js';
import { silentLogger } from '../observability/logger.js';
import {
  directoryBytes,
  formatBytes,
  LoadMeasure,
  MemoryAccounting,
  modelMemoryLimit,
  parseByteSize,
  processMemoryBytes,
  sumEntries,
  type AccountedVersion,
} from './memory.js';

const MIB = 2 ** 20;

describe('parseByteSize', () => {
  it('reads plain bytes, decimal and binary units in any case', () => {
    assert.equal(parseByteSize('1000000'), 1_000_000);
    assert.equal(parseByteSize('512MiB'), 512 * MIB);
    assert.equal(parseByteSize('512mib'), 512 * MIB);
    assert.equal(parseByteSize('512Mi'), 512 * MIB);
    assert.equal(parseByteSize('2G'), 2e9);
    assert.equal(parseByteSize('2 GB'), 2e9);
    assert.equal(parseByteSize('1.5GiB'), 1.5 * 2 ** 30);
    assert.equal(parseByteSize('64k'), 64_000);
    assert.equal(parseByteSize('10B'), 10);
    assert.equal(parseByteSize(' 1TiB '), 2 ** 40);
    assert.equal(parseByteSize('0'), 0);
  });
  it('refuses what is not a byte size', () => {
    for (const bad of ['', 'lots', '-1', '1.2.3', '5 parsecs', 'MiB', '1e9', '99999999999TiB']) assert.equal(parseByteSize(bad), undefined, bad);
  });
});

describe('formatBytes', () => {
  it('writes binary units', () => {
    assert.equal(formatBytes(800), '800 B');
    assert.equal(formatBytes(512 * MIB), '512 MiB');
    assert.equal(formatBytes(1.5 * 2 ** 30), '1.5 GiB');
    assert.equal(formatBytes(172.06 * MIB), '172.1 MiB');
  });
});

describe('modelMemoryLimit', () => {
  const p = (v: string) => ({ memory_limit: { string_value: v } });
  it('takes the parameter, else the server default; 0 and none mean no limit', () => {
    assert.equal(modelMemoryLimit('m', p('256MiB'), 1000), 256 * MIB);
    assert.equal(modelMemoryLimit('m', {}, 1000), 1000);
    assert.equal(modelMemoryLimit('m', p(''), 1000), 1000);
    assert.equal(modelMemoryLimit('m', p('none'), 1000), 0);
    assert.equal(modelMemoryLimit('m', p('0'), 1000), 0);
  });
  it('names the model, the parameter and the fix for a bad value', () => {
    assert.throws(
      () => modelMemoryLimit('resnet', p('big')),
      (err: NereidError) =>
        err.code === 'CONFIG_INVALID' && /model 'resnet': parameter 'memory_limit' must be a byte size such as "512MiB".*got 'big'/.test(err.message),
    );
  });
});

describe('sumEntries', () => {
  it('sums entries of the same type and device', () => {
    const e: MemoryUsageEntry[] = [
      { type: 'CPU', id: 0, byte_size: 1 },
      { type: 'GPU', id: 0, byte_size: 10 },
      { type: 'CPU', id: 0, byte_size: 2 },
      { type: 'GPU', id: 1, byte_size: 100 },
    ];
    assert.deepEqual(sumEntries(e), [
      { type: 'CPU', id: 0, byte_size: 3 },
      { type: 'GPU', id: 0, byte_size: 10 },
      { type: 'GPU', id: 1, byte_size: 100 },
    ]);
  });
});

describe('process and file figures', () => {
  it("reads this process's memory from /proc, and nothing for a process that does not exist", () => {
    const bytes = processMemoryBytes(process.pid);
    assert.ok(bytes !== undefined && bytes > MIB && bytes <= process.memoryUsage.rss() * 2, String(bytes));
    assert.equal(processMemoryBytes(2 ** 22 + 12345), undefined);
  });
  it('sums the files of a directory tree', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'nereid-mem-'));
    try {
      await mkdir(join(dir, 'a'));
      await writeFile(join(dir, 'model.onnx'), Buffer.alloc(1000));
      await writeFile(join(dir, 'a', 'weights.bin'), Buffer.alloc(24));
      assert.equal(directoryBytes(dir), 1024);
      assert.equal(directoryBytes(join(dir, 'missing')), 0);
    } finally {
      await rm(dir, { recursive: true });
    }
  });
  it('keeps no RSS growth measured while another measure overlapped', () => {
    const a = new LoadMeasure();
    const b = new LoadMeasure();
    const held = Buffer.alloc(32 * MIB, 1);
    assert.equal(b.end(), undefined);
    assert.equal(a.end(), undefined);
    const c = new LoadMeasure();
    const more = Buffer.alloc(32 * MIB, 1);
    const growth = c.end();
    assert.ok(growth !== undefined && growth > 16 * MIB, String(growth));
    assert.ok(held.length + more.length > 0);
  });
});

/** A version whose figure the test sets. */
function version(name: string, bytes: number, limit = 0, live = true): AccountedVersion & { bytes: number; stopped: NereidError[] } {
  const v = {
    name,
    version: 1,
    memoryLimitBytes: limit,
    memoryLive: live,
    bytes,
    stopped: [] as NereidError[],
    get memory(): MemoryUsageEntry[] {
      return [{ type: 'CPU', id: 0, byte_size: v.bytes }];
    },
    sampleMemory(): MemoryUsageEntry[] {
      return v.memory;
    },
    stopForMemory(error: NereidError): void {
      v.stopped.push(error);
    },
  };
  return v;
}

describe('MemoryAccounting', () => {
  it('refuses a load whose estimate passes its limit, before it starts', () => {
    const m = new MemoryAccounting({ logger: silentLogger(), sampleIntervalMs: 0 });
    assert.throws(
      () => m.reserve('m', 1, 100 * MIB, 200 * MIB),
      (err: NereidError) =>
        err.code === 'MEMORY_BUDGET' &&
        err.message === "model 'm' version 1 needs an estimated 200 MiB (the size of its model files), over its memory limit of 100 MiB; raise parameter 'memory_limit' in its config.pbtxt (or --model-memory-limit)",
    );
    assert.equal(m.usedBytes, 0);
  });

  it('reserves estimates of parallel loads against the budget, then the measured figures', () => {
    const m = new MemoryAccounting({ logger: silentLogger(), sampleIntervalMs: 0, budgetBytes: 100 * MIB });
    const a = m.reserve('a', 1, 0, 40 * MIB);
    const b = m.reserve('b', 1, 0, 40 * MIB);
    assert.equal(m.usedBytes, 80 * MIB);
    assert.throws(() => m.reserve('c', 1, 0, 30 * MIB), /model 'c' version 1 needs an estimated 30 MiB \(the size of its model files\), but the models loaded hold 80 MiB of the server's memory budget of 100 MiB \(--memory-budget\)/);
    a.settle(50 * MIB);
    assert.equal(m.usedBytes, 90 * MIB);
    assert.throws(() => b.settle(60 * MIB), /model 'b' version 1 needs 60 MiB measured after initialize, but the models loaded hold 50 MiB/);
    b.release();
    assert.equal(m.usedBytes, 50 * MIB);
    // The version replaces its reservation.
    const va = version('a', 50 * MIB);
    m.add(va);
    a.release();
    assert.equal(m.usedBytes, 50 * MIB);
    m.remove(va);
    assert.equal(m.usedBytes, 0);
  });

  it("estimates a model's next load from its last load's figure, not from what it grew to", () => {
    const m = new MemoryAccounting({ logger: silentLogger(), sampleIntervalMs: 0 });
    const r = m.reserve('m', 1, 0, 1000);
    r.settle(30 * MIB);
    const v = version('m', 30 * MIB, 100 * MIB);
    m.add(v);
    r.release();
    v.bytes = 150 * MIB;
    m.sample();
    assert.equal(v.stopped.length, 1);
    const next = m.reserve('m', 1, 100 * MIB, 1000);
    assert.equal(next.estimate, 30 * MIB);
  });

  it('checks instances added in place against the limit and the budget', () => {
    const m = new MemoryAccounting({ logger: silentLogger(), sampleIntervalMs: 0, budgetBytes: 100 * MIB });
    m.add(version('m', 60 * MIB, 80 * MIB));
    assert.throws(
      () => m.checkGrowth('m', 1, 80 * MIB, 60 * MIB, 30 * MIB, 1),
      /model 'm' version 1 needs 90 MiB with its 1 new instance\(s\) \(30 MiB of them\), over its memory limit of 80 MiB/,
    );
    assert.throws(
      () => m.checkGrowth('m', 1, 0, 60 * MIB, 50 * MIB, 2),
      /needs 110 MiB with its 2 new instance\(s\) \(50 MiB of them\), but the models loaded hold 60 MiB of the server's memory budget of 100 MiB/,
    );
    m.checkGrowth('m', 1, 80 * MIB, 60 * MIB, 10 * MIB, 1);
  });

  it('stops a live version over its limit once, counts it, and stops accounting it', () => {
    const m = new MemoryAccounting({ logger: silentLogger(), sampleIntervalMs: 0 });
    const under = version('under', 10 * MIB, 100 * MIB);
    const over = version('over', 101 * MIB, 100 * MIB);
    const atLoad = version('onnx', 500 * MIB, 100 * MIB, false);
    for (const v of [under, over, atLoad]) m.add(v);
    m.sample();
    m.sample();
    assert.equal(under.stopped.length, 0);
    assert.equal(atLoad.stopped.length, 0, 'figures measured at load are not enforced at run time');
    assert.equal(over.stopped.length, 1);
    assert.equal(over.stopped[0]!.code, 'MODEL_MEMORY_LIMIT');
    assert.equal(
      over.stopped[0]!.message,
      "model 'over' version 1 was stopped: it used 101 MiB, over its memory limit of 100 MiB; raise parameter 'memory_limit' in its config.pbtxt (or --model-memory-limit) or make it use less, then load it again",
    );
    assert.deepEqual([...m.stops], [['over', 1]]);
    assert.equal(m.usedBytes, 510 * MIB);
  });
});
