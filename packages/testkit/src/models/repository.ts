/**
 * Writes generated models into a Triton-layout model repository (models-and-scheduling.md §1.1).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { writeOnnxModel } from '../onnx/model-writer.js';
import type { TestModel } from './test-model.js';

export interface WriteModelOptions {
  /** Version directory. Default 1. */
  readonly version?: number;
  /** Write `<version>/model.onnx/model.onnx` (plus external data) instead of a `model.onnx` file. */
  readonly asDirectory?: boolean;
  /** Config text to write instead of `model.config`; false writes no config.pbtxt. */
  readonly config?: string | false;
}

/**
 * Writes `<root>/<model.name>/config.pbtxt` and `<root>/<model.name>/<version>/model.onnx`
 * (and the external data file beside the model file, if any). Returns the model directory.
 */
export async function writeModelToRepository(root: string, model: TestModel, options: WriteModelOptions = {}): Promise<string> {
  const dir = join(root, model.name);
  const versionDir = join(dir, String(options.version ?? 1));
  await mkdir(versionDir, { recursive: true });
  const config = options.config === undefined ? model.config : options.config;
  if (config !== false && config !== undefined) await writeFile(join(dir, 'config.pbtxt'), config);
  const file = options.asDirectory ? join(versionDir, 'model.onnx', 'model.onnx') : join(versionDir, 'model.onnx');
  await writeOnnxModel(file, model.onnx);
  return dir;
}
