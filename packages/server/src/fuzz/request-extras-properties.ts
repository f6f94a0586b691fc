/**
 * Test support: fuzz properties of the smaller request decoders — the generate extension's body,
 * the exact JSON parser behind every HTTP body, the repository load parameters, and the paths of
 * `file:` overrides.
 */
import assert from 'node:assert/strict';
import { resolve, sep } from 'node:path';
import fc from 'fast-check';
import { parseJson } from '@nereid/protocol';
import { loadOptionsFromParameters, type RepositoryParameter } from '../core/repository-parameters.js';
import type { ModelMetadata } from '../core/types.js';
import { decodeGenerateRequest } from '../frontends/http/generate-codec.js';
import { overridePathSegments } from '../repository/file-override.js';
import { holds, onlyTypedErrors, property, type FuzzProperty } from './check.js';

const leaf = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.string({ maxLength: 6 }),
  fc.constant(null),
  fc.constantFrom(2 ** 53, -1, 1e21, 0.5),
);
const value: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('v'), { maxLength: 4 }), fc.dictionary(fc.string({ maxLength: 4 }), tie('v'), { maxKeys: 3 })),
})).v;

const GENERATE_MODELS: readonly ModelMetadata[] = [
  { name: 'text', versions: ['1'], platform: 'python', inputs: [{ name: 'text_input', datatype: 'BYTES', shape: [1] }, { name: 'max_tokens', datatype: 'INT32', shape: [1] }], outputs: [{ name: 'text_output', datatype: 'BYTES', shape: [-1] }] },
  { name: 'numbers', versions: ['1'], platform: 'onnxruntime_onnx', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [-1, -1] }, { name: 'FLAG', datatype: 'BOOL', shape: [1] }], outputs: [{ name: 'OUTPUT0', datatype: 'FP32', shape: [-1, -1] }] },
];

const generateBody = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .dictionary(fc.oneof(fc.constantFrom('text_input', 'max_tokens', 'INPUT0', 'FLAG', 'id', 'parameters', 'triton_x', 'temperature'), fc.string({ maxLength: 4 })), value, { maxKeys: 5 })
      .map((doc) => JSON.stringify(doc)),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
);

const generate = property(
  'generate-request',
  "a generate extension body, however malformed, becomes a request or fails with a client-error NereidError (or, as for `data` of an infer request, REQUEST_JSON_DATA); its inputs' shapes are non-negative safe integers",
  fc.tuple(generateBody, fc.constantFrom(...GENERATE_MODELS)),
  ([body, metadata]) => {
    onlyTypedErrors(() => {
      const request = decodeGenerateRequest(Buffer.from(body), metadata, undefined);
      for (const input of request.inputs) for (const d of input.shape) holds(Number.isSafeInteger(d) && d >= 0, () => `input '${input.name}' decoded with dimension ${d}`);
    }, ['REQUEST_JSON_DATA']);
  },
);

const jsonText = fc.oneof(
  fc.json({ maxDepth: 4 }),
  fc.string({ maxLength: 40 }),
  fc.tuple(fc.json({ maxDepth: 3 }), fc.nat()).map(([t, cut]) => t.slice(0, cut % (t.length + 1))),
  fc.array(fc.constantFrom('[', ']', '{', '}', ',', ':', '"a"', '1', '-', '1e999', '0.', '.5', '01', 'tru', 'null', '"\\u12"', '"\\ud800"', ' '), { maxLength: 30 }).map((ts) => ts.join('')),
);

/** JSON.parse's reading, except that integers beyond 2^53 must come back exact (bigints). */
function sameAsJsonParse(exact: unknown, plain: unknown): boolean {
  if (typeof exact === 'bigint') return typeof plain === 'number' && Number(exact) === plain;
  if (Array.isArray(exact)) return Array.isArray(plain) && exact.length === plain.length && exact.every((v, i) => sameAsJsonParse(v, plain[i]));
  if (exact !== null && typeof exact === 'object') {
    if (plain === null || typeof plain !== 'object' || Array.isArray(plain)) return false;
    const a = Object.keys(exact);
    const b = Object.keys(plain);
    return a.length === b.length && a.every((k) => sameAsJsonParse((exact as Record<string, unknown>)[k], (plain as Record<string, unknown>)[k]));
  }
  return Object.is(exact, plain) || (exact === plain);
}

const json = property(
  'json-parse',
  "the exact JSON parser reads what JSON.parse reads (integers beyond 2^53 as exact bigints) and fails only with a client-error NereidError where JSON.parse fails",
  jsonText,
  (text) => {
    let plain: unknown;
    let plainFailed = false;
    try {
      plain = JSON.parse(text);
    } catch {
      plainFailed = true;
    }
    const error = onlyTypedErrors(() => {
      const exact = parseJson(text);
      holds(!plainFailed, () => `parsed what JSON.parse refuses: ${JSON.stringify(text)}`);
      holds(sameAsJsonParse(exact, plain), () => `read ${JSON.stringify(text)} differently from JSON.parse`);
    });
    // Nesting deeper than the parser's limit is refused where JSON.parse would read it.
    if (error !== undefined && !plainFailed) assert.match(error.message, /nesting|levels/);
  },
);

const repositoryParameter: fc.Arbitrary<RepositoryParameter> = fc.oneof(
  fc.string({ maxLength: 12 }).map((v) => ({ kind: 'string' as const, value: v })),
  fc.constantFrom('eA==', 'e', '====', '{}', '{"name":"m"}', '{"1":90,"2":10}', '{"1":-1}', '[1]', '{"1":0}').map((v) => ({ kind: 'string' as const, value: v })),
  fc.boolean().map((v) => ({ kind: 'bool' as const, value: v })),
  fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }).map((v) => ({ kind: 'int64' as const, value: v })),
  fc.uint8Array({ maxLength: 8 }).map((v) => ({ kind: 'bytes' as const, value: v })),
  value.map((v) => ({ kind: 'json' as const, value: v })),
  fc.constant({ kind: 'none' as const }),
);

const overrideKey = fc.oneof(
  fc.constantFrom('config', 'file:1/model.onnx', 'file:', 'file:../x', 'file:/etc/passwd', 'file:1/../../x', 'file:a\\b', 'file:./x', 'file:1//x', 'version_weights', 'version_policy', 'unknown'),
  fc.array(fc.constantFrom('1', '..', '.', '', 'model.onnx', 'a\0', '\\', '%2e%2e'), { minLength: 1, maxLength: 4 }).map((parts) => `file:${parts.join('/')}`),
  fc.string({ maxLength: 8 }),
);

const loadParameters = property(
  'repository-load-parameters',
  'load request parameters of any kind and key become load options or fail with a client-error NereidError; every file kept has a path that stays inside the model directory',
  fc.tuple(fc.dictionary(overrideKey, repositoryParameter, { maxKeys: 4 }), fc.constantFrom('base64' as const, 'raw' as const)),
  ([parameters, encoding]) => {
    onlyTypedErrors(() => {
      const options = loadOptionsFromParameters('m', parameters, encoding);
      const files = options.files === undefined ? [] : options.files instanceof Map ? [...options.files.keys()] : Object.keys(options.files);
      for (const path of files) {
        const root = resolve('/override/m');
        const target = resolve(root, ...overridePathSegments(path));
        holds(target.startsWith(root + sep), () => `file '${path}' resolves to ${target}`);
      }
    });
  },
);

const overridePaths = property(
  'override-path',
  "a `file:` override path is split into segments only when they stay inside the model directory (no '..', '.', empty segment, absolute path, NUL or backslash); anything else fails with a client-error NereidError",
  fc.oneof(fc.string({ maxLength: 16 }), fc.array(fc.constantFrom('1', '..', '.', '', 'a', '\0', '\\', '/', '%2e'), { maxLength: 6 }).map((p) => p.join(''))),
  (path) => {
    onlyTypedErrors(() => {
      const segments = overridePathSegments(path);
      const root = resolve('/override/m');
      const target = resolve(root, ...segments);
      holds(target.startsWith(root + sep) && segments.every((s) => s !== '' && s !== '.' && s !== '..' && !s.includes('\0')), () => `path '${path}' resolves to ${target}`);
    });
  },
);

/** The properties of this file, in the order they run. */
export const REQUEST_EXTRA_PROPERTIES: readonly FuzzProperty[] = [generate, json, loadParameters, overridePaths];
