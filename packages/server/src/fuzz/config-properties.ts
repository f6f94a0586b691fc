/**
 * Test support: fuzz properties of the config layer — `config.pbtxt` text → ModelConfig, the JSON
 * form a load request's `config` override takes, and normalisation and validation after them.
 *
 * The claims: whatever the text or JSON, parsing returns or throws a NereidError of a client-error
 * kind, and so do normalisation and validation of whatever parsed; and a parsed config printed
 * back parses to the same config.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  modelConfigFromJson,
  modelConfigToJson,
  normalizeModelConfig,
  parseModelConfigText,
  printModelConfigText,
  validateModelConfig,
  validateModelIO,
} from '../config/index.js';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { deriveModelConfig } from '../config/index.js';
import { PbtxtGenerator } from '../config/pbtxt-generator.js';
import { fixturesDir } from '../config/test-support.js';
import type { JsonValue } from '../config/message-object.js';
import { onlyTypedErrors, property, type FuzzProperty } from './check.js';

/** Schema-driven texts of the config generator: valid ones, and ones with one known fault. */
const generatedText = fc.tuple(fc.nat(), fc.nat(10_000)).map(([seed, index]) => new PbtxtGenerator(seed).valid(index).text);
const faultyText = fc.tuple(fc.nat(), fc.nat(10_000)).map(([seed, index]) => new PbtxtGenerator(seed).invalid(index).text);

/** Pieces of the text format, to make token soup of. */
const TOKENS = [
  'name', 'platform', 'backend', 'max_batch_size', 'input', 'output', 'dims', 'data_type', 'TYPE_FP32', 'TYPE_STRING',
  'instance_group', 'count', 'kind', 'KIND_CPU', 'dynamic_batching', 'max_queue_delay_microseconds', 'parameters', 'key',
  'value', 'string_value', 'sequence_batching', 'ensemble_scheduling', 'step', 'input_map', 'version_policy', 'specific',
  'versions', 'reshape', 'shape', 'optional', 'default_model_filename', ':', '{', '}', '<', '>', '[', ']', ',', ';',
  '"x"', "'y'", '"\\x00"', '"\\777"', '"\\u12"', '"', '-1', '-', '0', '1', '1e999', '-1e-999', 'inf', '-inf', 'nan', '0x7f',
  '0xffffffffffffffffff', '18446744073709551616', '-9223372036854775809', '1.5f', 'true', 'True', 't', '#', '#c\n', '\n', ' ',
  '\t', '\u00a0', '\u2028', '\ud800', '/*', 'ModelConfig', '[type.googleapis.com/x]',
];
const tokenSoup = fc.array(fc.constantFrom(...TOKENS), { maxLength: 80 }).map((tokens) => tokens.join(' '));

/** The hand-written fixtures: real-looking configs, most of which load. */
const FIXTURES: readonly string[] = readdirSync(fixturesDir())
  .filter((f) => f.endsWith('.pbtxt'))
  .sort()
  .map((f) => readFileSync(join(fixturesDir(), f), 'utf8'));
const baseText = fc.oneof(fc.constantFrom(...FIXTURES), generatedText);

/** Values a hostile config would set: out of range, huge, negative, path-like, odd strings. */
const HOSTILE_VALUES = [
  '-1', '0', '-2147483649', '2147483648', '4294967296', '9223372036854775807', '-9223372036854775808', '18446744073709551615',
  '100000', '1000000000', '1e38', '-1e38', 'inf', 'nan', '-0', '0.000001', '"../../etc/passwd"', '"/etc/passwd"', '"."', '".."', '""',
  '"a/b"', '"model.onnx"', `"${'x'.repeat(300)}"`, '"\\0"', 'true', 'TYPE_INVALID', 'TYPE_STRING', 'KIND_GPU', 'KIND_MODEL',
];

/** A base text with one of its values (a number, a string, an enum or bool) replaced by a hostile one. */
const hostileValueText = fc.tuple(baseText, fc.nat(), fc.constantFrom(...HOSTILE_VALUES)).map(([text, at, value]) => {
  const spots = [...text.matchAll(/:\s*(-?[0-9][0-9.eE+-]*|"(?:[^"\\\n]|\\.)*"|[A-Z][A-Z0-9_]+|true|false)/g)];
  if (spots.length === 0) return text;
  const m = spots[at % spots.length]!;
  const start = m.index + m[0].length - m[1]!.length;
  return text.slice(0, start) + value + text.slice(start + m[1]!.length);
});

/** A text with a few characters inserted, deleted or replaced, or cut short. */
const mutatedText = fc
  .tuple(baseText, fc.array(fc.tuple(fc.nat(), fc.nat(3), fc.constantFrom(...TOKENS)), { minLength: 1, maxLength: 4 }))
  .map(([text, edits]) => {
    let t = text;
    for (const [at, op, token] of edits) {
      const i = t.length === 0 ? 0 : at % t.length;
      if (op === 0) t = t.slice(0, i) + token + t.slice(i);
      else if (op === 1) t = t.slice(0, i) + t.slice(i + 1 + (at % 7));
      else if (op === 2) t = t.slice(0, i) + token + t.slice(i + token.length);
      else t = t.slice(0, i);
    }
    return t;
  });

const anyText = fc.oneof(
  { weight: 4, arbitrary: hostileValueText },
  { weight: 1, arbitrary: baseText },
  { weight: 3, arbitrary: mutatedText },
  { weight: 2, arbitrary: tokenSoup },
  { weight: 1, arbitrary: faultyText },
  { weight: 1, arbitrary: fc.string({ maxLength: 80 }) },
  { weight: 1, arbitrary: fc.fullUnicodeString({ maxLength: 40 }) },
);

/**
 * Derives, normalises and validates what parsed, as a load does before it builds anything (the
 * model directory holding one `model.onnx`).
 */
function loadChecks(parsed: ReturnType<typeof parseModelConfigText>): void {
  const config = normalizeModelConfig(deriveModelConfig(parsed, 'fuzzed', new Map([['model.onnx', 'file']])));
  validateModelConfig(config);
  validateModelIO(config);
}

const pbtxtHostile = property(
  'pbtxt-parse',
  'any text (generated, mutated, token soup, random Unicode) parses, normalises and validates, or fails with a client-error NereidError',
  anyText,
  (text) => {
    onlyTypedErrors(() => loadChecks(parseModelConfigText(text, 'config.pbtxt')));
  },
);

const pbtxtRoundTrip = property(
  'pbtxt-round-trip',
  'a fixture or generated valid text parses; printed back and parsed again it is the same config',
  baseText,
  (text) => {
    const parsed = parseModelConfigText(text);
    const printed = printModelConfigText(parsed);
    const again = parseModelConfigText(printed);
    assert.deepStrictEqual(again, parsed, `printed text:\n${printed}`);
  },
);

/** Replaces the JSON value at a random path of `json` by `value`. */
function replaceAt(json: JsonValue, path: readonly number[], value: JsonValue): JsonValue {
  if (path.length === 0 || json === null || typeof json !== 'object') return value;
  const [step, ...rest] = path as [number, ...number[]];
  if (Array.isArray(json)) {
    if (json.length === 0) return value;
    const i = step % json.length;
    return json.map((v, j) => (j === i ? replaceAt(v, rest, value) : v));
  }
  const keys = Object.keys(json);
  if (keys.length === 0) return value;
  const key = keys[step % keys.length]!;
  return { ...json, [key]: replaceAt(json[key]!, rest, value) };
}

const hostileJsonValue: fc.Arbitrary<JsonValue> = fc.oneof(
  fc.constantFrom(-1, 0, 2 ** 31, 2 ** 53, 1e308, -1e308, 0.5, '18446744073709551616', '-1', 'NaN', 'Infinity', '', '..', '/etc/passwd', 'TYPE_FP32', true, null, [], {}),
  fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<JsonValue>,
);

const jsonOverride = property(
  'config-json',
  "a load override's config JSON — a valid config's JSON with one value replaced by a hostile one, or any JSON — converts, normalises and validates, or fails with a client-error NereidError",
  fc.oneof(
    { weight: 4, arbitrary: fc.tuple(baseText, fc.array(fc.nat(), { maxLength: 5 }), hostileJsonValue).map(([text, path, value]) => {
      const json = modelConfigToJson(parseModelConfigText(text), { emitDefaults: false, int64AsString: true }) as JsonValue;
      return replaceAt(json, path, value);
    }) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }) as fc.Arbitrary<JsonValue> },
  ),
  (json) => {
    onlyTypedErrors(() => loadChecks(modelConfigFromJson(JSON.stringify(json))));
  },
);

/** The config properties, in the order they run. */
export const CONFIG_PROPERTIES: readonly FuzzProperty[] = [pbtxtHostile, pbtxtRoundTrip, jsonOverride];
