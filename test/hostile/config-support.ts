/**
 * What the configuration cases of the hostile tier share: the `simple` model's configuration as
 * ModelConfig JSON, its protobuf text form, and the answer a refused configuration gets.
 */
import assert from 'node:assert/strict';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, inferJson, jsonBody, simpleCase } from '../helpers/harness.js';

/**
 * A configuration refused before any version is tried gets Triton's answer to a repository poll
 * that fails: 500 / gRPC INTERNAL, 'failed to load '<m>', failed to poll from model repository: '
 * and then Nereid's reason.
 */
export const REFUSED_CONFIG_STATUS = 500;
export const REFUSED_CONFIG_GRPC_CODE = 13;

export const ONNX = simpleModel().onnx.bytes;
export const INT32_16 = (name: string): Record<string, unknown> => ({ name, data_type: 'TYPE_INT32', dims: [16] });

/** The `simple` model's configuration as ModelConfig JSON, with `patch` merged in. */
export function simpleConfig(patch: Record<string, unknown> = {}, name = 'simple'): Record<string, unknown> {
  return {
    name,
    backend: 'onnxruntime',
    max_batch_size: 8,
    input: [INT32_16('INPUT0'), INT32_16('INPUT1')],
    output: [INT32_16('OUTPUT0'), INT32_16('OUTPUT1')],
    instance_group: [{ kind: 'KIND_CPU', count: 1 }],
    ...patch,
  };
}

/** Map fields of ModelConfig (written as repeated key/value entries). */
const MAP_FIELDS = new Set(['inputs', 'parameters', 'cc_model_filenames', 'input_map', 'output_map']);

/** ModelConfig JSON as protobuf text format (enough for the configurations of these tests). */
export function toText(value: Record<string, unknown>, indent = ''): string {
  const lines: string[] = [];
  const quote = (v: string): string => JSON.stringify(v).replace(/\\u0000/g, '\\000');
  const scalar = (v: unknown): string => (typeof v === 'string' ? (/^(KIND_|TYPE_)/.test(v) ? v : quote(v)) : String(v));
  for (const [key, v] of Object.entries(value)) {
    if (Array.isArray(v)) {
      if (v.length === 0) continue;
      if (typeof v[0] === 'object') for (const item of v) lines.push(`${indent}${key} {\n${toText(item as Record<string, unknown>, indent + '  ')}${indent}}`);
      else lines.push(`${indent}${key}: [ ${v.map(scalar).join(', ')} ]`);
    } else if (v !== null && typeof v === 'object') {
      if (MAP_FIELDS.has(key)) {
        for (const [k, item] of Object.entries(v)) {
          const inner = typeof item === 'object' ? `{\n${toText(item as Record<string, unknown>, indent + '    ')}${indent}  }` : scalar(item);
          lines.push(`${indent}${key} {\n${indent}  key: ${JSON.stringify(k)}\n${indent}  value: ${inner}\n${indent}}`);
        }
      } else lines.push(`${indent}${key} {\n${toText(v as Record<string, unknown>, indent + '  ')}${indent}}`);
    } else lines.push(`${indent}${key}: ${scalar(v)}`);
  }
  return lines.join('\n') + '\n';
}

/** POSTs a repository load of `model` with `body`; its status and error message. */
export async function loadModel(url: string, model: string, body: Record<string, unknown> = {}): Promise<{ status: number; error: string }> {
  const reply = await httpRequest(`${url}/v2/repository/models/${model}/load`, { method: 'POST', body: JSON.stringify(body) });
  const parsed = reply.text === '' ? {} : (jsonBody(reply) as { error?: string });
  return { status: reply.status, error: parsed.error ?? '' };
}

/** The server at `url` still answers the `simple` model, with the right sums. */
export async function assertSimpleServing(url: string, seed: number): Promise<void> {
  const { inputs, sum } = simpleCase(1, seed);
  const reply = await inferJson(url, 'simple', inputs);
  assert.equal(reply.status, 200, reply.text);
  const out = (jsonBody(reply) as { outputs: { name: string; data: number[] }[] }).outputs.find((o) => o.name === 'OUTPUT0');
  assert.deepEqual(out?.data, sum);
}
