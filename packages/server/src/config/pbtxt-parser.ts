/**
 * Protobuf text-format parser for `config.pbtxt` (models-and-scheduling.md §2.1), driven by the
 * schema of schema.ts.
 *
 * Contract: returns only the fields the text set (`Sparse<ModelConfig>`); a sub-message written
 * as `dynamic_batching { }` is present as `{}`, a repeated or map field written as `[ ]` is
 * present and empty. Every failure throws `NereidError('CONFIG_PARSE')` whose message starts with
 * `<file>:<line>:<column>: ` (1-based; the file part only when a file name is given).
 *
 * It accepts and refuses what protobuf's C++ `TextFormat::Parser` (the parser Triton reads
 * `config.pbtxt` with) does, and produces the same message, except where this parser is stricter
 * on purpose:
 * - an enum number that names no value is refused (protobuf keeps it as an open-enum value; no
 *   part of Nereid could act on it);
 * - 64-bit integers beyond magnitude 2^53-1 are refused (they are JavaScript numbers here);
 * - a string that is not valid UTF-8 after unescaping is refused (protobuf's C++ parser keeps
 *   the bytes and only complains when it serialises them; its Python parser refuses them too).
 * `pbtxt-reference.test.ts` checks the agreement against protobuf's Python parser on generated
 * texts, and pins these differences and the places where the Python parser departs from the C++
 * one.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig, Sparse } from './model-config.js';
import { type MessageObject, setOwn } from './message-object.js';
import {
  type FieldSchema,
  INTEGER_RANGE,
  type MessageSchema,
  MODEL_CONFIG_SCHEMA,
  type ScalarType,
  type ValueSchema,
  defaultValueOf,
  toFloat32,
  valueSchemaOf,
} from './schema.js';

export interface TextParseOptions {
  /** Shown in front of `line:column` in error messages, e.g. `config.pbtxt`. */
  readonly fileName?: string;
}

/**
 * Parses the text form of a ModelConfig (models-and-scheduling.md §2.1). `options` may be the
 * file name alone.
 */
export function parseModelConfigText(text: string, options: TextParseOptions | string = {}): Sparse<ModelConfig> {
  const resolved = typeof options === 'string' ? { fileName: options } : options;
  return parseTextMessage(text, MODEL_CONFIG_SCHEMA, resolved) as Sparse<ModelConfig>;
}

/** Parses the text form of any message described by `schema`. */
export function parseTextMessage(text: string, schema: MessageSchema, options: TextParseOptions = {}): MessageObject {
  return new Parser(text, options.fileName).parseRoot(schema);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

type TokenKind = 'identifier' | 'integer' | 'float' | 'string' | 'symbol' | 'eof';

interface Position {
  readonly line: number;
  readonly column: number;
}

interface Token extends Position {
  readonly kind: TokenKind;
  /** Source text of the token (strings with their quotes). */
  readonly text: string;
  /** Decoded bytes of a string literal. */
  readonly bytes?: Uint8Array;
}

type Fail = (at: Position, message: string) => never;

const isDigit = (c: string): boolean => c >= '0' && c <= '9';
const isOctal = (c: string): boolean => c >= '0' && c <= '7';
const isHex = (c: string): boolean => /^[0-9a-fA-F]$/.test(c);
const isLetter = (c: string): boolean => (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_';

const SIMPLE_ESCAPES: Readonly<Record<string, number>> = {
  a: 7,
  b: 8,
  f: 12,
  n: 10,
  r: 13,
  t: 9,
  v: 11,
  '\\': 92,
  '?': 63,
  "'": 39,
  '"': 34,
};

class Tokenizer {
  readonly #src: string;
  readonly #fail: Fail;
  #pos = 0;
  #line = 1;
  #lineStart = 0;

  constructor(src: string, fail: Fail) {
    this.#src = src;
    this.#fail = fail;
  }

  #here(): Position {
    return { line: this.#line, column: this.#pos - this.#lineStart + 1 };
  }

  #peek(offset = 0): string {
    return this.#src.charAt(this.#pos + offset);
  }

  #skipSpaceAndComments(): void {
    const src = this.#src;
    while (this.#pos < src.length) {
      const c = src[this.#pos];
      if (c === '\n') {
        this.#pos++;
        this.#line++;
        this.#lineStart = this.#pos;
      } else if (c === ' ' || c === '\t' || c === '\r' || c === '\v' || c === '\f') {
        this.#pos++;
      } else if (c === '#') {
        while (this.#pos < src.length && src[this.#pos] !== '\n') this.#pos++;
      } else {
        return;
      }
    }
  }

  next(): Token {
    this.#skipSpaceAndComments();
    const at = this.#here();
    if (this.#pos >= this.#src.length) return { kind: 'eof', text: '', ...at };
    const start = this.#pos;
    const c = this.#peek();
    if (isLetter(c)) {
      while (isLetter(this.#peek()) || isDigit(this.#peek())) this.#pos++;
      return { kind: 'identifier', text: this.#src.slice(start, this.#pos), ...at };
    }
    if (isDigit(c) || (c === '.' && isDigit(this.#peek(1)))) return this.#number(at);
    if (c === '"' || c === "'") return this.#string(at);
    const code = c.charCodeAt(0);
    if (code < 0x20 || code === 0x7f) this.#fail(at, `invalid control character (code ${code}) in input`);
    const cp = this.#src.codePointAt(this.#pos) ?? code;
    const symbol = String.fromCodePoint(cp);
    this.#pos += symbol.length;
    return { kind: 'symbol', text: symbol, ...at };
  }

  /** Follows protobuf's io::Tokenizer: hex, leading-zero octal, decimal with '.', exponent and 'f'. */
  #number(at: Position): Token {
    const start = this.#pos;
    let isFloat = false;
    const first = this.#peek();
    this.#pos++;
    if (first === '0' && (this.#peek() === 'x' || this.#peek() === 'X')) {
      this.#pos++;
      if (!isHex(this.#peek())) this.#fail(this.#here(), `'0x' must be followed by hex digits`);
      while (isHex(this.#peek())) this.#pos++;
    } else if (first === '0' && isDigit(this.#peek())) {
      while (isOctal(this.#peek())) this.#pos++;
      if (isDigit(this.#peek())) this.#fail(at, 'numbers starting with a leading zero must be in octal');
    } else {
      if (first === '.') {
        isFloat = true;
        while (isDigit(this.#peek())) this.#pos++;
      } else {
        while (isDigit(this.#peek())) this.#pos++;
        if (this.#peek() === '.') {
          isFloat = true;
          this.#pos++;
          while (isDigit(this.#peek())) this.#pos++;
        }
      }
      if (this.#peek() === 'e' || this.#peek() === 'E') {
        isFloat = true;
        this.#pos++;
        if (this.#peek() === '+' || this.#peek() === '-') this.#pos++;
        if (!isDigit(this.#peek())) this.#fail(this.#here(), `'e' must be followed by an exponent`);
        while (isDigit(this.#peek())) this.#pos++;
      }
      if (this.#peek() === 'f' || this.#peek() === 'F') {
        isFloat = true;
        this.#pos++;
      }
    }
    if (isLetter(this.#peek())) this.#fail(this.#here(), 'need space between number and identifier');
    if (this.#peek() === '.') {
      this.#fail(
        this.#here(),
        isFloat ? "a number cannot have a second decimal point or a '.' after its exponent" : 'hex and octal numbers must be integers',
      );
    }
    return { kind: isFloat ? 'float' : 'integer', text: this.#src.slice(start, this.#pos), ...at };
  }

  #string(at: Position): Token {
    const src = this.#src;
    const start = this.#pos;
    const quote = src[this.#pos++];
    const bytes: number[] = [];
    const encoder = new TextEncoder();
    for (;;) {
      if (this.#pos >= src.length) this.#fail(at, 'unterminated string: end of input before the closing quote');
      const c = src[this.#pos];
      if (c === '\n') this.#fail(at, 'unterminated string: string literals cannot span lines');
      if (c === quote) {
        this.#pos++;
        break;
      }
      if (c === '\\') {
        this.#escape(bytes);
        continue;
      }
      const cp = src.codePointAt(this.#pos) ?? 0;
      const ch = String.fromCodePoint(cp);
      this.#pos += ch.length;
      for (const b of encoder.encode(ch)) bytes.push(b);
    }
    return { kind: 'string', text: src.slice(start, this.#pos), bytes: Uint8Array.from(bytes), ...at };
  }

  /** C escapes of protobuf string literals; appends the bytes they denote. */
  #escape(bytes: number[]): void {
    const at = this.#here();
    this.#pos++;
    const c = this.#peek();
    const simple = SIMPLE_ESCAPES[c];
    if (simple !== undefined) {
      this.#pos++;
      bytes.push(simple);
      return;
    }
    if (isOctal(c)) {
      let value = 0;
      for (let i = 0; i < 3 && isOctal(this.#peek()); i++) value = value * 8 + Number(this.#src[this.#pos++]);
      bytes.push(value & 0xff);
      return;
    }
    // Lower-case only: protobuf's tokenizer refuses '\X'.
    if (c === 'x') {
      this.#pos++;
      if (!isHex(this.#peek())) this.#fail(at, `'\\x' must be followed by hex digits`);
      let value = 0;
      for (let i = 0; i < 2 && isHex(this.#peek()); i++) value = value * 16 + parseInt(this.#src[this.#pos++], 16);
      bytes.push(value);
      return;
    }
    if (c === 'u' || c === 'U') {
      let cp = this.#unicodeDigits(c === 'u' ? 4 : 8, at);
      if (cp >= 0xd800 && cp <= 0xdbff && this.#peek() === '\\' && this.#peek(1) === 'u') {
        const save = this.#pos;
        this.#pos++;
        const low = this.#unicodeDigits(4, at);
        if (low >= 0xdc00 && low <= 0xdfff) cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        else this.#pos = save;
      }
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) this.#fail(at, `invalid unicode escape (code point 0x${cp.toString(16)})`);
      for (const b of new TextEncoder().encode(String.fromCodePoint(cp))) bytes.push(b);
      return;
    }
    if (this.#pos >= this.#src.length) this.#fail(at, 'unterminated string: end of input after a backslash');
    this.#fail(at, `invalid escape sequence '\\${c}' in string literal`);
  }

  /** Consumes the letter u/U and exactly `count` hex digits. */
  #unicodeDigits(count: number, at: Position): number {
    this.#pos++;
    const digits = this.#src.slice(this.#pos, this.#pos + count);
    if (digits.length !== count || ![...digits].every(isHex)) {
      this.#fail(at, `'\\u' must be followed by 4 hex digits and '\\U' by 8`);
    }
    this.#pos += count;
    return parseInt(digits, 16);
  }
}

// ---------------------------------------------------------------------------------------------
// Parser

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** Value of an integer token (decimal, `0x` hex or leading-zero octal). */
function integerLiteral(text: string): bigint {
  if (/^0[xX]/.test(text)) return BigInt(text);
  if (text.length > 1 && text.startsWith('0')) return BigInt(`0o${text.slice(1)}`);
  return BigInt(text);
}

function describe(tok: Token): string {
  switch (tok.kind) {
    case 'eof':
      return 'end of input';
    case 'string':
      return tok.text.length > 40 ? `${tok.text.slice(0, 37)}...` : tok.text;
    default:
      return `'${tok.text}'`;
  }
}

/**
 * Whether a singular field already set in a message holds a value, so that setting it again is
 * an error (protobuf's "specified multiple times"). Sub-messages and oneof members have presence;
 * other proto3 scalars hold a value only when it is not their default (-0 counts as a value, as
 * protobuf compares the bits), so `max_batch_size: 0 max_batch_size: 4` is accepted.
 */
function holdsValue(field: FieldSchema, value: unknown): boolean {
  if (field.type === 'message' || field.oneof !== undefined) return true;
  return !Object.is(value, defaultValueOf(valueSchemaOf(field)));
}

class Parser {
  readonly #file: string | undefined;
  readonly #tz: Tokenizer;
  #tok: Token;

  constructor(text: string, fileName: string | undefined) {
    this.#file = fileName;
    this.#tz = new Tokenizer(text, (at, message) => this.#fail(at, message));
    this.#tok = this.#tz.next();
  }

  #fail(at: Position, message: string): never {
    const where = `${at.line}:${at.column}`;
    throw new NereidError('CONFIG_PARSE', this.#file ? `${this.#file}:${where}: ${message}` : `${where}: ${message}`);
  }

  #advance(): Token {
    const tok = this.#tok;
    this.#tok = this.#tz.next();
    return tok;
  }

  #isSymbol(symbol: string): boolean {
    return this.#tok.kind === 'symbol' && this.#tok.text === symbol;
  }

  #trySymbol(symbol: string): boolean {
    if (!this.#isSymbol(symbol)) return false;
    this.#advance();
    return true;
  }

  parseRoot(schema: MessageSchema): MessageObject {
    const obj: MessageObject = {};
    const seen = new Map<string, Token>();
    while (this.#tok.kind !== 'eof') this.#parseField(schema, obj, seen);
    return obj;
  }

  #parseMessage(schema: MessageSchema, field: FieldSchema): MessageObject {
    let close: string;
    if (this.#trySymbol('{')) close = '}';
    else if (this.#trySymbol('<')) close = '>';
    else this.#fail(this.#tok, `expected '{' to start message field '${field.name}' (${schema.name}), found ${describe(this.#tok)}`);
    const obj: MessageObject = {};
    const seen = new Map<string, Token>();
    while (!this.#trySymbol(close)) {
      if (this.#tok.kind === 'eof') this.#fail(this.#tok, `unexpected end of input: expected '${close}' to close message field '${field.name}'`);
      this.#parseField(schema, obj, seen);
    }
    return obj;
  }

  /** One `name: value` / `name { ... }` / `name: [ ... ]` item, with its optional `,`/`;`. */
  #parseField(schema: MessageSchema, obj: MessageObject, seen: Map<string, Token>): void {
    const nameTok = this.#tok;
    if (this.#isSymbol('[')) this.#fail(nameTok, `extension and Any fields ('[...]') are not supported in message ${schema.name}`);
    if (nameTok.kind !== 'identifier') this.#fail(nameTok, `expected a field name in message ${schema.name}, found ${describe(nameTok)}`);
    this.#advance();
    const field = schema.field(nameTok.text);
    if (field === undefined) this.#fail(nameTok, `unknown field '${nameTok.text}' in message ${schema.name}`);

    if (field.type === 'message' || field.type === 'map') this.#trySymbol(':');
    else if (!this.#trySymbol(':')) {
      this.#fail(this.#tok, `expected ':' after field '${field.name}', found ${describe(this.#tok)}`);
    }

    if (field.type === 'map' || field.repeated) {
      const container = this.#container(obj, field);
      if (this.#trySymbol('[')) {
        if (!this.#trySymbol(']')) {
          for (;;) {
            this.#parseElement(field, container);
            if (this.#trySymbol(']')) break;
            if (!this.#trySymbol(',')) {
              this.#fail(this.#tok, `expected ',' or ']' in the list of field '${field.name}', found ${describe(this.#tok)}`);
            }
          }
        }
      } else {
        this.#parseElement(field, container);
      }
    } else {
      const first = seen.get(field.name);
      if (first !== undefined && holdsValue(field, obj[field.name])) {
        this.#fail(
          nameTok,
          `field '${field.name}' in message ${schema.name} is specified more than once (it is not repeated; first set at ${first.line}:${first.column})`,
        );
      }
      if (field.oneof !== undefined) {
        for (const [other, at] of seen) {
          if (schema.field(other)?.oneof === field.oneof) {
            this.#fail(
              nameTok,
              `field '${field.name}' and field '${other}' (set at ${at.line}:${at.column}) are members of the same oneof '${field.oneof}' in message ${schema.name}; only one may be set`,
            );
          }
        }
      }
      if (this.#isSymbol('[')) this.#fail(this.#tok, `field '${field.name}' is not repeated; a list value is not allowed`);
      seen.set(field.name, nameTok);
      setOwn(obj, field.name, this.#parseValue(valueSchemaOf(field), field));
    }
    if (!this.#trySymbol(';')) this.#trySymbol(',');
  }

  #container(obj: MessageObject, field: FieldSchema): unknown[] | Record<string, unknown> {
    const existing = obj[field.name];
    if (existing !== undefined) return existing as unknown[] | Record<string, unknown>;
    const created: unknown[] | Record<string, unknown> = field.type === 'map' ? {} : [];
    setOwn(obj, field.name, created);
    return created;
  }

  #parseElement(field: FieldSchema, container: unknown[] | Record<string, unknown>): void {
    if (field.type === 'map') {
      const entry = this.#parseMessage(field.entry, field);
      const key = entry.key ?? defaultValueOf({ type: field.key });
      const value = entry.value ?? (field.value.type === 'message' ? {} : defaultValueOf(field.value));
      // Later duplicate keys win (models-and-scheduling.md §2.1).
      setOwn(container as Record<string, unknown>, String(key), value);
    } else {
      (container as unknown[]).push(this.#parseValue(valueSchemaOf(field), field));
    }
  }

  #parseValue(value: ValueSchema, field: FieldSchema): unknown {
    switch (value.type) {
      case 'message':
        return this.#parseMessage(value.message, field);
      case 'enum':
        return this.#parseEnum(value, field);
      case 'string':
        return this.#parseString(field);
      case 'bool':
        return this.#parseBool(field);
      case 'float':
      case 'double':
        return this.#parseFloat(value.type, field);
      default:
        return this.#parseInteger(value.type, field);
    }
  }

  #parseString(field: FieldSchema): string {
    const first = this.#tok;
    if (first.kind !== 'string') this.#fail(first, `expected a string for field '${field.name}', found ${describe(first)}`);
    const parts: Uint8Array[] = [];
    while (this.#tok.kind === 'string') parts.push(this.#advance().bytes ?? new Uint8Array());
    const joined = Buffer.concat(parts);
    try {
      return UTF8.decode(joined);
    } catch {
      this.#fail(first, `string for field '${field.name}' is not valid UTF-8`);
    }
  }

  #parseBool(field: FieldSchema): boolean {
    const tok = this.#tok;
    if (tok.kind === 'integer') {
      const v = integerLiteral(tok.text);
      if (v !== 0n && v !== 1n) this.#fail(tok, `invalid value ${tok.text} for bool field '${field.name}': expected 0 or 1`);
      this.#advance();
      return v === 1n;
    }
    if (tok.kind === 'identifier') {
      this.#advance();
      if (tok.text === 'true' || tok.text === 'True' || tok.text === 't') return true;
      if (tok.text === 'false' || tok.text === 'False' || tok.text === 'f') return false;
    }
    this.#fail(tok, `invalid value ${describe(tok)} for bool field '${field.name}': expected true, false, True, False, t, f, 1 or 0`);
  }

  /** Signed/unsigned integers, range-checked for `type`; 64-bit values must be exact JS numbers. */
  #parseInteger(type: Exclude<ScalarType, 'string' | 'bool' | 'float' | 'double'>, field: FieldSchema): number {
    const start = this.#tok;
    const negative = this.#trySymbol('-');
    const tok = this.#tok;
    if (tok.kind !== 'integer') {
      const hint = tok.kind === 'float' ? ' (a fractional or exponent form is not an integer)' : '';
      this.#fail(tok, `expected an integer for field '${field.name}' (${type}), found ${describe(tok)}${hint}`);
    }
    this.#advance();
    const magnitude = integerLiteral(tok.text);
    const value = negative ? -magnitude : magnitude;
    const [min, max] = INTEGER_RANGE[type];
    if (negative && min === 0n && magnitude === 0n) {
      this.#fail(start, `a minus sign is not allowed before a value of unsigned field '${field.name}' (${type})`);
    }
    if (value < min || value > max) {
      this.#fail(start, `value ${negative ? '-' : ''}${tok.text} is out of range for field '${field.name}' (${type}: ${min} to ${max})`);
    }
    if (value > MAX_SAFE || value < -MAX_SAFE) {
      this.#fail(
        start,
        `value ${value} of field '${field.name}' (${type}) cannot be represented exactly; Nereid accepts 64-bit integers only up to magnitude 9007199254740991 (2^53-1)`,
      );
    }
    return Number(value);
  }

  #parseFloat(type: 'float' | 'double', field: FieldSchema): number {
    const negative = this.#trySymbol('-');
    const tok = this.#tok;
    let value: number;
    if (tok.kind === 'integer') {
      if (tok.text.length > 1 && tok.text.startsWith('0')) {
        this.#fail(tok, `expected a decimal number for field '${field.name}' (${type}), found '${tok.text}' (hex and octal forms are for integer fields)`);
      }
      value = Number(tok.text);
    } else if (tok.kind === 'float') value = Number(tok.text.replace(/[fF]$/, ''));
    else if (tok.kind === 'identifier' && /^(inf|infinity)$/i.test(tok.text)) value = Infinity;
    else if (tok.kind === 'identifier' && /^nan$/i.test(tok.text)) value = NaN;
    else this.#fail(tok, `expected a number for field '${field.name}' (${type}), found ${describe(tok)}`);
    this.#advance();
    if (negative) value = -value;
    return type === 'float' ? toFloat32(value) : value;
  }

  #parseEnum(value: Extract<ValueSchema, { type: 'enum' }>, field: FieldSchema): string {
    const e = value.enum;
    const tok = this.#tok;
    const expected = `expected one of ${e.values.map((v) => v.name).join(', ')}`;
    if (tok.kind === 'identifier') {
      const v = e.byName(tok.text);
      if (v === undefined) this.#fail(tok, `unknown enum value '${tok.text}' for field '${field.name}' (${e.name}); ${expected}`);
      this.#advance();
      return v.name;
    }
    if (tok.kind === 'integer' || this.#isSymbol('-')) {
      const number = this.#parseInteger('int32', field);
      const v = e.byNumber(number);
      if (v === undefined) this.#fail(tok, `unknown enum number ${number} for field '${field.name}' (${e.name}); ${expected}`);
      return v.name;
    }
    this.#fail(tok, `expected an enum name or number for field '${field.name}' (${e.name}), found ${describe(tok)}`);
  }
}
