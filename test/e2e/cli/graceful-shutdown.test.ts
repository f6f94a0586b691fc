/**
 * The graceful shutdown of `nereid serve` (docs/operations.md): on SIGTERM readiness turns false,
 * `--exit-grace-secs` keeps serving, then new connections are refused, in-flight HTTP requests and
 * gRPC calls and streams are answered, the models unload and the process exits 0. Under load,
 * over HTTP and gRPC, every request is answered or refused, never left hanging.
 */
import assert from 'node:assert/strict';
import { Agent, request as httpRequestRaw, type IncomingHttpHeaders } from 'node:http';
import { performance } from 'node:perf_hooks';
import { after, describe, it } from 'node:test';
import { status as GrpcStatus, type Client, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import type { pb } from '@nereid/protocol';
import { simpleCase } from '../../helpers/harness.js';
import { assertSimpleResponse, healthCheck, inferenceClient, healthClient, openStream, simpleRequest, unary } from '../../helpers/grpc.js';
import { EXAMPLE_REPOSITORY, startNereidServe, stopAllNereid, type NereidProcess } from '../../helpers/cli.js';

after(stopAllNereid);

/** Longest a request may take before the test calls it hung. */
const HANG_MS = 20_000;

type Outcome =
  | { kind: 'ok' }
  | { kind: 'answered'; status: number; text: string; connection: string | undefined }
  | { kind: 'refused'; error: string }
  | { kind: 'hung' };

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/**
 * One HTTP request with `node:http` (a fresh connection unless `agent` is given); resolves with
 * the reply or with the connection error, and rejects only if nothing happened in HANG_MS.
 */
function send(url: string, options: { method?: string; body?: string; agent?: Agent } = {}): Promise<Reply | { error: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequestRaw(url, { method: options.method ?? 'GET', agent: options.agent ?? false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
      res.on('error', (err) => resolve({ error: err.message }));
    });
    req.setTimeout(HANG_MS, () => {
      req.destroy();
      reject(new Error(`${options.method ?? 'GET'} ${url} hung for ${HANG_MS} ms`));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
    req.end(options.body);
  });
}

/** `simple` with batch 1, as JSON, and its expected sum. */
function simpleBody(seed: number): { body: string; sum: number[] } {
  const c = simpleCase(1, seed);
  return { body: JSON.stringify({ inputs: c.inputs }), sum: c.sum };
}

async function inferOutcome(url: string, seed: number, agent?: Agent): Promise<Outcome> {
  const { body, sum } = simpleBody(seed);
  let reply: Reply | { error: string };
  try {
    reply = await send(`${url}/v2/models/simple/infer`, { method: 'POST', body, ...(agent ? { agent } : {}) });
  } catch {
    return { kind: 'hung' };
  }
  if ('error' in reply) return { kind: 'refused', error: reply.error };
  if (reply.status !== 200) return { kind: 'answered', status: reply.status, text: reply.text, connection: reply.headers.connection };
  const out = (JSON.parse(reply.text) as { outputs: { name: string; data: number[] }[] }).outputs.find((o) => o.name === 'OUTPUT0')!;
  assert.deepEqual(out.data, sum, 'a served request gets the right answer');
  return { kind: 'ok' };
}

interface Sent {
  /** performance.now() when the request was issued. */
  at: number;
  outcome: Outcome;
}

/** Issues requests one after another until one is refused or `until()` says stop. */
async function httpWorker(url: string, results: Sent[], until: () => boolean, agent?: Agent): Promise<void> {
  for (let seed = 0; !until(); seed++) {
    const at = performance.now();
    const outcome = await inferOutcome(url, seed, agent);
    results.push({ at, outcome });
    if (outcome.kind === 'refused' || outcome.kind === 'hung') return;
  }
}

interface StreamRecord {
  written: { at: number; id: string }[];
  answers: Map<string, pb.ModelStreamInferResponse>;
  status: StatusObject | undefined;
  error: ServiceError | undefined;
}

/**
 * Keeps up to `depth` requests outstanding on one ModelStreamInfer stream, writing until the
 * stream ends; resolves with what was written and answered, and how the stream ended.
 */
function streamWorker(client: Client, name: string, depth: number): Promise<StreamRecord> {
  const record: StreamRecord = { written: [], answers: new Map(), status: undefined, error: undefined };
  const stream = openStream(client, { options: { deadline: Date.now() + 60_000 } });
  let ended = false;
  let n = 0;
  const expected = new Map<string, { sum: number[]; difference: number[] }>();
  const writeMore = () => {
    while (!ended && record.written.length - record.answers.size < depth) {
      const id = `${name}-${n}`;
      const { request, sum, difference } = simpleRequest(1, n++, { id });
      expected.set(id, { sum, difference });
      record.written.push({ at: performance.now(), id });
      stream.write(request);
    }
  };
  return new Promise((resolve) => {
    const finish = () => {
      if (record.status !== undefined && (ended || record.error !== undefined)) resolve(record);
    };
    stream.on('data', (r: pb.ModelStreamInferResponse) => {
      const id = r.infer_response?.id ?? '';
      record.answers.set(id, r);
      if (r.error_message === '') assertSimpleResponse(r.infer_response, expected.get(id)!);
      // Pace the writes a little so the server is busy but not flooded.
      setTimeout(writeMore, 2);
    });
    stream.on('error', (err: ServiceError) => {
      ended = true;
      record.error = err;
      finish();
    });
    stream.on('status', (s: StatusObject) => {
      record.status = s;
      finish();
    });
    stream.on('end', () => {
      ended = true;
      finish();
    });
    writeMore();
  });
}

/** Unary ModelInfer calls one after another until one fails. */
async function unaryWorker(client: Client, results: { at: number; ok: boolean; code?: number }[]): Promise<void> {
  for (let seed = 0; ; seed++) {
    const at = performance.now();
    const { request, sum, difference } = simpleRequest(1, seed);
    try {
      const response = await unary(client, 'ModelInfer', request, { options: { deadline: Date.now() + HANG_MS } });
      assertSimpleResponse(response, { sum, difference });
      results.push({ at, ok: true });
    } catch (err) {
      results.push({ at, ok: false, code: (err as ServiceError).code });
      return;
    }
  }
}

async function waitUntil(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 3000 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), what);
}

function logOf(p: NereidProcess): string {
  return p.output;
}

describe('--exit-grace-secs', () => {
  it('keeps serving while unready, then refuses new connections, and exits 0', async () => {
    const server = await startNereidServe([`--model-repository=${EXAMPLE_REPOSITORY}`, '--exit-grace-secs=2']);
    const grpc = inferenceClient(`127.0.0.1:${server.grpcPort}`);
    const health = healthClient(`127.0.0.1:${server.grpcPort}`);
    try {
      assert.equal((await send(`${server.url}/v2/health/ready`) as Reply).status, 200);
      const signalled = performance.now();
      server.process.child.kill('SIGTERM');
      await server.process.waitFor(/received SIGTERM: no longer ready; still serving for 2s \(--exit-grace-secs\)/);

      // Unready, but live and serving, on connections opened now.
      assert.equal((await send(`${server.url}/v2/health/ready`) as Reply).status, 400);
      assert.equal((await send(`${server.url}/v2/health/live`) as Reply).status, 200);
      const { body, sum } = simpleBody(3);
      const reply = (await send(`${server.url}/v2/models/simple/infer`, { method: 'POST', body })) as Reply;
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual((JSON.parse(reply.text) as { outputs: { data: number[] }[] }).outputs[0]!.data, sum);
      // Clients are asked not to reuse connections, so the next request can go elsewhere.
      assert.equal(reply.headers.connection, 'close');
      assert.equal((await unary(grpc, 'ServerReady', {})).ready, false);
      assert.equal((await unary(grpc, 'ServerLive', {})).live, true);
      const g = simpleRequest(1, 4);
      assertSimpleResponse(await unary(grpc, 'ModelInfer', g.request), g);
      assert.equal((await healthCheck(health)).status, 2 /* NOT_SERVING */);
      assert.ok(!/refusing new requests/.test(server.process.stdout), 'still in the grace period');

      // After the grace period: new connections are refused, never left hanging.
      await server.process.waitFor(/refusing new requests; waiting up to 30s for in-flight requests/);
      const exit = await server.process.waitForExit();
      assert.deepEqual(exit, { code: 0, signal: null }, logOf(server.process));
      assert.ok(performance.now() - signalled >= 2000, 'the process served for the whole grace period');
      const late = await send(`${server.url}/v2/health/live`);
      assert.ok('error' in late, `a connection after the shutdown is refused: ${JSON.stringify(late)}`);
      assert.match(server.process.stdout, /all models unloaded; exiting/);
      for (const model of ['mlp', 'simple', 'simple_int8', 'simple_string', 'tokenizer']) {
        assert.match(server.process.stdout, new RegExp(`unloaded model '${model}' version 1 in [\\d.]+ ms: drain [\\d.]+ ms, release [\\d.]+ ms`));
      }
    } finally {
      grpc.close();
      health.close();
      await server.process.stop('SIGKILL');
    }
  });

  it('rejects a value that is not a non-negative integer', async () => {
    const { runNereid } = await import('../../helpers/cli.js');
    const { exit, stderr } = await runNereid(['serve', `--model-repository=${EXAMPLE_REPOSITORY}`, '--exit-grace-secs=-1']);
    assert.equal(exit.code, 3);
    assert.match(stderr, /--exit-grace-secs expects an integer >= 0, got '-1'/);
  });
});

describe('shutdown under load', () => {
  for (const grace of [0, 2]) {
    it(`HTTP and gRPC clients busy, SIGTERM, --exit-grace-secs=${grace}: every request answered or refused, exit 0`, async () => {
      const server = await startNereidServe([`--model-repository=${EXAMPLE_REPOSITORY}`, `--exit-grace-secs=${grace}`]);
      const grpc = inferenceClient(`127.0.0.1:${server.grpcPort}`);
      const keepAlive = new Agent({ keepAlive: true, maxSockets: 2 });
      let exited = false;
      void server.process.exited.then(() => (exited = true));
      try {
        const http: Sent[][] = Array.from({ length: 6 }, () => []);
        const unaries: { at: number; ok: boolean; code?: number }[][] = [[], []];
        // Three workers on keep-alive connections, three opening a connection per request.
        const httpDone = http.map((results, i) => httpWorker(server.url, results, () => exited, i < 3 ? keepAlive : undefined));
        const unaryDone = unaries.map((results) => unaryWorker(grpc, results));
        const streamsDone = [streamWorker(grpc, 'a', 4), streamWorker(grpc, 'b', 2)];
        // Everyone is busy before the signal.
        await waitUntil(() => http.every((r) => r.length >= 3) && unaries.every((r) => r.length >= 3), 'the clients got going');

        const signalled = performance.now();
        server.process.child.kill('SIGTERM');
        const [exit, streams] = await Promise.all([server.process.waitForExit(), Promise.all(streamsDone), ...httpDone, ...unaryDone]);
        const log = logOf(server.process);
        assert.deepEqual(exit, { code: 0, signal: null }, log);

        // HTTP: nothing hung. With a grace period everything sent before the signal was served;
        // without one, a request still on its way when the drain began is answered 503 "Server
        // is stopping" (or its connection refused), never with another error.
        const all = http.flat();
        assert.deepEqual(all.filter((s) => s.outcome.kind === 'hung'), [], log);
        const before = all.filter((s) => s.at < signalled);
        const allowed = grace > 0 ? ['ok'] : ['ok', 'refused', 'answered'];
        assert.deepEqual(before.filter((s) => !allowed.includes(s.outcome.kind)), [], 'requests sent before the signal');
        assert.ok(before.filter((s) => s.outcome.kind === 'ok').length >= 18);
        for (const s of all) {
          if (s.outcome.kind === 'answered') {
            // A refusal in words, on a connection the server closes.
            assert.equal(s.outcome.status, 503, s.outcome.text);
            assert.match(s.outcome.text, /Server is stopping|Server exiting/);
            assert.equal(s.outcome.connection, 'close');
          }
        }
        if (grace > 0) {
          // During the grace period the server kept serving new requests on new connections.
          const during = all.filter((s) => s.at > signalled && s.at < signalled + (grace * 1000) / 2);
          assert.ok(during.length > 0 && during.every((s) => s.outcome.kind === 'ok'), JSON.stringify(during.filter((s) => s.outcome.kind !== 'ok')));
        }

        // gRPC unary: served (with a grace period, all those sent before the signal); the last
        // call refused as UNAVAILABLE, never hung.
        for (const results of unaries) {
          if (grace > 0) assert.ok(results.filter((r) => r.at < signalled).every((r) => r.ok));
          assert.ok(results.slice(0, -1).every((r) => r.ok));
          const last = results.at(-1)!;
          assert.ok(!last.ok && last.code === GrpcStatus.UNAVAILABLE, `last unary call: ${JSON.stringify(last)}`);
        }

        // gRPC streams: once the requests it had received were answered, the server ended each
        // stream (whose client had not ended its side) with UNAVAILABLE "…shutting down…", so the
        // requests still on their way are known to be refused. Responses come in request order,
        // so what was answered is a prefix of what was written: nothing received was dropped;
        // each answer is a success or, after the drain began, the in-band refusal (never any with
        // a grace period, among those written before the signal).
        for (const s of streams) {
          assert.equal(s.status?.code, GrpcStatus.UNAVAILABLE, `${JSON.stringify(s.status)} ${s.error?.message ?? ''}`);
          assert.match(s.status!.details, /shutting down/);
          const answered = s.written.slice(0, s.answers.size);
          for (const w of answered) {
            const message = s.answers.get(w.id)?.error_message;
            assert.ok(message === '' || /shutting down/.test(message ?? ''), `answered in order: ${message}`);
            if (grace > 0 && w.at < signalled) assert.equal(message, '', 'written before the signal, served');
          }
          const unanswered = s.written.slice(s.answers.size);
          if (grace > 0) assert.ok(unanswered.every((w) => w.at > signalled), 'written before the signal, answered');
          assert.ok(unanswered.length <= 4, `${unanswered.length} unanswered: at most the outstanding window`);
          assert.ok(s.answers.size >= 3);
        }
        assert.match(server.process.stdout, /all models unloaded; exiting/);
      } finally {
        keepAlive.destroy();
        grpc.close();
        await server.process.stop('SIGKILL');
      }
    });
  }
});
