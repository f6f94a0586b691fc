/**
 * The GPU check's preparation and script on a machine without a GPU (docs/testing.md, "The GPU
 * check"): scripts/gpu-bundle.mjs bundles the server into a folder with no node_modules within
 * reach (as on the GPU machine, which gets no node_modules) and the bundle serves a Python model;
 * scripts/gpu-check.sh then runs against that bundle with this Node, the GPU steps reporting that
 * there is no GPU, and its report says so. Only the Node tarball (npm registry) and the GPU steps
 * are left to the GPU machine.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PYTHON, requirePython } from '../helpers/python.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));

function run(file: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd: root, env: { ...process.env, ...env }, timeout: 240_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, output: stdout + stderr });
    });
  });
}

let dir: string;

before(async () => {
  await requirePython(['numpy', 'torch']);
  dir = await mkdtemp(join(tmpdir(), 'nereid-gpu-check-'));
});

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

test('gpu-bundle.mjs: the bundled server starts without node_modules and serves a Python model', async () => {
  const { code, output } = await run(process.execPath, ['scripts/gpu-bundle.mjs', '--check', '--out', join(dir, 'bundle'), '--without-node']);
  assert.equal(code, 0, output);
  assert.match(output, /the bundled server served a Python model \(without onnxruntime-node\)/);
});

test('gpu-check.sh without a GPU: every step passes or says why it was skipped, and the report says so', async () => {
  const out = join(dir, 'out');
  const { code, output } = await run('bash', ['scripts/gpu-check.sh'], { BUNDLE: join(dir, 'bundle'), NODE: process.execPath, OUT: out, PYTHON });
  assert.equal(code, 0, output);
  assert.doesNotMatch(output, /FAILED/);
  const report = JSON.parse(await readFile(join(out, 'gpu-check.json'), 'utf8')) as {
    gpu: boolean;
    no_gpu: string;
    steps: { step: string; result: string; why?: string }[];
    figures: Record<string, { p50_ms: number; runs: number }>;
    gpu_scale_device: number;
  };
  assert.equal(report.gpu, false);
  assert.match(report.no_gpu, /torch/);
  assert.deepEqual(
    report.steps.map((s) => [s.step, s.result]),
    [
      ['models ready', 'ok'],
      ['identity_py over HTTP (binary)', 'ok'],
      ['gpu_scale (TorchScript) over HTTP, and where it ran', 'ok'],
      ['CUDA registration refused without a GPU', 'ok'],
      ['GPU metrics (nv_gpu_* families on /metrics)', 'skipped'],
      ['CUDA shared-memory round trip (cupy client)', 'skipped'],
    ],
  );
  assert.match(report.steps[4]!.why!, /^no GPU/);
  assert.match(report.steps[5]!.why!, /^no GPU/);
  assert.equal(report.gpu_scale_device, -1);
  assert.deepEqual(Object.keys(report.figures).sort(), ['gpu_scale HTTP binary infer', 'identity_py HTTP binary infer']);
  for (const f of Object.values(report.figures)) assert.equal(f.runs, 100);
  assert.match(await readFile(join(out, 'server.log'), 'utf8'), /CUDA shared memory region 'r' refused: no usable CUDA device/);
});
