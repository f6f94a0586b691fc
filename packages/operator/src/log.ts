/** JSON-lines logging to stderr with a level threshold. */

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export function createLogger(level: LogLevel, write: (line: string) => void = (line) => process.stderr.write(line)): Logger {
  const threshold = LOG_LEVELS.indexOf(level);
  const log =
    (at: LogLevel) =>
    (message: string, fields: Record<string, unknown> = {}): void => {
      if (LOG_LEVELS.indexOf(at) < threshold) return;
      const clean: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(fields)) clean[k] = v instanceof Error ? v.message : v;
      write(JSON.stringify({ time: new Date().toISOString(), level: at, msg: message, ...clean }) + '\n');
    };
  return { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
}
