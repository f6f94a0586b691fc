/**
 * Unloading returns what loading took (docs/operations.md): the ONNX Runtime sessions and their
 * worker threads, timers, ports, sockets and files. Checked on the process itself: its thread
 * count (`/proc/self/status`), open file descriptors (`/proc/self/fd`) and active resources
 * (`process.getActiveResourcesInfo()`) come back to what they were, after the unload of one model
 * and after a whole server stops, cycle after cycle.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { Server, silentLogger } from '@nereid/server';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { inferJson, makeRepository, removeDir, simpleCase, startServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

const PROC_STATUS = '/proc/self/status';

function threadCount(): number {
  return Number(/^Threads:\s+(\d+)$/m.exec(readFileSync(PROC_STATUS, 'utf8'))![1]);
}

function openFiles(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Active resources as a sorted list (a multiset), e.g. `['MessagePort', 'Timeout']`. */
function resources(): string[] {
  return process.getActiveResourcesInfo().sort();
}

/** Waits (bounded) until `read()` equals `want`: threads and handles go asynchronously. */
async function settlesTo<T>(read: () => T, want: T, what: string): Promise<void> {
  let got = read();
  for (let i = 0; i < 300 && JSON.stringify(got) !== JSON.stringify(want); i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    got = read();
  }
  assert.deepEqual(got, want, what);
}

/** An INT32 [16] request for `simple`-like models through the facade. */
function simpleRequest(model: string) {
  const data = new Uint8Array(new Int32Array(16).fill(3).buffer);
  return {
    model,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32' as const, shape: [1, 16], data },
      { name: 'INPUT1', datatype: 'INT32' as const, shape: [1, 16], data },
    ],
  };
}

describe('unload releases resources', () => {
  let repo: string;

  before(async () => {
    const simple = simpleModel();
    const batched = simpleModel({ name: 'batched' });
    repo = await makeRepository({
      simple: modelFiles(simple, { config: `${simple.config!}\ninstance_group [ { kind: KIND_CPU count: 2 } ]` }),
      // A dynamic batcher with a queue delay arms timers.
      batched: modelFiles(batched, { config: `${batched.config!}\ndynamic_batching { max_queue_delay_microseconds: 20000 }` }),
      simple_string: modelFiles(simpleStringModel()),
    });
  });
  after(async () => {
    await removeDir(repo);
  });

  /** One server life: load everything, serve over HTTP and gRPC, stop. */
  async function cycle(): Promise<void> {
    const srv = await startServer({ modelRepositories: [repo], grpc: true, metrics: { intervalMs: 50 }, rateLimit: 'execution_count' });
    try {
      srv.server.metrics.start();
      const replies = await Promise.all([
        inferJson(srv.url, 'simple', simpleCase(2).inputs),
        inferJson(srv.url, 'batched', simpleCase(1).inputs),
        inferJson(srv.url, 'batched', simpleCase(1, 3).inputs),
        srv.server.infer(simpleRequest('simple')),
      ]);
      for (const r of replies.slice(0, 3)) assert.equal((r as { status: number }).status, 200);
    } finally {
      await srv.stop();
    }
  }

  it('a stopped server leaves no thread, worker, timer, port or socket behind, cycle after cycle', async () => {
    // The first cycle creates what a process keeps for good (libuv's thread pool, for one).
    await cycle();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const threads = threadCount();
    const handles = resources();
    const files = openFiles();
    for (let i = 0; i < 3; i++) {
      await cycle();
      await settlesTo(threadCount, threads, `threads after cycle ${i + 2}`);
      await settlesTo(resources, handles, `active resources after cycle ${i + 2}`);
      await settlesTo(openFiles, files, `open file descriptors after cycle ${i + 2}`);
    }
    assert.ok(!handles.includes('MessagePort'), `no worker port is left: ${handles.join(', ')}`);
  });

  it('unloading one model ends its instances’ threads while the others serve', async () => {
    const server = new Server({ modelRepositories: [repo], logger: silentLogger(), modelControlMode: 'explicit', metrics: { cpu: false } });
    await server.load();
    try {
      await server.loadModel('simple_string');
      const onlyOne = { threads: threadCount(), ports: resources().filter((r) => r === 'MessagePort').length };
      await server.loadModel('simple');
      await server.infer(simpleRequest('simple'));
      const both = { threads: threadCount(), ports: resources().filter((r) => r === 'MessagePort').length };
      // `simple` has two instances: two worker threads, each with a port.
      assert.ok(both.threads >= onlyOne.threads + 2, `${both.threads} threads with both, ${onlyOne.threads} with one`);
      assert.equal(both.ports, onlyOne.ports + 2);

      await server.unloadModel('simple');
      await settlesTo(threadCount, onlyOne.threads, 'threads after the unload');
      await settlesTo(() => resources().filter((r) => r === 'MessagePort').length, onlyOne.ports, 'worker ports after the unload');
      assert.deepEqual(server.modelStatuses().filter((s) => s.state === 'READY').map((s) => s.name), ['simple_string']);

      // Loading it again works and costs the same.
      await server.loadModel('simple');
      await server.infer(simpleRequest('simple'));
      assert.equal(threadCount(), both.threads);
    } finally {
      await server.stop();
    }
  });
});
