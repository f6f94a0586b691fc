/**
 * The per-call settings of both clients against real servers: an AbortSignal and a timeout cancel
 * the request on the server (the backend sees its signal abort), connection failures are
 * InferenceServerErrors (HTTP 503, gRPC UNAVAILABLE), and idempotent calls — never inference —
 * are retried per the policy across a server that starts late or restarts.
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, InferenceServerError, type ClientInferOptions } from '@nereid/client';
import { GrpcStatus } from '@nereid/protocol';
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, GrpcFrontend, HttpFrontend, Server, silentLogger, type Backend } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { serveRepository, type RunningGrpcServer, type ServedRepository } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

let served: ServedRepository;
let repo: string;
/**
 * A backend whose requests finish only when cancelled: each waits for its signal, then answers
 * CANCELLED and is recorded in `cancelled`. `batches` counts execute calls.
 */
class WaitingBackend {
  readonly cancelled: string[] = [];
  readonly batches: number[] = [];
  readonly backend: Backend;

  constructor() {
    const self = this;
    this.backend = {
      name: 'waiting_test',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel() {
        return {
          async createInstance() {
            return {
              async execute(requests) {
                self.batches.push(requests.length);
                await Promise.all(
                  requests.map(
                    (r) =>
                      new Promise<void>((resolve) => {
                        const done = () => {
                          self.cancelled.push(r.id);
                          r.respond(new NereidError('REQUEST_CANCELLED', `request '${r.id}' was cancelled`), true);
                          resolve();
                        };
                        if (r.signal.aborted) done();
                        else r.signal.addEventListener('abort', done, { once: true });
                      }),
                  ),
                );
              },
              async unload() {},
            };
          },
          async unload() {},
        };
      },
    };
  }
}

const WAITER_CONFIG = `name: "waiter"
backend: "waiting_test"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 4 } ]
`;

let backend: WaitingBackend;
let srv: RunningGrpcServer;
let http: HttpClient;
let grpc: GrpcClient;

before(async () => {
  backend = new WaitingBackend();
  served = await serveRepository(
    {
      waiter: { 'config.pbtxt': WAITER_CONFIG, '1/.keep': '' },
      simple: modelFiles(simpleModel()),
    },
    { backends: [backend.backend] },
  );
  ({ repo, srv, http, grpc } = served);
});

after(async () => {
  await served?.close();
});

function waiting(id: string): ClientInferOptions {
  return { model: 'waiter', id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: Int32Array.of(1) }] };
}

function simple(): ClientInferOptions {
  const a = Int32Array.from({ length: 16 }, (_, i) => i);
  return {
    model: 'simple',
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: a },
    ],
  };
}

/** Resolves once the backend has seen request `id` cancelled (the test's own timeout bounds the wait). */
async function cancelledOnServer(id: string): Promise<void> {
  while (!backend.cancelled.includes(id)) await new Promise((r) => setTimeout(r, 5));
}

/** Resolves once the backend has been handed `n` batches in all. */
async function batchesSeen(n: number): Promise<void> {
  while (backend.batches.length < n) await new Promise((r) => setTimeout(r, 5));
}

describe('cancellation and timeouts reach the server', { timeout: 60_000 }, () => {
  for (const [label, client] of [
    ['HTTP', () => http],
    ['gRPC', () => grpc],
  ] as const) {
    it(`${label}: aborting an in-flight infer rejects with the signal's reason and cancels the request on the server`, async () => {
      const id = `abort-${label}`;
      const seen = backend.batches.length;
      const controller = new AbortController();
      const reason = new Error('user gave up');
      const pending = client().infer({ ...waiting(id), signal: controller.signal });
      await batchesSeen(seen + 1);
      controller.abort(reason);
      await assert.rejects(pending, (err: unknown) => err === reason);
      await cancelledOnServer(id);
      assert.equal((await client().infer(simple())).model, 'simple');
    });

    it(`${label}: a timeout cancels the request on the server and rejects with 504`, async () => {
      const id = `timeout-${label}`;
      await assert.rejects(client().infer({ ...waiting(id), timeout: 200 }), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError, String(err));
        assert.equal(err.status, 504, err.message);
        if (label === 'gRPC') assert.equal(err.grpcCode, GrpcStatus.DEADLINE_EXCEEDED);
        else assert.match(err.message, /POST .*\/v2\/models\/waiter\/infer got no complete answer within the 200 ms timeout/);
        return true;
      });
      await cancelledOnServer(id);
    });

    it(`${label}: a timeout applies to the other calls too, and a generous one changes nothing`, async () => {
      assert.equal(typeof (await client().serverMetadata({ timeout: 30_000 })).version, 'string');
      assert.equal((await client().infer({ ...simple(), timeout: 30_000 })).model, 'simple');
    });
  }

  it('HTTP: a client-wide default timeout applies to infer', async () => {
    const quick = new HttpClient(srv.url, { timeout: 150 });
    await assert.rejects(quick.infer(waiting('default-timeout')), (err: unknown) => err instanceof InferenceServerError && err.status === 504);
    await cancelledOnServer('default-timeout');
  });
});

/** A TCP port nothing listens on now (taken from the OS and released). */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

interface Fixed {
  stop(): Promise<void>;
}

/** A server with HTTP and gRPC frontends on the given ports. */
async function startOn(httpPort: number, grpcPort: number): Promise<Fixed> {
  const server = new Server({ logger: silentLogger(), modelRepositories: [repo], backends: [new WaitingBackend().backend] });
  await server.load();
  const frontend = new HttpFrontend(server, { address: '127.0.0.1', port: httpPort });
  await frontend.listen();
  const g = new GrpcFrontend(server, { address: '127.0.0.1', port: grpcPort });
  await g.listen();
  return {
    async stop() {
      const closing = [frontend.close(), g.close()];
      await server.stop();
      frontend.closeAllConnections();
      g.forceClose();
      await Promise.all(closing);
    },
  };
}

const RETRY = { retries: 40, backoffMs: 25, maxBackoffMs: 100 };

describe('connection errors and retries', { timeout: 60_000 }, () => {
  it('an unreachable server: HTTP 503 and gRPC UNAVAILABLE, both InferenceServerErrors, nothing retried by default', async () => {
    const port = await freePort();
    const h = new HttpClient(`http://127.0.0.1:${port}`);
    const g = new GrpcClient(`127.0.0.1:${port}`);
    try {
      await assert.rejects(h.serverMetadata(), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError, String(err));
        assert.equal(err.status, 503);
        assert.match(err.message, new RegExp(`GET http://127.0.0.1:${port}/v2 failed: cannot reach the server \\(ECONNREFUSED\\)`));
        return true;
      });
      await assert.rejects(g.serverMetadata(), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError, String(err));
        assert.equal(err.grpcCode, GrpcStatus.UNAVAILABLE);
        assert.equal(err.status, 503);
        return true;
      });
    } finally {
      g.close();
    }
  });

  it('HTTP: a connection that breaks while an inference answer arrives is a 503 naming the call', async () => {
    // Promises 1000 bytes, sends 10, then closes the connection.
    const breaking = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': 1000 });
        res.write('{"model_na');
        setTimeout(() => res.socket?.destroy(), 20);
      });
    });
    await new Promise<void>((resolve) => breaking.listen(0, '127.0.0.1', resolve));
    const port = (breaking.address() as AddressInfo).port;
    try {
      const h = new HttpClient(`http://127.0.0.1:${port}`);
      await assert.rejects(h.infer({ model: 'm', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: Int32Array.of(1) }] }), (err: unknown) => {
        assert.ok(err instanceof InferenceServerError, String(err));
        assert.equal(err.status, 503);
        assert.match(err.message, new RegExp(`POST http://127.0.0.1:${port}/v2/models/m/infer failed: the connection broke while the answer arrived`));
        return true;
      });
    } finally {
      breaking.closeAllConnections();
      await new Promise((resolve) => breaking.close(resolve));
    }
  });

  it('a server that starts late: idempotent calls of both clients succeed after retries, infer fails at once', async () => {
    const [httpPort, grpcPort] = [await freePort(), await freePort()];
    const h = new HttpClient(`http://127.0.0.1:${httpPort}`, { retry: RETRY });
    const g = new GrpcClient(`127.0.0.1:${grpcPort}`, { retry: RETRY });
    let late: Fixed | undefined;
    try {
      const calls = Promise.all([
        h.serverMetadata(),
        h.modelConfig('simple'),
        h.modelStatistics('simple'),
        h.repositoryIndex(),
        h.isServerLive(),
        g.serverMetadata(),
        g.modelMetadata('simple'),
        g.isServerReady(),
        g.healthCheck(),
      ]);
      const inferHttp = h.infer(simple()).then(() => 'answered', (err: unknown) => err);
      const inferGrpc = g.infer(simple()).then(() => 'answered', (err: unknown) => err);
      const noRetry = h.serverMetadata({ retry: false }).then(() => 'answered', (err: unknown) => err);
      // The single attempts have failed before the server exists.
      for (const failed of [await inferHttp, await inferGrpc, await noRetry]) {
        assert.ok(failed instanceof InferenceServerError, String(failed));
        assert.equal(failed.status, 503);
      }
      late = await startOn(httpPort, grpcPort);
      const [meta, config, stats, index, live, gMeta, gModel, gReady, gHealth] = await calls;
      assert.equal(typeof meta.version, 'string');
      assert.equal(config.name, 'simple');
      assert.equal(stats.model_stats.length, 1);
      assert.ok(index.some((e) => e.name === 'simple'));
      assert.equal(live, true);
      assert.equal(typeof gMeta.version, 'string');
      assert.equal(gModel.name, 'simple');
      assert.equal(gReady, true);
      assert.equal(gHealth, 'SERVING');
    } finally {
      g.close();
      await late?.stop();
    }
  });

  it('a server that restarts: calls made while it is down succeed once it is back', async () => {
    const [httpPort, grpcPort] = [await freePort(), await freePort()];
    let running = await startOn(httpPort, grpcPort);
    const h = new HttpClient(`http://127.0.0.1:${httpPort}`, { retry: RETRY });
    const g = new GrpcClient(`127.0.0.1:${grpcPort}`, { retry: RETRY });
    try {
      assert.equal((await h.infer(simple())).model, 'simple');
      assert.equal((await g.infer(simple())).model, 'simple');
      await running.stop();
      const down = await h.infer(simple()).then(() => 'answered', (err: unknown) => err);
      assert.ok(down instanceof InferenceServerError && down.status === 503, String(down));
      const calls = Promise.all([h.modelMetadata('simple'), g.modelConfig('simple'), g.modelStatistics('simple')]);
      await new Promise((r) => setTimeout(r, 100));
      running = await startOn(httpPort, grpcPort);
      const [meta, config, stats] = await calls;
      assert.equal(meta.name, 'simple');
      assert.equal(config.name, 'simple');
      assert.equal(stats.model_stats.length, 1);
      assert.equal((await h.infer(simple())).model, 'simple');
    } finally {
      g.close();
      await running.stop();
    }
  });

  it('retries stop when the signal aborts, with its reason', async () => {
    const port = await freePort();
    const h = new HttpClient(`http://127.0.0.1:${port}`, { retry: { retries: 1000, backoffMs: 20 } });
    const reason = new Error('enough');
    const controller = new AbortController();
    setTimeout(() => controller.abort(reason), 100);
    await assert.rejects(h.serverMetadata({ signal: controller.signal }), (err: unknown) => err === reason);
  });

  it('a server answer other than 503 is not retried: the error comes back with its status and message', async () => {
    const h = new HttpClient(srv.url, { retry: RETRY });
    await assert.rejects(h.modelConfig('nope'), (err: unknown) => {
      assert.ok(err instanceof InferenceServerError);
      assert.notEqual(err.status, 503);
      assert.match(err.message, /nope/);
      return true;
    });
  });
});
