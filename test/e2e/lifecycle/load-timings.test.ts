/**
 * Load and unload timings per model version and phase (docs/operations.md): one log line per
 * load and per unload, `nv_model_load_phase_duration_secs` and
 * `nv_model_unload_phase_duration_secs` on the metrics endpoint, and `Server.modelTimings()`.
 *
 * The probe backend's deliberate delays give lower bounds only; no test asserts how fast
 * anything is.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LOAD_PHASES, Server, createLogger, type Logger } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { promtoolCheck, sample, scrape, seriesOf, startMetrics, type RunningMetrics } from '../metrics/exposition.js';
import { ProbeBackend, probeConfig, probeWarmup } from './probe-backend.js';

/** A logger that keeps its info lines (and drops everything else). */
function capturingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const base = createLogger({ info: false, warning: false, error: false });
  return { lines, logger: { ...base, info: (m: string) => void lines.push(m) } };
}

const CREATE_DELAY_MS = 150;
const EXECUTE_DELAY_MS = 40;
const WARMUP_COUNT = 3;

describe('load and unload timings', () => {
  let repo: string;
  let server: Server;
  let metrics: RunningMetrics;
  let lines: string[];
  const probe = new ProbeBackend();

  before(async () => {
    repo = await makeRepository({
      slow: {
        'config.pbtxt': probeConfig('slow', {
          count: 2,
          parameters: { create_delay_ms: String(CREATE_DELAY_MS), execute_delay_ms: String(EXECUTE_DELAY_MS) },
          extra: probeWarmup('w', { count: WARMUP_COUNT }),
        }),
        '1/.keep': '',
      },
      simple: modelFiles(simpleModel()),
    });
    const captured = capturingLogger();
    lines = captured.lines;
    server = new Server({
      modelRepositories: [repo],
      backends: [probe.backend],
      logger: captured.logger,
      modelControlMode: 'explicit',
      loadModels: ['*'],
      metrics: { cpu: false },
    });
    await server.load();
    metrics = await startMetrics(server);
  });
  after(async () => {
    await metrics?.close();
    await server?.stop();
    await removeDir(repo);
  });

  it('logs one line per load with every phase', () => {
    for (const [model, version] of [['slow', 1], ['simple', 1]] as const) {
      const loaded = lines.filter((l) => l.startsWith(`loaded model '${model}' version ${version} in `));
      assert.equal(loaded.length, 1, lines.join('\n'));
      assert.match(
        loaded[0]!,
        /^loaded model '\w+' version 1 in \d+\.\d ms: read \d+\.\d ms, parse \d+\.\d ms, auto_complete \d+\.\d ms, backend_init \d+\.\d ms, warmup \d+\.\d ms$/,
      );
    }
  });

  it('exports every phase of every loaded version; the phases add up to the load duration', async () => {
    const text = await scrape(metrics.url);
    promtoolCheck(text);
    assert.match(text, /^# TYPE nv_model_load_phase_duration_secs gauge$/m);
    for (const model of ['slow', 'simple']) {
      const labels = (phase: string) => `{model="${model}",phase="${phase}",version="1"}`;
      const phases = LOAD_PHASES.map((phase) => sample(text, `nv_model_load_phase_duration_secs${labels(phase)}`));
      assert.ok(phases.every((p) => p >= 0));
      const total = sample(text, `nv_model_load_duration_secs{model="${model}",version="1"}`);
      const sum = phases.reduce((a, b) => a + b, 0);
      // The phases cover the load; the total also holds the bookkeeping between them.
      assert.ok(sum <= total + 1e-6 && sum >= total * 0.5, `${model}: phases ${phases.join(', ')} vs total ${total}`);
    }
    // The probe's deliberate delays are where they belong: instances are created in parallel.
    const slow = (phase: string) => sample(text, `nv_model_load_phase_duration_secs{model="slow",phase="${phase}",version="1"}`);
    assert.ok(slow('backend_init') >= (CREATE_DELAY_MS - 5) / 1e3, `backend_init ${slow('backend_init')}`);
    assert.ok(slow('warmup') >= (WARMUP_COUNT * EXECUTE_DELAY_MS - 5) / 1e3, `warmup ${slow('warmup')}`);
    assert.equal(seriesOf(text, 'nv_model_load_phase_duration_secs').length, 2 * LOAD_PHASES.length);
  });

  it('shows the same figures through Server.modelTimings()', async () => {
    const text = await scrape(metrics.url);
    const timings = server.modelTimings();
    assert.deepEqual(timings.map((t) => [t.name, t.version]), [['simple', '1'], ['slow', '1']]);
    for (const t of timings) {
      assert.equal(t.unload, undefined);
      assert.deepEqual(Object.keys(t.load!.phases), [...LOAD_PHASES]);
      assert.equal(t.load!.total_secs, sample(text, `nv_model_load_duration_secs{model="${t.name}",version="1"}`));
      for (const phase of LOAD_PHASES) {
        assert.equal(t.load!.phases[phase], sample(text, `nv_model_load_phase_duration_secs{model="${t.name}",phase="${phase}",version="1"}`));
      }
    }
  });

  it('an unload logs and exports its drain and release phases; the version’s load series go', async () => {
    // A request in flight makes the drain take at least one execution.
    const data = new Uint8Array(new Int32Array([3]).buffer);
    const inflight = server.infer({ model: 'slow', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data }] });
    await new Promise((resolve) => setTimeout(resolve, 5));
    await server.unloadModel('slow');
    assert.deepEqual([...(await inflight).outputs[0]!.data], [...data]);
    // The unload call returns once no version is READY (protocol.md §3.13); the release follows.
    for (let i = 0; i < 200 && !lines.some((l) => l.startsWith("unloaded model 'slow'")); i++) await new Promise((r) => setTimeout(r, 10));

    const unloaded = lines.filter((l) => l.startsWith("unloaded model 'slow' version 1 in "));
    assert.equal(unloaded.length, 1, lines.join('\n'));
    assert.match(unloaded[0]!, /^unloaded model 'slow' version 1 in \d+\.\d ms: drain \d+\.\d ms, release \d+\.\d ms$/);

    const text = await scrape(metrics.url);
    promtoolCheck(text);
    const drain = sample(text, 'nv_model_unload_phase_duration_secs{model="slow",phase="drain",version="1"}');
    const release = sample(text, 'nv_model_unload_phase_duration_secs{model="slow",phase="release",version="1"}');
    assert.ok(drain >= 0 && release >= 0);
    assert.deepEqual(seriesOf(text, 'nv_model_load_phase_duration_secs').filter((s) => s.includes('model="slow"')), []);
    assert.deepEqual(server.modelTimings('slow'), [
      { name: 'slow', version: '1', unload: { total_secs: server.modelTimings('slow')[0]!.unload!.total_secs, phases: { drain, release } } },
    ]);
    assert.equal(probe.instancesReleased, 2);
  });
});
