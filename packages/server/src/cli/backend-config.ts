/**
 * The `--backend-config` keys the built-in backends know. A key a built-in backend does not know
 * is refused at start (a typo would otherwise change nothing, silently); a key Triton's backend
 * of the same name takes but Nereid's does not use is accepted with a start-up warning that says
 * what is missing. A custom backend's keys (any other backend name) reach its module as they are:
 * the module decides.
 */
import { NereidError } from '@nereid/protocol';

/** A key: what it sets, or why it has no effect. */
type KeySpec = { readonly effect: string; readonly ignored?: never } | { readonly ignored: string; readonly effect?: never };

const PYTHON_KEYS: Readonly<Record<string, KeySpec>> = {
  'python-executable': { effect: 'the interpreter of the stubs' },
  'execute-timeout-secs': { effect: 'the execute time limit' },
  'initialize-timeout-secs': { effect: 'the time limit of initialize and auto_complete_config' },
  'unload-timeout-secs': { effect: 'how long an execute may still run once its model unloads or the server stops' },
  'shm-region-byte-size': { effect: "the size of each of a stub's two shared-memory rings" },
  'shm-default-byte-size': { ignored: "Nereid's stubs use two fixed rings; size them with shm-region-byte-size" },
  'shm-growth-byte-size': { ignored: "Nereid's rings do not grow; size them with shm-region-byte-size" },
  'shm-message-queue-size': { ignored: 'the rings are the message queue; there is no separate queue to size' },
  'stub-timeout-seconds': { effect: "the time limit of a stub's start-up" },
  'busy-poll-us': { effect: 'how long an idle stub, and the event loop awaiting a stub, poll before they sleep' },
  'default-max-batch-size': { ignored: 'the Python backend does not auto-complete max_batch_size' },
};

/** Keys by built-in backend; '' holds the keys that may be given for every backend. */
export const BACKEND_CONFIG_KEYS: Readonly<Record<string, Readonly<Record<string, KeySpec>>>> = {
  onnxruntime: {
    'default-max-batch-size': { effect: 'the max_batch_size auto-complete gives a model that can batch' },
    'enable-global-threadpool': { ignored: 'each model instance has its own ONNX Runtime thread pools (parameters intra_op_thread_count, inter_op_thread_count)' },
    intra_op_thread_count: { ignored: 'set it per model, as the parameter intra_op_thread_count of its config.pbtxt' },
    inter_op_thread_count: { ignored: 'set it per model, as the parameter inter_op_thread_count of its config.pbtxt' },
  },
  python: PYTHON_KEYS,
  pytorch: PYTHON_KEYS,
  openvino: { ...PYTHON_KEYS, 'default-max-batch-size': { effect: 'the max_batch_size auto-complete gives a model whose layouts have a batch dimension' } },
  tensorflow: {
    ...PYTHON_KEYS,
    'default-max-batch-size': { effect: 'the max_batch_size auto-complete gives a SavedModel that can batch' },
    'allow-soft-placement': { ignored: 'the tensorflow backend runs models on CPUs only' },
    'gpu-memory-fraction': { ignored: 'the tensorflow backend runs models on CPUs only' },
    version: { ignored: 'the tensorflow backend runs TensorFlow 2 only' },
  },
};

/** Global keys: those of any built-in backend (they apply to every backend), plus `module` is per backend only. */
function globalKey(key: string): KeySpec | undefined {
  for (const keys of Object.values(BACKEND_CONFIG_KEYS)) {
    const spec = keys[key];
    if (spec?.effect !== undefined) return spec;
  }
  for (const keys of Object.values(BACKEND_CONFIG_KEYS)) if (keys[key] !== undefined) return keys[key];
  return undefined;
}

/**
 * Checks one setting. Returns the start-up warning for a known key without effect, undefined for
 * one with an effect or for a custom backend; throws REQUEST_PARAMETER for an unknown key.
 */
export function checkBackendConfigKey(backend: string, key: string): string | undefined {
  const where = backend === '' ? `--backend-config=${key}=…` : `--backend-config=${backend},${key}=…`;
  if (key === '') throw new NereidError('REQUEST_PARAMETER', `${where}: the key is empty`);
  const known = BACKEND_CONFIG_KEYS[backend];
  if (backend !== '' && known === undefined) return undefined;
  const spec = backend === '' ? globalKey(key) : known?.[key];
  if (spec === undefined) {
    const list = backend === '' ? [...new Set(Object.values(BACKEND_CONFIG_KEYS).flatMap((k) => Object.keys(k)))] : Object.keys(known ?? {});
    throw new NereidError(
      'REQUEST_PARAMETER',
      `${where}: the ${backend === '' ? 'built-in backends do' : `${backend} backend does`} not know the key '${key}'; known keys: ${list.sort().join(', ')}`,
    );
  }
  if (spec.ignored !== undefined) return `${where} has no effect in this version of Nereid: ${spec.ignored}`;
  return undefined;
}
