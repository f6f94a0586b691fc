// Nereid's config.pbtxt parser against protobuf's reference text-format parser (Python's
// google.protobuf.text_format over the project's model_config.proto, protobuf-reference.ts): a
// few thousand generated texts, the fixtures and past disagreements must give the same message;
// generated and hand-written invalid texts must be refused by both, Nereid naming the line and
// column; the places where Nereid or the Python parser differ on purpose are pinned one by one.
//
// Needs /usr/bin/python3 with Debian's python3-protobuf and python3-grpc-tools; without them
// every test here fails saying so. The generator's seed is fixed, so every run checks the same
// texts; NEREID_PBTXT_SEED=<n> picks another and NEREID_PBTXT_SEED=random a random one (every
// failure prints the seed); NEREID_PBTXT_TEXTS sets how many texts (default 2500).
import test from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import { modelConfigToJson, parseModelConfigText } from './index.js';
import type { JsonObject, JsonValue } from './message-object.js';
import { FAULTS, FEATURES, type GeneratedText, type InvalidText, PbtxtGenerator } from './pbtxt-generator.js';
import { canonicalFloats, parseWithReference, type ReferenceResult, type ReferenceRun, toReferenceDialect } from './protobuf-reference.js';
import { fixturesDir } from './test-support.js';

const DEFAULT_SEED = 20261205;
const seedSetting = process.env.NEREID_PBTXT_SEED;
const SEED = seedSetting === undefined || seedSetting === '' ? DEFAULT_SEED : seedSetting === 'random' ? randomInt(2 ** 31) : Number(seedSetting);
const TEXTS = process.env.NEREID_PBTXT_TEXTS !== undefined ? Number(process.env.NEREID_PBTXT_TEXTS) : 2500;
const INVALID_TEXTS = 500;
const THIS_FILE = fileURLToPath(import.meta.url);
const REPRODUCE = `seed ${SEED}; reproduce with NEREID_PBTXT_SEED=${SEED} NEREID_PBTXT_TEXTS=${TEXTS} node --test ${THIS_FILE}`;

if (!Number.isInteger(SEED) || SEED < 0) throw new Error(`NEREID_PBTXT_SEED must be a non-negative integer or 'random', got ${seedSetting}`);
if (!Number.isInteger(TEXTS) || TEXTS < 500) throw new Error(`NEREID_PBTXT_TEXTS must be an integer of at least 500 (to reach every field), got ${process.env.NEREID_PBTXT_TEXTS}`);

// ---------------------------------------------------------------------------------------------
// Fixed cases

/** Inputs where Nereid once disagreed with protobuf; they go through the same comparison. */
const REGRESSIONS: readonly string[] = [
  // A singular scalar holding its default may be given again (proto3 scalars have no presence).
  'max_batch_size: 0 max_batch_size: 4',
  'input { name: "" name: "x" data_type: 0 data_type: TYPE_FP32 }',
  'parameters { key: "" key: "k" value { } }',
  'instance_group { passive: false passive: true }',
  'max_batch_size: 4 max_batch_size: 0',
  'max_batch_size: 0 max_batch_size: 4 max_batch_size: 5',
  // Floats are decimal only.
  'sequence_batching { direct { minimum_slot_utilization: 0x10 } }',
  'model_metrics { metric_control { histogram_options { buckets: [ 1, -0x1 ] } } }',
  // A '.' after a hex number or a complete float.
  'model_metrics { metric_control { histogram_options { buckets: 0x1.5 } } }',
  'model_metrics { metric_control { histogram_options { buckets: 1.5.5 } } }',
];

interface FixedInvalid {
  readonly text: string;
  /** Where Nereid must report the error. */
  readonly line: number;
  readonly column: number;
  readonly why: string;
}

/** Invalid texts the generator does not write; both parsers must refuse them. */
const INVALID: readonly FixedInvalid[] = [
  { text: 'name: "m"\ninput {\n  name: "x"\n', line: 4, column: 1, why: 'end of input inside a message' },
  { text: 'name: "m"\nmax_batch_size:', line: 2, column: 16, why: 'end of input before a value' },
  { text: 'name: "m"\nbackend', line: 2, column: 8, why: 'end of input after a field name' },
  { text: 'input { name: }', line: 1, column: 15, why: 'no value before the closing brace' },
  { text: ': "x"', line: 1, column: 1, why: 'no field name' },
  { text: '4: 8', line: 1, column: 1, why: 'a field number instead of a name' },
  { text: '[inference.ext]: 1', line: 1, column: 1, why: 'extension syntax' },
  { text: 'input [ { name: "x" } >', line: 1, column: 23, why: 'a list closed by >' },
  { text: 'input [ { name: "x" }, ]', line: 1, column: 24, why: 'a trailing comma in a list of messages' },
  { text: 'input { dims: [ , ] }', line: 1, column: 17, why: 'an empty list element' },
  { text: 'name: "a\nb"', line: 1, column: 7, why: 'a newline inside a string' },
  // Protobuf's C++ parser keeps such bytes and only complains when it serialises them.
  { text: 'name: "ok"\nbackend: "\\377"', line: 2, column: 10, why: 'a string that is not UTF-8' },
  { text: 'name: "\\xc3"', line: 1, column: 7, why: 'a truncated UTF-8 sequence' },
  { text: 'input { data_type: type_fp32 }', line: 1, column: 20, why: 'enum names are case-sensitive' },
  { text: 'dynamic_batching {}\nensemble_scheduling {}', line: 2, column: 1, why: 'two members of scheduling_choice' },
  { text: 'version_policy { specific { versions: [ 1 ] } latest { } }', line: 1, column: 47, why: 'two members of policy_choice' },
];

interface Difference {
  readonly text: string;
  /** What protobuf's Python parser gives: 'refuses', or the message's JSON. */
  readonly python: 'refuses' | JsonObject;
  /** What Nereid gives (the C++ parser's answer, unless the case is a deliberate difference). */
  readonly nereid: RegExp | JsonObject;
  readonly why: string;
}

/**
 * Where Nereid is stricter than protobuf on purpose (pbtxt-parser.ts); protobuf accepts these.
 */
const DELIBERATE: readonly Difference[] = [
  {
    text: 'input { data_type: 99 }',
    python: { input: [{ data_type: 99 }] },
    nereid: /^1:20: unknown enum number 99 for field 'data_type' \(DataType\)/,
    why: 'an enum number that names no value',
  },
  {
    text: 'instance_group { kind: -1 }',
    python: { instance_group: [{ kind: -1 }] },
    nereid: /^1:24: unknown enum number -1 for field 'kind'/,
    why: 'a negative enum number',
  },
  {
    text: 'input { dims: 9007199254740993 }',
    python: { input: [{ dims: ['9007199254740993'] }] },
    nereid: /^1:15: value 9007199254740993 of field 'dims' \(int64\) cannot be represented exactly; .*2\^53-1/,
    why: 'a 64-bit integer beyond 2^53-1',
  },
  {
    text: 'input { dims: -0x8000000000000000 }',
    python: { input: [{ dims: ['-9223372036854775808'] }] },
    nereid: /^1:15: value -9223372036854775808 of field 'dims' \(int64\) cannot be represented exactly/,
    why: 'the least int64',
  },
  {
    text: 'dynamic_batching { priority_queue_policy { key: 18446744073709551615 } }',
    python: { dynamic_batching: { priority_queue_policy: { '18446744073709551615': {} } } },
    nereid: /^1:49: value 18446744073709551615 of field 'key' \(uint64\) cannot be represented exactly/,
    why: 'the greatest uint64, as a map key',
  },
];

/**
 * Where protobuf's Python parser (Debian's python3-protobuf 3.21) departs from its C++ parser,
 * the one Triton reads config.pbtxt with: Nereid follows the C++ parser. Each Nereid answer here
 * is what protobuf 3.21's C++ TextFormat::Parser gives for the same text, and the Python answer
 * is checked too, so this list says when a newer Python parser stops differing.
 */
const REFERENCE_QUIRKS: readonly Difference[] = [
  { text: 'max_batch_size: +5', python: { max_batch_size: 5 }, nereid: /^1:17: expected an integer .* found '\+'/, why: 'a plus sign' },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: +1.5 } }',
    python: { sequence_batching: { direct: { minimum_slot_utilization: 1.5 } } },
    nereid: /^1:56: expected a number .* found '\+'/,
    why: 'a plus sign on a float',
  },
  { text: 'input { dims: - 2 }', python: 'refuses', nereid: { input: [{ dims: ['-2'] }] }, why: 'a minus sign apart from its number' },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: - # c\n inf } }',
    python: 'refuses',
    nereid: { sequence_batching: { direct: { minimum_slot_utilization: '-Infinity' } } },
    why: 'a comment between a minus sign and inf',
  },
  { text: 'instance_group { passive: 0x1 }', python: 'refuses', nereid: { instance_group: [{ passive: true }] }, why: 'a bool in hex' },
  { text: 'instance_group { passive: 01 }', python: 'refuses', nereid: { instance_group: [{ passive: true }] }, why: 'a bool in octal' },
  { text: 'input { format: 02 }', python: 'refuses', nereid: { input: [{ format: 'FORMAT_NCHW' }] }, why: 'an enum number in octal' },
  {
    text: 'dynamic_batching { priority_levels: -0 }',
    python: { dynamic_batching: {} },
    nereid: /^1:37: a minus sign is not allowed before a value of unsigned field 'priority_levels'/,
    why: '-0 for an unsigned field',
  },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: 010 } }',
    python: { sequence_batching: { direct: { minimum_slot_utilization: 10 } } },
    nereid: /^1:56: expected a decimal number for field 'minimum_slot_utilization' \(float\), found '010'/,
    why: 'a leading-zero integer for a float (Python reads it as decimal)',
  },
  {
    text: 'model_metrics { metric_control { histogram_options { buckets: 00.5 } } }',
    python: { model_metrics: { metric_control: [{ histogram_options: { buckets: [0.5] } }] } },
    nereid: /^1:65: hex and octal numbers must be integers/,
    why: 'a leading-zero float',
  },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: 1.5F } }',
    python: 'refuses',
    nereid: { sequence_batching: { direct: { minimum_slot_utilization: 1.5 } } },
    why: 'an upper-case F suffix',
  },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: inff } }',
    python: { sequence_batching: { direct: { minimum_slot_utilization: 'Infinity' } } },
    nereid: /^1:56: expected a number .* found 'inff'/,
    why: 'an f suffix on inf',
  },
  {
    text: 'model_metrics { metric_control { histogram_options { buckets: nanf } } }',
    python: { model_metrics: { metric_control: [{ histogram_options: { buckets: ['NaN'] } }] } },
    nereid: /^1:63: expected a number .* found 'nanf'/,
    why: 'an f suffix on nan',
  },
  { text: 'max_batch_size: 1_000', python: { max_batch_size: 1000 }, nereid: /^1:18: need space between number and identifier/, why: 'digit separators' },
  { text: 'name: "\\u00e9"', python: 'refuses', nereid: { name: 'é' }, why: 'a \\u escape (Python makes it the single byte 0xe9)' },
  { text: 'name: "\\U0001F600"', python: { name: '\\U0001f600' }, nereid: { name: '😀' }, why: 'a \\U escape (Python keeps it as text)' },
  { text: 'name: "a\\?"', python: { name: 'a\\?' }, nereid: { name: 'a?' }, why: 'the \\? escape' },
  { text: 'name: "a\\qb"', python: { name: 'a\\qb' }, nereid: /^1:9: invalid escape sequence '\\q'/, why: 'an unknown escape' },
  { text: 'name: "\\8"', python: { name: '\\8' }, nereid: /^1:8: invalid escape sequence '\\8'/, why: 'a non-octal digit escape' },
  { text: 'name: "\\X41"', python: { name: '\\X41' }, nereid: /^1:8: invalid escape sequence '\\X'/, why: 'an upper-case \\X escape' },
  { text: 'name: "\\400"', python: { name: '\\u0100' }, nereid: { name: '\u0000' }, why: 'an octal escape above \\377 (C++ keeps the low byte)' },
  {
    text: 'sequence_batching { direct { minimum_slot_utilization: -0 minimum_slot_utilization: 0.5 } }',
    python: { sequence_batching: { direct: { minimum_slot_utilization: 0.5 } } },
    nereid: /^1:59: field 'minimum_slot_utilization' .* specified more than once/,
    why: 'a float given again after -0 (C++ compares bits: -0 is a value)',
  },
];

// ---------------------------------------------------------------------------------------------
// One reference run for everything

interface Batch {
  readonly valid: readonly GeneratedText[];
  readonly invalid: readonly InvalidText[];
  readonly fixtures: ReadonlyArray<{ readonly file: string; readonly text: string }>;
  readonly run: ReferenceRun;
  /** Results, in the order the texts were sent. */
  readonly results: {
    readonly valid: readonly ReferenceResult[];
    readonly invalid: readonly ReferenceResult[];
    readonly fixtures: readonly ReferenceResult[];
    readonly regressions: readonly ReferenceResult[];
    readonly fixedInvalid: readonly ReferenceResult[];
    readonly deliberate: readonly ReferenceResult[];
    readonly quirks: readonly ReferenceResult[];
  };
}

let batch: Promise<Batch> | undefined;

function referenceBatch(): Promise<Batch> {
  batch ??= (async () => {
    const generator = new PbtxtGenerator(SEED);
    const valid = Array.from({ length: TEXTS }, (_, i) => generator.valid(i));
    const invalid = Array.from({ length: INVALID_TEXTS }, (_, i) => generator.invalid(i));
    const dir = fixturesDir();
    const fixtures = readdirSync(dir)
      .filter((f) => f.endsWith('.pbtxt'))
      .sort()
      .map((file) => ({ file, text: readFileSync(join(dir, file), 'utf8') }));
    // The quirks go as written: they show the Python parser's own reading.
    const groups = [
      valid.map((g) => toReferenceDialect(g.text)),
      invalid.map((g) => toReferenceDialect(g.text)),
      fixtures.map((f) => toReferenceDialect(f.text)),
      REGRESSIONS.map(toReferenceDialect),
      INVALID.map((c) => c.text),
      DELIBERATE.map((c) => c.text),
      REFERENCE_QUIRKS.map((c) => c.text),
    ];
    const run = await parseWithReference(groups.flat());
    const results: ReferenceResult[][] = [];
    let offset = 0;
    for (const group of groups) {
      results.push(run.results.slice(offset, offset + group.length));
      offset += group.length;
    }
    const [v, i, f, r, fi, d, q] = results as [ReferenceResult[], ReferenceResult[], ReferenceResult[], ReferenceResult[], ReferenceResult[], ReferenceResult[], ReferenceResult[]];
    return { valid, invalid, fixtures, run, results: { valid: v, invalid: i, fixtures: f, regressions: r, fixedInvalid: fi, deliberate: d, quirks: q } };
  })();
  return batch;
}

// ---------------------------------------------------------------------------------------------
// Comparing

type Outcome = { readonly ok: JsonObject } | { readonly error: string };

/** Nereid's answer, in the reference's terms (protobuf JSON, floats as their float32 values). */
function nereid(text: string): Outcome {
  try {
    return { ok: canonicalFloats(modelConfigToJson(parseModelConfigText(text), { emitDefaults: false, int64AsString: true })) };
  } catch (err) {
    if (err instanceof NereidError && err.code === 'CONFIG_PARSE') return { error: err.message };
    throw err;
  }
}

function show(value: unknown, max = 1500): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

/** Why Nereid's and the reference's answers for `text` differ, or undefined when they agree. */
function disagreement(text: string, reference: ReferenceResult): string | undefined {
  const ours = nereid(text);
  if ('error' in reference) {
    return 'error' in ours ? undefined : `Nereid accepts it as ${show(ours.ok)} but protobuf refuses it: ${reference.error}`;
  }
  if ('error' in ours) return `Nereid refuses it (${ours.error}) but protobuf accepts it as ${show(reference.ok)}`;
  try {
    assert.deepStrictEqual(ours.ok, canonicalFloats(reference.ok));
    return undefined;
  } catch (err) {
    return `the messages differ:\n${(err as Error).message.split('\n').slice(0, 40).join('\n')}`;
  }
}

function report(what: string, failures: readonly string[], total: number): string {
  return `${failures.length} of ${total} ${what} (${REPRODUCE}):\n\n${failures.slice(0, 5).join('\n\n')}`;
}

// ---------------------------------------------------------------------------------------------
// Tests

test('generated texts: Nereid reads every one as protobuf does', async (t) => {
  const { valid, results, run } = await referenceBatch();
  t.diagnostic(`${valid.length} texts, ${REPRODUCE}, reference protobuf ${run.version}`);
  const failures: string[] = [];
  valid.forEach((g, i) => {
    const reference = results.valid[i] as ReferenceResult;
    if ('error' in reference) {
      failures.push(`text ${i}: the reference refuses a text the generator meant to be valid (${reference.error}):\n${show(g.text, 3000)}`);
      return;
    }
    const why = disagreement(g.text, reference);
    if (why !== undefined) failures.push(`text ${i}: ${why}\ntext: ${show(g.text, 3000)}`);
  });
  assert.equal(failures.length, 0, report('generated texts disagree', failures, valid.length));
});

test('generated texts: every field of every message and every syntax feature occurs', async () => {
  const { valid } = await referenceBatch();
  const generator = new PbtxtGenerator(SEED);
  const fields = new Set(valid.flatMap((g) => [...g.fields]));
  const features = new Set(valid.flatMap((g) => [...g.features]));
  const missingFields = generator.targetKeys.filter((k) => !fields.has(k));
  const missingFeatures = FEATURES.filter((f) => !features.has(f));
  assert.deepEqual(missingFields, [], `fields no generated text sets (${REPRODUCE})`);
  assert.deepEqual(missingFeatures, [], `syntax features no generated text uses (${REPRODUCE})`);
  // Map entries and nesting to the deepest message are among the targets.
  assert.ok(generator.targetKeys.includes('ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound.InputEntry.value'));
  assert.ok(generator.targetKeys.length > 150, `only ${generator.targetKeys.length} target fields`);
});

test('fixtures: Nereid reads every fixture as protobuf does', async () => {
  const { fixtures, results } = await referenceBatch();
  assert.ok(fixtures.length > 0, `no fixtures in ${fixturesDir()}`);
  const failures: string[] = [];
  fixtures.forEach((f, i) => {
    const reference = results.fixtures[i] as ReferenceResult;
    if ('error' in reference) failures.push(`${f.file}: the reference refuses it: ${reference.error}`);
    else {
      const why = disagreement(f.text, reference);
      if (why !== undefined) failures.push(`${f.file}: ${why}`);
    }
  });
  assert.equal(failures.length, 0, report('fixtures disagree', failures, fixtures.length));
});

test('regressions: past disagreements now agree', async () => {
  const { results } = await referenceBatch();
  const failures: string[] = [];
  REGRESSIONS.forEach((text, i) => {
    const why = disagreement(text, results.regressions[i] as ReferenceResult);
    if (why !== undefined) failures.push(`${show(text)}: ${why}`);
  });
  assert.equal(failures.length, 0, report('regression inputs disagree', failures, REGRESSIONS.length));
});

/** Checks that Nereid refuses `text` with an error at `line:column` (or later when not exact). */
function refusedAt(text: string, line: number, column: number, exact: boolean): string | undefined {
  const ours = nereid(text);
  if ('ok' in ours) return `Nereid accepts it as ${show(ours.ok)}`;
  const at = /^(\d+):(\d+): /.exec(ours.error);
  if (at === null) return `Nereid's error does not start with line:column: ${ours.error}`;
  const [gotLine, gotColumn] = [Number(at[1]), Number(at[2])];
  const lines = text.split('\n');
  if (gotLine > lines.length || gotColumn > (lines[gotLine - 1] ?? '').length + 1) {
    return `Nereid's error points outside the text (${lines.length} lines): ${ours.error}`;
  }
  const ok = exact ? gotLine === line && gotColumn === column : gotLine > line || (gotLine === line && gotColumn >= column);
  return ok ? undefined : `Nereid's error should be at ${exact ? '' : 'or after '}${line}:${column}: ${ours.error}`;
}

test('invalid texts: both parsers refuse every generated fault, Nereid at its line and column', async () => {
  const { invalid, results } = await referenceBatch();
  const failures: string[] = [];
  const faults = new Set(invalid.map((g) => g.fault));
  invalid.forEach((g, i) => {
    const reference = results.invalid[i] as ReferenceResult;
    const where = `invalid text ${i} (${g.fault} at ${g.target}, ${g.line}:${g.column})`;
    if ('ok' in reference) failures.push(`${where}: the reference accepts it as ${show(reference.ok)}:\n${show(g.text, 3000)}`);
    const why = refusedAt(g.text, g.line, g.column, g.exact);
    if (why !== undefined) failures.push(`${where}: ${why}\ntext: ${show(g.text, 3000)}`);
  });
  assert.equal(failures.length, 0, report('invalid texts fail the check', failures, invalid.length));
  assert.deepEqual(
    FAULTS.filter((f) => !faults.has(f)),
    [],
    'every kind of fault was generated',
  );
});

test('invalid texts: both parsers refuse the hand-written ones, Nereid at their line and column', async () => {
  const { results } = await referenceBatch();
  const failures: string[] = [];
  INVALID.forEach((c, i) => {
    const reference = results.fixedInvalid[i] as ReferenceResult;
    if ('ok' in reference) failures.push(`${c.why}: the reference accepts ${show(c.text)} as ${show(reference.ok)}`);
    const why = refusedAt(c.text, c.line, c.column, true);
    if (why !== undefined) failures.push(`${c.why} (${show(c.text)}): ${why}`);
  });
  assert.deepEqual(failures, []);
});

/** Checks one Difference against the Python parser's and Nereid's answers. */
function checkDifference(c: Difference, reference: ReferenceResult): string[] {
  const failures: string[] = [];
  const label = `${c.why} (${show(c.text)})`;
  if (c.python === 'refuses') {
    if ('ok' in reference) failures.push(`${label}: the Python parser now accepts it as ${show(reference.ok)}; it no longer differs`);
  } else if ('error' in reference) {
    failures.push(`${label}: the Python parser now refuses it (${reference.error})`);
  } else if (!sameJson(canonicalFloats(reference.ok), c.python)) {
    failures.push(`${label}: the Python parser now gives ${show(reference.ok)}, not ${show(c.python)}`);
  }
  const ours = nereid(c.text);
  if (c.nereid instanceof RegExp) {
    if ('ok' in ours) failures.push(`${label}: Nereid accepts it as ${show(ours.ok)}; expected an error matching ${c.nereid}`);
    else if (!c.nereid.test(ours.error)) failures.push(`${label}: Nereid's error ${show(ours.error)} does not match ${c.nereid}`);
  } else if ('error' in ours) {
    failures.push(`${label}: Nereid refuses it: ${ours.error}`);
  } else if (!sameJson(ours.ok, c.nereid)) {
    failures.push(`${label}: Nereid gives ${show(ours.ok)}, expected ${show(c.nereid)}`);
  }
  return failures;
}

function sameJson(a: JsonValue, b: JsonValue): boolean {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

test('deliberate differences: Nereid refuses what protobuf accepts, saying why', async () => {
  const { results } = await referenceBatch();
  assert.deepEqual(
    DELIBERATE.flatMap((c, i) => checkDifference(c, results.deliberate[i] as ReferenceResult)),
    [],
  );
});

test("the Python parser's departures from protobuf's C++ parser: Nereid reads these as the C++ parser does", async () => {
  const { results } = await referenceBatch();
  assert.deepEqual(
    REFERENCE_QUIRKS.flatMap((c, i) => checkDifference(c, results.quirks[i] as ReferenceResult)),
    [],
  );
});

test('toReferenceDialect rewrites only \\u, \\U and \\? inside strings', () => {
  assert.equal(toReferenceDialect('name: "\\u00e9\\U0001F600\\?" # "\\u00e9"'), 'name: "\\303\\251\\360\\237\\230\\200?" # "\\u00e9"');
  assert.equal(toReferenceDialect("name: '\\ud83d\\ude00' \"\\\\u00e9\""), "name: '\\360\\237\\230\\200' \"\\\\u00e9\"");
  assert.equal(toReferenceDialect('name: "\\"\\u0041" backend: "x"'), 'name: "\\"\\101" backend: "x"');
});
