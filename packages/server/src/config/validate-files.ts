/**
 * The §3.6 rules that look at files in the model directory: output label files (§1.6) and the
 * custom batching library parameter `TRITON_BATCH_STRATEGY_PATH` (§2.4).
 *
 * Paths are relative to the model directory (not the version directory); one that resolves
 * outside it is refused lexically, before any file is touched.
 */
import { readFile, stat } from 'node:fs/promises';
import { isAbsolute, relative, resolve } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from './model-config.js';
import { BATCH_STRATEGY_PATH_PARAMETER } from './validate.js';

/** Whether `path` (relative to `modelDir`, or absolute) names something strictly inside `modelDir`. */
export function isInsideDirectory(modelDir: string, path: string): boolean {
  const rel = relative(resolve(modelDir), resolve(modelDir, path));
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel);
}

/**
 * Reads the label file of every output that names one and returns output name → labels (line i
 * labels class i; a final newline does not add an empty label; `\r\n` line ends are accepted).
 * Throws `NereidError('CONFIG_UNSUPPORTED')` for a path outside the model directory and
 * `NereidError('CONFIG_INVALID')` for a file that cannot be read.
 */
export async function loadLabelFiles(config: ModelConfig, modelDir: string): Promise<Map<string, string[]>> {
  const labels = new Map<string, string[]>();
  for (const output of config.output) {
    const file = output.label_filename;
    if (file === '') continue;
    const where = `model '${config.name}': output '${output.name}' label file '${file}'`;
    if (!isInsideDirectory(modelDir, file)) {
      throw new NereidError('CONFIG_UNSUPPORTED', `${where} is outside the model directory; label files must be inside '${modelDir}'`);
    }
    let text: string;
    try {
      text = await readFile(resolve(modelDir, file), 'utf8');
    } catch (err) {
      throw new NereidError('CONFIG_INVALID', `${where} cannot be read: ${(err as Error).message}`, { cause: err });
    }
    const lines = text.split(/\r?\n/);
    if (lines.at(-1) === '') lines.pop();
    labels.set(output.name, lines);
  }
  return labels;
}

/**
 * The file part of the `TRITON_BATCH_STRATEGY_PATH` rule: when the parameter is set, the path
 * must stay inside the model directory and name an existing file. Returns the absolute path, or
 * undefined when the parameter is absent. Throws `NereidError('CONFIG_INVALID')`.
 */
export async function resolveBatchStrategyPath(config: ModelConfig, modelDir: string): Promise<string | undefined> {
  const parameter = Object.hasOwn(config.parameters, BATCH_STRATEGY_PATH_PARAMETER) ? config.parameters[BATCH_STRATEGY_PATH_PARAMETER] : undefined;
  if (parameter === undefined) return undefined;
  const path = parameter.string_value;
  const where = `model '${config.name}': parameter ${BATCH_STRATEGY_PATH_PARAMETER} '${path}'`;
  if (!isInsideDirectory(modelDir, path)) {
    throw new NereidError('CONFIG_INVALID', `${where} must name a file inside the model directory '${modelDir}'`);
  }
  const absolute = resolve(modelDir, path);
  const info = await stat(absolute).catch(() => undefined);
  if (info === undefined || !info.isFile()) throw new NereidError('CONFIG_INVALID', `${where} does not name an existing file`);
  return absolute;
}
