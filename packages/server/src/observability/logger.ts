/**
 * Server log, in the spirit of Triton's: severity toggles, a verbose level, `default` or `ISO8601`
 * line format, console or file (protocol.md §3.16, §6.3).
 *
 * Default format:  `I1202 17:36:00.123456 4242 nereid] message`
 * ISO8601 format:  `2026-12-02T17:36:00Z I 4242 nereid] message`
 */
import { appendFileSync } from 'node:fs';

export type LogFormat = 'default' | 'ISO8601';

export interface LogSettings {
  info: boolean;
  warning: boolean;
  error: boolean;
  verboseLevel: number;
  format: LogFormat;
  /** Empty: console (info/verbose to stdout, warnings/errors to stderr). */
  file: string;
}

export const DEFAULT_LOG_SETTINGS: Readonly<LogSettings> = {
  info: true,
  warning: true,
  error: true,
  verboseLevel: 0,
  format: 'default',
  file: '',
};

export interface Logger {
  info(message: string): void;
  warning(message: string): void;
  error(message: string): void;
  /** Logged only when the verbose level is at least `level`. */
  verbose(level: number, message: string): void;
  isVerbose(level: number): boolean;
  readonly settings: Readonly<LogSettings>;
  update(settings: Partial<LogSettings>): void;
}

const pad = (n: number, width = 2): string => String(n).padStart(width, '0');

function formatLine(settings: LogSettings, severity: 'I' | 'W' | 'E' | 'V', message: string): string {
  const now = new Date();
  if (settings.format === 'ISO8601') {
    return `${now.toISOString().replace(/\.\d{3}Z$/, 'Z')} ${severity} ${process.pid} nereid] ${message}\n`;
  }
  const micros = pad(now.getMilliseconds(), 3) + '000';
  return (
    `${severity}${pad(now.getMonth() + 1)}${pad(now.getDate())} ` +
    `${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}.${micros} ` +
    `${process.pid} nereid] ${message}\n`
  );
}

export function createLogger(initial: Partial<LogSettings> = {}): Logger {
  const settings: LogSettings = { ...DEFAULT_LOG_SETTINGS, ...initial };
  const write = (severity: 'I' | 'W' | 'E' | 'V', message: string): void => {
    const line = formatLine(settings, severity, message);
    if (settings.file) appendFileSync(settings.file, line);
    else if (severity === 'W' || severity === 'E') process.stderr.write(line);
    else process.stdout.write(line);
  };
  return {
    settings,
    info: (m) => settings.info && write('I', m),
    warning: (m) => settings.warning && write('W', m),
    error: (m) => settings.error && write('E', m),
    verbose: (level, m) => settings.verboseLevel >= level && write('V', m),
    isVerbose: (level) => settings.verboseLevel >= level,
    update: (next) => Object.assign(settings, next),
  };
}

/** A logger that drops everything (embedding and tests). */
export function silentLogger(): Logger {
  return createLogger({ info: false, warning: false, error: false, verboseLevel: 0 });
}
