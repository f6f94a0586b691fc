/**
 * Path rules for every file or directory name a configuration can give. A configuration may come
 * from a load request of the repository API, so a name it gives must not reach outside the model
 * directory: each one is checked lexically, before any file is touched.
 *
 * A path in a configuration is relative (to the version directory for model files, to the model
 * directory for the others) and made of plain segments: not absolute, no `..` segment, no NUL
 * character, no backslash, not empty. `.` segments are harmless and allowed. Symbolic links that
 * the repository's owner placed inside the model directory are followed, as Triton follows them:
 * only someone who can write the repository can create them, and the rules here are about what a
 * configuration names. (A load request's file overrides cannot create links.)
 *
 * Names that become a directory or a package lookup (`backend`, model names) are single segments
 * of letters, digits, `_`, `-` and `.`, not `.` or `..`.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from './model-config.js';

/** `EXECUTION_ENV_PATH` may start with this variable, which stands for the model directory. */
export const MODEL_DIRECTORY_VARIABLE = '$$TRITON_MODEL_DIRECTORY';

/** Model-level parameters that name a file or a directory. */
export const PATH_PARAMETERS = ['TRITON_BATCH_STRATEGY_PATH', 'EXECUTION_ENV_PATH'] as const;

function show(value: string): string {
  const text = JSON.stringify(value.length > 200 ? `${value.slice(0, 200)}…` : value);
  return `'${text.slice(1, -1)}'`;
}

/**
 * Why `path` is not a safe relative path, or undefined when it is. The checks are lexical only.
 */
export function unsafeRelativePath(path: string): string | undefined {
  if (path.length === 0) return 'the path is empty';
  if (path.includes('\0')) return 'it contains a NUL character';
  if (path.includes('\\')) return 'it contains a backslash';
  if (path.startsWith('/')) return 'absolute paths are not allowed';
  if (/^[A-Za-z]:/.test(path)) return 'drive-letter paths are not allowed';
  for (const segment of path.split('/')) {
    if (segment === '..') return "a '..' segment would leave the model directory";
  }
  return undefined;
}

/**
 * Throws CONFIG_INVALID when `path` (the value of `field`) is not a safe relative path; the message
 * names the model, the field, the value, the rule and what to write instead.
 */
export function checkConfigPath(config: Pick<ModelConfig, 'name'>, field: string, path: string, relativeTo: string): void {
  const why = unsafeRelativePath(path);
  if (why !== undefined) {
    throw new NereidError(
      'CONFIG_INVALID',
      `model '${config.name}': ${field} ${show(path)} is refused: ${why}; give a path relative to ${relativeTo}, ` +
        `such as 'model.onnx' or 'data/file.bin', that stays inside it`,
    );
  }
}

/** Why `name` is not a safe single-segment name, or undefined when it is. */
export function unsafeName(name: string): string | undefined {
  if (name === '.' || name === '..') return `'${name}' names a directory, not a model or backend`;
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) return 'only letters, digits and _ - . are allowed';
  return undefined;
}

/**
 * The path rules for every path a configuration can name: `default_model_filename`,
 * `cc_model_filenames`, `runtime`, output `label_filename`, warmup `input_data_file`, a sequence
 * state's initial `data_file`, the
 * path parameters (TRITON_BATCH_STRATEGY_PATH, EXECUTION_ENV_PATH), and the `backend` name.
 * Throws CONFIG_INVALID for the first one that breaks them.
 */
export function validateConfigPaths(config: ModelConfig): void {
  if (config.default_model_filename !== '') {
    checkConfigPath(config, 'default_model_filename', config.default_model_filename, 'the version directory');
  }
  for (const [key, file] of Object.entries(config.cc_model_filenames)) {
    checkConfigPath(config, `cc_model_filenames['${key.slice(0, 64)}']`, file, 'the version directory');
  }
  if (config.runtime !== '') checkConfigPath(config, 'runtime', config.runtime, 'the model or backend directory');
  for (const output of config.output) {
    if (output.label_filename !== '') checkConfigPath(config, `output '${output.name}' label_filename`, output.label_filename, 'the model directory');
  }
  config.sequence_batching?.state.forEach((state, i) => {
    state.initial_state.forEach((initial, j) => {
      if (initial.data_file !== undefined) {
        checkConfigPath(
          config,
          `sequence_batching.state[${i}].initial_state[${j}] data_file`,
          initial.data_file,
          "the model directory's initial_state/",
        );
      }
    });
  });
  config.model_warmup.forEach((warmup, i) => {
    for (const [input, spec] of Object.entries(warmup.inputs)) {
      if (spec.input_data_file !== undefined) {
        checkConfigPath(config, `model_warmup[${i}] input '${input}' input_data_file`, spec.input_data_file, "the model's warmup directory");
      }
    }
  });
  for (const key of PATH_PARAMETERS) {
    const value = Object.hasOwn(config.parameters, key) ? config.parameters[key]?.string_value : undefined;
    if (value === undefined || value === '') continue;
    const rest = key === 'EXECUTION_ENV_PATH' && value.startsWith(MODEL_DIRECTORY_VARIABLE) ? value.slice(MODEL_DIRECTORY_VARIABLE.length).replace(/^\/+/, '') : value;
    if (rest === '' && value !== rest) {
      throw new NereidError('CONFIG_INVALID', `model '${config.name}': parameter ${key} ${show(value)} names the model directory itself; name the environment inside it`);
    }
    checkConfigPath(config, `parameter ${key}`, rest, `the model directory (or ${MODEL_DIRECTORY_VARIABLE}/…)`);
  }
  if (config.backend !== '') {
    const why = unsafeName(config.backend);
    if (why !== undefined) {
      throw new NereidError(
        'CONFIG_INVALID',
        `model '${config.name}': backend ${show(config.backend)} is refused: ${why}; a backend is named like 'onnxruntime' or 'python'`,
      );
    }
  }
}
