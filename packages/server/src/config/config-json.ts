/**
 * The JSON form of ModelConfig (models-and-scheduling.md §2.2, protocol.md §3.6) and the proto3
 * defaults filler, all driven by schema.ts.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig, Sparse } from './model-config.js';
import { type JsonObject, type JsonValue, type MessageObject, hasOwn, isPlainObject, setOwn } from './message-object.js';
import {
  type FieldSchema,
  INTEGER_RANGE,
  type MapKeyType,
  type MessageSchema,
  MODEL_CONFIG_SCHEMA,
  type ValueSchema,
  defaultValueOf,
  is64BitType,
  isIntegerType,
  toFloat32,
  valueSchemaOf,
} from './schema.js';

export interface ModelConfigJsonOptions {
  /**
   * true: every scalar, repeated and map field is emitted, default or not (the server's config
   * endpoint, protocol.md §3.6). false: default scalars and empty repeated/map fields are omitted
   * (proto3 JSON). Sub-messages are emitted exactly when set; unset oneof members never are.
   */
  readonly emitDefaults: boolean;
  /**
   * true: 64-bit integers as decimal strings (the standard proto3 JSON mapping). false: as JSON
   * numbers (the server endpoint, models-and-scheduling.md §2.2). Map keys are always strings.
   */
  readonly int64AsString: boolean;
}

/**
 * JSON object for `config` with snake_case names and enum names. Non-finite floats become
 * "NaN"/"Infinity"/"-Infinity". An all-default config with `emitDefaults: false` gives `{}`.
 */
export function modelConfigToJson(config: Sparse<ModelConfig> | ModelConfig, options: ModelConfigJsonOptions): JsonObject {
  return messageToJson(config as MessageObject, MODEL_CONFIG_SCHEMA, options);
}

function messageToJson(message: MessageObject, schema: MessageSchema, options: ModelConfigJsonOptions): JsonObject {
  const out: JsonObject = {};
  for (const field of schema.fields) {
    const value = message[field.name];
    if (value === undefined) {
      if (options.emitDefaults && field.oneof === undefined && !(field.type === 'message' && !field.repeated)) {
        setOwn(out, field.name, field.type === 'map' ? {} : field.repeated ? [] : scalarToJson(valueSchemaOf(field), defaultValueOf(valueSchemaOf(field)), options));
      }
      continue;
    }
    const element = valueSchemaOf(field);
    if (field.type === 'map') {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length === 0 && !options.emitDefaults) continue;
      const obj: JsonObject = {};
      for (const [k, v] of entries) setOwn(obj, k, valueToJson(element, v, options));
      setOwn(out, field.name, obj);
    } else if (field.repeated) {
      const items = value as unknown[];
      if (items.length === 0 && !options.emitDefaults) continue;
      setOwn(out, field.name, items.map((item) => valueToJson(element, item, options)));
    } else {
      // Scalars outside a oneof have no presence: a default value is "not set" (proto3).
      if (!options.emitDefaults && field.oneof === undefined && element.type !== 'message' && value === defaultValueOf(element) && !Object.is(value, -0)) {
        continue;
      }
      setOwn(out, field.name, valueToJson(element, value, options));
    }
  }
  return out;
}

function valueToJson(schema: ValueSchema, value: unknown, options: ModelConfigJsonOptions): JsonValue {
  if (schema.type === 'message') return messageToJson(value as MessageObject, schema.message, options);
  return scalarToJson(schema, value, options);
}

function scalarToJson(schema: ValueSchema, value: unknown, options: ModelConfigJsonOptions): JsonValue {
  if ((schema.type === 'float' || schema.type === 'double') && typeof value === 'number' && !Number.isFinite(value)) {
    return Number.isNaN(value) ? 'NaN' : value > 0 ? 'Infinity' : '-Infinity';
  }
  if (is64BitType(schema.type) && options.int64AsString) return String(value);
  return value as JsonValue;
}

// ---------------------------------------------------------------------------------------------
// JSON → message

/**
 * Parses the JSON form of a ModelConfig (a JSON text, or an already parsed value) with proto3
 * JSON rules: snake_case or lowerCamelCase names, integers as numbers or strings, enum names
 * (case-insensitive) or numbers, `null` meaning "not set". Unknown fields, a field given under
 * both its names, two members of one oneof and type mismatches throw
 * `NereidError('CONFIG_PARSE')` naming the JSON path.
 */
export function modelConfigFromJson(value: unknown): Sparse<ModelConfig> {
  let parsed = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value) as unknown;
    } catch (err) {
      throw new NereidError('CONFIG_PARSE', `model configuration JSON: ${(err as Error).message}`, { cause: err });
    }
  }
  return messageFromJson(parsed, MODEL_CONFIG_SCHEMA, '') as Sparse<ModelConfig>;
}

function jsonError(path: string, message: string): NereidError {
  return new NereidError('CONFIG_PARSE', `model configuration JSON${path ? ` at '${path}'` : ''}: ${message}`);
}

function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 40 ? `${text.slice(0, 37)}...` : text;
}

function messageFromJson(value: unknown, schema: MessageSchema, path: string): MessageObject {
  if (!isPlainObject(value)) throw jsonError(path, `expected an object for message ${schema.name}, got ${show(value)}`);
  const out: MessageObject = {};
  const givenAs = new Map<string, string>();
  for (const [key, v] of Object.entries(value)) {
    const field = schema.fieldByJsonName(key);
    const fieldPath = path ? `${path}.${key}` : key;
    if (field === undefined) throw jsonError(fieldPath, `unknown field '${key}' in message ${schema.name}`);
    const previous = givenAs.get(field.name);
    if (previous !== undefined) throw jsonError(fieldPath, `field '${field.name}' is given twice (as '${previous}' and '${key}')`);
    givenAs.set(field.name, key);
    if (v === null) continue;
    if (field.oneof !== undefined) {
      for (const other of schema.fields) {
        if (other !== field && other.oneof === field.oneof && hasOwn(out, other.name)) {
          throw jsonError(fieldPath, `fields '${other.name}' and '${field.name}' are members of the same oneof '${field.oneof}'; only one may be set`);
        }
      }
    }
    setOwn(out, field.name, fieldFromJson(field, v, fieldPath));
  }
  return out;
}

function fieldFromJson(field: FieldSchema, value: unknown, path: string): unknown {
  const element = valueSchemaOf(field);
  if (field.type === 'map') {
    if (!isPlainObject(value)) throw jsonError(path, `expected an object for map field '${field.name}', got ${show(value)}`);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const entryPath = `${path}[${JSON.stringify(k)}]`;
      if (v === null) throw jsonError(entryPath, 'map values must not be null');
      setOwn(out, mapKeyFromJson(field.key, k, entryPath), valueFromJson(element, v, entryPath));
    }
    return out;
  }
  if (field.repeated) {
    if (!Array.isArray(value)) throw jsonError(path, `expected an array for repeated field '${field.name}', got ${show(value)}`);
    return value.map((item, i) => {
      if (item === null) throw jsonError(`${path}[${i}]`, 'repeated field elements must not be null');
      return valueFromJson(element, item, `${path}[${i}]`);
    });
  }
  return valueFromJson(element, value, path);
}

function mapKeyFromJson(type: MapKeyType, key: string, path: string): string {
  if (type === 'string') return key;
  if (type === 'bool') {
    if (key !== 'true' && key !== 'false') throw jsonError(path, `map key ${show(key)} is not a bool`);
    return key;
  }
  return String(integerFromJson(type, key, path));
}

function valueFromJson(schema: ValueSchema, value: unknown, path: string): unknown {
  switch (schema.type) {
    case 'message':
      return messageFromJson(value, schema.message, path);
    case 'enum': {
      if (typeof value === 'string') {
        const upper = value.toUpperCase();
        const v = schema.enum.values.find((e) => e.name.toUpperCase() === upper);
        if (v === undefined) throw jsonError(path, `unknown value ${show(value)} of enum ${schema.enum.name}`);
        return v.name;
      }
      if (typeof value === 'number' && Number.isInteger(value)) {
        const v = schema.enum.byNumber(value);
        if (v === undefined) throw jsonError(path, `unknown number ${value} of enum ${schema.enum.name}`);
        return v.name;
      }
      throw jsonError(path, `expected an enum name or number for ${schema.enum.name}, got ${show(value)}`);
    }
    case 'string':
      if (typeof value !== 'string') throw jsonError(path, `expected a string, got ${show(value)}`);
      return value;
    case 'bool':
      if (typeof value !== 'boolean') throw jsonError(path, `expected true or false, got ${show(value)}`);
      return value;
    case 'float':
    case 'double': {
      let n: number;
      if (typeof value === 'number') n = value;
      else if (value === 'NaN') n = NaN;
      else if (value === 'Infinity') n = Infinity;
      else if (value === '-Infinity') n = -Infinity;
      else if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value))) n = Number(value);
      else throw jsonError(path, `expected a number, got ${show(value)}`);
      return schema.type === 'float' ? toFloat32(n) : n;
    }
    default:
      return integerFromJson(schema.type, value, path);
  }
}

/** An integer of `type` from a JSON number or numeric string; must be exact as a JS number. */
function integerFromJson(type: string, value: unknown, path: string): number {
  if (!isIntegerType(type)) throw jsonError(path, `unsupported integer type ${type}`);
  let big: bigint;
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw jsonError(path, `expected an integer (${type}), got ${show(value)}`);
    big = BigInt(value);
  } else if (typeof value === 'string' && /^-?\d+$/.test(value.trim())) {
    big = BigInt(value.trim());
  } else if (typeof value === 'string' && value.trim() !== '' && Number.isInteger(Number(value))) {
    big = BigInt(Number(value));
  } else {
    throw jsonError(path, `expected an integer (${type}), got ${show(value)}`);
  }
  const [min, max] = INTEGER_RANGE[type];
  if (big < min || big > max) throw jsonError(path, `value ${big} is out of range for ${type} (${min} to ${max})`);
  if (big > BigInt(Number.MAX_SAFE_INTEGER) || big < -BigInt(Number.MAX_SAFE_INTEGER)) {
    throw jsonError(path, `value ${big} (${type}) cannot be represented exactly; Nereid accepts 64-bit integers only up to magnitude 9007199254740991 (2^53-1)`);
  }
  return Number(big);
}

// ---------------------------------------------------------------------------------------------
// Defaults

/**
 * The complete form of `config`: every missing scalar, repeated and map field filled with its
 * proto3 default, recursively. Sub-messages and oneof members stay absent when absent. Returns a
 * fresh object; the input is not modified.
 */
export function completeModelConfig(config: Sparse<ModelConfig>): ModelConfig {
  return completeMessage(config as MessageObject, MODEL_CONFIG_SCHEMA) as unknown as ModelConfig;
}

/** Schema-driven form of completeModelConfig for any message. */
export function completeMessage(message: MessageObject, schema: MessageSchema): MessageObject {
  const out: MessageObject = {};
  for (const field of schema.fields) {
    const value = message[field.name];
    const element = valueSchemaOf(field);
    if (field.type === 'map') {
      const map: Record<string, unknown> = {};
      for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) setOwn(map, k, completeValue(element, v));
      setOwn(out, field.name, map);
    } else if (field.repeated) {
      setOwn(out, field.name, ((value ?? []) as unknown[]).map((item) => completeValue(element, item)));
    } else if (value !== undefined) {
      setOwn(out, field.name, completeValue(element, value));
    } else if (element.type !== 'message' && field.oneof === undefined) {
      setOwn(out, field.name, defaultValueOf(element));
    }
  }
  return out;
}

function completeValue(schema: ValueSchema, value: unknown): unknown {
  return schema.type === 'message' ? completeMessage(value as MessageObject, schema.message) : value;
}
