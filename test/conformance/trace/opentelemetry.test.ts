/**
 * Trace mode `opentelemetry` against real Triton 2.51, side by side: both servers export to one
 * real Jaeger (test/helpers/jaeger.ts), each under its own service name, and get the same
 * requests (an ensemble over HTTP and over gRPC with a client's `traceparent`, a single model
 * with a request id and no context). Each trace read back from Jaeger is reduced to its shape
 * (span names, kinds, parents, event names, the triton.* attributes with the trace ids replaced by
 * how they relate) and the two servers' shapes must be equal; so must their trace settings
 * answers but for the collector URL and the service name.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Metadata } from '@grpc/grpc-js';
import { inferenceClient, inferRequest, inputTensor, rawBytes, unary } from '../../helpers/grpc.js';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { startJaeger, type Jaeger, type JaegerSpan, type JaegerTrace } from '../../helpers/jaeger.js';
import { ADD_SUB_ENSEMBLE_MODELS } from '../helpers/python-models.js';
import { startConformanceServer, type ConformanceServer } from '../helpers/tier.js';
import { requireTriton, startTriton, type TritonServer } from '../helpers/triton.js';

const MODELS = ADD_SUB_ENSEMBLE_MODELS;

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 2);

/** A span reduced to what both servers must agree on. */
interface Shape {
  name: string;
  kind: unknown;
  events: unknown[];
  attributes: Record<string, unknown>;
  children: Shape[];
}

/**
 * The shape of `trace`: from its root (the span whose parent is not in the trace), children
 * sorted by name then by events; triton.trace_id dropped and triton.trace_parent_id replaced by
 * whether it names the parent span's trace id (0 for the ensemble or a single model).
 */
function shapeOf(trace: JaegerTrace): { shape: Shape; rootParent: string | undefined } {
  const ids = new Set(trace.spans.map((s) => s.spanID));
  const parentOf = (s: JaegerSpan) => s.references.find((r) => r.refType === 'CHILD_OF')?.spanID;
  const roots = trace.spans.filter((s) => !ids.has(parentOf(s) ?? ''));
  assert.equal(roots.length, 1, `one root span: ${trace.spans.map((s) => s.operationName).join(', ')}`);
  const tag = (s: JaegerSpan, key: string) => s.tags.find((t) => t.key === key)?.value;
  const build = (span: JaegerSpan, parentTraceId: unknown): Shape => {
    const attributes: Record<string, unknown> = {};
    for (const t of span.tags) {
      if (!t.key.startsWith('triton.') || t.key === 'triton.trace_id') continue;
      attributes[t.key] = t.key === 'triton.trace_parent_id' ? (t.value === 0 ? 0 : t.value === parentTraceId ? 'the parent model span' : `other: ${String(t.value)}`) : t.value;
    }
    const children = trace.spans
      .filter((s) => parentOf(s) === span.spanID)
      .map((s) => build(s, tag(span, 'triton.trace_id') ?? parentTraceId))
      .sort((x, y) => (x.name + JSON.stringify(x.events)).localeCompare(y.name + JSON.stringify(y.events)));
    return {
      name: span.operationName,
      kind: tag(span, 'span.kind'),
      events: span.logs.map((l) => l.fields.find((f) => f.key === 'event')?.value),
      attributes,
      children,
    };
  };
  return { shape: build(roots[0]!, undefined), rootParent: parentOf(roots[0]!) };
}

function clientContext() {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

interface Served {
  service: string;
  http: string;
  grpc: string;
}

/** The requests, sent to one server; the traces' ids (or, for the request without context, its request id). */
async function sendRequests(server: Served, single: string) {
  const httpContext = clientContext();
  const httpInfer = async (model: string, headers: Record<string, string>, body: object) => {
    const response = await fetch(`http://${server.http}/v2/models/${model}/infer`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    assert.equal(response.status, 200, `${server.service}: ${await response.text()}`);
  };
  await httpInfer('ens', { traceparent: httpContext.traceparent }, {
    id: 'ens-http',
    inputs: [
      { name: 'A', datatype: 'FP32', shape: [16], data: A },
      { name: 'B', datatype: 'FP32', shape: [16], data: B },
    ],
  });
  const grpcContext = clientContext();
  const client = inferenceClient(server.grpc);
  try {
    const metadata = new Metadata();
    metadata.set('traceparent', grpcContext.traceparent);
    await unary(
      client,
      'ModelInfer',
      inferRequest({
        model_name: 'ens',
        inputs: [inputTensor('A', 'FP32', [16]), inputTensor('B', 'FP32', [16])],
        raw_input_contents: [rawBytes(Float32Array.from(A)), rawBytes(Float32Array.from(B))],
      }),
      { metadata },
    );
  } finally {
    client.close();
  }
  await httpInfer('add_sub', {}, {
    id: single,
    inputs: [
      { name: 'INPUT0', datatype: 'FP32', shape: [16], data: A },
      { name: 'INPUT1', datatype: 'FP32', shape: [16], data: B },
    ],
  });
  return { httpContext, grpcContext, single };
}

describe('conformance: OpenTelemetry traces against real Triton 2.51 (Jaeger)', () => {
  let jaeger: Jaeger | undefined;
  let triton: TritonServer | undefined;
  let nereid: ConformanceServer | undefined;
  let repository: string | undefined;
  const flags = (service: string) => [
    '--trace-config=mode=opentelemetry',
    '--trace-config=level=TIMESTAMPS',
    '--trace-config=rate=1',
    `--trace-config=opentelemetry,url=${jaeger!.otlpUrl}`,
    `--trace-config=opentelemetry,resource=service.name=${service}`,
    '--trace-config=opentelemetry,bsp_schedule_delay=100',
  ];
  const servers: Record<'triton' | 'nereid', Served> = {} as Record<'triton' | 'nereid', Served>;
  const sent: Partial<Record<'triton' | 'nereid', Awaited<ReturnType<typeof sendRequests>>>> = {};

  before(async () => {
    requireTriton();
    jaeger = await startJaeger();
    repository = await makeRepository(MODELS);
    const suffix = randomBytes(3).toString('hex');
    [triton, nereid] = await Promise.all([startTriton(repository, flags(`triton-${suffix}`)), startConformanceServer(Object.entries(MODELS), flags(`nereid-${suffix}`))]);
    servers.triton = { service: `triton-${suffix}`, http: triton.endpoints.http, grpc: triton.endpoints.grpc };
    servers.nereid = { service: `nereid-${suffix}`, http: nereid.endpoints.http, grpc: nereid.endpoints.grpc };
    // One request id for both (each server's traces are found under its own service name).
    const single = `single-${suffix}`;
    sent.triton = await sendRequests(servers.triton, single);
    sent.nereid = await sendRequests(servers.nereid, single);
  });

  after(async () => {
    await Promise.all([triton?.stop(), nereid?.stop()]);
    await jaeger?.stop();
    if (repository !== undefined) await removeDir(repository);
  });

  const both = async (pick: (s: Awaited<ReturnType<typeof sendRequests>>) => { traceId: string; spanId: string }, spans: number) => {
    const out: Record<string, ReturnType<typeof shapeOf>> = {};
    for (const who of ['triton', 'nereid'] as const) {
      const context = pick(sent[who]!);
      const { shape, rootParent } = shapeOf(await jaeger!.waitForTrace(context.traceId, spans));
      assert.equal(rootParent, context.spanId, `${who}: InferRequest's parent is the client's span`);
      out[who] = { shape, rootParent };
    }
    assert.deepEqual(out.nereid!.shape, out.triton!.shape);
  };

  it('an HTTP ensemble request with a traceparent: the same span tree', () => both((s) => s.httpContext, 6));

  it('a gRPC ensemble request with a traceparent: the same span tree', () => both((s) => s.grpcContext, 6));

  it('a request without a context starts a trace of its own: the same span tree', async () => {
    const shapes: Record<string, Shape> = {};
    for (const who of ['triton', 'nereid'] as const) {
      let found: JaegerTrace[] = [];
      for (const until = Date.now() + 20_000; found.length === 0 && Date.now() < until; ) {
        found = await jaeger!.traces(servers[who].service, { 'triton.request_id': sent[who]!.single });
        if (found.length === 0) await new Promise((r) => setTimeout(r, 200));
      }
      assert.equal(found.length, 1, `${who}: one trace with request id ${sent[who]!.single}`);
      const { shape, rootParent } = shapeOf(await jaeger!.waitForTrace(found[0]!.traceID, 3));
      assert.equal(rootParent, undefined, `${who}: InferRequest is a root`);
      shapes[who] = shape;
    }
    assert.deepEqual(shapes.nereid, shapes.triton);
  });

  it('the trace settings answer: the same settings in the same order', async () => {
    const answers: Record<string, [string, unknown][]> = {};
    for (const who of ['triton', 'nereid'] as const) {
      const text = await (await fetch(`http://${servers[who].http}/v2/trace/setting`)).text();
      const entries = Object.entries(JSON.parse(text) as Record<string, unknown>);
      answers[who] = entries.map(([k, v]) => [k, k === 'url' ? 'the collector' : k === 'resource' ? 'the service' : v]);
    }
    assert.deepEqual(answers.nereid, answers.triton);
  });
});
