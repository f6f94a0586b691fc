/**
 * Helpers for the OpenVINO backend tests: models made at test time by OpenVINO itself (an ONNX
 * model from the project's ONNX writer converted with `openvino.convert_model` and saved as an IR
 * with `openvino.save_model`, or a graph built with OpenVINO's opset API), and OpenVINO called
 * directly on the same model and input, for checking what the server answers element by element.
 * They run the runtimes environment's interpreter (`node scripts/setup.mjs runtimes` makes it).
 */
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { encodeModel, type OnnxGraphBuilder } from '@nereid/testkit';
import { RUNTIMES_PYTHON, runProcess } from './python.js';

const run = (args: readonly string[]) => runProcess(RUNTIMES_PYTHON, args);

/**
 * Throws, naming the command that installs it, when the runtimes environment cannot import
 * OpenVINO. Called from a suite's `before` hook, it fails the suite with the reason.
 */
export async function requireOpenVino(): Promise<void> {
  if (!existsSync(RUNTIMES_PYTHON)) throw new Error(`${RUNTIMES_PYTHON} does not exist: run node scripts/setup.mjs runtimes`);
  const r = await run(['-c', 'import openvino']);
  if (r.code !== 0) throw new Error(`${RUNTIMES_PYTHON} cannot import openvino: ${r.stderr.trim().split('\n').pop()}; run node scripts/setup.mjs runtimes`);
}

/** Runs a Python script with the runtimes interpreter; rejects with its stderr when it fails. */
export async function runOpenVinoPython(script: string, args: readonly string[] = []): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-ov-'));
  try {
    const file = join(dir, 'script.py');
    await writeFile(file, script);
    const r = await run([file, ...args]);
    if (r.code !== 0) throw new Error(`the OpenVINO script failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Writes `graph` (the project's ONNX writer) as an ONNX model file at `path`. */
export async function writeOnnx(path: string, graph: OnnxGraphBuilder): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, encodeModel(graph).bytes);
}

export interface ConvertOptions {
  /** OpenVINO layouts to give ports by name (for example `{ X: 'NC', Y: 'NC' }`), saved in the IR. */
  readonly layouts?: Readonly<Record<string, string>>;
}

/**
 * Converts the ONNX model `onnxPath` into an IR `xmlPath` (and its `.bin`) with OpenVINO's own
 * converter (`openvino.convert_model` then `openvino.save_model`, weights kept in FP32).
 */
export async function convertToIr(onnxPath: string, xmlPath: string, options: ConvertOptions = {}): Promise<void> {
  await mkdir(dirname(xmlPath), { recursive: true });
  await runOpenVinoPython(
    `import json, sys
import openvino as ov
model = ov.convert_model(sys.argv[1])
layouts = json.loads(sys.argv[3])
for port in list(model.inputs) + list(model.outputs):
    for name in port.get_names():
        if name in layouts:
            port.get_node().set_layout(ov.Layout(layouts[name]))
ov.save_model(model, sys.argv[2], compress_to_fp16=False)
`,
    [onnxPath, xmlPath, JSON.stringify(options.layouts ?? {})],
  );
}

/** Copies the IR `fromXml` and its `.bin` to `toXml` (and its `.bin`), for models that share one conversion. */
export async function copyIr(fromXml: string, toXml: string): Promise<void> {
  await mkdir(dirname(toXml), { recursive: true });
  await copyFile(fromXml, toXml);
  await copyFile(fromXml.replace(/\.xml$/, '.bin'), toXml.replace(/\.xml$/, '.bin'));
}

/**
 * Saves a model built with OpenVINO's opset API as an IR at `xmlPath`: `source` runs with `ov`,
 * `ops` (opset13) and `np` imported and must bind `model` to an `ov.Model`.
 */
export async function saveOpsetModel(xmlPath: string, source: string): Promise<void> {
  await mkdir(dirname(xmlPath), { recursive: true });
  await runOpenVinoPython(`import sys\nimport numpy as np\nimport openvino as ov\nfrom openvino import opset13 as ops\n${source}\nov.save_model(model, sys.argv[1], compress_to_fp16=False)\n`, [xmlPath]);
}

/** A tensor for `openvinoInfer`: numpy dtype name, shape and little-endian element bytes. */
export interface RawTensor {
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: ArrayBufferView;
}

function rawBytes(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * OpenVINO called directly: reads `modelPath`, compiles it for the CPU (with `properties`, e.g.
 * `{ INFERENCE_NUM_THREADS: 1 }`) and infers `inputs` (by port name). Returns the outputs by
 * port name as raw tensors.
 */
export async function openvinoInfer(
  modelPath: string,
  inputs: Readonly<Record<string, RawTensor>>,
  properties: Readonly<Record<string, string | number>> = {},
): Promise<Record<string, { dtype: string; shape: number[]; data: Uint8Array }>> {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-ov-infer-'));
  try {
    const request = Object.fromEntries(
      Object.entries(inputs).map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, data: Buffer.from(rawBytes(t.data)).toString('base64') }]),
    );
    const file = join(dir, 'request.json');
    await writeFile(file, JSON.stringify({ model: modelPath, inputs: request, properties }));
    await runOpenVinoPython(
      `import base64, json, sys
import numpy as np
import openvino as ov
spec = json.load(open(sys.argv[1]))
compiled = ov.Core().compile_model(spec["model"], "CPU", spec["properties"])
feed = {name: np.frombuffer(base64.b64decode(t["data"]), dtype=t["dtype"]).reshape(t["shape"]) for name, t in spec["inputs"].items()}
results = compiled.create_infer_request().infer(feed)
out = {}
for port in compiled.outputs:
    array = np.ascontiguousarray(results[port])
    for name in port.get_names():
        out[name] = {"dtype": array.dtype.name, "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}
json.dump(out, open(sys.argv[2], "w"))
`,
      [file, join(dir, 'result.json')],
    );
    const result = JSON.parse(await readFile(join(dir, 'result.json'), 'utf8')) as Record<string, { dtype: string; shape: number[]; data: string }>;
    return Object.fromEntries(Object.entries(result).map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, data: new Uint8Array(Buffer.from(t.data, 'base64')) }]));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
