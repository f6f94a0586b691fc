/**
 * Backends Triton knows that Nereid cannot run (models-and-scheduling.md §1.3): a model naming one
 * is refused at load with an error that says so and what to do instead, never with a generic
 * "backend not found".
 */

export interface UnsupportedBackend {
  /** What the backend is, for people. */
  readonly what: string;
  /** Why it cannot run on this server. */
  readonly why: string;
  /** What to do instead. */
  readonly instead: string;
}

const GPU_ONLY = 'it needs NVIDIA CUDA and a GPU in the server process, and this server runs its in-process backends on CPUs only';
const TO_ONNX = "export the model to ONNX and serve it with backend 'onnxruntime'";

/** By `backend` name (after platform → backend derivation, §1.4). */
export const UNSUPPORTED_BACKENDS: ReadonlyMap<string, UnsupportedBackend> = new Map([
  ['tensorrt', { what: 'TensorRT (platform tensorrt_plan, model.plan)', why: `its runtime cannot be installed here: ${GPU_ONLY}`, instead: `${TO_ONNX} (a TensorRT plan is built from one)` }],
  ['fil', { what: 'FIL, the RAPIDS forest inference library', why: `its runtime cannot be installed here: ${GPU_ONLY}`, instead: "convert the forest to ONNX (skl2onnx, onnxmltools) and serve it with backend 'onnxruntime'" }],
  ['dali', { what: 'NVIDIA DALI data pipelines (model.dali)', why: `its runtime cannot be installed here: ${GPU_ONLY}`, instead: 'write the pre-processing as a custom JavaScript backend (docs/backends.md)' }],
  ['vllm', { what: 'vLLM', why: `its runtime cannot be installed here: ${GPU_ONLY}`, instead: 'serve a language model through an ONNX export or a custom JavaScript backend' }],
  ['tensorrtllm', { what: 'TensorRT-LLM', why: `its runtime cannot be installed here: ${GPU_ONLY}`, instead: 'serve a language model through an ONNX export or a custom JavaScript backend' }],
  ['paddle', { what: 'PaddlePaddle', why: 'the Paddle inference runtime cannot be installed on this server', instead: `convert the model with paddle2onnx and serve it with backend 'onnxruntime'` }],
  ['armnn_tflite', { what: 'TensorFlow Lite through Arm NN', why: 'its runtime cannot be installed on this server', instead: `convert the model with tf2onnx and serve it with backend 'onnxruntime'` }],
]);

/**
 * The load error text for model `model` naming unsupported backend `name`; `supported` lists
 * what this server runs.
 */
export function unsupportedBackendMessage(name: string, model: string, supported: readonly string[]): string | undefined {
  const b = UNSUPPORTED_BACKENDS.get(name);
  if (b === undefined) return undefined;
  return (
    `model '${model}' uses backend '${name}', ${b.what}, which Nereid does not support on this server: ${b.why}. ` +
    `Supported here: ${supported.join(', ')}, and custom JavaScript backends (docs/backends.md). Instead, ${b.instead}.`
  );
}
