/**
 * bench/vs-triton.ts end to end in its quick mode, on two of its points (add_sub over gRPC at
 * concurrency 4, and the decoupled model over gRPC streams): both servers start on the shared
 * repository, both load generators run, and every figure, breakdown row and event-loop row is
 * printed with a number. No figure is compared with a bound (the machines are noisy); this only
 * checks that the benchmark works.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { it } from 'node:test';
import { parseFigureLine } from '../../../bench/summary.js';
import { REPO_ROOT } from '../../helpers/cli.js';
import { requireEnvironment } from '../helpers/tier.js';
import { requireTriton } from '../helpers/triton.js';

it('vs-triton --quick measures both servers with both generators and prints every ratio, the breakdowns and the loop probe', { timeout: 120_000 }, async () => {
  requireEnvironment();
  requireTriton();
  const { stdout } = await new Promise<{ stdout: string }>((resolve, reject) =>
    execFile(
      process.execPath,
      [join(REPO_ROOT, 'dist', 'bench', 'vs-triton.js'), '--quick', '--points', 'add_sub_grpc_c4,decoupled'],
      { timeout: 110_000, maxBuffer: 16 * 1024 * 1024 },
      (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${out}\n${errOut}`)) : resolve({ stdout: out })),
    ),
  );
  const figures = stdout.split('\n').flatMap((l) => parseFigureLine(l) ?? []);
  const names = figures.map((f) => f.name).sort();
  const expected = [
    ...['pa', 'np'].flatMap((g) => ['throughput', 'p50', 'p99', 'batch', 'cpu'].map((w) => `vs_triton_${g}_add_sub_grpc_c4_${w}`)),
    ...['pa', 'np'].flatMap((g) => ['throughput', 'p50', 'p99', 'batch', 'cpu'].map((w) => `vs_triton_${g}_decoupled_grpc_stream_c4_${w}`)),
  ].sort();
  assert.deepEqual(names, expected, stdout);
  for (const f of figures) {
    assert.ok(f.value > 0 && f.baseline! > 0 && f.ratio! > 0, `${f.name} has no positive value, baseline and ratio\n${stdout}`);
  }
  // add_sub batches dynamically; the decoupled model runs one request per execution.
  assert.ok(figures.find((f) => f.name === 'vs_triton_pa_add_sub_grpc_c4_batch')!.value >= 1, stdout);
  assert.equal(figures.find((f) => f.name === 'vs_triton_pa_decoupled_grpc_stream_c4_batch')!.value, 1, stdout);
  assert.doesNotMatch(stdout, /not measured/);
  const rows = (point: string) => stdout.split('\n').filter((l) => l.startsWith('| ') && l.includes(` ${point} `));
  // One breakdown row and one loop-probe row per generator that measured the point, all numbers.
  assert.equal(rows('add_sub_grpc_c4').length, 4, stdout);
  assert.equal(rows('decoupled_grpc_stream_c4').length, 4, stdout);
  for (const row of [...rows('add_sub_grpc_c4'), ...rows('decoupled_grpc_stream_c4')]) assert.doesNotMatch(row, /–|NaN/, row);
});
