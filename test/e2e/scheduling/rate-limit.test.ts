// --rate-limit=execution_count end to end: instances of two models share one global resource
// unit, so no two executions overlap; a pool smaller than a requirement fails the load.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Server, silentLogger, type BackendInstance, type BackendModel, type Backend } from '@nereid/server';
import { BACKEND_SPI_VERSION } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';

/** A JS backend whose instances record how many executions overlap. */
function probeBackend(): { backend: Backend; maxOverlap: () => number } {
  let running = 0;
  let max = 0;
  const instance: BackendInstance = {
    async execute(requests) {
      running++;
      max = Math.max(max, running);
      await new Promise((r) => setTimeout(r, 2));
      running--;
      for (const r of requests) r.respond({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1, 1], data: new Uint8Array(4) }] });
    },
    async unload() {},
  };
  const model: BackendModel = { createInstance: async () => instance, unload: async () => {} };
  return {
    backend: { name: 'probe', spiVersion: BACKEND_SPI_VERSION, createModel: async () => model },
    maxOverlap: () => max,
  };
}

const config = (name: string, count: number) => `
name: "${name}"
backend: "probe"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: ${count} rate_limiter { resources [ { name: "R" global: true count: 1 } ] } } ]
`;

const request = (model: string) => ({
  model,
  inputs: [{ name: 'IN', datatype: 'INT32' as const, shape: [1, 1], data: new Int32Array([1]) }],
});

describe('--rate-limit=execution_count', () => {
  let repo: string;
  before(async () => {
    repo = await makeRepository({
      a: { 'config.pbtxt': config('a', 2), '1/.keep': '' },
      b: { 'config.pbtxt': config('b', 2), '1/.keep': '' },
    });
  });
  after(async () => removeDir(repo));

  it('lets no two executions holding the one global unit overlap, across models and instances', async () => {
    const probe = probeBackend();
    const server = new Server({ modelRepositories: [repo], logger: silentLogger(), backends: [probe.backend], rateLimit: 'execution_count' });
    try {
      await server.load();
      await Promise.all(Array.from({ length: 40 }, (_, i) => server.infer(request(i % 2 ? 'a' : 'b'))));
      assert.equal(probe.maxOverlap(), 1);
    } finally {
      await server.stop();
    }
  });

  it('without the rate limiter the same instances do overlap (the probe can see it)', async () => {
    const probe = probeBackend();
    const server = new Server({ modelRepositories: [repo], logger: silentLogger(), backends: [probe.backend] });
    try {
      await server.load();
      await Promise.all(Array.from({ length: 40 }, (_, i) => server.infer(request(i % 2 ? 'a' : 'b'))));
      assert.ok(probe.maxOverlap() > 1, `max overlap ${probe.maxOverlap()}`);
    } finally {
      await server.stop();
    }
  });

  it('fails the load of a model requiring more units than --rate-limit-resource allows', async () => {
    const probe = probeBackend();
    const server = new Server({
      modelRepositories: [repo],
      logger: silentLogger(),
      backends: [probe.backend],
      rateLimit: 'execution_count',
      rateLimitResources: [{ name: 'R', count: 0 }],
    });
    try {
      const report = await server.load();
      assert.equal(report.failures.length, 2);
      for (const f of report.failures) assert.match(f.reason, /requires 1 units of resource 'R' but --rate-limit-resource makes only 0 available/);
    } finally {
      await server.stop();
    }
  });
});
