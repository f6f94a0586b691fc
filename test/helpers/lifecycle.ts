/**
 * Models and helpers for the model-lifecycle tests: a model whose answer tells which copy
 * computed it, its repository files and configurations, and polling for a condition.
 */
import { OnnxGraphBuilder, encodeModel, modelConfigText } from '@nereid/testkit';
import type { ModelFiles } from './harness.js';

/** Elements per request row of a tagged model. */
export const TAGGED_WIDTH = 4;

/** ONNX bytes of a model computing OUTPUT0 = INPUT0 + `tag` (INT32 [batch, 4]). */
export function taggedOnnx(tag: number): Uint8Array {
  const g = new OnnxGraphBuilder('tagged')
    .input('INPUT0', 'INT32', ['batch', TAGGED_WIDTH])
    .output('OUTPUT0', 'INT32', ['batch', TAGGED_WIDTH])
    .initializer('TAG', 'INT32', [1], [tag])
    .node('Add', ['INPUT0', 'TAG'], ['OUTPUT0']);
  return encodeModel(g).bytes;
}

/** The `config.pbtxt` of a tagged model (max_batch_size 8), with `extra` appended. */
export function taggedConfig(name: string, extra = ''): string {
  const tensor = (n: string) => ({ name: n, dataType: 'INT32' as const, dims: [TAGGED_WIDTH] });
  return modelConfigText({ name, maxBatchSize: 8, inputs: [tensor('INPUT0')], outputs: [tensor('OUTPUT0')], extra });
}

/** The same configuration as ModelConfig JSON, for a load's `config` parameter. */
export function taggedConfigJson(name: string, extra: Record<string, unknown> = {}): string {
  const tensor = (n: string) => ({ name: n, data_type: 'TYPE_INT32', dims: [TAGGED_WIDTH] });
  return JSON.stringify({ name, platform: 'onnxruntime_onnx', max_batch_size: 8, input: [tensor('INPUT0')], output: [tensor('OUTPUT0')], ...extra });
}

/** A model directory with one tagged model file per version (`{ 1: 100 }`: version 1 adds 100). */
export function taggedFiles(name: string, versions: Readonly<Record<number, number>>, extra = ''): ModelFiles {
  const files: ModelFiles = { 'config.pbtxt': taggedConfig(name, extra) };
  for (const [v, tag] of Object.entries(versions)) files[`${v}/model.onnx`] = taggedOnnx(tag);
  return files;
}

/** Waits until `check` resolves true, polling; fails naming `what` after `timeoutMs`. */
export async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
