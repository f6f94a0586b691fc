/**
 * Prints a (sparse or complete) ModelConfig in protobuf text format: two-space indentation, one
 * field per line in schema order, repeated scalars as `[ a, b ]`, repeated messages as repeated
 * blocks, maps as repeated `{ key: .. value: .. }` blocks. Every field present in the object is
 * printed (including default values and empty lists), so `parse(print(x))` deep-equals `x` for
 * any `x` the parser can produce.
 *
 * With `annotate`, a value line may end with a `# <note>` comment: the callback gets the value's
 * field path: field names joined by `.`, a repeated element as `[i]`, a map entry as `["key"]`
 * (the key as a JSON string whatever its type): `input[0].dims`, `parameters["k"].string_value`.
 * Comments do not change what the text parses to.
 */
import type { ModelConfig, Sparse } from './model-config.js';
import type { MessageObject } from './message-object.js';
import { type FieldSchema, type MessageSchema, MODEL_CONFIG_SCHEMA, type ValueSchema, valueSchemaOf } from './schema.js';

export interface TextPrintOptions {
  /** A note for the value at `path`, printed as a trailing comment; undefined for none. */
  readonly annotate?: (path: string) => string | undefined;
}

/** Text format of `config`; ends with a newline unless empty. */
export function printModelConfigText(config: Sparse<ModelConfig> | ModelConfig, options: TextPrintOptions = {}): string {
  return printTextMessage(config as MessageObject, MODEL_CONFIG_SCHEMA, options);
}

/** Text format of any message described by `schema`. */
export function printTextMessage(message: MessageObject, schema: MessageSchema, options: TextPrintOptions = {}): string {
  const lines: string[] = [];
  printFields(message, schema, '', lines, new Printer(options.annotate), '');
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}

function fieldPath(parent: string, field: string): string {
  return parent === '' ? field : `${parent}.${field}`;
}

class Printer {
  readonly #annotate: ((path: string) => string | undefined) | undefined;

  constructor(annotate: ((path: string) => string | undefined) | undefined) {
    this.#annotate = annotate;
  }

  /** `line`, with the note for `path` when there is one. */
  line(line: string, path: string): string {
    const note = this.#annotate?.(path);
    return note === undefined ? line : `${line}  # ${note}`;
  }
}

function printFields(message: MessageObject, schema: MessageSchema, indent: string, lines: string[], p: Printer, path: string): void {
  for (const field of schema.fields) {
    const value = message[field.name];
    if (value !== undefined) printField(field, value, indent, lines, p, fieldPath(path, field.name));
  }
}

function printField(field: FieldSchema, value: unknown, indent: string, lines: string[], p: Printer, path: string): void {
  const element = valueSchemaOf(field);
  if (field.type === 'map') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) lines.push(p.line(`${indent}${field.name} [ ]`, path));
    for (const [key, v] of entries) {
      lines.push(`${indent}${field.name} {`);
      lines.push(`${indent}  key: ${formatScalar({ type: field.key }, field.key === 'string' ? key : mapKeyValue(key, field.key))}`);
      printSingle('value', field.value, v, `${indent}  `, lines, p, `${path}[${JSON.stringify(key)}]`);
      lines.push(`${indent}}`);
    }
    return;
  }
  if (field.repeated) {
    const items = value as unknown[];
    if (element.type === 'message') {
      if (items.length === 0) lines.push(p.line(`${indent}${field.name} [ ]`, path));
      items.forEach((item, i) => printSingle(field.name, element, item, indent, lines, p, `${path}[${i}]`));
    } else {
      const body = items.map((item) => formatScalar(element, item)).join(', ');
      lines.push(p.line(`${indent}${field.name}: [ ${body}${body ? ' ' : ''}]`, path));
    }
    return;
  }
  printSingle(field.name, element, value, indent, lines, p, path);
}

function printSingle(name: string, schema: ValueSchema, value: unknown, indent: string, lines: string[], p: Printer, path: string): void {
  if (schema.type !== 'message') {
    lines.push(p.line(`${indent}${name}: ${formatScalar(schema, value)}`, path));
    return;
  }
  const body: string[] = [];
  printFields(value as MessageObject, schema.message, `${indent}  `, body, p, path);
  if (body.length === 0) {
    lines.push(p.line(`${indent}${name} { }`, path));
  } else {
    lines.push(`${indent}${name} {`, ...body, `${indent}}`);
  }
}

function mapKeyValue(key: string, type: string): unknown {
  return type === 'bool' ? key === 'true' : Number(key);
}

function formatScalar(schema: Exclude<ValueSchema, { type: 'message' }>, value: unknown): string {
  switch (schema.type) {
    case 'string':
      return quote(String(value));
    case 'float':
    case 'double':
      return formatFloat(value as number);
    default:
      return String(value);
  }
}

function formatFloat(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Infinity) return 'inf';
  if (value === -Infinity) return '-inf';
  if (Object.is(value, -0)) return '-0';
  return String(value);
}

/** Double-quoted with C escapes; non-ASCII text is written as UTF-8 as is. */
function quote(text: string): string {
  let out = '"';
  for (const ch of text) {
    switch (ch) {
      case '"':
        out += '\\"';
        break;
      case '\\':
        out += '\\\\';
        break;
      case '\n':
        out += '\\n';
        break;
      case '\r':
        out += '\\r';
        break;
      case '\t':
        out += '\\t';
        break;
      default: {
        const code = ch.codePointAt(0) ?? 0;
        out += code < 0x20 || code === 0x7f ? `\\${code.toString(8).padStart(3, '0')}` : ch;
      }
    }
  }
  return `${out}"`;
}
