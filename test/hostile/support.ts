/**
 * Shared pieces of the hostile tier: the served repository every corpus runs against, a system
 * shared-memory object to aim hostile ranges at, and the memory watch that keeps the corpora
 * bounded.
 *
 * The server runs in this process, so `process.memoryUsage().rss` is the server's resident size.
 * Garbage is collected (V8's `gc`, exposed here at run time) before each sample, so what the
 * bound measures is memory still held, not garbage not yet collected.
 */
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { identityModel, sequenceAccumulatorModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { serveRepository, type ServedRepository } from '../helpers/harness.js';
import { modelFiles } from '../helpers/models.js';

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** Resident set size in bytes after a full collection. */
export function settledRss(): number {
  collect();
  collect();
  return process.memoryUsage().rss;
}

const MiB = 1024 * 1024;

/**
 * Watches resident memory over a corpus: `sample` after each case records the highest RSS seen;
 * `check` asserts that it never rose more than `limitMiB` above the first sample. Generous
 * enough for a loaded machine and the body buffers one request may hold (64 MiB by default),
 * tight enough that a case which allocates for its declared shape (2^40 elements) or inflates a
 * compression bomb without bound fails it.
 */
export class MemoryWatch {
  readonly #baseline = settledRss();
  #settled = this.#baseline;
  #settledCase = '(none)';
  /**
   * The highest RSS seen by a 2 ms timer, which also catches memory a case held only briefly. The
   * timer does not hold the process open: a test that fails before `check` still ends.
   */
  #transient = this.#baseline;
  #transientCase = '(none)';
  #current = '(start)';
  readonly #timer = setInterval(() => {
    const rss = process.memoryUsage.rss();
    if (rss > this.#transient) {
      this.#transient = rss;
      this.#transientCase = this.#current;
    }
  }, 2).unref();

  /** Marks the start of case `what` (for the transient peak's report). */
  begin(what: string): void {
    this.#current = what;
  }

  /** Records the RSS left after case `what`, once garbage is collected. */
  sample(what: string): void {
    const rss = settledRss();
    if (rss > this.#settled) {
      this.#settled = rss;
      this.#settledCase = what;
    }
  }

  /**
   * Stops watching; asserts that memory held after any case rose less than `limitMiB` above the
   * start, and that no case, even briefly, took more than `transientLimitMiB` above it.
   */
  check(limitMiB: number, transientLimitMiB: number): void {
    clearInterval(this.#timer);
    const held = (this.#settled - this.#baseline) / MiB;
    const peak = (this.#transient - this.#baseline) / MiB;
    if (process.env.NEREID_HOSTILE_SHOW === '1') console.log(`memory: held +${held.toFixed(1)} MiB ('${this.#settledCase}'), peak +${peak.toFixed(1)} MiB ('${this.#transientCase}')`);
    assert.ok(held < limitMiB, `resident memory held after a case rose ${held.toFixed(1)} MiB (limit ${limitMiB} MiB); highest after '${this.#settledCase}'`);
    assert.ok(peak < transientLimitMiB, `resident memory peaked ${peak.toFixed(1)} MiB above the start (limit ${transientLimitMiB} MiB) during '${this.#transientCase}'`);
  }
}

/** Name and size of the system shared-memory object the corpora register regions over. */
export const SHM_BYTES = 4096;

export interface HostileServer extends ServedRepository {
  /** POSIX name (`/nereid-hostile-<pid>-<n>`) of a SHM_BYTES object in /dev/shm. */
  shmKey: string;
}

let counter = 0;

/**
 * Serves `simple` (INT32 [-1,16] × 2), `simple_string` (BYTES), `identity_fp32` (FP32
 * [-1,-1]) and `seq` (a sequence model with a UINT64 correlation id, INPUT INT32 [-1,1]) over
 * HTTP and gRPC with explicit model control and client shared memory allowed (the
 * widest surface), and makes a shared-memory object for register cases.
 */
export async function startHostileServer(): Promise<HostileServer> {
  const shmKey = `/nereid-hostile-${process.pid}-${counter++}`;
  writeFileSync(`/dev/shm${shmKey}`, Buffer.alloc(SHM_BYTES));
  try {
    const served = await serveRepository(
      {
        simple: modelFiles(simpleModel()),
        simple_string: modelFiles(simpleStringModel()),
        identity_fp32: modelFiles(identityModel('FLOAT', [-1, -1])),
        seq: modelFiles(sequenceAccumulatorModel({ name: 'seq', maxBatchSize: 1, idleMicroseconds: 500_000 })),
      },
      { modelControlMode: 'explicit', loadModels: ['*'], allowClientShm: true },
    );
    return {
      ...served,
      shmKey,
      async close() {
        await served.close();
        rmSync(`/dev/shm${shmKey}`, { force: true });
      },
    };
  } catch (err) {
    rmSync(`/dev/shm${shmKey}`, { force: true });
    throw err;
  }
}

/** The `simple` model's inputs, A = 0..15 and B = 2·A, and the expected sum. */
export const SIMPLE_A = Array.from({ length: 16 }, (_, i) => i);
export const SIMPLE_B = SIMPLE_A.map((v) => 2 * v);
export const SIMPLE_SUM = SIMPLE_A.map((v, i) => v + SIMPLE_B[i]!);
