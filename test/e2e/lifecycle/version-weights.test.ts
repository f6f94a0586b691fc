/**
 * Weighted routing between versions (the `version_weights` load parameter, docs/protocol.md) in a
 * real `nereid serve` process, set through @nereid/client over HTTP and gRPC: the observed split
 * of requests that name no version is exact (smooth weighted round-robin), requests that name a
 * version get it, new weights with the same configuration reload nothing, bad weights are refused
 * with the model, version and rule named, and promoting a version (a load that serves only it)
 * while requests are in flight to the old one loses none of them.
 *
 * The model is a JavaScript backend in the model directory: version v answers Y = X + 100·v with
 * the response parameter `copy`, an id made when the version's copy was created, and waits the
 * request parameter `delay_ms` first.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, InferenceServerError, type InferResult } from '@nereid/client';
import { startNereidServe, type NereidProcess } from '../../helpers/cli.js';
import { httpRequest, jsonBody, makeRepository, removeDir } from '../../helpers/harness.js';
import { waitFor } from '../../helpers/lifecycle.js';
import { performance } from 'node:perf_hooks';

const MODULE = `import { randomUUID } from 'node:crypto';
export default {
  name: 'weighted',
  spiVersion: 1,
  async createModel(ctx) {
    const copy = randomUUID();
    const tag = ctx.version * 100;
    return {
      async createInstance() {
        return {
          async execute(requests) {
            await Promise.all(requests.map(async (r) => {
              const delay = Number(r.parameters.delay_ms ?? 0);
              if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
              const x = r.inputs.get('X');
              const output = new Float32Array(new Uint8Array(x.data).buffer).map((v) => v + tag);
              r.respond({ outputs: [{ name: 'Y', datatype: 'FP32', shape: x.shape, data: new Uint8Array(output.buffer) }], parameters: { copy } });
            }));
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};
`;

const TENSORS = {
  input: [{ name: 'X', data_type: 'TYPE_FP32', dims: [-1] }],
  output: [{ name: 'Y', data_type: 'TYPE_FP32', dims: [-1] }],
};

/** The model's configuration as ModelConfig JSON; `versions`: its version policy's specific versions. */
function configJson(versions: readonly number[]): string {
  return JSON.stringify({
    name: 'w',
    backend: 'weighted',
    max_batch_size: 8,
    ...TENSORS,
    dynamic_batching: {},
    instance_group: [{ kind: 'KIND_CPU', count: 2 }],
    version_policy: { specific: { versions } },
  });
}

const CONFIG_PBTXT =
  'name: "w"\nbackend: "weighted"\nmax_batch_size: 8\n' +
  'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' +
  'dynamic_batching { }\ninstance_group [ { kind: KIND_CPU, count: 2 } ]\nversion_policy: { specific: { versions: [ 1, 2 ] } }\n';

let repo: string;
let proc: NereidProcess;
let url: string;
let metricsUrl: string;
let http: HttpClient;
let grpc: GrpcClient;

before(async () => {
  repo = await makeRepository({ w: { 'config.pbtxt': CONFIG_PBTXT, 'model.mjs': MODULE, '1/.keep': '', '2/.keep': '', '3/.keep': '' } });
  const started = await startNereidServe([`--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=w', '--log-verbose=1']);
  proc = started.process;
  url = started.url;
  const metrics = await proc.waitFor(/Started Metrics Service at 127\.0\.0\.1:(\d+)/);
  assert.ok(started.grpcPort !== undefined, proc.output);
  metricsUrl = `http://127.0.0.1:${metrics[1]}/metrics`;
  http = new HttpClient(url);
  grpc = new GrpcClient(`127.0.0.1:${started.grpcPort}`);
});

after(async () => {
  grpc?.close();
  await proc?.stop();
  await removeDir(repo);
});

function send(client: HttpClient | GrpcClient, x: number, options: { version?: string; delayMs?: number } = {}): Promise<InferResult> {
  return client.infer({
    model: 'w',
    ...(options.version !== undefined ? { version: options.version } : {}),
    ...(options.delayMs !== undefined ? { parameters: { delay_ms: options.delayMs } } : {}),
    inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 2], data: new Float32Array([x, x + 0.5]) }],
  });
}

/** Checks an answer against the version it names: Y = X + 100·version. */
function checked(result: InferResult, x: number): string {
  const y = [...(result.typed('Y') as Float32Array)];
  const tag = Number(result.version) * 100;
  assert.deepEqual(y, [x + tag, x + 0.5 + tag], `version ${result.version} answered ${y} for ${x}`);
  return result.version;
}

/** Sends `n` requests naming no version, `inFlight` at a time; answers per version. */
async function split(client: HttpClient | GrpcClient, n: number, inFlight = 32): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < n) {
        const x = next++;
        const version = checked(await send(client, x), x);
        counts[version] = (counts[version] ?? 0) + 1;
      }
    }),
  );
  return counts;
}

/** The `copy` id of each version's serving copy. */
async function copies(): Promise<Record<string, unknown>> {
  return {
    1: (await send(http, 1, { version: '1' })).parameters['copy'],
    2: (await send(http, 1, { version: '2' })).parameters['copy'],
  };
}

/** How many version loads the server has started (`loading: w:<v>` log lines). */
function loads(): number {
  return proc.stdout.split('\n').filter((l) => /loading: w:\d+$/.test(l)).length;
}

async function weightGauge(): Promise<Record<string, number>> {
  const text = (await httpRequest(metricsUrl)).text;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^nereid_model_version_weight\{model="w",version="(\d+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

async function loadError(promise: Promise<unknown>): Promise<InferenceServerError> {
  const err = await promise.then(
    () => assert.fail('the load succeeded'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof InferenceServerError, String(err));
  return err;
}

describe('version_weights', () => {
  it('without weights, requests that name no version go to the highest ready version', async () => {
    assert.deepEqual(await split(http, 20), { 2: 20 });
    assert.deepEqual(await weightGauge(), {});
  });

  it('90/10 over HTTP: 2,000 requests split exactly 1,800/200; nothing reloads; gauge, index and log show it', async () => {
    const before = await copies();
    const loadsBefore = loads();
    await http.loadModel('w', { versionWeights: { 1: 90, 2: 10 } });
    assert.deepEqual(await copies(), before, 'the serving copies stay');
    assert.equal(loads(), loadsBefore, 'no version loads again');
    assert.deepEqual(await split(http, 2000), { 1: 1800, 2: 200 });
    assert.deepEqual(await weightGauge(), { 1: 90, 2: 10 });
    const index = await http.repositoryIndex();
    assert.deepEqual(index, [
      { name: 'w', version: '1', state: 'READY', weight: 90 },
      { name: 'w', version: '2', state: 'READY', weight: 10 },
    ]);
    assert.match(proc.stdout, /model 'w': version weights \{"1":90,"2":10\} for requests that name no version/);
  });

  it('30/70 over gRPC with the same config: nothing reloads; 2,000 requests split exactly 600/1,400', async () => {
    // The first load with a config parameter loads the versions from it (as Triton does)…
    await grpc.loadModel('w', { config: configJson([1, 2]) });
    const before = await copies();
    const loadsBefore = loads();
    // …the same config with weights only changes the weights.
    await grpc.loadModel('w', { config: configJson([1, 2]), versionWeights: { 1: 30, 2: 70 } });
    assert.deepEqual(await copies(), before);
    assert.equal(loads(), loadsBefore);
    assert.deepEqual(await split(grpc, 2000), { 1: 600, 2: 1400 });
    assert.deepEqual(await weightGauge(), { 1: 30, 2: 70 });
  });

  it('a gRPC stream follows the weights; requests that name a version get that version', async () => {
    const stream = grpc.stream();
    for (let i = 0; i < 10; i++) stream.send({ model: 'w', id: String(i), inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 2], data: new Float32Array([i, i + 0.5]) }] });
    stream.end();
    const counts: Record<string, number> = {};
    for await (const r of stream) {
      assert.ok(r.result, String(r.error));
      const v = checked(r.result, Number(r.id));
      counts[v] = (counts[v] ?? 0) + 1;
    }
    assert.deepEqual(counts, { 1: 3, 2: 7 });
    for (const version of ['1', '2']) {
      const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => send(i % 2 ? http : grpc, i, { version })));
      assert.deepEqual(new Set(answers.map((a, i) => checked(a, i))), new Set([version]));
    }
  });

  it('refuses bad weights with 400 / INVALID_ARGUMENT naming the model, version and rule; the weights stay', async () => {
    const post = (body: unknown) =>
      httpRequest(`${url}/v2/repository/models/w/load`, { method: 'POST', body: JSON.stringify({ parameters: { version_weights: body } }) });
    const cases: [unknown, RegExp][] = [
      [{ 3: 10 }, /load parameter 'version_weights' of model 'w' names version 3, which this load does not serve \(it serves versions 1, 2, per the version policy in effect after the load\)/],
      [{ 1: -5, 2: 5 }, /of model 'w': the weight of version 1 is -5, not an integer from 0 to 1000000/],
      [[90, 10], /of model 'w': got an array, not an object/],
      [7, /of model 'w': got the number 7, not an object/],
      [{ 1: 0, 2: 0 }, /of model 'w': every weight is 0, so no version would take requests/],
      ['{"1": 5', /of model 'w' is not JSON/],
    ];
    for (const [body, message] of cases) {
      const reply = await post(body);
      assert.equal(reply.status, 400, `${JSON.stringify(body)}: ${reply.text}`);
      assert.match((jsonBody(reply) as { error: string }).error, message);
    }
    // The JSON text form is accepted over HTTP too.
    assert.equal((await post('{"1": 30, "2": 70}')).status, 200);

    const unknown = await loadError(grpc.loadModel('w', { versionWeights: { 4: 1 } }));
    assert.equal(unknown.grpcCode, 3, unknown.message);
    assert.match(unknown.message, /names version 4, which this load does not serve \(it serves versions 1, 2/);
    const negative = await loadError(http.loadModel('w', { versionWeights: { 2: -1 } }));
    assert.equal(negative.status, 400);
    assert.match(negative.message, /the weight of version 2 is -1/);
    assert.deepEqual(await split(http, 100), { 1: 30, 2: 70 });
    assert.deepEqual(await weightGauge(), { 1: 30, 2: 70 });
  });

  it('promoting version 2 while requests are in flight on version 1 answers every one; then only 2 serves', async () => {
    await http.loadModel('w', { config: configJson([1, 2]), versionWeights: { 1: 1, 2: 1 } });
    const copy2 = (await copies())[2];
    type Answer = { version: string; at: number } | { error: string; at: number };
    const inFlight: Promise<Answer>[] = [];
    const fire = (x: number, version?: string) =>
      inFlight.push(
        send(x % 2 ? http : grpc, x, { delayMs: 800, ...(version ? { version } : {}) }).then(
          (r) => ({ version: checked(r, x), at: performance.now() }),
          (e: Error) => ({ error: e.message, at: performance.now() }),
        ),
      );
    for (let i = 0; i < 16; i++) fire(i);
    for (let i = 16; i < 24; i++) fire(i, '1');
    // Each version has two instances: two requests execute, the others wait in its queue.
    await new Promise((resolve) => setTimeout(resolve, 300));

    const promoting = performance.now();
    await http.loadModel('w', { config: configJson([2]), versionWeights: { 2: 100 } });
    const promoted = performance.now();
    const answers = await Promise.all(inFlight);
    const failed = answers.filter((a) => 'error' in a);
    assert.deepEqual(failed, [], 'no request is lost');
    const byVersion = (v: string) => answers.filter((a) => 'version' in a && a.version === v);
    assert.equal(byVersion('1').length, 16, 'the 8 unversioned requests routed to version 1 and the 8 that named it');
    assert.equal(byVersion('2').length, 8);
    assert.ok(
      byVersion('1').some((a) => a.at > promoted),
      `version 1 answered after the promoting load returned (${promoting.toFixed(0)}–${promoted.toFixed(0)} ms): it drained, it was not cut off`,
    );

    assert.equal((await send(http, 3, { version: '2' })).parameters['copy'], copy2, 'version 2 was not reloaded');
    assert.deepEqual(await split(http, 50), { 2: 50 });
    const gone = await send(http, 1, { version: '1' }).catch((e: unknown) => e as InferenceServerError);
    assert.ok(gone instanceof InferenceServerError);
    assert.match(gone.message, /'w' version 1 is not at ready state/);
    assert.deepEqual(await weightGauge(), { 2: 100 });
    await waitFor('version 1 to be unloaded', async () =>
      (await http.repositoryIndex()).some((e) => e.version === '1' && e.state === 'UNAVAILABLE'),
    );
  });

  it('unload clears the weights', async () => {
    await http.unloadModel('w');
    assert.deepEqual(await weightGauge(), {});
    await http.loadModel('w');
    assert.deepEqual(await split(http, 10), { 2: 10 });
    assert.match(proc.stdout, /model 'w': version weights cleared by the unload/);
  });
});
