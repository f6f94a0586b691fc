/**
 * The untyped form every schema-driven routine works on: a message is a plain object keyed by
 * proto field name, a repeated field an array, a map field a plain object keyed by the map key
 * (integer keys as canonical decimal strings), an enum its value name.
 */

export type MessageObject = Record<string, unknown>;

/** JSON-able values, as produced by the JSON mapping. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/**
 * Defines an own enumerable property. Unlike `obj[key] = value` this is safe for user-chosen map
 * keys such as `__proto__`, and keeps the object's prototype `Object.prototype` (deep-equal
 * comparisons with `JSON.parse` output stay valid).
 */
export function setOwn(obj: object, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function hasOwn(obj: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}
