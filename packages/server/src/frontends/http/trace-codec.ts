/**
 * The trace extension's HTTP bodies (docs/observability.md): `POST /v2/trace/setting` and
 * `/v2/models/{m}/trace/setting` take a JSON object whose `trace_level` is a list of strings and
 * whose other settings are strings; null clears a setting. Answers are the same shape.
 */
import { NereidError } from '@nereid/protocol';
import { jsonObjectBody } from './body.js';
import type { TraceSettingsAnswer, TraceSettingsUpdate } from '../../observability/trace.js';

export function decodeTraceSettingsUpdate(body: Buffer): TraceSettingsUpdate {
  const parsed = jsonObjectBody(body, 'trace setting');
  const update = new Map<string, readonly string[] | null>();
  for (const [name, value] of Object.entries(parsed)) {
    if (value === null) update.set(name, null);
    else if (name === 'trace_level') {
      if (!Array.isArray(value) || !value.every((v): v is string => typeof v === 'string')) {
        throw new NereidError('REQUEST_MALFORMED', `'trace_level' must be a list of strings (e.g. ["TIMESTAMPS"]), got ${JSON.stringify(value)}`);
      }
      update.set(name, value);
    } else {
      if (typeof value !== 'string') {
        throw new NereidError('REQUEST_MALFORMED', `'${name}' must be a string (e.g. "100") or null, got ${JSON.stringify(value)}`);
      }
      update.set(name, [value]);
    }
  }
  return update;
}

/**
 * The answer as JSON: `trace_level` a list, every other setting a string; a setting with several
 * values (mode opentelemetry's `resource`, one per attribute) a list of them, where Triton repeats
 * the key.
 */
export function encodeTraceSettings(answer: TraceSettingsAnswer): string {
  const out: Record<string, string | string[]> = {};
  for (const [name, values] of Object.entries(answer)) out[name] = name === 'trace_level' || values.length !== 1 ? values : values[0]!;
  return JSON.stringify(out);
}
