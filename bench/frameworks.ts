/**
 * What Nereid adds over calling each framework's own runtime directly in Python, in one run, for
 * TensorFlow (SavedModel), OpenVINO (IR) and PyTorch (TorchScript): the same MLP (64 → H → H → 16
 * FP32, ReLU, the same weights; H = 256 and 1024) in each format, one instance, the server's
 * default threads.
 *   (a) latency per request at batch 1 and at batch 32, concurrency 1: Nereid (the `Server`
 *       facade, the dynamic batcher and the Python stub) against the runtime called in a Python
 *       process of the same interpreter with the same thread count; the difference of the means
 *       is what Nereid adds (target: under 200 µs at batch 1);
 *   (b) throughput under dynamic batching (64 concurrent batch-1 requests, max_batch_size 32)
 *       against the runtime's own batch-32 ceiling, 32 / (its batch-32 latency) (target: at least
 *       0.6 of it).
 * The direct runner and Nereid alternate in windows, three rounds, medians kept (the machine is
 * shared and noisy). A framework whose runtime is missing is skipped with a line saying why and the
 * command that installs it; the others still run.
 *
 * Usage: node dist/bench/frameworks.js [--seconds N] [--json out.json] [--only tensorflow,openvino,pytorch]
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Server, silentLogger, type InferRequest } from '@nereid/server';
import { alternate, benchArgs, compared, medianOf, report, runLoad, type Figure } from './lib.js';

const { seconds, jsonPath, value } = benchArgs();
const RUNTIMES_PYTHON = fileURLToPath(new URL('../../.venv-runtimes/bin/python3', import.meta.url));
const SYSTEM_PYTHON = '/usr/bin/python3';
const IN = 64;
const OUT = 16;
const BATCH = 32;
const CLIENTS = 64;
/** The server's default intra-op threads for one instance (threads.ts): the cores but one. */
const THREADS = Math.max(1, availableParallelism() - 1);

interface Framework {
  name: 'tensorflow' | 'openvino' | 'pytorch';
  python: string;
  module: string;
  install: string;
  /** Python that writes the model into sys.argv[1] (the version directory) from W1, B1, … in sys.argv[2]. */
  make: string;
  /** The model name's prefix and the configuration line that picks the backend. */
  prefix: string;
  platform: string;
  inputName: string;
  outputName: string;
  /** Python that defines `load(version_dir, threads)` returning `run(x) -> numpy`, the runtime's own call. */
  direct: string;
}

/**
 * The hidden widths measured: 256, where the runtime's own work is small and what Nereid adds per
 * request shows most, and 1024, a model whose batch of 32 costs milliseconds.
 */
const HIDDEN = [256, 1024];

/** The weights, made with numpy: W1 [64,H], W2 [H,H], W3 [H,16] and biases, H = sys.argv[2]. */
const WEIGHTS = String.raw`
import sys, numpy as np
rng = np.random.default_rng(7)
H = int(sys.argv[2])
scale = 1.0 / np.sqrt(H)
np.savez(sys.argv[1],
         w1=(rng.standard_normal((${IN}, H)) * 0.1).astype(np.float32), b1=(rng.standard_normal(H) * 0.1).astype(np.float32),
         w2=(rng.standard_normal((H, H)) * scale).astype(np.float32), b2=(rng.standard_normal(H) * 0.1).astype(np.float32),
         w3=(rng.standard_normal((H, ${OUT})) * scale).astype(np.float32), b3=(rng.standard_normal(${OUT}) * 0.1).astype(np.float32))
`;

function config(name: string, platform: string, input: string, output: string): string {
  return `name: "${name}"
${platform}
max_batch_size: ${BATCH}
input [ { name: "${input}" data_type: TYPE_FP32 dims: [ ${IN} ] } ]
output [ { name: "${output}" data_type: TYPE_FP32 dims: [ ${OUT} ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

const FRAMEWORKS: Framework[] = [
  {
    name: 'tensorflow',
    python: RUNTIMES_PYTHON,
    module: 'tensorflow',
    install: 'node scripts/setup.mjs runtimes',
    make: String.raw`
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf
w = np.load(sys.argv[2])
class Mlp(tf.Module):
    def __init__(self):
        self.v = {k: tf.constant(w[k]) for k in w.files}
    @tf.function(input_signature=[tf.TensorSpec([None, ${IN}], tf.float32, name="INPUT0")])
    def serve(self, INPUT0):
        v = self.v
        h = tf.nn.relu(tf.matmul(INPUT0, v["w1"]) + v["b1"])
        h = tf.nn.relu(tf.matmul(h, v["w2"]) + v["b2"])
        return {"OUTPUT0": tf.matmul(h, v["w3"]) + v["b3"]}
m = Mlp()
tf.saved_model.save(m, os.path.join(sys.argv[1], "model.savedmodel"), signatures={"serving_default": m.serve})
`,
    prefix: 'tf',
    platform: 'platform: "tensorflow_savedmodel"',
    inputName: 'INPUT0',
    outputName: 'OUTPUT0',
    direct: String.raw`
def load(version_dir, threads):
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    # As the tensorflow runner runs a SavedModel (and Triton's backend): its MetaGraph in a session,
    # the signature's tensors fed and fetched by name through a callable made once, the graph's
    # operations on the calling thread (the runner's default without TF_NUM_INTER_THREADS).
    graph = tf.Graph()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=-1)
    session = tf.compat.v1.Session(graph=graph, config=config)
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], os.path.join(version_dir, "model.savedmodel"))
    sig = meta.signature_def["serving_default"]
    call = session.make_callable([graph.get_tensor_by_name(sig.outputs["OUTPUT0"].name)],
                                 feed_list=[graph.get_tensor_by_name(sig.inputs["INPUT0"].name)])
    return lambda x: call(x)[0]
`,
  },
  {
    name: 'openvino',
    python: RUNTIMES_PYTHON,
    module: 'openvino',
    install: 'node scripts/setup.mjs runtimes',
    make: String.raw`
import os, sys
import numpy as np, openvino as ov
import openvino.opset13 as ops
w = np.load(sys.argv[2])
x = ops.parameter([-1, ${IN}], np.float32, name="INPUT0")
x.output(0).get_tensor().set_names({"INPUT0"})
h = ops.relu(ops.add(ops.matmul(x, ops.constant(w["w1"]), False, False), ops.constant(w["b1"])))
h = ops.relu(ops.add(ops.matmul(h, ops.constant(w["w2"]), False, False), ops.constant(w["b2"])))
y = ops.add(ops.matmul(h, ops.constant(w["w3"]), False, False), ops.constant(w["b3"]))
y.output(0).get_tensor().set_names({"OUTPUT0"})
ov.save_model(ov.Model([y], [x], "mlp"), os.path.join(sys.argv[1], "model.xml"))
`,
    prefix: 'ov',
    platform: 'backend: "openvino"',
    inputName: 'INPUT0',
    outputName: 'OUTPUT0',
    direct: String.raw`
def load(version_dir, threads):
    import os
    import openvino as ov
    # As the openvino backend compiles it: the thread count, OpenVINO's defaults otherwise.
    compiled = ov.Core().compile_model(os.path.join(version_dir, "model.xml"), "CPU", {"INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    def run(x):
        request.infer({0: x})
        return request.get_output_tensor(0).data.copy()
    return run
`,
  },
  {
    name: 'pytorch',
    python: SYSTEM_PYTHON,
    module: 'torch',
    install: 'apt-get install python3-torch (or: node scripts/setup.mjs test)',
    make: String.raw`
import os, sys
import numpy as np, torch
w = {k: torch.from_numpy(v) for k, v in np.load(sys.argv[2]).items()}
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for k, v in w.items():
            self.register_buffer(k, v)
    def forward(self, x):
        h = torch.relu(x @ self.w1 + self.b1)
        h = torch.relu(h @ self.w2 + self.b2)
        return h @ self.w3 + self.b3
torch.jit.save(torch.jit.script(Mlp()), os.path.join(sys.argv[1], "model.pt"))
`,
    prefix: 'pt',
    platform: 'platform: "pytorch_libtorch"',
    inputName: 'INPUT__0',
    outputName: 'OUTPUT__0',
    direct: String.raw`
def load(version_dir, threads):
    import os, torch
    torch.set_num_threads(threads)
    m = torch.jit.load(os.path.join(version_dir, "model.pt"), map_location="cpu").eval()
    def run(x):
        with torch.inference_mode():
            return m(torch.from_numpy(x)).numpy()
    return run
`,
  },
];

/**
 * The direct runner: loads the model once, then for each line `<batch> <seconds>` on stdin calls
 * the runtime in a closed loop on one random input of that batch and answers one JSON line of the
 * mean and median latency in µs; `check` answers the output of the check input for comparison.
 */
const DIRECT_LOOP = String.raw`
import json, sys, time
import numpy as np
run = load(sys.argv[1], int(sys.argv[2]))
rng = np.random.default_rng(1)
for line in sys.stdin:
    words = line.split()
    if words[0] == "check":
        x = np.arange(${IN}, dtype=np.float32).reshape(1, ${IN}) / ${IN}
        print(json.dumps({"out": run(x).reshape(-1).tolist()}), flush=True)
        continue
    batch, seconds = int(words[0]), float(words[1])
    x = rng.standard_normal((batch, ${IN})).astype(np.float32)
    for _ in range(20):
        run(x)
    times = []
    cpu0 = time.process_time()
    start = time.perf_counter()
    end = start + seconds
    while True:
        t0 = time.perf_counter()
        run(x)
        t1 = time.perf_counter()
        times.append((t1 - t0) * 1e6)
        if t1 >= end:
            break
    cores = (time.process_time() - cpu0) / (time.perf_counter() - start)
    times.sort()
    print(json.dumps({"mean": sum(times) / len(times), "p50": times[len(times) // 2], "n": len(times), "cores": cores}), flush=True)
`;

class DirectRunner {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: AsyncIterator<string>;

  constructor(fw: Framework, versionDir: string) {
    // OpenBLAS (the matrix products of a torch built without MKL) keeps a thread per core that
    // torch.set_num_threads does not limit; the server caps it at the instance's threads
    // (pytorch_model.py), and so does this.
    const env = { ...process.env, TF_CPP_MIN_LOG_LEVEL: '3', OPENBLAS_NUM_THREADS: String(THREADS) };
    this.#child = spawn(fw.python, ['-c', `${fw.direct}\n${DIRECT_LOOP}`, versionDir, String(THREADS)], { env });
    this.#child.stderr.resume();
    this.#lines = createInterface({ input: this.#child.stdout })[Symbol.asyncIterator]();
  }

  async ask<T>(line: string): Promise<T> {
    this.#child.stdin.write(`${line}\n`);
    const next = await this.#lines.next();
    if (next.done) throw new Error(`the direct runner exited (${String(this.#child.exitCode)})`);
    return JSON.parse(next.value) as T;
  }

  close(): void {
    this.#child.stdin.end();
  }
}

/** Runs `script` from a file (torch.jit.script reads the source of the classes it compiles). */
async function runPython(python: string, script: string, args: string[]): Promise<void> {
  const file = join(repo, 'make.py');
  await writeFile(file, script);
  const r = spawnSync(python, [file, ...args], { encoding: 'utf8', env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '3' } });
  if (r.status !== 0) throw new Error(`${python} failed (${String(r.status)}): ${(r.stderr || r.error?.message || '').trim().split('\n').slice(-5).join(' | ')}`);
}

function available(fw: Framework): string | undefined {
  if (!existsSync(fw.python)) return `${fw.python} does not exist (run: ${fw.install})`;
  const r = spawnSync(fw.python, ['-c', `import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("${fw.module}") else 3)`]);
  return r.status === 0 ? undefined : `${fw.python} cannot import ${fw.module} (run: ${fw.install})`;
}

const only = value('only')?.split(',');
const chosen = FRAMEWORKS.filter((fw) => only === undefined || only.includes(fw.name));
const ready: Framework[] = [];
for (const fw of chosen) {
  const why = available(fw);
  if (why === undefined) ready.push(fw);
  else console.log(`frameworks: ${fw.name} skipped, ${why}`);
}
if (ready.length === 0) process.exit(0);

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-frameworks-'));
const modelName = (fw: Framework, hidden: number) => `${fw.prefix}_mlp${hidden}`;
for (const hidden of HIDDEN) {
  const weights = join(repo, `weights${hidden}.npz`);
  await runPython(ready[0]!.python, WEIGHTS, [weights, String(hidden)]);
  for (const fw of ready) {
    const name = modelName(fw, hidden);
    const versionDir = join(repo, name, '1');
    await mkdir(versionDir, { recursive: true });
    await writeFile(join(repo, name, 'config.pbtxt'), config(name, fw.platform, fw.inputName, fw.outputName));
    await runPython(fw.python, fw.make, [versionDir, weights]);
  }
  await rm(weights);
}
await rm(join(repo, 'make.py'));

const server = new Server({ modelRepositories: [repo], logger: silentLogger() });
await server.load();
if (server.startReport.failures.length > 0) throw new Error(`models failed to load: ${JSON.stringify(server.startReport.failures)}`);

/** Nereid against the runtime called directly, for one framework and width. */
async function measure(fw: Framework, hidden: number): Promise<Figure[]> {
  const model = modelName(fw, hidden);
  const direct = new DirectRunner(fw, join(repo, model, '1'));
  const input = (batch: number) => Float32Array.from({ length: batch * IN }, (_, i) => Math.sin(i));
  const request = (data: Float32Array): InferRequest => ({
    model,
    inputs: [{ name: fw.inputName, datatype: 'FP32', shape: [data.length / IN, IN], data }],
  });
  try {
    // Both answer the same input alike (the model files hold the same network).
    const check = Float32Array.from({ length: IN }, (_, i) => i / IN);
    const [ours, theirs] = await Promise.all([server.infer(request(check)), direct.ask<{ out: number[] }>('check')]);
    const bytes = ours.outputs.find((o) => o.name === fw.outputName)!.data;
    const got = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const worst = Math.max(...theirs.out.map((v, i) => Math.abs(v - got[i]!)));
    if (!(worst < 1e-4)) throw new Error(`${model}: Nereid's output differs from the runtime's by ${worst}`);

    const one = request(input(1));
    const many = request(input(BATCH));
    type Window = { b1: number; b1p50: number; b32: number; batching: number; cores: number };
    const [nereid, runtime] = await alternate<'nereid' | 'direct', Window>(['nereid', 'direct'], 3, async (target) => {
      if (target === 'direct') {
        const b1 = await direct.ask<{ mean: number; p50: number; cores: number }>(`1 ${seconds}`);
        const b32 = await direct.ask<{ mean: number; cores: number }>(`${BATCH} ${seconds}`);
        return { b1: b1.mean, b1p50: b1.p50, b32: b32.mean, batching: 0, cores: Math.max(b1.cores, b32.cores) };
      }
      const b1 = await runLoad(() => server.infer(one), 1, seconds);
      const b32 = await runLoad(() => server.infer(many), 1, seconds);
      const batching = await runLoad(() => server.infer(one), CLIENTS, seconds);
      return { b1: b1.meanLatencyUs, b1p50: b1.p50Us, b32: b32.meanLatencyUs, batching: batching.throughput, cores: 0 };
    });
    const n = medianOf(nereid!);
    const d = medianOf(runtime!);
    const what = `${fw.name} MLP ${hidden}`;
    return [
      { name: `${what} added latency at batch 1`, value: n.b1 - d.b1, unit: 'us' },
      { name: `${what} added latency at batch 1, p50`, value: n.b1p50 - d.b1p50, unit: 'us' },
      compared(`${what} latency at batch 1`, 'us', n.b1, d.b1, 'runtime called directly'),
      { name: `${what} added latency at batch ${BATCH}`, value: n.b32 - d.b32, unit: 'us' },
      compared(`${what} latency at batch ${BATCH}`, 'us', n.b32, d.b32, 'runtime called directly'),
      compared(`${what} throughput under dynamic batching (${CLIENTS} clients)`, 'infer/s', n.batching, (BATCH * 1e6) / d.b32, `batch-${BATCH} ceiling`),
      { name: `${what} CPU cores the direct runtime used (${THREADS} thread(s) asked)`, value: d.cores, unit: 'cores' },
    ];
  } finally {
    direct.close();
  }
}

const figures: Figure[] = [];
for (const hidden of HIDDEN) for (const fw of ready) figures.push(...(await measure(fw, hidden)));
await server.stop();
await rm(repo, { recursive: true, force: true });
report(figures, jsonPath);
