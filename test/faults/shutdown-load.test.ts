/**
 * SIGTERM under load, against the real `nereid serve` process: HTTP clients on new connections
 * and on keep-alive connections, gRPC unary calls and ModelStreamInfer streams, all busy when
 * the signal comes. Over 20 rounds, no request is cut off: each one is served, or refused in
 * words ("Server is stopping…" 503, gRPC UNAVAILABLE "…shutting down…"), or its connection is
 * refused before it was accepted; and the process exits 0.
 */
import assert from 'node:assert/strict';
import { Agent, request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { status as GrpcStatus, type Client, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import type { pb } from '@nereid/protocol';
import { simpleModel } from '@nereid/testkit';
import { inferenceClient, openStream, simpleRequest, unary } from '../helpers/grpc.js';
import { makeRepository, removeDir, simpleCase } from '../helpers/harness.js';
import { modelFiles } from '../helpers/models.js';
import { startNereidServe, stopAllNereid } from '../helpers/cli.js';

const ROUNDS = 20;
/** Longest a request may go unanswered before it counts as cut off. */
const HANG_MS = 20_000;

/** Refusal wordings: HTTP's and the scheduler's "Server is stopping…", gRPC's "…shutting down…". */
const STOPPING = /Server is stopping|shutting down|Server exiting|Server not ready/;
/** gRPC details of a call refused because no connection could be made (never accepted). */
const NOT_CONNECTED = /ECONNREFUSED|No connection established|Failed to connect/;

type Kind = 'ok' | 'refused' | 'cut';
interface Outcome {
  kind: Kind;
  what: string;
}

let repo: string;
before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
});
after(async () => {
  await stopAllNereid();
  await removeDir(repo);
});

function httpInfer(port: number, seed: number, agent: Agent | false): Promise<Outcome> {
  const c = simpleCase(1, seed);
  const body = JSON.stringify({ inputs: c.inputs });
  return new Promise((resolve) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, path: '/v2/models/simple/infer', method: 'POST', agent, headers: { 'Content-Type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('error', (err) => resolve({ kind: 'cut', what: `response: ${err.message}` }));
        res.on('end', () => {
          if (res.statusCode === 200) {
            const out = (JSON.parse(text) as { outputs: { name: string; data: number[] }[] }).outputs.find((o) => o.name === 'OUTPUT0');
            assert.deepEqual(out?.data, c.sum);
            resolve({ kind: 'ok', what: '200' });
          } else if (res.statusCode === 503 && STOPPING.test(text)) resolve({ kind: 'refused', what: text });
          else resolve({ kind: 'cut', what: `${res.statusCode} ${text}` });
        });
      },
    );
    req.setTimeout(HANG_MS, () => req.destroy(new Error('no answer')));
    req.on('error', (err: NodeJS.ErrnoException) =>
      resolve(err.code === 'ECONNREFUSED' ? { kind: 'refused', what: 'ECONNREFUSED' } : { kind: 'cut', what: `${err.code ?? ''} ${err.message}` }),
    );
    req.end(body);
  });
}

async function httpWorker(port: number, agent: Agent | false, out: Outcome[]): Promise<void> {
  for (let seed = 0; ; seed++) {
    const o = await httpInfer(port, seed, agent);
    out.push(o);
    if (o.kind !== 'ok') return;
  }
}

async function unaryWorker(client: Client, out: Outcome[]): Promise<void> {
  for (let seed = 0; ; seed++) {
    const { request } = simpleRequest(1, seed);
    try {
      await unary(client, 'ModelInfer', request, { options: { deadline: Date.now() + HANG_MS } });
      out.push({ kind: 'ok', what: 'OK' });
    } catch (err) {
      const e = err as ServiceError;
      const refused = e.code === GrpcStatus.UNAVAILABLE && (STOPPING.test(e.details) || NOT_CONNECTED.test(e.details));
      out.push({ kind: refused ? 'refused' : 'cut', what: `${e.code} ${e.details}` });
      return;
    }
  }
}

/**
 * Keeps two requests outstanding on one stream. After the first in-band refusal it writes no
 * more and ends its side. When the stream is over, every request written is accounted for: its
 * own response, or the stream's final status (a shutdown refusal covers those unanswered; an
 * OK or any other status leaves them cut off).
 */
function streamWorker(client: Client, name: string, out: Outcome[]): Promise<void> {
  const stream = openStream(client, { options: { deadline: Date.now() + 60_000 } });
  let written = 0;
  let answered = 0;
  let writing = true;
  const write = () => {
    while (writing && written - answered < 2) {
      const { request } = simpleRequest(1, written, { id: `${name}-${written}` });
      written++;
      stream.write(request);
    }
  };
  return new Promise((resolve) => {
    let done = false;
    const finish = (status: { code: number; details: string }) => {
      if (done) return;
      done = true;
      const unansweredKind: Kind = status.code === GrpcStatus.UNAVAILABLE && (STOPPING.test(status.details) || NOT_CONNECTED.test(status.details)) ? 'refused' : 'cut';
      for (let i = answered; i < written; i++) out.push({ kind: unansweredKind, what: `stream ended ${status.code} ${status.details}` });
      resolve();
    };
    stream.on('data', (r: pb.ModelStreamInferResponse) => {
      answered++;
      if (r.error_message === '') out.push({ kind: 'ok', what: 'stream OK' });
      else {
        out.push({ kind: STOPPING.test(r.error_message) ? 'refused' : 'cut', what: r.error_message });
        if (writing) {
          writing = false;
          stream.end();
        }
      }
      setImmediate(write);
    });
    stream.on('error', (err: ServiceError) => finish(err));
    stream.on('status', (s: StatusObject) => {
      if (s.code === GrpcStatus.OK) finish(s);
    });
    write();
  });
}

async function round(n: number): Promise<{ outcomes: Outcome[]; ms: number }> {
  const server = await startNereidServe([`--model-repository=${repo}`]);
  const client = inferenceClient(`127.0.0.1:${server.grpcPort}`);
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 2 });
  try {
    const lists: Outcome[][] = Array.from({ length: 10 }, () => []);
    const work = [
      ...[0, 1, 2, 3].map((i) => httpWorker(server.port, false, lists[i]!)),
      ...[4, 5].map((i) => httpWorker(server.port, keepAlive, lists[i]!)),
      ...[6, 7].map((i) => unaryWorker(client, lists[i]!)),
      ...[8, 9].map((i) => streamWorker(client, `s${n}-${i}`, lists[i]!)),
    ];
    // Everyone has been served a few times before the signal.
    for (let i = 0; i < 2000 && !lists.every((l) => l.filter((o) => o.kind === 'ok').length >= 3); i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const signalled = Date.now();
    server.process.child.kill('SIGTERM');
    const [exit] = await Promise.all([server.process.waitForExit(), ...work]);
    assert.deepEqual(exit, { code: 0, signal: null }, server.process.output);
    return { outcomes: lists.flat(), ms: Date.now() - signalled };
  } finally {
    keepAlive.destroy();
    client.close();
    await server.process.stop('SIGKILL');
  }
}

describe('SIGTERM under load over HTTP and gRPC', () => {
  it(`${ROUNDS} rounds: every request served or refused, none cut off, exit 0`, async (t) => {
    const cut: string[] = [];
    let served = 0;
    let refused = 0;
    for (let n = 0; n < ROUNDS; n++) {
      const { outcomes } = await round(n);
      for (const o of outcomes) {
        if (o.kind === 'cut') cut.push(`round ${n}: ${o.what}`);
        else if (o.kind === 'ok') served++;
        else refused++;
      }
    }
    t.diagnostic(`${served} served, ${refused} refused, ${cut.length} cut off`);
    assert.deepEqual(cut, [], `${served} served, ${refused} refused`);
    assert.ok(served >= ROUNDS * 30 && refused >= ROUNDS, `${served} served, ${refused} refused`);
  });
});
