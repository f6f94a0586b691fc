/**
 * Trace mode `opentelemetry` end to end (docs/observability.md): `nereid serve` with
 * `--trace-config mode=opentelemetry` exports to a real Jaeger (test/helpers/jaeger.ts, OTLP/HTTP
 * in, memory storage) and the test reads the spans back from Jaeger's query API.
 *
 * - An ensemble request over HTTP with a `traceparent` header, one over gRPC with `traceparent`
 *   metadata, and one on a gRPC stream whose metadata carries it: the trace continues the
 *   client's (same trace id, the client's span as the parent of InferRequest), and the span tree
 *   is Triton's: InferRequest → the ensemble's span → one span per step → each step's compute
 *   span, with Triton's events and attributes, and the resource attributes given with
 *   `opentelemetry,resource=`.
 * - A failed request's error is the status of its spans.
 * - Without a `traceparent` a traced request starts a trace of its own; at rate 1000 a request
 *   that carries the client's context is traced all the same, one that does not is not.
 * - A collector that cannot be reached costs no request: the server answers and logs the failure.
 * - Bad settings stop the server at start with a message naming the setting.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Metadata, type Client } from '@grpc/grpc-js';
import { simpleModel } from '@nereid/testkit';
import { startNereidServe, runNereid, stopAllNereid, type NereidProcess } from '../../helpers/cli.js';
import { collectStream, inferenceClient, inferRequest, inputTensor, int32s, openStream, rawBytes, unary } from '../../helpers/grpc.js';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { startJaeger, type Jaeger, type JaegerSpan, type JaegerTrace } from '../../helpers/jaeger.js';
import { modelFiles } from '../../helpers/models.js';

const SERVICE = 'nereid-otel-test';

/** `simple` (INT32 [16] add/sub) under another name. */
function addSub(name: string) {
  const model = simpleModel();
  return modelFiles(model, { config: model.config!.replace('name: "simple"', `name: "${name}"`) });
}

/** add_sub_a then add_sub_b: OUTPUT0 = 2 × INPUT0, OUTPUT1 = 2 × INPUT1. */
const PIPELINE = `name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "add_sub_a"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT0" value: "s" }
      output_map { key: "OUTPUT1" value: "d" }
    },
    {
      model_name: "add_sub_b"
      model_version: -1
      input_map { key: "INPUT0" value: "s" }
      input_map { key: "INPUT1" value: "d" }
      output_map { key: "OUTPUT0" value: "OUTPUT0" }
      output_map { key: "OUTPUT1" value: "OUTPUT1" }
    }
  ]
}
`;

const IN0 = Array.from({ length: 16 }, (_, i) => i);
const IN1 = Array.from({ length: 16 }, (_, i) => 100 - i);

/** A W3C traceparent of fresh random ids, as a client's OpenTelemetry SDK would send. */
function clientContext(flags = '01') {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${flags}` };
}

async function httpInfer(url: string, model: string, headers: Record<string, string>, id?: string) {
  const response = await fetch(`${url}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      ...(id !== undefined && { id }),
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: IN0 },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: IN1 },
      ],
    }),
  });
  const body = (await response.json()) as { outputs?: { name: string; data: number[] }[]; error?: string };
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

/** A loopback port that nothing listens on (it was free a moment ago). */
function unusedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

const tag = (span: JaegerSpan, key: string) => span.tags.find((t) => t.key === key)?.value;
const events = (span: JaegerSpan) => span.logs.map((l) => l.fields.find((f) => f.key === 'event')?.value);
const parentOf = (span: JaegerSpan) => span.references.find((r) => r.refType === 'CHILD_OF');

/** The spans of `trace` by name (names that occur once) and the children of each span id. */
function tree(trace: JaegerTrace) {
  const children = new Map<string, JaegerSpan[]>();
  for (const span of trace.spans) {
    const parent = parentOf(span);
    if (parent === undefined) continue;
    const list = children.get(parent.spanID) ?? [];
    list.push(span);
    children.set(parent.spanID, list);
  }
  const only = (name: string) => {
    const found = trace.spans.filter((s) => s.operationName === name);
    assert.equal(found.length, 1, `one span named ${name}, got ${found.length}: ${trace.spans.map((s) => s.operationName).join(', ')}`);
    return found[0]!;
  };
  const childrenOf = (span: JaegerSpan) => (children.get(span.spanID) ?? []).map((s) => s.operationName).sort();
  return { only, childrenOf, children: (span: JaegerSpan) => children.get(span.spanID) ?? [] };
}

/**
 * Checks the span tree of one `pipeline` request: InferRequest (a child of the client's span) →
 * pipeline → add_sub_a, add_sub_b → compute each; events, attributes, kinds and the resource.
 */
function assertPipelineTrace(trace: JaegerTrace, client: { traceId: string; spanId: string }, frontend: 'HTTP' | 'GRPC', requestId?: string) {
  assert.equal(trace.spans.length, 6, trace.spans.map((s) => s.operationName).join(', '));
  for (const span of trace.spans) {
    assert.equal(span.traceID, client.traceId, `${span.operationName} continues the client's trace`);
    assert.equal(tag(span, 'span.kind'), 'server', `${span.operationName} is a SERVER span`);
  }
  const t = tree(trace);
  const root = t.only('InferRequest');
  const rootParent = parentOf(root);
  assert.ok(rootParent, 'InferRequest has the client span as parent');
  assert.equal(rootParent.spanID, client.spanId);
  assert.deepEqual(t.childrenOf(root), ['pipeline']);
  const pipeline = t.only('pipeline');
  assert.deepEqual(t.childrenOf(pipeline), ['add_sub_a', 'add_sub_b'], 'the ensemble span has one span per step and no compute span');
  const a = t.only('add_sub_a');
  const b = t.only('add_sub_b');
  assert.deepEqual(t.childrenOf(a), ['compute']);
  assert.deepEqual(t.childrenOf(b), ['compute']);

  const receive = frontend === 'HTTP' ? ['HTTP_RECV_START', 'HTTP_RECV_END'] : ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END'];
  const send = frontend === 'HTTP' ? ['HTTP_SEND_START', 'HTTP_SEND_END'] : ['GRPC_SEND_START', 'GRPC_SEND_END'];
  assert.deepEqual(events(root), [...receive, 'INFER_RESPONSE_COMPLETE', ...send]);
  assert.deepEqual(events(pipeline), ['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
  for (const step of [a, b]) {
    assert.deepEqual(events(step), ['REQUEST_START', 'QUEUE_START', 'REQUEST_END'], `${step.operationName} events`);
    const compute = t.children(step)[0]!;
    assert.deepEqual(events(compute), ['COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END']);
  }

  assert.equal(tag(pipeline, 'triton.model_name'), 'pipeline');
  assert.equal(tag(pipeline, 'triton.model_version'), 1);
  assert.equal(tag(pipeline, 'triton.trace_parent_id'), 0);
  const pipelineTraceId = tag(pipeline, 'triton.trace_id');
  assert.equal(typeof pipelineTraceId, 'number');
  for (const step of [a, b]) {
    assert.equal(tag(step, 'triton.model_name'), step.operationName);
    assert.equal(tag(step, 'triton.model_version'), 1);
    assert.equal(tag(step, 'triton.trace_parent_id'), pipelineTraceId, `${step.operationName} is a child trace of the ensemble's`);
    assert.notEqual(tag(step, 'triton.trace_id'), pipelineTraceId);
  }
  for (const span of [pipeline, a, b]) assert.equal(tag(span, 'triton.request_id'), requestId, `${span.operationName}'s request id, as Triton gives the steps the ensemble request's`);

  // Time: each span starts within its parent, and the second step after the first has computed.
  const end = (s: JaegerSpan) => s.startTime + s.duration;
  assert.ok(root.startTime <= pipeline.startTime && pipeline.startTime <= a.startTime, 'InferRequest, then the ensemble, then its first step');
  const computeA = t.children(a)[0]!;
  assert.ok(a.startTime <= computeA.startTime && end(computeA) <= end(a), 'compute lies within its step');
  assert.ok(end(computeA) <= b.startTime, 'the second step starts after the first computed');
  assert.ok(end(b) <= end(pipeline) + 1, 'the ensemble ends after its last step');

  const process = trace.processes[root.processID]!;
  assert.equal(process.serviceName, SERVICE);
  assert.ok(process.tags.some((t) => t.key === 'test.key' && t.value === 'test.value'), JSON.stringify(process.tags));
}

let jaeger: Jaeger;
let repo: string;

before(async () => {
  jaeger = await startJaeger();
  repo = await makeRepository({ add_sub_a: addSub('add_sub_a'), add_sub_b: addSub('add_sub_b'), pipeline: { 'config.pbtxt': PIPELINE, '1/.keep': '' } });
});

after(async () => {
  await stopAllNereid();
  await jaeger?.stop();
  if (repo !== undefined) await removeDir(repo);
});

const otelFlags = (rate: number) => [
  `--model-repository=${repo}`,
  '--trace-config=mode=opentelemetry',
  '--trace-config=level=TIMESTAMPS',
  `--trace-config=rate=${rate}`,
  `--trace-config=opentelemetry,url=${jaeger.otlpUrl}`,
  `--trace-config=opentelemetry,resource=service.name=${SERVICE}`,
  '--trace-config=opentelemetry,resource=test.key=test.value',
  '--trace-config=opentelemetry,bsp_schedule_delay=50',
];

describe('every request traced (rate 1)', () => {
  let server: NereidProcess;
  let url: string;
  let grpc: Client;

  before(async () => {
    const started = await startNereidServe(otelFlags(1));
    server = started.process;
    url = started.url;
    grpc = inferenceClient(`127.0.0.1:${started.grpcPort}`);
  });

  after(async () => {
    grpc?.close();
    await server?.stop();
  });

  it('an HTTP ensemble request continues the traceparent header and has Triton span tree', async () => {
    const client = clientContext();
    const body = await httpInfer(url, 'pipeline', { traceparent: client.traceparent }, 'pipeline-7');
    assert.deepEqual(body.outputs?.find((o) => o.name === 'OUTPUT0')?.data, IN0.map((x) => 2 * x));
    assertPipelineTrace(await jaeger.waitForTrace(client.traceId, 6), client, 'HTTP', 'pipeline-7');
  });

  it('a gRPC ensemble request continues the traceparent metadata', async () => {
    const client = clientContext();
    const metadata = new Metadata();
    metadata.set('traceparent', client.traceparent);
    const response = await unary(
      grpc,
      'ModelInfer',
      inferRequest({
        model_name: 'pipeline',
        inputs: [inputTensor('INPUT0', 'INT32', [1, 16]), inputTensor('INPUT1', 'INT32', [1, 16])],
        raw_input_contents: [rawBytes(Int32Array.from(IN0)), rawBytes(Int32Array.from(IN1))],
      }),
      { metadata },
    );
    assert.deepEqual(int32s(response.raw_output_contents[1]!), IN1.map((x) => 2 * x));
    assertPipelineTrace(await jaeger.waitForTrace(client.traceId, 6), client, 'GRPC');
  });

  it('a gRPC stream continues the traceparent of its metadata in each request', async () => {
    const client = clientContext();
    const metadata = new Metadata();
    metadata.set('traceparent', client.traceparent);
    const stream = openStream(grpc, { metadata });
    const done = collectStream(stream);
    stream.write(
      inferRequest({
        model_name: 'pipeline',
        id: 'streamed',
        inputs: [inputTensor('INPUT0', 'INT32', [1, 16]), inputTensor('INPUT1', 'INT32', [1, 16])],
        raw_input_contents: [rawBytes(Int32Array.from(IN0)), rawBytes(Int32Array.from(IN1))],
      }),
    );
    stream.end();
    const { responses, error } = await done;
    assert.equal(error, undefined);
    assert.equal(responses[0]?.error_message, '');
    assertPipelineTrace(await jaeger.waitForTrace(client.traceId, 6), client, 'GRPC', 'streamed');
  });

  it('a request that fails has its error as the status of InferRequest and of its model span', async () => {
    const client = clientContext();
    const response = await fetch(`${url}/v2/models/pipeline/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: client.traceparent },
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: IN0 }] }),
    });
    const body = (await response.json()) as { error: string };
    assert.equal(response.status, 400);
    const trace = await jaeger.waitForTrace(client.traceId, 2);
    const t = tree(trace);
    for (const span of [t.only('InferRequest'), t.only('pipeline')]) {
      assert.equal(tag(span, 'otel.status_code'), 'ERROR', span.operationName);
      assert.equal(tag(span, 'otel.status_description'), body.error, span.operationName);
    }
  });

  it("answers the trace settings in Triton's form for this mode", async () => {
    const response = await fetch(`${url}/v2/trace/setting`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), {
      trace_level: ['TIMESTAMPS'],
      trace_rate: '1',
      trace_count: '-1',
      trace_mode: 'opentelemetry',
      url: jaeger.otlpUrl,
      resource: [`service.name=${SERVICE}`, 'test.key=test.value'],
      bsp_schedule_delay: '50',
      bsp_max_export_batch_size: '512',
      bsp_max_queue_size: '2048',
    });
  });

  it('a client context that is not sampled is traced all the same (Nereid decided to trace)', async () => {
    const client = clientContext('00');
    await httpInfer(url, 'add_sub_a', { traceparent: client.traceparent });
    const trace = await jaeger.waitForTrace(client.traceId, 3);
    const t = tree(trace);
    assert.deepEqual(t.childrenOf(t.only('InferRequest')), ['add_sub_a']);
    assert.deepEqual(t.childrenOf(t.only('add_sub_a')), ['compute']);
  });

  it('without a traceparent a request starts a trace of its own, its request id an attribute', async () => {
    const id = `no-context-${randomBytes(4).toString('hex')}`;
    await httpInfer(url, 'add_sub_b', {}, id);
    let found: JaegerTrace[] = [];
    for (const until = Date.now() + 20_000; found.length === 0 && Date.now() < until; ) {
      found = await jaeger.traces(SERVICE, { 'triton.request_id': id });
      if (found.length === 0) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(found.length, 1, `one trace with request id ${id}`);
    const trace = await jaeger.waitForTrace(found[0]!.traceID, 3);
    const t = tree(trace);
    const root = t.only('InferRequest');
    assert.equal(parentOf(root), undefined, 'InferRequest is the root of a new trace');
    assert.equal(tag(t.only('add_sub_b'), 'triton.request_id'), id);
  });
});

describe('rate 1000: the client context decides', () => {
  it('a request with a traceparent is traced, one without is not', async () => {
    const { process: server, url } = await startNereidServe(otelFlags(1000));
    try {
      const untraced = `untraced-${randomBytes(4).toString('hex')}`;
      await httpInfer(url, 'add_sub_a', {}, untraced);
      const client = clientContext();
      await httpInfer(url, 'add_sub_a', { traceparent: client.traceparent }, 'with-context');
      const trace = await jaeger.waitForTrace(client.traceId, 3);
      assert.equal(tree(trace).only('add_sub_a').operationName, 'add_sub_a');
      // Spans are exported in the order they end: the first request's would have come first.
      assert.deepEqual(await jaeger.traces(SERVICE, { 'triton.request_id': untraced }), [], 'the request without context (1st of 1000) is not traced');
    } finally {
      await server.stop();
    }
  });
});

describe('rate 0: only the requests that carry a client context', () => {
  it('traces a request with a traceparent and no other', async () => {
    const { process: server, url } = await startNereidServe(otelFlags(0));
    try {
      const untraced = `rate0-${randomBytes(4).toString('hex')}`;
      for (let i = 0; i < 3; i++) await httpInfer(url, 'add_sub_b', {}, untraced);
      const client = clientContext();
      await httpInfer(url, 'add_sub_b', { traceparent: client.traceparent });
      await jaeger.waitForTrace(client.traceId, 3);
      assert.deepEqual(await jaeger.traces(SERVICE, { 'triton.request_id': untraced }), []);
      const settings = (await (await fetch(`${url}/v2/trace/setting`)).json()) as Record<string, unknown>;
      assert.equal(settings.trace_rate, '0');
    } finally {
      await server.stop();
    }
  });
});

describe('a collector that cannot be reached', () => {
  it('costs no request: the server answers and logs the failed export', async () => {
    const closedPort = await unusedPort();
    const { process: server, url } = await startNereidServe([
      `--model-repository=${repo}`,
      '--trace-config=mode=opentelemetry',
      '--trace-config=level=TIMESTAMPS',
      '--trace-config=rate=1',
      `--trace-config=opentelemetry,url=http://127.0.0.1:${closedPort}/v1/traces`,
      '--trace-config=opentelemetry,bsp_schedule_delay=50',
    ]);
    try {
      for (let i = 0; i < 3; i++) await httpInfer(url, 'pipeline', { traceparent: clientContext().traceparent });
      // The exporter retries for a few seconds before it gives up on an export.
      await server.waitFor(/OpenTelemetry trace export to http:\/\/127\.0\.0\.1:\d+\/v1\/traces failed: connect ECONNREFUSED/, 'stderr');
      const health = await fetch(`${url}/v2/health/ready`);
      assert.equal(health.status, 200);
    } finally {
      await server.stop();
    }
  });
});

describe('bad settings stop the server at start, naming the setting', () => {
  const cases: [string[], RegExp][] = [
    [['--trace-config=opentelemetry,bsp_max_queue_size=abc'], /Bad option: "--trace-config opentelemetry,bsp_max_queue_size"\. Invalid option value\. Got abc/],
    [['--trace-config=opentelemetry,bsp_schedule_delay=-5'], /opentelemetry,bsp_schedule_delay.*Got -5/],
    [['--trace-config=opentelemetry,bsp_max_export_batch_size=0'], /opentelemetry,bsp_max_export_batch_size.*Got 0/],
    [['--trace-config=opentelemetry,url=localhost:4318'], /opentelemetry,url.*http:\/\/ or https:\/\/ URL/],
    [['--trace-config=opentelemetry,resource=novalue'], /resource=<key>=<value>/],
    [['--trace-config=rate=0', '--trace-config=mode=triton'], /rate=0: the sample rate must be non-zero while tracing is on .* in mode triton; mode opentelemetry takes rate 0/],
    [['--trace-config=opentelemetry,colour=blue'], /Unknown setting 'colour' of mode opentelemetry; the settings are url, resource, bsp_max_queue_size/],
    [
      ['--trace-config=opentelemetry,bsp_max_queue_size=100', '--trace-config=opentelemetry,bsp_max_export_batch_size=200'],
      /bsp_max_export_batch_size \(200\) must not exceed bsp_max_queue_size \(100\)/,
    ],
  ];
  for (const [flags, message] of cases) {
    it(flags.join(' '), async () => {
      const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, '--trace-config=mode=opentelemetry', '--trace-config=level=TIMESTAMPS', ...flags, '--http-port=0', '--grpc-port=0', '--metrics-port=0', '--http-address=127.0.0.1', '--grpc-address=127.0.0.1']);
      assert.notEqual(exit.code, 0, stderr);
      assert.match(stderr, message);
    });
  }
});
