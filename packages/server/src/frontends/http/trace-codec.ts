/**
 * The trace extension's HTTP bodies (docs/observability.md): `POST /v2/trace/setting` and
 * `/v2/models/{m}/trace/setting` take a JSON object whose `trace_level` is a list of strings and
 * whose other settings are strings; null clears a setting. Answers are the same shape.
 */
import { NereidError } from '@nereid/protocol';
import type { TraceSettingsAnswer, TraceSettingsUpdate } from '../../observability/trace.js';

export function decodeTraceSettingsUpdate(body: Buffer): TraceSettingsUpdate {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new NereidError('REQUEST_MALFORMED', `failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new NereidError('REQUEST_MALFORMED', 'the trace setting request body must be a JSON object, e.g. {"trace_rate": "100"}');
  }
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

export function encodeTraceSettings(answer: TraceSettingsAnswer): string {
  return JSON.stringify({
    trace_level: answer.trace_level,
    trace_rate: answer.trace_rate[0],
    trace_count: answer.trace_count[0],
    log_frequency: answer.log_frequency[0],
    trace_file: answer.trace_file[0],
    trace_mode: answer.trace_mode[0],
  });
}
