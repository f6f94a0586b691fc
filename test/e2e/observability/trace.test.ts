/**
 * Request tracing end to end (docs/observability.md): the trace extension's settings over HTTP
 * and gRPC (global and per model, clearing, Triton's errors), and the trace file a real server
 * writes for HTTP and gRPC requests and an ensemble with child traces, its rotation with
 * log_frequency, sampling by rate and count, level TENSORS, and the client's trace context.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Metadata, status, type Client } from '@grpc/grpc-js';
import type { Trace } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { assertStatus, collectStream, inferenceClient, openStream, simpleRequest, unary, unaryError } from '../../helpers/grpc.js';
import { httpRequest, inferJson, jsonBody, makeRepository, removeDir, simpleCase, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { ensembleConfig, StepBackend, stepConfig } from '../ensemble/step-backend.js';

interface TraceEvent {
  id: number;
  model_name?: string;
  model_version?: number;
  request_id?: string;
  parent_id?: number;
  timestamps?: { name: string; ns: number }[];
  activity?: string;
  tensor?: { name: string; data: string; shape: string; dtype: string };
}

/** A trace file's events grouped by trace id: its model line, timestamp names in order, tensors. */
function tracesOf(events: TraceEvent[]): Map<number, { info: TraceEvent; stamps: string[]; ns: number[]; tensors: TraceEvent[] }> {
  const out = new Map<number, { info: TraceEvent; stamps: string[]; ns: number[]; tensors: TraceEvent[] }>();
  for (const e of events) {
    let t = out.get(e.id);
    if (t === undefined) out.set(e.id, (t = { info: { id: e.id }, stamps: [], ns: [], tensors: [] }));
    if (e.model_name !== undefined) t.info = e;
    for (const s of e.timestamps ?? []) {
      t.stamps.push(s.name);
      t.ns.push(s.ns);
    }
    if (e.activity !== undefined) t.tensors.push(e);
  }
  return out;
}

const readEvents = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as TraceEvent[];
const model = (config: string) => ({ 'config.pbtxt': config, '1/.keep': '' });

let repo: string;
let dir: string;
let steps: StepBackend;

before(async () => {
  steps = new StepBackend();
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    add1: model(stepConfig('add1')),
    add10: model(stepConfig('add10', { add: '10' })),
    pipe: model(
      ensembleConfig('pipe', { inputs: ['X'], outputs: ['Y'] }, [
        { model: 'add1', inputs: { IN: 'X' }, outputs: { OUT: 't' } },
        { model: 'add10', inputs: { IN: 't' }, outputs: { OUT: 'Y' } },
      ]),
    ),
  });
  dir = mkdtempSync(join(tmpdir(), 'nereid-trace-e2e-'));
});

after(async () => {
  if (repo) await removeDir(repo);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const post = (url: string, body: unknown) => httpRequest(url, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) });

describe('trace settings over HTTP and gRPC', () => {
  let srv: RunningGrpcServer;
  let client: Client;
  const file = () => join(dir, 'settings.json');

  before(async () => {
    srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], grpc: true, trace: { file: file() } });
    client = inferenceClient(srv.grpcTarget);
  });
  after(async () => {
    client?.close();
    await srv?.stop();
  });

  it('GET answers the global settings, and a model without settings of its own the same', async () => {
    const expected = { trace_level: ['OFF'], trace_rate: '1000', trace_count: '-1', log_frequency: '0', trace_file: file(), trace_mode: 'triton' };
    assert.deepEqual(jsonBody(await httpRequest(`${srv.url}/v2/trace/setting`)), expected);
    assert.deepEqual(jsonBody(await httpRequest(`${srv.url}/v2/models/simple/trace/setting`)), expected);
    const metadata = jsonBody(await httpRequest(`${srv.url}/v2`)) as { extensions: string[] };
    assert.ok(metadata.extensions.includes('trace'));
  });

  it('POST updates a model, which keeps following the global values it did not set; null clears', async () => {
    const m = `${srv.url}/v2/models/simple/trace/setting`;
    const g = `${srv.url}/v2/trace/setting`;
    let r = await post(m, { trace_level: ['TIMESTAMPS', 'TENSORS'], trace_rate: '5' });
    assert.equal(r.status, 200);
    assert.deepEqual((jsonBody(r) as { trace_level: string[] }).trace_level, ['TIMESTAMPS', 'TENSORS']);
    r = await post(g, { trace_count: '9', log_frequency: '4' });
    assert.deepEqual(jsonBody(await httpRequest(m)), {
      trace_level: ['TIMESTAMPS', 'TENSORS'],
      trace_rate: '5',
      trace_count: '9',
      log_frequency: '4',
      trace_file: file(),
      trace_mode: 'triton',
    });
    // Global values cleared go back to the start values; a model's cleared values to the global ones.
    await post(g, { trace_count: null, log_frequency: null });
    r = await post(m, { trace_level: null, trace_rate: null });
    assert.deepEqual(jsonBody(r), jsonBody(await httpRequest(g)));
    assert.equal(srv.server.tracing.enabled, false);
  });

  it("refuses what Triton refuses, with its status and wording, and keeps serving", async () => {
    const g = `${srv.url}/v2/trace/setting`;
    const cases: [string, unknown, number, RegExp][] = [
      [g, { trace_file: '/etc/cron.d/x' }, 501, /^trace file location can not be updated through network protocol$/],
      [`${srv.url}/v2/models/simple/trace/setting`, { trace_file: null }, 501, /can not be updated through network protocol/],
      [g, { trace_rate: 'abc' }, 400, /^Unable to parse 'trace_rate', got: abc$/],
      [`${srv.url}/v2/models/simple/trace/setting`, { trace_level: ['TIMESTAMPS'], trace_rate: '0' }, 400, /sample rate must be non-zero/],
      [g, { trace_count: '-2' }, 400, /Expecting value >= -1, got:-2/],
      [g, { trace_level: ['OFF', 'TIMESTAMPS'] }, 400, /^Expect only one trace level 'OFF' is specified$/],
      [g, { trace_level: 'TIMESTAMPS' }, 400, /'trace_level' must be a list of strings/],
      [g, { trace_rate: 5 }, 400, /'trace_rate' must be a string/],
      [g, '{', 400, /failed to parse the request JSON buffer/],
      [`${srv.url}/v2/models/nope/trace/setting`, {}, 400, /^Request for unknown model : nope$/],
    ];
    for (const [url, body, code, message] of cases) {
      const r = await post(url, body);
      assert.equal(r.status, code, JSON.stringify(body));
      assert.match((jsonBody(r) as { error: string }).error, message);
    }
    assert.equal((await httpRequest(`${srv.url}/v2/models/simple/versions/1/trace/setting`)).status, 404);
    assert.equal((await httpRequest(g, { method: 'PUT', body: '{}' })).status, 405);
    assert.equal((await inferJson(srv.url, 'simple', simpleCase(1).inputs)).status, 200);
    assert.deepEqual((jsonBody(await httpRequest(g)) as { trace_level: string[] }).trace_level, ['OFF']);
  });

  it('gRPC TraceSetting: no settings is a query, an empty value list clears, errors as Triton maps them', async () => {
    const q = await unary(client, 'TraceSetting', { settings: {}, model_name: '' });
    assert.deepEqual(q.settings.trace_rate, { value: ['1000'] });
    assert.deepEqual(q.settings.trace_file, { value: [file()] });
    const u = await unary(client, 'TraceSetting', { settings: { trace_rate: { value: ['7'] }, trace_level: { value: ['TIMESTAMPS'] } }, model_name: 'simple' });
    assert.deepEqual([u.settings.trace_rate, u.settings.trace_level], [{ value: ['7'] }, { value: ['TIMESTAMPS'] }]);
    const cleared = await unary(client, 'TraceSetting', { settings: { trace_rate: { value: [] }, trace_level: { value: [] } }, model_name: 'simple' });
    assert.deepEqual(cleared, q);
    assertStatus(
      await unaryError(client, 'TraceSetting', { settings: { trace_file: { value: ['/tmp/x'] } }, model_name: '' }),
      status.UNIMPLEMENTED,
      'trace file location can not be updated through network protocol',
    );
    assertStatus(await unaryError(client, 'TraceSetting', { settings: { trace_rate: { value: ['x'] } }, model_name: '' }), status.INVALID_ARGUMENT, "Unable to parse 'trace_rate', got: x");
    assertStatus(await unaryError(client, 'TraceSetting', { settings: {}, model_name: 'nope' }), status.INVALID_ARGUMENT, 'Request for unknown model : nope');
  });
});

describe('the trace file', () => {
  it('holds each HTTP and gRPC request with its timestamps, and an ensemble with a child trace per step', async () => {
    const file = join(dir, 'timestamps.json');
    const srv = await startServer({ modelRepositories: [repo], backends: [steps.backend], grpc: true, trace: { level: 1, rate: 1, file } });
    const client = inferenceClient(srv.grpcTarget);
    try {
      const http = await httpRequest(`${srv.url}/v2/models/simple/infer`, { method: 'POST', body: JSON.stringify({ id: 'h1', inputs: simpleCase(1).inputs }) });
      assert.equal(http.status, 200);
      await unary(client, 'ModelInfer', simpleRequest(1, 0, { id: 'g1' }).request);
      const stream = openStream(client);
      const streamed = collectStream(stream);
      stream.write(simpleRequest(1, 0, { id: 's1' }).request);
      stream.end();
      assert.equal((await streamed).responses.length, 1);
      const ens = await httpRequest(`${srv.url}/v2/models/pipe/infer`, {
        method: 'POST',
        body: JSON.stringify({ id: 'e1', inputs: [{ name: 'X', datatype: 'FP32', shape: [2], data: [1, 2] }] }),
      });
      assert.deepEqual((jsonBody(ens) as { outputs: { data: number[] }[] }).outputs[0]!.data, [12, 13]);
      const sse = await httpRequest(`${srv.url}/v2/models/simple/infer`, {
        method: 'POST',
        headers: { Accept: 'text/event-stream' },
        body: JSON.stringify({ id: 'sse1', inputs: simpleCase(1).inputs }),
      });
      assert.match(sse.text, /^data: /);
      assert.equal((await inferJson(srv.url, 'nope', simpleCase(1).inputs)).status, 404);
    } finally {
      client.close();
      await srv.stop();
    }
    const traces = tracesOf(readEvents(file));
    const byRequest = (id: string, parent = 0) => [...traces.values()].filter((t) => t.info.request_id === id && (t.info.parent_id ?? 0) === parent);
    const compute = ['QUEUE_START', 'COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END'];

    const [h] = byRequest('h1');
    assert.ok(h);
    assert.deepEqual(h.info, { id: h.info.id, model_name: 'simple', model_version: 1, request_id: 'h1' });
    for (const name of ['HTTP_RECV_START', 'HTTP_RECV_END', 'REQUEST_START', ...compute, 'REQUEST_END', 'INFER_RESPONSE_COMPLETE', 'HTTP_SEND_START', 'HTTP_SEND_END']) {
      assert.equal(h.stamps.filter((s) => s === name).length, 1, `${name} in ${h.stamps.join(' ')}`);
    }
    assert.deepEqual([h.stamps[0], h.stamps.at(-1)], ['HTTP_RECV_START', 'HTTP_SEND_END']);
    // In time order, and the request's own stamps in their causal order.
    assert.deepEqual(h.ns, [...h.ns].sort((a, b) => a - b));
    const at = (name: string) => h.ns[h.stamps.indexOf(name)]!;
    for (let i = 1; i < compute.length; i++) assert.ok(at(compute[i - 1]!) <= at(compute[i]!), `${compute[i - 1]} before ${compute[i]}`);
    assert.ok(at('REQUEST_START') <= at('QUEUE_START') && at('COMPUTE_END') <= at('HTTP_SEND_START'));

    const [g] = byRequest('g1');
    assert.ok(g);
    assert.deepEqual([g.stamps[0], g.stamps.at(-1)], ['GRPC_WAITREAD_START', 'GRPC_SEND_END']);
    assert.ok(g.stamps.includes('COMPUTE_START') && g.stamps.includes('REQUEST_END'));

    const [st] = byRequest('s1');
    assert.ok(st);
    assert.deepEqual([st.stamps[0], st.stamps.at(-1)], ['GRPC_WAITREAD_START', 'GRPC_SEND_END']);
    assert.ok(st.stamps.includes('GRPC_SEND_START') && st.stamps.includes('COMPUTE_END'), st.stamps.join(' '));

    const [sse] = byRequest('sse1');
    assert.ok(sse);
    assert.deepEqual([sse.stamps[0], sse.stamps.at(-1)], ['HTTP_RECV_START', 'HTTP_SEND_END']);
    assert.ok(sse.stamps.includes('HTTP_SEND_START') && sse.stamps.includes('COMPUTE_END'), sse.stamps.join(' '));
    // A request that failed before a model version took it: its frontend stamps, no version.
    const failed = [...traces.values()].find((t) => t.info.model_name === 'nope');
    assert.ok(failed);
    assert.equal(failed.info.model_version, undefined);
    assert.deepEqual([failed.stamps[0], failed.stamps.at(-1)], ['HTTP_RECV_START', 'HTTP_SEND_END']);

    const [e] = byRequest('e1');
    assert.ok(e);
    assert.equal(e.info.model_name, 'pipe');
    assert.ok(!e.stamps.some((s) => s.startsWith('COMPUTE_')), `the ensemble computes nothing itself: ${e.stamps.join(' ')}`);
    const children = byRequest('e1', e.info.id);
    assert.deepEqual(children.map((c) => c.info.model_name), ['add1', 'add10']);
    for (const c of children) {
      assert.equal(c.info.parent_id, e.info.id);
      assert.ok(c.stamps.includes('COMPUTE_START') && c.stamps.includes('REQUEST_END'), c.stamps.join(' '));
      assert.ok(!c.stamps.some((s) => s.startsWith('HTTP_')));
      // Inside the ensemble's span.
      assert.ok(c.ns[0]! >= e.ns[e.stamps.indexOf('REQUEST_START')]! && c.ns.at(-1)! <= e.ns.at(-1)!);
    }
    assert.equal(traces.size, 8);
  });

  it('rotates with log_frequency set through the API: <file>.0, <file>.1, …, the last closed at shutdown', async () => {
    const file = join(dir, 'rotated.json');
    const srv = await startServer({ modelRepositories: [repo], trace: { level: 1, rate: 1, file } });
    try {
      assert.equal((await post(`${srv.url}/v2/trace/setting`, { log_frequency: '2' })).status, 200);
      for (let i = 0; i < 5; i++) assert.equal((await inferJson(srv.url, 'simple', simpleCase(1, i).inputs)).status, 200);
      await srv.server.tracing.flush();
      assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('rotated.json')).sort(), ['rotated.json.0', 'rotated.json.1', 'rotated.json.2']);
      assert.equal(tracesOf(readEvents(`${file}.1`)).size, 2);
    } finally {
      await srv.stop();
    }
    assert.deepEqual([0, 1, 2].map((k) => tracesOf(readEvents(`${file}.${k}`)).size), [2, 2, 1]);
    assert.ok(!existsSync(file));
  });

  it('samples every rate-th request while trace_count lasts, and records tensors at level TENSORS', async () => {
    const file = join(dir, 'sampled.json');
    const srv = await startServer({ modelRepositories: [repo], trace: { file } });
    try {
      await post(`${srv.url}/v2/models/simple/trace/setting`, { trace_level: ['TIMESTAMPS', 'TENSORS'], trace_rate: '3', trace_count: '2' });
      for (let i = 0; i < 12; i++) assert.equal((await inferJson(srv.url, 'simple', simpleCase(1, i).inputs)).status, 200);
      assert.deepEqual((jsonBody(await httpRequest(`${srv.url}/v2/models/simple/trace/setting`)) as { trace_count: string }).trace_count, '0');
    } finally {
      await srv.stop();
    }
    const traces = [...tracesOf(readEvents(file)).values()];
    assert.equal(traces.length, 2);
    // The 3rd and 6th requests (seeds 2 and 5).
    const input0 = traces.map((t) => t.tensors.find((x) => x.activity === 'TENSOR_QUEUE_INPUT' && x.tensor!.name === 'INPUT0')!.tensor!);
    assert.deepEqual(input0, [2, 5].map((seed) => ({ name: 'INPUT0', data: simpleCase(1, seed).inputs[0]!.data.join(','), shape: '1,16', dtype: 'INT32' })));
    const output0 = traces[0]!.tensors.find((x) => x.activity === 'TENSOR_BACKEND_OUTPUT' && x.tensor!.name === 'OUTPUT0')!.tensor!;
    assert.equal(output0.data, simpleCase(1, 2).sum.join(','));
  });
});

describe("the client's trace context", () => {
  it("reaches the trace sinks from HTTP's traceparent header and gRPC's metadata", async () => {
    const srv = await startServer({ modelRepositories: [repo], grpc: true, trace: { level: 1, rate: 1 } });
    const client = inferenceClient(srv.grpcTarget);
    const seen: Trace[] = [];
    srv.server.tracing.addSink({ write: (t) => void seen.push(t), flush: async () => {}, close: async () => {} });
    const parent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    try {
      await httpRequest(`${srv.url}/v2/models/simple/infer`, {
        method: 'POST',
        headers: { traceparent: parent, tracestate: 'k=v' },
        body: JSON.stringify({ inputs: simpleCase(1).inputs }),
      });
      const metadata = new Metadata();
      metadata.set('traceparent', parent);
      await unary(client, 'ModelInfer', simpleRequest(1).request, { metadata });
      await inferJson(srv.url, 'simple', simpleCase(1).inputs);
    } finally {
      client.close();
      await srv.stop();
    }
    assert.deepEqual(
      seen.map((t) => t.carrier),
      [{ traceparent: parent, tracestate: 'k=v' }, { traceparent: parent }, undefined],
    );
    assert.deepEqual(seen.map((t) => t.timestamps()[0]![0]), ['HTTP_RECV_START', 'GRPC_WAITREAD_START', 'HTTP_RECV_START']);
  });

  it('is traced the same on the grpc-js fallback server (--grpc-server=grpc-js)', async () => {
    const srv = await startServer({ modelRepositories: [repo], grpc: { server: 'grpc-js' }, trace: { level: 1, rate: 1 } });
    const client = inferenceClient(srv.grpcTarget);
    const seen: Trace[] = [];
    srv.server.tracing.addSink({ write: (t) => void seen.push(t), flush: async () => {}, close: async () => {} });
    try {
      const metadata = new Metadata();
      metadata.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
      await unary(client, 'ModelInfer', simpleRequest(1).request, { metadata });
      await srv.server.tracing.flush();
    } finally {
      client.close();
      await srv.stop();
    }
    assert.equal(seen.length, 1);
    const names = seen[0]!.timestamps().map(([n]) => n);
    assert.deepEqual([names[0], names.at(-1)], ['GRPC_WAITREAD_START', 'GRPC_SEND_END']);
    assert.equal(seen[0]!.carrier?.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  });
});
