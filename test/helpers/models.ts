/**
 * Repository files for a `@nereid/testkit` model, for `makeRepository` / `addModels`.
 */
import type { TestModel } from '@nereid/testkit';
import type { ModelFiles } from './harness.js';

/** `config.pbtxt` (the model's own, or `config`) and `1/model.onnx`, plus any `extra` files. */
export function modelFiles(model: TestModel, options: { config?: string; extra?: ModelFiles } = {}): ModelFiles {
  const config = options.config ?? model.config;
  if (config === undefined) throw new Error(`model '${model.name}' has no config; pass one`);
  return { 'config.pbtxt': config, '1/model.onnx': model.onnx.bytes, ...options.extra };
}
