/**
 * Test support, not part of the config layer's surface: a seeded generator of varied
 * `config.pbtxt` texts, driven by the schema (schema.ts), for comparing Nereid's parser with
 * protobuf's reference parser (`pbtxt-reference.test.ts`).
 *
 * `valid(i)` writes a text both parsers must accept: random fields of random messages, and
 * always the path down to one target field, so that every field of every message (map entries
 * included) is reached every `targets().length` texts. The syntax varies at random: list and
 * repeated forms of repeated fields (mixed), map entries as blocks and lists, `{}` and `<>`,
 * optional colons and separators, comments and whitespace between any two tokens, every number,
 * bool, enum and string spelling.
 *
 * `invalid(i)` writes a text with one fault that both parsers must refuse, and where Nereid's
 * error must point.
 *
 * The generator avoids the spellings where protobuf's Python parser departs from its C++ parser
 * (Triton's); `pbtxt-reference.test.ts` pins those separately. It never spells a number with `+`,
 * separates `-` from its number, puts `-` before an unsigned value, writes a float as a hex or
 * leading-zero integer, a bool or an enum number as hex or octal, an upper-case `F` suffix, or
 * gives a singular float `-0` before another value. String escapes `\u`, `\U` and `\?` are
 * generated; the test rewrites them for the Python parser (`toReferenceDialect`).
 */
import { Prng } from '@nereid/testkit';
import {
  type EnumSchema,
  type FieldSchema,
  type MapKeyType,
  type MessageSchema,
  MODEL_CONFIG_SCHEMA,
  type ScalarType,
  type ValueSchema,
  valueSchemaOf,
} from './schema.js';

// ---------------------------------------------------------------------------------------------
// Random numbers

/** The testkit's seeded generator (mulberry32), with the draws the text generator needs. */
export class Random extends Prng {
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[this.int(items.length)] as T;
  }

  /** A BigInt in [min, max]. */
  bigint(min: bigint, max: bigint): bigint {
    const span = max - min + 1n;
    let r = 0n;
    for (let i = 0; i < 3; i++) r = (r << 32n) | BigInt(this.int(2 ** 32));
    return min + (r % span);
  }
}

// ---------------------------------------------------------------------------------------------
// Features: what a text used. The test checks that a run used every one.

export const FEATURES = [
  'repeated-scalar-list',
  'repeated-scalar-repeated',
  'repeated-scalar-mixed',
  'repeated-empty-list',
  'repeated-message-list',
  'repeated-message-repeated',
  'repeated-message-mixed',
  'message-braces',
  'message-angles',
  'message-colon',
  'message-empty',
  'map-entry-blocks',
  'map-entry-list',
  'map-entry-no-key',
  'map-entry-no-value',
  'map-entry-value-first',
  'map-duplicate-key',
  'oneof-member',
  'singular-default-then-value',
  'fields-interleaved',
  'separator-comma',
  'separator-semicolon',
  'comment-line',
  'comment-between-name-and-colon',
  'comment-in-list',
  'comment-at-eof-without-newline',
  'whitespace-none',
  'whitespace-tab',
  'whitespace-crlf',
  'whitespace-formfeed',
  'whitespace-vtab',
  'int-decimal',
  'int-hex',
  'int-octal',
  'int-negative',
  'int-extreme',
  'int64-large',
  'float-integer-form',
  'float-fraction',
  'float-leading-dot',
  'float-trailing-dot',
  'float-exponent',
  'float-f-suffix',
  'float-negative',
  'float-inf',
  'float-nan',
  'float-overflow',
  'float-underflow',
  'bool-true-false',
  'bool-capitalised',
  'bool-t-f',
  'bool-1-0',
  'enum-name',
  'enum-number',
  'string-double-quoted',
  'string-single-quoted',
  'string-concatenated',
  'string-empty',
  'string-escape-simple',
  'string-escape-quote',
  'string-escape-octal',
  'string-escape-hex',
  'string-escape-unicode',
  'string-utf8-raw',
  'string-utf8-escaped',
  'string-hash-inside',
] as const;

export type Feature = (typeof FEATURES)[number];

// ---------------------------------------------------------------------------------------------
// Faults of invalid texts

export const FAULTS = [
  'unknown-field',
  'integer-wrong-type',
  'integer-out-of-range',
  'unsigned-negative',
  'integer-then-letter',
  'float-wrong-type',
  'float-malformed',
  'bool-wrong-value',
  'string-wrong-type',
  'string-unterminated',
  'enum-unknown-name',
  'enum-wrong-type',
  'message-given-scalar',
  'message-mismatched-close',
  'message-unclosed',
  'duplicate-singular',
  'oneof-conflict',
  'missing-colon',
  'list-on-singular',
  'list-trailing-comma',
  'list-missing-comma',
  'list-semicolon',
  'double-separator',
  'stray-close',
  'control-character',
] as const;

export type Fault = (typeof FAULTS)[number];

export interface GeneratedText {
  readonly text: string;
  readonly features: ReadonlySet<Feature>;
  /** `Message.field` of every field the text sets (see `fieldKey`). */
  readonly fields: ReadonlySet<string>;
}

export interface InvalidText {
  readonly text: string;
  readonly fault: Fault;
  /** `Message.field` the fault is in (or next to). */
  readonly target: string;
  /** 1-based line and column (UTF-16 units) where the error must be reported... */
  readonly line: number;
  readonly column: number;
  /** ...exactly, or (false) anywhere from there to the end of the text. */
  readonly exact: boolean;
}

/** How coverage names a field: `ModelConfig.input`, `ModelConfig.ParametersEntry.key`. */
export function fieldKey(message: MessageSchema, field: FieldSchema): string {
  return `${message.name}.${field.name}`;
}

/** Messages a field's value lives in: its message type, or the entry message of a map. */
function childMessage(field: FieldSchema): MessageSchema | undefined {
  if (field.type === 'map') return field.entry;
  if (field.type === 'message') return field.message;
  return undefined;
}

interface Target {
  /** Fields from the current message down to the target field (the last). */
  readonly path: readonly FieldSchema[];
  readonly fault?: Fault;
}

/** Every field of every message reachable from ModelConfig (map entries included), with its path. */
export function targets(): ReadonlyArray<{ readonly key: string; readonly path: readonly FieldSchema[] }> {
  const out: Array<{ key: string; path: FieldSchema[] }> = [];
  const visit = (message: MessageSchema, path: FieldSchema[]): void => {
    for (const field of message.fields) {
      out.push({ key: fieldKey(message, field), path: [...path, field] });
      const child = childMessage(field);
      if (child !== undefined) visit(child, [...path, field]);
    }
  };
  visit(MODEL_CONFIG_SCHEMA, []);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing tokens

interface Piece {
  readonly text: string;
  readonly comment: boolean;
  /** A newline must follow (an unterminated string). */
  readonly newlineAfter: boolean;
}

const WORD = /[A-Za-z0-9_.]/;

class Writer {
  readonly pieces: Piece[] = [];
  /** Piece index and offset of the position the error must be reported at. */
  mark: { piece: number; offset: number } | undefined;
  readonly #rng: Random;
  readonly #features: Set<Feature>;
  readonly #commentRate: number;

  constructor(rng: Random, features: Set<Feature>, commentRate: number) {
    this.#rng = rng;
    this.#features = features;
    this.#commentRate = commentRate;
  }

  tok(text: string, options: { mark?: number; newlineAfter?: boolean } = {}): void {
    if (options.mark !== undefined) this.mark = { piece: this.pieces.length, offset: options.mark };
    this.pieces.push({ text, comment: false, newlineAfter: options.newlineAfter ?? false });
  }

  /** Maybe a `#` comment here, counted as `feature` when one is written. */
  comment(feature?: Feature, rate = this.#commentRate): void {
    if (!this.#rng.chance(rate)) return;
    const bodies = [' note', ' "quoted" { braces } [ list ]: # again', '', " it's 1, 2; <x>", '\tTODO'];
    this.pieces.push({ text: `#${this.#rng.pick(bodies)}`, comment: true, newlineAfter: true });
    this.#features.add('comment-line');
    if (feature !== undefined) this.#features.add(feature);
  }

  render(style: 'compact' | 'pretty' | 'wild'): { text: string; line: number; column: number } {
    const rng = this.#rng;
    let text = '';
    let markLine = 0;
    let markColumn = 0;
    const lineColumnAt = (offset: number): [number, number] => {
      let line = 1;
      let lineStart = 0;
      for (let i = 0; i < offset; i++) {
        if (text.charCodeAt(i) === 10) {
          line++;
          lineStart = i + 1;
        }
      }
      return [line, offset - lineStart + 1];
    };
    if (rng.chance(0.2)) text += rng.pick(['\n', ' ', '\n\n', '\t']);
    this.pieces.forEach((piece, i) => {
      if (i > 0) text += this.#separator(this.pieces[i - 1] as Piece, piece, style);
      if (this.mark?.piece === i) [markLine, markColumn] = lineColumnAt(text.length + this.mark.offset);
      text += piece.text;
    });
    const last = this.pieces[this.pieces.length - 1];
    if (last?.comment && rng.chance(0.5)) this.#features.add('comment-at-eof-without-newline');
    else if (last?.newlineAfter || last?.comment || rng.chance(0.7)) text += '\n';
    return { text, line: markLine, column: markColumn };
  }

  #separator(prev: Piece, next: Piece, style: 'compact' | 'pretty' | 'wild'): string {
    const rng = this.#rng;
    if (prev.comment || prev.newlineAfter) {
      const sep = rng.pick(['\n', '\n', '\n  ', '\r\n', '\n\t']);
      if (sep === '\r\n') this.#features.add('whitespace-crlf');
      return sep;
    }
    const needsSpace = WORD.test(prev.text.charAt(prev.text.length - 1)) && WORD.test(next.text.charAt(0));
    const weights: Array<[string, number]> =
      style === 'compact'
        ? [['', 4], [' ', 5], ['\n', 1]]
        : style === 'pretty'
          ? [[' ', 6], ['\n', 3], ['\n  ', 2], ['', 1]]
          : [['', 2], [' ', 3], ['\n', 2], ['\t', 1], ['\r\n', 1], ['\f', 1], ['\v', 1], ['  \n\t ', 1]];
    const allowed = weights.filter(([s]) => s !== '' || !needsSpace);
    const total = allowed.reduce((n, [, w]) => n + w, 0);
    let r = rng.next() * total;
    let sep = ' ';
    for (const [s, w] of allowed) {
      r -= w;
      if (r < 0) {
        sep = s;
        break;
      }
    }
    if (sep === '') this.#features.add('whitespace-none');
    if (sep.includes('\t')) this.#features.add('whitespace-tab');
    if (sep.includes('\r\n')) this.#features.add('whitespace-crlf');
    if (sep.includes('\f')) this.#features.add('whitespace-formfeed');
    if (sep.includes('\v')) this.#features.add('whitespace-vtab');
    return sep;
  }
}

// ---------------------------------------------------------------------------------------------
// Values

const INT_LIMITS: Readonly<Record<'int32' | 'int64' | 'uint32' | 'uint64', readonly [bigint, bigint]>> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  // Nereid's 64-bit integers are exact JavaScript numbers (pbtxt-parser.ts).
  int64: [-(2n ** 53n - 1n), 2n ** 53n - 1n],
  uint64: [0n, 2n ** 53n - 1n],
};

const NON_ASCII = ['é', 'ß', 'naïve', '日本', '✓', '😀', 'Ω'];

type IntegerType = 'int32' | 'int64' | 'uint32' | 'uint64';

function isInteger(type: string): type is IntegerType {
  return type === 'int32' || type === 'int64' || type === 'uint32' || type === 'uint64';
}

class Values {
  readonly #rng: Random;
  readonly #features: Set<Feature>;

  constructor(rng: Random, features: Set<Feature>) {
    this.#rng = rng;
    this.#features = features;
  }

  integer(type: IntegerType, value?: bigint): string {
    const rng = this.#rng;
    const [min, max] = INT_LIMITS[type];
    if (value === undefined) {
      const special = [0n, 1n, max, min, 2n ** 31n - 1n, 255n, 4096n];
      if (type === 'int64' || type === 'uint64') special.push(2n ** 32n, 2n ** 40n + 3n);
      if (min < 0n) special.push(-1n, -(2n ** 31n));
      const r = rng.next();
      value = r < 0.45 ? rng.bigint(0n, 64n) : r < 0.75 ? rng.pick(special) : rng.bigint(min, max);
      if (value < min || value > max) value = 0n;
      if (min < 0n && value > 0n && rng.chance(0.15)) value = -value;
    }
    if (value === max || value === min) this.#features.add('int-extreme');
    const magnitude = value < 0n ? -value : value;
    if (magnitude > 2n ** 32n) this.#features.add('int64-large');
    let digits: string;
    const form = rng.next();
    if (form < 0.2) {
      const hex = magnitude.toString(16);
      digits = `${rng.pick(['0x', '0X'])}${rng.chance(0.5) ? hex.toUpperCase() : hex}`;
      this.#features.add('int-hex');
    } else if (form < 0.32 && magnitude > 0n) {
      digits = `0${magnitude.toString(8)}`;
      this.#features.add('int-octal');
    } else {
      digits = magnitude.toString();
      this.#features.add('int-decimal');
    }
    if (value < 0n) this.#features.add('int-negative');
    return value < 0n ? `-${digits}` : digits;
  }

  float(): string {
    const rng = this.#rng;
    const r = rng.next();
    if (r < 0.08) {
      this.#features.add('float-inf');
      return `${rng.chance(0.4) ? '-' : ''}${rng.pick(['inf', 'Inf', 'INF', 'infinity', 'Infinity', 'INFINITY'])}`;
    }
    if (r < 0.12) {
      this.#features.add('float-nan');
      return `${rng.chance(0.2) ? '-' : ''}${rng.pick(['nan', 'NaN', 'NAN'])}`;
    }
    if (r < 0.17) {
      const extreme = rng.pick([
        ['1e39', 'float-overflow'],
        ['3.5e38', 'float-overflow'],
        ['1e309', 'float-overflow'],
        ['1.8e308', 'float-overflow'],
        ['1e-46', 'float-underflow'],
        ['1e-45', 'float-underflow'],
        ['1e-400', 'float-underflow'],
        ['5e-324', 'float-underflow'],
        ['3.4028235e38', 'float-exponent'],
        ['1.17549435e-38', 'float-exponent'],
        ['1.7976931348623157e308', 'float-exponent'],
        ['123456789012345678901234567890', 'float-integer-form'],
      ] as const);
      this.#features.add(extreme[1]);
      return `${rng.chance(0.3) ? '-' : ''}${extreme[0]}`;
    }
    const whole = rng.chance(0.3) ? '0' : String(rng.int(rng.chance(0.5) ? 10 : 100000));
    const frac = String(rng.int(1000)).padStart(rng.int(4), '0');
    let text: string;
    const form = rng.int(6);
    if (form === 0) {
      text = whole;
      this.#features.add('float-integer-form');
    } else if (form === 1) {
      text = `.${frac || '5'}`;
      this.#features.add('float-leading-dot');
    } else if (form === 2) {
      text = `${whole}.`;
      this.#features.add('float-trailing-dot');
    } else if (form === 3) {
      text = `${whole}${rng.pick(['e', 'E'])}${rng.pick(['', '+', '-'])}${rng.int(40)}`;
      this.#features.add('float-exponent');
    } else if (form === 4) {
      text = `${whole}.${frac}${rng.pick(['e', 'E'])}${rng.pick(['', '-'])}${rng.int(12)}`;
      this.#features.add('float-exponent');
    } else {
      text = `${whole}.${frac}`;
      this.#features.add('float-fraction');
    }
    if (rng.chance(0.15)) {
      text += 'f';
      this.#features.add('float-f-suffix');
    }
    if (rng.chance(0.2)) {
      this.#features.add('float-negative');
      return `-${text}`;
    }
    return text;
  }

  bool(value?: boolean): string {
    const rng = this.#rng;
    const v = value ?? rng.chance(0.5);
    const form = rng.int(4);
    if (form === 0) {
      this.#features.add('bool-true-false');
      return v ? 'true' : 'false';
    }
    if (form === 1) {
      this.#features.add('bool-capitalised');
      return v ? 'True' : 'False';
    }
    if (form === 2) {
      this.#features.add('bool-t-f');
      return v ? 't' : 'f';
    }
    this.#features.add('bool-1-0');
    return v ? '1' : '0';
  }

  enumValue(e: EnumSchema, index?: number): string {
    const rng = this.#rng;
    const v = e.values[index ?? rng.int(e.values.length)];
    if (v === undefined) throw new Error(`enum ${e.name} has no value ${index}`);
    if (rng.chance(0.2)) {
      this.#features.add('enum-number');
      return String(v.number);
    }
    this.#features.add('enum-name');
    return v.name;
  }

  /** One to three adjacent literals. */
  string(): string[] {
    const rng = this.#rng;
    const count = rng.chance(0.8) ? 1 : 2 + rng.int(2);
    if (count > 1) this.#features.add('string-concatenated');
    const out: string[] = [];
    for (let i = 0; i < count; i++) out.push(this.#literal());
    return out;
  }

  #literal(): string {
    const rng = this.#rng;
    const quote = rng.chance(0.7) ? '"' : "'";
    this.#features.add(quote === '"' ? 'string-double-quoted' : 'string-single-quoted');
    const parts: string[] = [];
    const n = rng.chance(0.1) ? 0 : 1 + rng.int(3);
    if (n === 0) this.#features.add('string-empty');
    for (let i = 0; i < n; i++) {
      const last = i === n - 1;
      const r = rng.int(14);
      if (r < 4) {
        const words = ['model', 'x', 'INPUT__0', 'a b', 'gpu_0', 'labels.txt', 'k=v', '{ not: a message }', '1.5', "-", '/path/to'];
        parts.push(rng.pick(words));
      } else if (r === 4) {
        parts.push('# not a comment');
        this.#features.add('string-hash-inside');
      } else if (r === 5) {
        parts.push(quote === '"' ? "it's" : 'say "hi"');
      } else if (r === 6) {
        parts.push(rng.pick(['\\n', '\\t', '\\r', '\\a', '\\b', '\\f', '\\v', '\\\\', '\\?']));
        this.#features.add('string-escape-simple');
      } else if (r === 7) {
        parts.push(rng.pick(["\\'", '\\"']));
        this.#features.add('string-escape-quote');
      } else if (r === 8) {
        // Octal escapes of ASCII; 1 or 2 digits only before the closing quote, so that a digit
        // that follows is not read as part of the escape.
        const value = rng.int(128);
        const octal = value.toString(8);
        parts.push(last && rng.chance(0.5) ? `\\${octal}` : `\\${octal.padStart(3, '0')}`);
        this.#features.add('string-escape-octal');
      } else if (r === 9) {
        const value = 1 + rng.int(127);
        const hex = value.toString(16);
        const text = last && value < 16 && rng.chance(0.5) ? hex : hex.padStart(2, '0');
        parts.push(`\\x${rng.chance(0.5) ? text.toUpperCase() : text}`);
        this.#features.add('string-escape-hex');
      } else if (r === 10) {
        parts.push(rng.pick(NON_ASCII));
        this.#features.add('string-utf8-raw');
      } else if (r === 11) {
        const bytes = new TextEncoder().encode(rng.pick(NON_ASCII));
        parts.push([...bytes].map((b) => (rng.chance(0.5) ? `\\${b.toString(8)}` : `\\x${b.toString(16)}`)).join(''));
        this.#features.add('string-utf8-escaped');
      } else if (r === 12) {
        const ch = rng.pick(['é', 'Ω', '✓', '日', '😀']);
        const cp = ch.codePointAt(0) ?? 0;
        if (cp > 0xffff) {
          parts.push(
            rng.chance(0.5)
              ? `\\U${cp.toString(16).padStart(8, '0')}`
              : `\\u${ch.charCodeAt(0).toString(16)}\\u${ch.charCodeAt(1).toString(16)}`,
          );
        } else {
          parts.push(`\\u${cp.toString(16).padStart(4, '0')}`);
        }
        this.#features.add('string-escape-unicode');
      } else {
        parts.push(quote === '"' ? "'" : '"');
      }
    }
    return `${quote}${parts.join('')}${quote}`;
  }

  /** A value of a scalar type, as its token(s). `nonDefault`: never the type's default. */
  scalar(type: ScalarType, nonDefault = false): string[] {
    switch (type) {
      case 'string': {
        if (!nonDefault) return this.string();
        return [`"${this.#rng.pick(['x', 'model', 'a b'])}"`];
      }
      case 'bool':
        return [this.bool(nonDefault ? true : undefined)];
      case 'float':
      case 'double':
        return [nonDefault ? this.#rng.pick(['1.5', '7', '2e3', '-0.25']) : this.float()];
      default:
        return [this.integer(type, nonDefault ? BigInt(1 + this.#rng.int(9)) : undefined)];
    }
  }

  /** The type's default, spelled some way both parsers read as "not set". */
  defaultOf(value: ValueSchema): string[] {
    const rng = this.#rng;
    switch (value.type) {
      case 'string':
        return [rng.pick(['""', "''", '"" \'\''])];
      case 'bool':
        return [rng.pick(['false', 'False', 'f', '0'])];
      case 'float':
      case 'double':
        return [rng.pick(['0', '0.0', '0e5', '.0'])];
      case 'enum':
        return [rng.chance(0.5) ? (value.enum.values[0]?.name ?? '0') : '0'];
      case 'message':
        throw new Error('messages have no default spelling');
      default:
        return [rng.pick(['0', '0x0', '00'])];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The generator

type Occurrence = (w: Writer) => void;

export class PbtxtGenerator {
  readonly #seed: number;
  readonly #targets = targets();

  constructor(seed: number) {
    this.#seed = seed >>> 0;
  }

  /** The target fields, in the order `valid(i)` cycles through them. */
  get targetKeys(): readonly string[] {
    return this.#targets.map((t) => t.key);
  }

  /** Text number `index` of this seed: always the same text for the same seed and index. */
  valid(index: number): GeneratedText {
    const rng = new Random(this.#seed ^ Math.imul(index + 1, 0x9e3779b1));
    const target = this.#targets[index % this.#targets.length];
    const run = new Run(rng, target === undefined ? undefined : { path: target.path });
    const { text } = run.generate();
    return { text, features: run.features, fields: run.fields };
  }

  /** Invalid text number `index`: one fault, cycling through FAULTS. */
  invalid(index: number): InvalidText {
    const fault = FAULTS[index % FAULTS.length] as Fault;
    const rng = new Random(this.#seed ^ Math.imul(index + 1, 0x85ebca6b) ^ 0x5bd1e995);
    const eligible = this.#targets.filter((t) => faultApplies(fault, t.path));
    if (eligible.length === 0) throw new Error(`no field can carry fault ${fault}`);
    const target = rng.pick(eligible);
    const run = new Run(rng, { path: target.path, fault });
    const { text, line, column } = run.generate();
    if (line === 0) throw new Error(`fault ${fault} was not written for ${target.key}`);
    return { text, fault, target: target.key, line, column, exact: fault !== 'message-unclosed' };
  }
}

/** Whether `fault` can be written at the last field of `path`. */
function faultApplies(fault: Fault, path: readonly FieldSchema[]): boolean {
  const field = path[path.length - 1];
  if (field === undefined) return false;
  const value = valueSchemaOf(field);
  const scalar = field.type !== 'message' && field.type !== 'map';
  switch (fault) {
    case 'unknown-field':
    case 'double-separator':
      return true;
    case 'stray-close':
      return path.length === 1;
    case 'integer-wrong-type':
    case 'integer-out-of-range':
    case 'integer-then-letter':
      return isInteger(value.type);
    case 'unsigned-negative':
      return value.type === 'uint32' || value.type === 'uint64';
    case 'float-wrong-type':
    case 'float-malformed':
      return value.type === 'float' || value.type === 'double';
    case 'bool-wrong-value':
      return value.type === 'bool';
    case 'string-wrong-type':
    case 'string-unterminated':
      return value.type === 'string';
    case 'enum-unknown-name':
    case 'enum-wrong-type':
      return value.type === 'enum';
    case 'message-given-scalar':
    case 'message-mismatched-close':
    case 'message-unclosed':
      return field.type === 'message';
    case 'duplicate-singular':
      // A one-value enum has no value but its default, which may be given twice.
      return !field.repeated && field.type !== 'map' && (value.type !== 'enum' || value.enum.values.length > 1);
    case 'oneof-conflict': {
      const parentField = path[path.length - 2];
      const parent = parentField === undefined ? MODEL_CONFIG_SCHEMA : childMessage(parentField);
      return field.oneof !== undefined && (parent?.fields.filter((f) => f.oneof === field.oneof).length ?? 0) > 1;
    }
    case 'missing-colon':
    case 'list-on-singular':
      return scalar && !field.repeated;
    case 'list-trailing-comma':
    case 'list-semicolon':
      return scalar && field.repeated;
    case 'list-missing-comma':
      // Two adjacent strings are one string.
      return scalar && field.repeated && value.type !== 'string';
    case 'control-character':
      return true;
  }
}

/** One text being written. */
class Run {
  readonly features = new Set<Feature>();
  readonly fields = new Set<string>();
  readonly #rng: Random;
  readonly #values: Values;
  readonly #target: Target | undefined;
  readonly #w: Writer;
  readonly #style: 'compact' | 'pretty' | 'wild';

  constructor(rng: Random, target: Target | undefined) {
    this.#rng = rng;
    this.#values = new Values(rng, this.features);
    this.#target = target;
    this.#style = rng.pick(['compact', 'pretty', 'wild'] as const);
    this.#w = new Writer(rng, this.features, this.#style === 'wild' ? 0.12 : rng.pick([0, 0.03, 0.06]));
  }

  generate(): { text: string; line: number; column: number } {
    this.#w.comment();
    this.#body(MODEL_CONFIG_SCHEMA, 0, this.#target);
    this.#w.comment();
    return this.#w.render(this.#style);
  }

  /** The fields of one message, in some order. */
  #body(schema: MessageSchema, depth: number, target: Target | undefined): void {
    const rng = this.#rng;
    const forced = target?.path[0];
    const rest: Target | undefined = target === undefined || target.path.length <= 1 ? undefined : { ...target, path: target.path.slice(1) };
    const atTarget = target !== undefined && target.path.length === 1;
    const rate = depth === 0 ? 0.2 : depth === 1 ? 0.3 : 0.4;

    let chosen = schema.fields.filter((f) => f === forced || rng.chance(rate));
    for (const oneof of schema.oneofs) {
      const members = chosen.filter((f) => f.oneof === oneof);
      if (members.length <= 1) continue;
      const keep = members.includes(forced as FieldSchema) ? forced : rng.pick(members);
      chosen = chosen.filter((f) => f.oneof !== oneof || f === keep);
    }
    const fault = atTarget ? target.fault : undefined;
    if (fault === 'oneof-conflict' && forced !== undefined) {
      chosen = chosen.filter((f) => f.oneof !== forced.oneof || f === forced);
    }

    const lists: Occurrence[][] = chosen.map((field) => {
      if (field === forced && fault !== undefined) return this.#faulty(schema, field, fault, depth);
      return this.#occurrences(schema, field, depth, field === forced ? rest : undefined, field === forced);
    });
    if (fault === 'oneof-conflict' && forced !== undefined) {
      // The other member comes after the target, so the error is at its name.
      const other = schema.fields.find((f) => f.oneof === forced.oneof && f !== forced);
      const index = chosen.indexOf(forced);
      if (other !== undefined) {
        const occurrences = lists[index] as Occurrence[];
        occurrences.push((w) => {
          this.#name(w, other, true);
          this.#value(w, other, depth, undefined);
        });
      }
    }
    this.#interleave(lists);
  }

  /** Writes the per-field occurrence lists, keeping each field's own order. */
  #interleave(lists: Occurrence[][]): void {
    const rng = this.#rng;
    const w = this.#w;
    const remaining = lists.filter((l) => l.length > 0).map((l) => [...l]);
    const shuffle = rng.chance(0.4);
    if (shuffle && remaining.filter((l) => l.length > 0).length > 1) this.features.add('fields-interleaved');
    while (remaining.length > 0) {
      const i = shuffle ? rng.int(remaining.length) : 0;
      const list = remaining[i] as Occurrence[];
      (list.shift() as Occurrence)(w);
      w.comment();
      if (list.length === 0) remaining.splice(i, 1);
    }
  }

  #separator(w: Writer): void {
    const r = this.#rng.next();
    if (r < 0.12) {
      w.tok(',');
      this.features.add('separator-comma');
    } else if (r < 0.22) {
      w.tok(';');
      this.features.add('separator-semicolon');
    }
  }

  /** The occurrences of one field (several for repeated and map fields). */
  #occurrences(schema: MessageSchema, field: FieldSchema, depth: number, rest: Target | undefined, forced: boolean): Occurrence[] {
    const rng = this.#rng;
    this.fields.add(fieldKey(schema, field));
    if (field.type === 'map' || field.repeated) {
      const count = forced ? 1 + rng.int(2) : rng.int(3);
      const targetIndex = rest === undefined ? -1 : rng.int(Math.max(count, 1));
      const elements = Array.from({ length: count }, (_, i) => i);
      if (count === 0) {
        this.features.add('repeated-empty-list');
        return [
          (w) => {
            this.#name(w, field);
            w.tok('[');
            w.tok(']');
            this.#separator(w);
          },
        ];
      }
      // Split the elements into runs; each run is one list or one single occurrence.
      const runs: number[][] = [];
      for (const e of elements) {
        const current = runs[runs.length - 1];
        if (current !== undefined && rng.chance(0.6)) current.push(e);
        else runs.push([e]);
      }
      const asList = runs.map((run) => run.length > 1 || rng.chance(0.4));
      const kind = field.type === 'map' ? 'map' : field.type === 'message' ? 'message' : 'scalar';
      const hasList = asList.some((l) => l);
      const hasSingle = asList.some((l) => !l);
      if (kind === 'map') this.features.add(hasList ? 'map-entry-list' : 'map-entry-blocks');
      else if (hasList && hasSingle) this.features.add(`repeated-${kind}-mixed` as Feature);
      else this.features.add((hasList ? `repeated-${kind}-list` : `repeated-${kind}-repeated`) as Feature);
      const keys: string[][] = [];
      return runs.map((run, r) => (w: Writer) => {
        this.#name(w, field);
        if (asList[r]) {
          w.tok('[');
          w.comment('comment-in-list');
          run.forEach((e, k) => {
            if (k > 0) {
              w.tok(',');
              w.comment('comment-in-list');
            }
            this.#element(w, field, depth, e === targetIndex ? rest : undefined, keys);
          });
          w.comment('comment-in-list');
          w.tok(']');
        } else {
          this.#element(w, field, depth, run[0] === targetIndex ? rest : undefined, keys);
        }
        this.#separator(w);
      });
    }
    const occurrences: Occurrence[] = [];
    const value = valueSchemaOf(field);
    if (value.type !== 'message' && field.oneof === undefined && rng.chance(0.06)) {
      this.features.add('singular-default-then-value');
      occurrences.push((w) => {
        this.#name(w, field);
        for (const t of this.#values.defaultOf(value)) w.tok(t);
        this.#separator(w);
      });
    }
    if (field.oneof !== undefined) this.features.add('oneof-member');
    occurrences.push((w) => {
      this.#name(w, field);
      this.#value(w, field, depth, rest);
      this.#separator(w);
    });
    return occurrences;
  }

  /** `name` and, for scalars, `:`; comments may sit between them. */
  #name(w: Writer, field: FieldSchema, mark = false): void {
    w.tok(field.name, mark ? { mark: 0 } : {});
    w.comment('comment-between-name-and-colon', 0.05);
    const message = field.type === 'message' || field.type === 'map';
    if (!message) {
      w.tok(':');
      w.comment();
    } else if (this.#rng.chance(0.3)) {
      w.tok(':');
      this.features.add('message-colon');
    }
  }

  /**
   * One value of `field` after its name (and colon): `{ ... }` for a message, an entry for a map.
   * `nonDefault`: never the type's default (a second occurrence must then be refused).
   */
  #value(w: Writer, field: FieldSchema, depth: number, rest: Target | undefined, nonDefault = false): void {
    if (field.type === 'map') {
      this.#mapEntry(w, field, depth, rest, []);
      return;
    }
    const value = valueSchemaOf(field);
    if (value.type === 'message') this.#message(w, value.message, depth + 1, rest);
    else if (value.type === 'enum') w.tok(this.#values.enumValue(value.enum, nonDefault ? 1 + this.#rng.int(value.enum.values.length - 1) : undefined));
    else for (const t of this.#values.scalar(value.type, nonDefault)) w.tok(t);
  }

  /** One element of a repeated or map field (`keys`: the map's keys so far, to repeat one). */
  #element(w: Writer, field: FieldSchema, depth: number, rest: Target | undefined, keys: string[][]): void {
    if (field.type === 'map') this.#mapEntry(w, field, depth, rest, keys);
    else this.#value(w, field, depth, rest);
  }

  #open(w: Writer): string {
    if (this.#rng.chance(0.15)) {
      w.tok('<');
      this.features.add('message-angles');
      return '>';
    }
    w.tok('{');
    this.features.add('message-braces');
    return '}';
  }

  #message(w: Writer, schema: MessageSchema, depth: number, target: Target | undefined): void {
    const close = this.#open(w);
    const before = w.pieces.length;
    this.#body(schema, depth, target);
    if (w.pieces.length === before) this.features.add('message-empty');
    w.tok(close);
  }

  /** `{ key: k value: v }` with either part missing or in either order; keys may repeat. */
  #mapEntry(w: Writer, field: Extract<FieldSchema, { type: 'map' }>, depth: number, rest: Target | undefined, keys: string[][]): void {
    const rng = this.#rng;
    const entry = field.entry;
    const keyField = entry.field('key') as FieldSchema;
    const valueField = entry.field('value') as FieldSchema;
    this.fields.add(fieldKey(entry, keyField));
    if (rest?.fault !== undefined) {
      // A fault inside the entry: write the entry as the message it is.
      const close = this.#open(w);
      this.#body(entry, depth + 1, rest);
      w.tok(close);
      return;
    }
    const forced = rest?.path[0];
    const withKey = forced === keyField || rng.chance(0.9);
    const withValue = forced === valueField || rng.chance(0.85);
    if (!withKey) this.features.add('map-entry-no-key');
    if (!withValue) this.features.add('map-entry-no-value');
    let key: string[] = [];
    if (withKey) {
      if (keys.length > 0 && rng.chance(0.15)) {
        key = rng.pick(keys);
        this.features.add('map-duplicate-key');
      } else {
        key = this.#mapKey(field.key);
        keys.push(key);
      }
    }
    const close = this.#open(w);
    const writeKey = (): void => {
      w.tok('key');
      w.tok(':');
      for (const t of key) w.tok(t);
      this.#separator(w);
    };
    const writeValue = (): void => {
      this.fields.add(fieldKey(entry, valueField));
      const valueRest = forced === valueField && rest !== undefined && rest.path.length > 1 ? { ...rest, path: rest.path.slice(1) } : undefined;
      w.tok('value');
      if (field.value.type === 'message') {
        if (rng.chance(0.4)) w.tok(':');
        this.#message(w, field.value.message, depth + 1, valueRest);
      } else {
        w.tok(':');
        if (field.value.type === 'enum') w.tok(this.#values.enumValue(field.value.enum));
        else for (const t of this.#values.scalar(field.value.type)) w.tok(t);
      }
      this.#separator(w);
    };
    if (withKey && withValue && rng.chance(0.2)) {
      this.features.add('map-entry-value-first');
      writeValue();
      writeKey();
    } else {
      if (withKey) writeKey();
      if (withValue) writeValue();
    }
    w.tok(close);
  }

  #mapKey(type: MapKeyType): string[] {
    if (type === 'string') return this.#values.string();
    if (type === 'bool') return [this.#values.bool()];
    return [this.#values.integer(type)];
  }

  // -------------------------------------------------------------------------------------------
  // Faults

  /** The occurrence(s) of `field` written with `fault`; the writer's mark is where it must be reported. */
  #faulty(schema: MessageSchema, field: FieldSchema, fault: Fault, depth: number): Occurrence[] {
    const rng = this.#rng;
    const v = this.#values;
    const value = valueSchemaOf(field);
    const nameColon = (w: Writer): void => this.#name(w, field);
    const badValue = (tokens: readonly string[], mark = 0) => (w: Writer) => {
      nameColon(w);
      tokens.forEach((t, i) => w.tok(t, i === 0 ? { mark } : {}));
    };
    switch (fault) {
      case 'unknown-field': {
        const names = [`${field.name}s`, 'not_a_field', field.name.toUpperCase(), `x${field.name}`];
        const name = rng.pick(names.filter((n) => schema.field(n) === undefined));
        return [
          (w) => {
            w.tok(name, { mark: 0 });
            w.tok(':');
            w.tok(rng.pick(['1', '"x"', 'TYPE_FP32']));
          },
        ];
      }
      case 'integer-wrong-type':
        return [badValue([rng.pick(['"8"', '1.5', 'abc', 'true', '1e3', '2.', 'inf'])])];
      case 'integer-out-of-range': {
        const type = value.type as IntegerType;
        const outside = {
          int32: ['2147483648', '-2147483649', '0x80000000', '99999999999'],
          uint32: ['4294967296', '0x100000000'],
          int64: ['9223372036854775808', '-9223372036854775809', '0x8000000000000000'],
          uint64: ['18446744073709551616', '0x10000000000000000'],
        }[type];
        return [badValue([rng.pick(outside)])];
      }
      case 'unsigned-negative':
        return [badValue([rng.pick(['-1', '-7', '-0x10'])])];
      case 'integer-then-letter':
        return [badValue(['12abc'], 2)];
      case 'float-wrong-type': {
        // Both parsers report '-0x1' at the number after the sign.
        const [text, offset] = rng.pick([['"1.5"', 0], ['abc', 0], ['true', 0], ['0x10', 0], ['-0x1', 1], ['infinite', 0]] as const);
        return [badValue([text], offset)];
      }
      case 'float-malformed': {
        const [text, offset] = rng.pick([
          ['1e', 2],
          ['1.5.5', 3],
          ['2e5.1', 3],
          ['.5e+', 4],
        ] as const);
        return [badValue([text], offset)];
      }
      case 'bool-wrong-value':
        return [badValue([rng.pick(['yes', '2', '"true"', 'TRUE', '1.0', 'on', '-1'])])];
      case 'string-wrong-type':
        return [badValue([rng.pick(['8', 'abc', '1.5', 'true', 'TYPE_FP32'])])];
      case 'string-unterminated':
        return [
          (w) => {
            nameColon(w);
            w.tok(rng.pick(['"abc', "'abc", '"ab\\"c', '"']), { mark: 0, newlineAfter: true });
          },
        ];
      case 'enum-unknown-name': {
        if (value.type !== 'enum') throw new Error('enum fault on a non-enum field');
        const real = rng.pick(value.enum.values).name;
        const other = value.enum.name === 'DataType' ? 'KIND_GPU' : 'TYPE_FP32';
        return [badValue([rng.pick([`NOT_${real}`, real.toLowerCase(), other])])];
      }
      case 'enum-wrong-type':
        return [badValue([rng.pick(['"TYPE_FP32"', '1.5', "'x'"])])];
      case 'message-given-scalar':
        return [
          (w) => {
            w.tok(field.name);
            w.tok(':');
            w.tok(rng.pick(['1', '"x"', 'true']), { mark: 0 });
          },
        ];
      case 'message-mismatched-close':
        return [
          (w) => {
            this.#name(w, field);
            const open = rng.chance(0.5);
            w.tok(open ? '{' : '<');
            this.#body((value as Extract<ValueSchema, { type: 'message' }>).message, depth + 1, undefined);
            w.tok(open ? '>' : '}', { mark: 0 });
          },
        ];
      case 'message-unclosed':
        return [
          (w) => {
            this.#name(w, field);
            w.tok('{', { mark: 0 });
            this.#body((value as Extract<ValueSchema, { type: 'message' }>).message, depth + 1, undefined);
          },
        ];
      case 'duplicate-singular':
        return [
          (w) => {
            this.#name(w, field);
            this.#value(w, field, depth, undefined, true);
          },
          (w) => {
            this.#name(w, field, true);
            this.#value(w, field, depth, undefined, rng.chance(0.5));
          },
        ];
      case 'oneof-conflict':
        return [
          (w) => {
            this.#name(w, field);
            this.#value(w, field, depth, undefined);
          },
        ];
      case 'missing-colon':
        return [
          (w) => {
            w.tok(field.name);
            const tokens = value.type === 'enum' ? [v.enumValue(value.enum)] : v.scalar(value.type as ScalarType);
            tokens.forEach((t, i) => w.tok(t, i === 0 ? { mark: 0 } : {}));
          },
        ];
      case 'list-on-singular':
        return [
          (w) => {
            nameColon(w);
            w.tok('[', { mark: 0 });
            const tokens = value.type === 'enum' ? [v.enumValue(value.enum)] : v.scalar(value.type as ScalarType);
            for (const t of tokens) w.tok(t);
            w.tok(']');
          },
        ];
      case 'list-trailing-comma':
      case 'list-missing-comma':
      case 'list-semicolon':
        return [
          (w) => {
            nameColon(w);
            w.tok('[');
            const element = (): string[] => (value.type === 'enum' ? [v.enumValue(value.enum)] : v.scalar(value.type as ScalarType));
            for (const t of element()) w.tok(t);
            if (fault === 'list-trailing-comma') {
              w.tok(',');
              w.tok(']', { mark: 0 });
              return;
            }
            if (fault === 'list-semicolon') w.tok(';', { mark: 0 });
            element().forEach((t, i) => w.tok(t, fault === 'list-missing-comma' && i === 0 ? { mark: 0 } : {}));
            w.tok(']');
          },
        ];
      case 'double-separator':
        return [
          (w) => {
            this.#name(w, field);
            this.#value(w, field, depth, undefined);
            w.tok(rng.pick([',', ';']));
            w.tok(rng.pick([',', ';']), { mark: 0 });
          },
        ];
      case 'stray-close':
        return [
          (w) => {
            this.#name(w, field);
            this.#value(w, field, depth, undefined);
            w.tok(rng.pick(['}', '>']), { mark: 0 });
          },
        ];
      case 'control-character':
        return [
          (w) => {
            this.#name(w, field);
            this.#value(w, field, depth, undefined);
            w.tok(rng.pick(['\x01', '\x7f', '\x1b']), { mark: 0 });
          },
        ];
    }
  }
}
