/**
 * Server-side derivation of `name`, `backend`, `platform` and `default_model_filename`
 * (models-and-scheduling.md §1.4). Pure: the caller lists the model directory (see
 * model-directory.ts) and passes what it found.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig, Sparse } from './model-config.js';

/**
 * The entries of the model directory's first sub-directory in byte-wise sorted order (normally
 * the lowest-sorting version directory), name → kind; empty or undefined when the model directory
 * has no sub-directory.
 */
export type FirstSubdirectoryEntries = ReadonlyMap<string, 'file' | 'directory'>;

interface Identity {
  name: string;
  platform: string;
  backend: string;
  file: string;
}

/**
 * Returns a copy of `config` (sparse or complete) with the §1.4 fields filled in; other fields
 * are shared with the input. Throws `NereidError('CONFIG_INVALID')` when nothing determines a
 * backend and `modelDirName` has no `.` (rule 8).
 */
export function deriveModelConfig<C extends Sparse<ModelConfig>>(
  config: C,
  modelDirName: string,
  entries: FirstSubdirectoryEntries = new Map(),
): C {
  const id: Identity = {
    name: config.name ?? '',
    platform: config.platform ?? '',
    backend: config.backend ?? '',
    file: config.default_model_filename ?? '',
  };
  if (id.name === '') id.name = modelDirName;
  applyRules(id, modelDirName, entries);

  const out: C = { ...config };
  if (id.name !== (config.name ?? '')) out.name = id.name;
  if (id.platform !== (config.platform ?? '')) out.platform = id.platform;
  if (id.backend !== (config.backend ?? '')) out.backend = id.backend;
  if (id.file !== (config.default_model_filename ?? '')) out.default_model_filename = id.file;
  return out;
}

/** Rule groups 2–8 of §1.4; the first group that applies ends derivation. */
function applyRules(id: Identity, modelDirName: string, entries: FirstSubdirectoryEntries): void {
  const hasFile = (name: string): boolean => entries.get(name) === 'file';
  const hasDirectory = (name: string): boolean => entries.get(name) === 'directory';
  const hasEntry = (name: string): boolean => entries.has(name);
  const unspecified = (): boolean => id.platform === '' && id.file === '';

  // 2. TensorFlow
  if (id.platform === '' && (id.backend === '' || id.backend === 'tensorflow')) {
    if (id.file === 'model.savedmodel') id.platform = 'tensorflow_savedmodel';
    else if (id.file === 'model.graphdef') id.platform = 'tensorflow_graphdef';
    else if (id.file === '') {
      if (hasDirectory('model.savedmodel')) id.platform = 'tensorflow_savedmodel';
      // Checked second, as in the reference: a graphdef file wins over a savedmodel directory.
      if (hasFile('model.graphdef')) id.platform = 'tensorflow_graphdef';
    }
  }
  if (id.platform === 'tensorflow_savedmodel' || id.platform === 'tensorflow_graphdef') {
    if (id.backend === '') id.backend = 'tensorflow';
    if (id.file === '') id.file = id.platform === 'tensorflow_savedmodel' ? 'model.savedmodel' : 'model.graphdef';
    return;
  }

  // 3. TensorRT
  if (id.backend === '') {
    if (id.platform === 'tensorrt_plan' || id.file === 'model.plan') id.backend = 'tensorrt';
    else if (unspecified() && hasFile('model.plan')) id.backend = 'tensorrt';
  }
  if (id.backend === 'tensorrt') {
    if (id.platform === '') id.platform = 'tensorrt_plan';
    if (id.file === '') id.file = 'model.plan';
    return;
  }

  // 4. ONNX Runtime (model.onnx may be a file or a directory with external data)
  if (id.backend === '') {
    if (id.platform === 'onnxruntime_onnx' || id.file === 'model.onnx') id.backend = 'onnxruntime';
    else if (unspecified() && hasEntry('model.onnx')) id.backend = 'onnxruntime';
  }
  if (id.backend === 'onnxruntime') {
    if (id.platform === '') id.platform = 'onnxruntime_onnx';
    if (id.file === '') id.file = 'model.onnx';
    return;
  }

  // 5. OpenVINO
  if (id.backend === '') {
    if (id.file === 'model.xml') id.backend = 'openvino';
    else if (unspecified() && hasEntry('model.xml')) id.backend = 'openvino';
  }
  if (id.backend === 'openvino') {
    if (id.file === '') id.file = 'model.xml';
    return;
  }

  // 6. PyTorch ('libtorch' is recognised here and rejected by validation, §1.4 quirk)
  if (id.backend === '') {
    if (id.platform === 'pytorch_libtorch' || id.platform === 'libtorch' || id.file === 'model.pt') {
      id.backend = 'pytorch';
    } else if (id.platform === 'torch_aoti' || id.file === 'model.pt2') {
      id.backend = 'pytorch';
    } else if (unspecified()) {
      // As in the reference: only when no `model.pt` entry exists is `model.pt2` considered.
      if (hasEntry('model.pt')) {
        if (hasFile('model.pt')) {
          id.backend = 'pytorch';
          id.platform = 'pytorch_libtorch';
        }
      } else if (hasFile('model.pt2')) {
        id.backend = 'pytorch';
        id.platform = 'torch_aoti';
      }
    }
  }
  if (id.backend === 'pytorch') {
    if (id.platform === '') {
      id.platform = 'pytorch_libtorch';
      if (id.file === '') id.file = 'model.pt';
    } else if (id.platform === 'torch_aoti' && id.file === '') {
      id.file = 'model.pt2';
    }
    return;
  }

  // 7. Python
  if (id.backend === '') {
    if (id.file === 'model.py') id.backend = 'python';
    else if (unspecified() && hasEntry('model.py')) id.backend = 'python';
  }
  if (id.backend === 'python') {
    if (id.file === '') id.file = 'model.py';
    return;
  }

  // 8. Custom backend named by the directory: `<anything>.<backend>`
  if (id.backend === '' && id.platform === '' && id.file === '') {
    const dot = modelDirName.indexOf('.');
    if (dot < 0) {
      throw new NereidError(
        'CONFIG_INVALID',
        `Invalid model name: Could not determine backend for model '${modelDirName}' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'.`,
      );
    }
    id.backend = modelDirName.slice(dot + 1);
    id.file = `model.${id.backend}`;
  }
}
