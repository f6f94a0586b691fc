/**
 * The TensorFlow backend (`platform: "tensorflow_savedmodel"` / `"tensorflow_graphdef"`) and the
 * OpenVINO backend (`backend: "openvino"`): the frameworks' own Python runtimes, run by the Python
 * stub like TorchScript models (python-backend.ts), one process per instance. The stub's runners
 * are nereid_stub/tensorflow_model.py and nereid_stub/openvino_model.py; docs/backends.md
 * describes tensor mapping, parameters and auto-complete.
 *
 * The runtimes come from PyPI (tensorflow-cpu, openvino) and are installed, pinned, into the
 * project's runtimes environment `.venv-runtimes` by `node scripts/setup.mjs runtimes` (the test
 * profile does it too). Its interpreter is the default of both backends; `python-executable`
 * (`--backend-config=tensorflow,python-executable=…`) or EXECUTION_ENV_PATH name another. A model
 * whose interpreter lacks the runtime is refused at load with the command that installs it.
 */
import { execFile } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../../config/model-config.js';
import { BACKEND_SPI_VERSION, type AutoCompleteContext, type Backend, type BackendModel, type ModelContext } from '../spi.js';
import { DEFAULT_PYTHON, PythonModel, autoCompleteInStub, stubSettings, type Runner, type StubSettings } from './python-backend.js';

/** The project's runtimes environment (made by `node scripts/setup.mjs runtimes`). */
export const RUNTIMES_VENV = fileURLToPath(new URL('../../../../../.venv-runtimes/', import.meta.url));
/** The command that makes it, as the refusal prints it. */
export const RUNTIMES_SETUP_COMMAND = 'node scripts/setup.mjs runtimes';

/** Its interpreter when it exists, else the system's. */
export function defaultRuntimePython(): string {
  const python = join(RUNTIMES_VENV, 'bin', 'python3');
  return existsSync(python) ? python : DEFAULT_PYTHON;
}

export interface Framework {
  readonly runner: Runner;
  /** The Python module that must import in the stub. */
  readonly module: string;
  /** The PyPI requirement scripts/setup.mjs pins, for the refusal. */
  readonly pypi: string;
  readonly what: string;
}

export const TENSORFLOW: Framework = { runner: 'tensorflow', module: 'tensorflow', pypi: 'tensorflow-cpu', what: 'TensorFlow' };
export const OPENVINO: Framework = { runner: 'openvino', module: 'openvino', pypi: 'openvino', what: 'OpenVINO' };

/** Interpreters known to have a module, by `<python>\0<module>` (a found module stays found). */
const found = new Set<string>();

/**
 * Resolves when `python` can import `framework.module` (found without importing it, in well under
 * a second); rejects with the load error that names the interpreter and the command that installs
 * the runtime.
 */
export async function requireRuntime(model: string, python: string, framework: Framework, backend: string): Promise<void> {
  const key = `${python}\0${framework.module}`;
  if (found.has(key)) return;
  const probe = 'import importlib.util, sys\nsys.exit(0 if importlib.util.find_spec(sys.argv[1]) is not None else 3)\n';
  const status = await new Promise<number | string>((resolve) => {
    execFile(python, ['-c', probe, framework.module], { timeout: 30_000 }, (err) => {
      if (err === null) resolve(0);
      else resolve(typeof err.code === 'number' ? err.code : (err.message.split('\n')[0] ?? String(err.code)));
    });
  });
  if (status === 0) {
    found.add(key);
    return;
  }
  const why = status === 3 ? `it is not installed for the Python interpreter ${python}` : `the Python interpreter ${python} cannot run (${String(status)})`;
  throw new NereidError(
    'MODEL_LOAD_FAILED',
    `model '${model}': the ${backend} backend runs models with ${framework.what} (PyPI ${framework.pypi}), and ${why}. ` +
      `Install it into the project's runtimes environment with: ${RUNTIMES_SETUP_COMMAND} ` +
      `(or name an interpreter that has it with --backend-config=${backend},python-executable=<path>)`,
  );
}

/** The model file or directory `name` in the version directory; a load error when it is missing or of the wrong kind. */
function requireEntry(ctx: Pick<ModelContext, 'config' | 'versionDirectory' | 'name'>, fallback: string, kind: 'file' | 'directory', what: string): string {
  const path = join(ctx.versionDirectory, ctx.config.default_model_filename || fallback);
  const info = statSync(path, { throwIfNoEntry: false });
  if (info === undefined || (kind === 'file' ? !info.isFile() : !info.isDirectory())) {
    throw new NereidError('MODEL_LOAD_FAILED', `model '${ctx.name}': ${what} '${path}' does not exist${info === undefined ? '' : ` as a ${kind}`}`);
  }
  return path;
}

/** The model path of a TensorFlow model: the SavedModel directory or the GraphDef file. */
function tensorflowModelPath(ctx: Pick<ModelContext, 'config' | 'versionDirectory' | 'name'>): string {
  if (ctx.config.platform === 'tensorflow_graphdef') return requireEntry(ctx, 'model.graphdef', 'file', 'GraphDef file');
  return requireEntry(ctx, 'model.savedmodel', 'directory', 'SavedModel directory');
}

/**
 * The model path of an OpenVINO model: an IR `model.xml` with its weights `model.bin` beside it
 * (the default), or another file OpenVINO reads (`default_model_filename: "model.onnx"`).
 */
function openvinoModelPath(ctx: Pick<ModelContext, 'config' | 'versionDirectory' | 'name'>): string {
  const file = ctx.config.default_model_filename || 'model.xml';
  const path = join(ctx.versionDirectory, file);
  if (!existsSync(path)) {
    const onnx = file === 'model.xml' && existsSync(join(ctx.versionDirectory, 'model.onnx'));
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `model '${ctx.name}': OpenVINO model file '${path}' does not exist` +
        (onnx ? `; for the model.onnx beside it, set default_model_filename: "model.onnx" in config.pbtxt` : ': put the IR model.xml and its model.bin there'),
    );
  }
  if (file.endsWith('.xml')) {
    const weights = `${path.slice(0, -'.xml'.length)}.bin`;
    if (!existsSync(weights)) {
      throw new NereidError(
        'MODEL_LOAD_FAILED',
        `model '${ctx.name}': the OpenVINO IR '${path}' has no weights file '${weights}' beside it; put the ${basename(weights)} that was saved with the ${file} (openvino.save_model writes both) into the same directory`,
      );
    }
  }
  return path;
}

/**
 * Auto-complete (§3.5) by the runner's `auto_complete(config, path)` in a throw-away stub: the
 * runner reads the model's signature and returns the configuration completed.
 */
async function autoComplete(ctx: AutoCompleteContext, framework: Framework, backend: string, path: string, settings: StubSettings): Promise<ModelConfig> {
  await requireRuntime(ctx.name, settings.python, framework, backend);
  // The max_batch_size auto-complete gives a model that can batch (--backend-config default-max-batch-size, 4 as in Triton).
  const env = { NEREID_DEFAULT_MAX_BATCH_SIZE: ctx.backendConfig['default-max-batch-size'] ?? '4' };
  return autoCompleteInStub(ctx, settings, { runner: framework.runner, path }, `model '${ctx.name}' (auto-complete)`, env);
}

function frameworkBackend(name: string, framework: Framework, modelPath: (ctx: Pick<ModelContext, 'config' | 'versionDirectory' | 'name'>) => string): Backend {
  return {
    name,
    spiVersion: BACKEND_SPI_VERSION,
    async autoCompleteConfig(ctx: AutoCompleteContext): Promise<ModelConfig> {
      const path = modelPath(ctx);
      return autoComplete(ctx, framework, name, path, await stubSettings(ctx, defaultRuntimePython()));
    },
    async createModel(ctx: ModelContext): Promise<BackendModel> {
      const path = modelPath(ctx);
      const settings = await stubSettings(ctx, defaultRuntimePython());
      await requireRuntime(ctx.name, settings.python, framework, name);
      return new PythonModel(ctx, framework.runner, path, settings);
    },
  };
}

export const tensorflowBackend: Backend = frameworkBackend('tensorflow', TENSORFLOW, tensorflowModelPath);
export const openvinoBackend: Backend = frameworkBackend('openvino', OPENVINO, openvinoModelPath);
