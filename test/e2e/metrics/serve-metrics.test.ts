/**
 * The metrics endpoint of `nereid serve` (protocol.md §5.1, §6.2): started next to HTTP and gRPC
 * and logged, its flags (`--allow-metrics`, `--allow-cpu-metrics`, `--metrics-config`,
 * `--metrics-interval-ms`), the address/port clash check, and a clean shutdown.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { NereidProcess, runNereid, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { inferJson, makeRepository, removeDir, simpleCase } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { promtoolCheck, sample, scrape } from './exposition.js';

after(stopAllNereid);

let repo: string;
before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
});
after(async () => {
  if (repo) await removeDir(repo);
});

const METRICS_LINE = /Started Metrics Service at 127\.0\.0\.1:(\d+)/;
const L = '{model="simple",version="1"}';

describe('nereid serve: the metrics endpoint', () => {
  it('starts on the HTTP address, serves the model series and histograms, and closes on SIGTERM', async () => {
    const server = await startNereidServe([
      `--model-repository=${repo}`,
      '--metrics-config=histogram_latencies=true',
      '--metrics-config',
      'histogram_buckets=nv_inference_queue_histogram_us:1,10,100',
      '--metrics-interval-ms=50',
    ]);
    try {
      const port = Number((await server.process.waitFor(METRICS_LINE))[1]);
      const url = `http://127.0.0.1:${port}/metrics`;
      assert.equal((await inferJson(server.url, 'simple', simpleCase(2).inputs)).status, 200);
      await new Promise((r) => setTimeout(r, 150));
      const text = await scrape(url);
      assert.equal(sample(text, `nv_inference_request_success${L}`), 1);
      assert.equal(sample(text, `nv_inference_count${L}`), 2);
      assert.equal(sample(text, `nv_inference_request_histogram_us_count${L}`), 1);
      assert.equal(sample(text, `nv_inference_first_response_histogram_ms_count${L}`), 1);
      assert.ok(sample(text, `nv_inference_queue_histogram_us_bucket{model="simple",version="1",le="100"}`) <= 1);
      assert.doesNotMatch(text, /nv_inference_queue_histogram_us_bucket\{model="simple",version="1",le="250"\}/);
      const utilization = sample(text, 'nv_cpu_utilization');
      assert.ok(utilization >= 0 && utilization <= 1);
      promtoolCheck(text);
    } finally {
      const exit = await server.process.stop();
      assert.equal(exit.code, 0, server.process.output);
    }
    assert.doesNotMatch(server.process.stderr, /option --(allow-metrics|metrics-\w+) is not supported/);
  });

  it('--allow-cpu-metrics=false drops the CPU families; without histogram_latencies there are no histograms', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--allow-cpu-metrics=false', '--allow-gpu-metrics=false']);
    try {
      const port = Number((await server.process.waitFor(METRICS_LINE))[1]);
      const text = await scrape(`http://127.0.0.1:${port}/metrics`);
      assert.equal(sample(text, `nv_inference_request_success${L}`), 0);
      assert.doesNotMatch(text, /nv_cpu_|nv_gpu_|histogram/);
    } finally {
      await server.process.stop();
    }
  });

  it('--allow-metrics=false starts no metrics service', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--allow-metrics=false']);
    await server.process.stop();
    assert.doesNotMatch(server.process.stdout, /Metrics Service/);
  });

  it('refuses to start when the metrics endpoint is configured on the HTTP or gRPC address and port', async () => {
    for (const [clashing, other] of [
      ['--http-port=45123', '--grpc-port=0'],
      ['--grpc-port=45123', '--http-port=0'],
    ] as const) {
      const which = clashing.startsWith('--http') ? 'HTTP' : 'gRPC';
      const p = new NereidProcess([
        'serve',
        `--model-repository=${repo}`,
        '--http-address=127.0.0.1',
        '--grpc-address=127.0.0.1',
        '--metrics-address=127.0.0.1',
        clashing,
        other,
        '--metrics-port=45123',
      ]);
      const exit = await p.waitForExit();
      assert.equal(exit.code, 1, p.output);
      assert.match(p.stderr, new RegExp(`the metrics and ${which} services are both configured on 127\\.0\\.0\\.1:45123`));
      assert.doesNotMatch(p.stdout, /Started/);
    }
  });

  it('rejects unknown --metrics-config keys and bad values, naming them', async () => {
    for (const [arg, message] of [
      ['--metrics-config=histogram=true', /--metrics-config has no key 'histogram'/],
      ['--metrics-config=histogram_latencies=maybe', /--metrics-config histogram_latencies expects a boolean/],
      ['--metrics-config=histogram_buckets=nv_inference_count:1,2', /histogram_buckets expects <family>:<b1>,<b2>/],
      ['--metrics-config=histogram_buckets=nv_inference_request_histogram_us:1,x', /expects finite numbers/],
      ['--metrics-interval-ms=0', /--metrics-interval-ms expects a number of milliseconds > 0/],
    ] as const) {
      const { exit, stderr } = await runNereid(['serve', `--model-repository=${repo}`, arg]);
      assert.equal(exit.code, 3, stderr);
      assert.match(stderr, message);
    }
  });

  it('accepts summary_latencies with a warning that summaries are not implemented', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--metrics-config=summary_latencies=true', '--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01']);
    await server.process.stop();
    assert.match(server.process.stderr, /summary_latencies=true has no effect/);
  });
});
