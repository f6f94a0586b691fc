/**
 * JSON decoding that keeps 64-bit integers exact (protocol.md §7.5 item 3): INT64/UINT64 tensor
 * data, `sequence_id` and statistics counters can exceed 2^53, which `JSON.parse` would round.
 */
import { NereidError } from './errors.js';

/** Deepest array/object nesting `parseJson` accepts; deeper documents are REQUEST_MALFORMED. */
export const MAX_JSON_DEPTH = 512;

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * Parses a JSON document with `JSON.parse` semantics, except that:
 * - an integer token (no fraction, no exponent) whose value lies outside ±(2^53−1) becomes a
 *   `bigint` holding its exact value; every other number is a JS number, as `JSON.parse` gives;
 * - the tokens `NaN`, `Infinity` and `-Infinity` are accepted as numbers (Python's `json` and the
 *   JSON tensor output of protocol.md §3.7.2 produce them);
 * - nesting deeper than MAX_JSON_DEPTH is rejected.
 *
 * Byte input is decoded as UTF-8 (invalid sequences become U+FFFD, as a lenient reader does).
 * `what` names the document in error messages ("the request JSON buffer").
 *
 * Errors: NereidError('REQUEST_MALFORMED') whose message says what was expected, what was found
 * and the offset: a byte offset for byte input, a UTF-16 code-unit index for string input.
 *
 * Cost: `JSON.parse` plus one walk over the result that looks for numbers of unsafe magnitude
 * and excess depth; only documents that have them (or that `JSON.parse` rejects) are parsed a
 * second time by the exact parser. (Scanning the text for long digit runs instead would send
 * float tensors down the slow path: their 17-digit fractions are such runs.)
 */
export function parseJson(text: string | Uint8Array, what = 'the JSON buffer'): unknown {
  const s = typeof text === 'string' ? text : utf8(text);
  let value: unknown;
  try {
    value = JSON.parse(s);
  } catch {
    return parseExact(s, what, typeof text !== 'string');
  }
  if (typeof value === 'object' && value !== null ? needsExact(value, 1) : isUnsafeNumber(value)) {
    return parseExact(s, what, typeof text !== 'string');
  }
  return value;
}

/**
 * The exact parser alone (what `parseJson` falls back to): same results and errors as
 * `parseJson`, always by the hand-written recursive-descent parser. Exposed for tests and for
 * callers that know their document holds 64-bit integers.
 */
export function parseJsonExact(text: string | Uint8Array, what = 'the JSON buffer'): unknown {
  return parseExact(typeof text === 'string' ? text : utf8(text), what, typeof text !== 'string');
}

function utf8(bytes: Uint8Array): string {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return buf.toString('utf8');
}

function isUnsafeNumber(v: unknown): boolean {
  return typeof v === 'number' && (v > MAX_SAFE || v < -MAX_SAFE);
}

/**
 * Whether a `JSON.parse` result may have lost precision (it holds a number of magnitude ≥ 2^53,
 * which a big integer token rounds to) or nests deeper than MAX_JSON_DEPTH. Recursion is bounded
 * by MAX_JSON_DEPTH.
 */
function needsExact(node: object, depth: number): boolean {
  if (depth > MAX_JSON_DEPTH) return true;
  if (Array.isArray(node)) {
    for (let i = 0; i < node.length; i++) {
      const v: unknown = node[i];
      if (typeof v === 'number') {
        if (v > MAX_SAFE || v < -MAX_SAFE) return true;
      } else if (typeof v === 'object' && v !== null && needsExact(v, depth + 1)) {
        return true;
      }
    }
    return false;
  }
  const record = node as Record<string, unknown>;
  for (const key in record) {
    const v = record[key];
    if (typeof v === 'number') {
      if (v > MAX_SAFE || v < -MAX_SAFE) return true;
    } else if (typeof v === 'object' && v !== null && needsExact(v, depth + 1)) {
      return true;
    }
  }
  return false;
}

// Character codes.
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const QUOTE = 0x22;
const PLUS = 0x2b;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const SLASH = 0x2f;
const D0 = 0x30;
const D1 = 0x31;
const D9 = 0x39;
const COLON = 0x3a;
const UPPER_E = 0x45;
const UPPER_I = 0x49;
const UPPER_N = 0x4e;
const LBRACKET = 0x5b;
const BACKSLASH = 0x5c;
const RBRACKET = 0x5d;
const LOWER_E = 0x65;
const LOWER_F = 0x66;
const LOWER_N = 0x6e;
const LOWER_T = 0x74;
const LBRACE = 0x7b;
const RBRACE = 0x7d;

function parseExact(s: string, what: string, byteOffsets: boolean): unknown {
  const p = new ExactParser(s, what, byteOffsets);
  const value = p.value(0);
  p.skipWs();
  if (p.i < s.length) p.fail('expected end of input');
  return value;
}

class ExactParser {
  i = 0;
  readonly #s: string;
  readonly #what: string;
  readonly #byteOffsets: boolean;

  constructor(s: string, what: string, byteOffsets: boolean) {
    this.#s = s;
    this.#what = what;
    this.#byteOffsets = byteOffsets;
  }

  fail(expected: string, at = this.i): never {
    const s = this.#s;
    const found = at < s.length ? `'${s[at]}'` : 'end of input';
    const offset = this.#byteOffsets ? Buffer.byteLength(s.slice(0, at), 'utf8') : at;
    throw new NereidError('REQUEST_MALFORMED', `failed to parse ${this.#what}: ${expected}, found ${found} at ${offset}`);
  }

  skipWs(): void {
    const s = this.#s;
    let i = this.i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (c === SPACE || c === LF || c === CR || c === TAB) i++;
      else break;
    }
    this.i = i;
  }

  value(depth: number): unknown {
    this.skipWs();
    const s = this.#s;
    const c = s.charCodeAt(this.i);
    if (c === QUOTE) return this.string();
    if ((c >= D0 && c <= D9) || c === MINUS) return this.number();
    if (c === LBRACKET) return this.array(depth + 1);
    if (c === LBRACE) return this.object(depth + 1);
    if (c === LOWER_T) return this.literal('true', true);
    if (c === LOWER_F) return this.literal('false', false);
    if (c === LOWER_N) return this.literal('null', null);
    if (c === UPPER_N) return this.literal('NaN', NaN);
    if (c === UPPER_I) return this.literal('Infinity', Infinity);
    return this.fail('expected a value');
  }

  literal<T>(word: string, result: T): T {
    if (!this.#s.startsWith(word, this.i)) this.fail(`expected a value`);
    this.i += word.length;
    return result;
  }

  array(depth: number): unknown[] {
    if (depth > MAX_JSON_DEPTH) this.fail(`expected at most ${MAX_JSON_DEPTH} levels of nesting`);
    const s = this.#s;
    const out: unknown[] = [];
    this.i++;
    this.skipWs();
    if (s.charCodeAt(this.i) === RBRACKET) {
      this.i++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth));
      this.skipWs();
      const c = s.charCodeAt(this.i);
      if (c === COMMA) this.i++;
      else if (c === RBRACKET) {
        this.i++;
        return out;
      } else this.fail("expected ',' or ']' after an array element");
    }
  }

  object(depth: number): Record<string, unknown> {
    if (depth > MAX_JSON_DEPTH) this.fail(`expected at most ${MAX_JSON_DEPTH} levels of nesting`);
    const s = this.#s;
    const out: Record<string, unknown> = {};
    this.i++;
    this.skipWs();
    if (s.charCodeAt(this.i) === RBRACE) {
      this.i++;
      return out;
    }
    for (;;) {
      this.skipWs();
      if (s.charCodeAt(this.i) !== QUOTE) this.fail('expected a string key');
      const key = this.string();
      this.skipWs();
      if (s.charCodeAt(this.i) !== COLON) this.fail("expected ':' after an object key");
      this.i++;
      const v = this.value(depth);
      // JSON.parse defines an own property even for "__proto__"; assignment would set the prototype.
      if (key === '__proto__') {
        Object.defineProperty(out, key, { value: v, writable: true, enumerable: true, configurable: true });
      } else {
        out[key] = v;
      }
      this.skipWs();
      const c = s.charCodeAt(this.i);
      if (c === COMMA) this.i++;
      else if (c === RBRACE) {
        this.i++;
        return out;
      } else this.fail("expected ',' or '}' after an object member");
    }
  }

  string(): string {
    const s = this.#s;
    const start = ++this.i;
    let i = start;
    for (;;) {
      if (i >= s.length) this.fail('expected a closing quote', i);
      const c = s.charCodeAt(i);
      if (c === QUOTE) {
        this.i = i + 1;
        return s.slice(start, i);
      }
      if (c === BACKSLASH) break;
      if (c < SPACE) this.fail('expected an escaped control character in a string', i);
      i++;
    }
    let out = s.slice(start, i);
    let run = i;
    for (;;) {
      if (i >= s.length) this.fail('expected a closing quote', i);
      const c = s.charCodeAt(i);
      if (c === QUOTE) {
        this.i = i + 1;
        return out + s.slice(run, i);
      }
      if (c < SPACE) this.fail('expected an escaped control character in a string', i);
      if (c !== BACKSLASH) {
        i++;
        continue;
      }
      out += s.slice(run, i);
      const e = s.charCodeAt(i + 1);
      switch (e) {
        case QUOTE: out += '"'; break;
        case BACKSLASH: out += '\\'; break;
        case SLASH: out += '/'; break;
        case 0x62: out += '\b'; break;
        case LOWER_F: out += '\f'; break;
        case LOWER_N: out += '\n'; break;
        case 0x72: out += '\r'; break;
        case LOWER_T: out += '\t'; break;
        case 0x75: {
          // \uXXXX is one UTF-16 code unit; a surrogate pair is two escapes, which concatenate.
          let code = 0;
          for (let k = i + 2; k < i + 6; k++) {
            const h = hexValue(s.charCodeAt(k));
            if (h < 0) this.fail('expected four hex digits after \\u', k);
            code = code * 16 + h;
          }
          out += String.fromCharCode(code);
          i += 4;
          break;
        }
        default:
          this.fail('expected a valid escape character after \\', i + 1);
      }
      i += 2;
      run = i;
    }
  }

  number(): number | bigint {
    const s = this.#s;
    const start = this.i;
    let i = start;
    const negative = s.charCodeAt(i) === MINUS;
    if (negative) {
      i++;
      if (s.charCodeAt(i) === UPPER_I) {
        this.i = i;
        return -this.literal('Infinity', Infinity);
      }
    }
    let c = s.charCodeAt(i);
    // Integer digits accumulate exactly up to 2^53; beyond that the sum only grows (each step
    // rounds monotonically), so `magnitude > MAX_SAFE` still tells exactly when a bigint is due.
    let magnitude = 0;
    if (c === D0) {
      c = s.charCodeAt(++i);
    } else if (c >= D1 && c <= D9) {
      do {
        magnitude = magnitude * 10 + (c - D0);
        c = s.charCodeAt(++i);
      } while (c >= D0 && c <= D9);
    } else {
      this.fail('expected a digit', i);
    }
    if (c !== DOT && c !== LOWER_E && c !== UPPER_E) {
      this.i = i;
      if (magnitude > MAX_SAFE) return BigInt(s.slice(start, i));
      return negative ? -magnitude : magnitude;
    }
    if (c === DOT) {
      i++;
      if (!isDigit(s.charCodeAt(i))) this.fail('expected a digit after the decimal point', i);
      while (isDigit(s.charCodeAt(i))) i++;
      c = s.charCodeAt(i);
    }
    if (c === LOWER_E || c === UPPER_E) {
      i++;
      const sign = s.charCodeAt(i);
      if (sign === PLUS || sign === MINUS) i++;
      if (!isDigit(s.charCodeAt(i))) this.fail('expected a digit in the exponent', i);
      while (isDigit(s.charCodeAt(i))) i++;
    }
    this.i = i;
    // Number() on the token text rounds correctly, exactly as JSON.parse does.
    return Number(s.slice(start, i));
  }
}

function isDigit(c: number): boolean {
  return c >= D0 && c <= D9;
}

function hexValue(c: number): number {
  if (c >= D0 && c <= D9) return c - D0;
  const lower = c | 0x20;
  if (lower >= 0x61 && lower <= LOWER_F) return lower - 0x61 + 10;
  return -1;
}

const BIGINT_MARK = '\u0000bigint:';
const BIGINT_TOKEN = /"\\u0000bigint:(-?\d+)"/g;

/**
 * `JSON.stringify` that also writes bigints, as exact JSON integers (statistics counters and
 * nanosecond totals exceed 2^53).
 */
export function stringifyJson(value: unknown): string {
  let sawBigint = false;
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'bigint') return v;
    sawBigint = true;
    return `${BIGINT_MARK}${v.toString()}`;
  });
  return sawBigint ? text.replace(BIGINT_TOKEN, '$1') : text;
}
