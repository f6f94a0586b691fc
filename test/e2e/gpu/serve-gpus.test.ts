/**
 * `nereid serve` with the fake nvidia-smi of test/helpers/nvidia-smi first on PATH: the devices it
 * finds in its start-up log, CUDA_VISIBLE_DEVICES in its environment honoured (restricted and
 * renumbered), and the nv_gpu_* families on its metrics endpoint, switched by
 * --allow-gpu-metrics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { simpleModel } from '@nereid/testkit';
import { NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { promtoolCheck, scrape } from '../metrics/exposition.js';

after(stopAllNereid);

const FAKE_BIN = fileURLToPath(new URL('../../../../test/helpers/nvidia-smi/bin', import.meta.url));
const METRICS_LINE = /Started Metrics Service at 127\.0\.0\.1:(\d+)/;
const H100_MIG_GPU = 'GPU-5e0d3b9a-7c2f-4e1b-a6d8-9f0e1d2c3b4a';
const H100_WHOLE = 'GPU-c4b3a291-8f7e-4d6c-b5a4-3e2f1d0c9b8a';

let repo: string;
before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
});
after(async () => {
  if (repo) await removeDir(repo);
});

function env(fixture: string, visible?: string): Record<string, string> {
  return { PATH: `${FAKE_BIN}:${process.env['PATH']}`, FAKE_NVIDIA_SMI_FIXTURE: fixture, ...(visible !== undefined ? { CUDA_VISIBLE_DEVICES: visible } : {}) };
}

describe('nereid serve on an H100 machine (recorded nvidia-smi)', () => {
  it('logs every GPU and MIG instance found and reports the GPU families of each GPU', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--metrics-interval-ms=100'], env('h100-mig'));
    try {
      const stdout = server.process.stdout;
      assert.match(stdout, new RegExp(`GPU 0: NVIDIA H100 80GB HBM3 \\(${H100_MIG_GPU}\\), 79\\.6 GiB, MIG mode with 5 instance\\(s\\)`));
      assert.match(stdout, /  MIG 3g\.40gb device 0 \(MIG-2f4a6c8e-0b2d-5f4a-9c6e-8b0d2f4a6c8e\), 39\.3 GiB/);
      assert.match(stdout, new RegExp(`GPU 1: NVIDIA H100 80GB HBM3 \\(${H100_WHOLE}\\), 79\\.6 GiB\\n`));
      const port = Number((await server.process.waitFor(METRICS_LINE))[1]);
      let text = '';
      for (let i = 0; i < 50 && !text.includes('nv_gpu_power_usage{'); i++) {
        await new Promise((r) => setTimeout(r, 100));
        text = await scrape(`http://127.0.0.1:${port}/metrics`);
      }
      assert.match(text, new RegExp(`^nv_gpu_power_usage\\{gpu_uuid="${H100_MIG_GPU}"\\} 112\\.4$`, 'm'));
      assert.match(text, new RegExp(`^nv_gpu_power_limit\\{gpu_uuid="${H100_WHOLE}"\\} 700$`, 'm'));
      assert.match(text, new RegExp(`^nv_gpu_utilization\\{gpu_uuid="${H100_WHOLE}"\\} 0\\.12$`, 'm'));
      // A GPU in MIG mode has no utilization figure: no series rather than a made-up one.
      assert.doesNotMatch(text, new RegExp(`^nv_gpu_utilization\\{gpu_uuid="${H100_MIG_GPU}"\\}`, 'm'));
      promtoolCheck(text);
    } finally {
      const exit = await server.process.stop();
      assert.equal(exit.code, 0, server.process.output);
    }
  });

  it('CUDA_VISIBLE_DEVICES=1 leaves one GPU, numbered 0; --allow-gpu-metrics=false drops the GPU families', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--metrics-interval-ms=100', '--allow-gpu-metrics=false'], env('h100-mig', '1'));
    try {
      assert.match(server.process.stdout, new RegExp(`GPU 0: NVIDIA H100 80GB HBM3 \\(${H100_WHOLE}\\)`));
      assert.doesNotMatch(server.process.stdout, new RegExp(H100_MIG_GPU));
      const port = Number((await server.process.waitFor(METRICS_LINE))[1]);
      await new Promise((r) => setTimeout(r, 300));
      assert.doesNotMatch(await scrape(`http://127.0.0.1:${port}/metrics`), /nv_gpu_|nv_energy/);
    } finally {
      await server.process.stop();
    }
  });

  it("nereid config completes KIND_AUTO as a load would: a Python model on the whole GPU, an ONNX model on the CPU", async () => {
    // A model directory of its own: the repository above is served by the other tests.
    const python = join(await makeRepository({}), 'auto_python');
    await mkdir(join(python, '1'), { recursive: true });
    await writeFile(join(python, 'config.pbtxt'), 'backend: "python"\ninput [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n');
    await writeFile(join(python, '1', 'model.py'), 'class TritonPythonModel:\n    def execute(self, requests):\n        return []\n');
    for (const [dir, expected] of [
      [python, /kind: KIND_GPU[\s\S]*gpus: \[?\s*1/],
      [join(repo, 'simple'), /kind: KIND_CPU/],
    ] as const) {
      const p = new NereidProcess(['config', dir], env('h100-mig'));
      const exit = await p.waitForExit();
      assert.equal(exit.code, 0, p.output);
      assert.match(p.stdout, expected);
    }
    await removeDir(dirname(python));
  });

  it('without nvidia-smi: one info line, no GPU families', async () => {
    // A PATH with no nvidia-smi, even on a machine with GPUs (node is started by its full path).
    const server = await startNereidServe([`--model-repository=${repo}`], { PATH: '/nonexistent-nereid-test-path' });
    try {
      assert.match(server.process.stdout, /GPU discovery: nvidia-smi was not found; no GPUs/);
      assert.match(server.process.stdout, /GPUs: none/);
      const port = Number((await server.process.waitFor(METRICS_LINE))[1]);
      assert.doesNotMatch(await scrape(`http://127.0.0.1:${port}/metrics`), /nv_gpu_/);
    } finally {
      await server.process.stop();
    }
  });
});
