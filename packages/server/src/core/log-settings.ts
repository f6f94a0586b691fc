/**
 * The logging extension's rules (protocol.md §3.16, §4.8 LogSettings), shared by the HTTP and gRPC
 * frontends through `Server.logSettings()` / `Server.updateLogSettings()`.
 */
import { NereidError } from '@nereid/protocol';
import type { Logger, LogSettings } from '../observability/logger.js';
import type { LogSettingsReport } from './types.js';

const UINT32_MAX = 0xffff_ffff;

export function logSettingsReport(logger: Logger): LogSettingsReport {
  const s = logger.settings;
  return {
    log_file: s.file,
    log_info: s.info,
    log_warning: s.warning,
    log_error: s.error,
    log_verbose_level: s.verboseLevel,
    log_format: s.format,
  };
}

function describe(value: unknown): string {
  return value === undefined ? 'no value' : JSON.stringify(value);
}

function boolSetting(key: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new NereidError('REQUEST_PARAMETER_TYPE', `log setting '${key}' expects a boolean, got ${describe(value)}`);
  return value;
}

/**
 * Validates every setting of `update`, then applies them all (an invalid update changes nothing).
 * Values: `null` = leave unchanged (HTTP JSON null); `undefined` = the key is present without a
 * value (a gRPC `SettingValue` with no choice), which is an error for every key. Unknown keys are
 * ignored, as Triton does.
 *
 * @throws NereidError UNSUPPORTED for any `log_file` other than null; INVALID_ARG for a value of
 *   the wrong type, a verbose level outside 0..2^32−1, or a format other than `default`/`ISO8601`.
 */
export function applyLogSettingsUpdate(logger: Logger, update: Readonly<Record<string, unknown>>): void {
  const next: Partial<LogSettings> = {};
  for (const [key, value] of Object.entries(update)) {
    if (value === null) continue;
    switch (key) {
      case 'log_file':
        throw new NereidError('UNSUPPORTED', 'log file location can not be updated through network protocol');
      case 'log_info':
        next.info = boolSetting(key, value);
        break;
      case 'log_warning':
        next.warning = boolSetting(key, value);
        break;
      case 'log_error':
        next.error = boolSetting(key, value);
        break;
      case 'log_verbose_level':
        if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > UINT32_MAX) {
          throw new NereidError('REQUEST_PARAMETER_TYPE', `log setting '${key}' expects an unsigned integer, got ${describe(value)}`);
        }
        next.verboseLevel = value;
        break;
      case 'log_format':
        if (typeof value !== 'string') throw new NereidError('REQUEST_PARAMETER_TYPE', `log setting '${key}' expects a string, got ${describe(value)}`);
        if (value !== 'default' && value !== 'ISO8601') {
          throw new NereidError('REQUEST_PARAMETER', `invalid argument for log_format, got '${value}'; expected 'default' or 'ISO8601'`);
        }
        next.format = value;
        break;
      default:
        break;
    }
  }
  logger.update(next);
}
