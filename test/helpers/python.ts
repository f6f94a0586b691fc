/**
 * Helpers for the Python and PyTorch backend tests: a check that the system Python can run them, a
 * logger that records lines, Triton-style `model.py` sources, and TorchScript models saved by
 * Debian's torch at test time (no binary is committed).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createLogger, type Logger } from '@nereid/server';
import { REPO_ROOT } from './cli.js';

/** The interpreter the backends use by default, with Debian's numpy and torch. */
export const PYTHON = '/usr/bin/python3';

/** The runtimes environment's interpreter (TensorFlow, OpenVINO): `node scripts/setup.mjs runtimes` makes it. */
export const RUNTIMES_PYTHON = join(REPO_ROOT, '.venv-runtimes', 'bin', 'python3');

/**
 * Runs `file` (an interpreter) with `args` and `stdin`, at most 180 s; resolves with its exit code
 * and output (TensorFlow's start-up chatter kept to warnings).
 */
export function runProcess(file: string, args: readonly string[], stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      { timeout: 180_000, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' } },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
        resolve({ code, stdout, stderr: err !== null && stderr === '' ? err.message : stderr });
      },
    );
    if (stdin !== undefined) child.stdin!.end(stdin);
  });
}

/** The Debian packages that provide the Python modules the tests import. */
const DEBIAN: Record<string, string> = {
  numpy: 'python3-numpy',
  torch: 'python3-torch libopenblas0-pthread',
  PIL: 'python3-pil',
  grpc: 'python3-grpcio',
  grpc_tools: 'python3-grpc-tools',
};

const checked = new Map<string, Promise<string | undefined>>();

/**
 * Why `PYTHON` cannot run the tests (a sentence naming the modules and the Debian packages that
 * provide them), or undefined when it imports every module of `modules`.
 */
export function pythonMissing(modules: readonly string[] = ['numpy']): Promise<string | undefined> {
  const key = modules.join(',');
  let reason = checked.get(key);
  if (reason === undefined) {
    reason = runProcess(PYTHON, ['-c', `import ${key}`]).then((r) =>
      r.code === 0
        ? undefined
        : `${PYTHON} cannot import ${modules.join(', ')}: ${r.stderr.trim().split('\n').pop()}. ` +
          `Install ${modules.map((m) => DEBIAN[m] ?? m).join(' ')} (apt-get install -y ...), or run npm test, which installs them`,
    );
    checked.set(key, reason);
  }
  return reason;
}

/**
 * Throws when `PYTHON` cannot import every module of `modules`. Called from a suite's `before`
 * hook, it makes the suite fail with the reason instead of running tests that cannot work.
 */
export async function requirePython(modules: readonly string[] = ['numpy']): Promise<void> {
  const reason = await pythonMissing(modules);
  if (reason !== undefined) throw new Error(reason);
}

/** Runs a Python script with `PYTHON`; rejects with its stderr when it fails. */
export async function runPython(script: string, args: readonly string[] = []): Promise<string> {
  const r = await runProcess(PYTHON, ['-c', script, ...args]);
  if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
  return r.stdout;
}

/**
 * Saves a TorchScript module to `path`: `source` defines `class M(torch.nn.Module)`, scripted
 * with torch.jit.script and saved with torch.jit.save.
 */
export async function saveTorchScript(path: string, source: string): Promise<void> {
  // torch.jit.script reads the class's source, so the script must be a file.
  await mkdir(dirname(path), { recursive: true });
  const dir = await mkdtemp(join(tmpdir(), 'nereid-torch-'));
  try {
    const script = join(dir, 'make_model.py');
    await writeFile(script, `import sys, torch\n${source}\ntorch.jit.save(torch.jit.script(M()), sys.argv[1])\n`);
    const r = await runProcess(PYTHON, [script, path]);
    if (r.code !== 0) throw new Error(`saving a TorchScript model failed (${r.code}): ${r.stderr}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A logger keeping every line (severity letter + message), for checking what models printed. */
export function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const base = createLogger({ info: false, warning: false, error: false });
  return {
    ...base,
    lines,
    settings: base.settings,
    update: (s) => base.update(s),
    isVerbose: () => true,
    info: (m: string) => void lines.push(`I ${m}`),
    warning: (m: string) => void lines.push(`W ${m}`),
    error: (m: string) => void lines.push(`E ${m}`),
    verbose: (_level: number, m: string) => void lines.push(`V ${m}`),
  };
}

/** Waits until `check` returns true, polling every 20 ms; throws naming `what` after `timeoutMs`. */
export async function waitUntil(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Whether a process exists and has not exited (a zombie waiting to be reaped counts as gone). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return true;
  }
}

/** Triton's `add_sub` example (python_backend/examples/add_sub), unchanged in substance. */
export const ADD_SUB_PY = String.raw`
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        output0_dtype = self.output0_dtype
        output1_dtype = self.output1_dtype
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (
                in_0.as_numpy() + in_1.as_numpy(),
                in_0.as_numpy() - in_1.as_numpy(),
            )
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(output1_dtype))
            inference_response = pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1])
            responses.append(inference_response)
        return responses

    def finalize(self):
        print("Cleaning up...")
`;

export const ADD_SUB_CONFIG = `
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
`;

/** An identity model over any datatype: OUTPUT0 = INPUT0, with request metadata as parameters. */
export const IDENTITY_PY = String.raw`
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        print("initialize", args["model_name"], args["model_instance_name"], flush=True)

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            params = json.loads(request.parameters())
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", in0.as_numpy())],
                parameters={"request_id": request.request_id(), "batch": len(requests),
                            "echo": str(params.get("echo", "")), "big": str(params.get("big", "")),
                            "version": self.args["model_version"]}))
        return responses
`;

/** `config.pbtxt` of a python identity model. */
export function identityConfig(name: string, datatype: string, options: { maxBatchSize?: number; dims?: string; extra?: string } = {}): string {
  const dims = options.dims ?? '[ -1 ]';
  return `
name: "${name}"
backend: "python"
max_batch_size: ${options.maxBatchSize ?? 8}
input [ { name: "INPUT0" data_type: ${datatype} dims: ${dims} } ]
output [ { name: "OUTPUT0" data_type: ${datatype} dims: ${dims} } ]
${options.extra ?? ''}
`;
}

/**
 * A decoupled model in Triton's repeat pattern: for IN = [a, b, c] it sends OUT = [a], [b], [c]
 * from a thread, then a flags-only final response; a negative value ends the request with an
 * error response instead.
 */
export const REPEAT_PY = String.raw`
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            threading.Thread(target=self.repeat, args=(sender, values)).start()
        return None

    def repeat(self, sender, values):
        for v in values:
            time.sleep(0.002)
            if v < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative value %d" % v)),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([v], dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
`;

export const REPEAT_CONFIG = `
name: "repeat"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
`;

/**
 * A Python model that sleeps `sleep` seconds (a request parameter) in `execute`, then answers its
 * pid as `PID` (INT64 [1]); `initialize` prints its pid.
 */
export const SLEEPY_PY = String.raw`
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        print("initialize pid", os.getpid(), flush=True)

    def execute(self, requests):
        out = []
        for request in requests:
            time.sleep(float(json.loads(request.parameters()).get("sleep", 0)))
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]))
        return out
`;
