/**
 * The progress of `nereid analyze`: configurations done and left, the level being measured, and
 * the estimated time remaining. On a terminal a bar (`cli-progress`) on stderr; elsewhere one
 * plain line per finished configuration; `none` prints only the skipped configurations. The
 * bar draws on the process's stderr; the lines and notices go where the command's output goes.
 */
import cliProgress from 'cli-progress';
import type { Level } from './search.js';
import type { Variant } from './types.js';

function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m}m${String(s % 60).padStart(2, '0')}s` : `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

export class Progress {
  readonly #style: 'bar' | 'lines' | 'none';
  readonly #write: (text: string) => void;
  #bar: cliProgress.SingleBar | undefined;
  #total = 0;
  #done = 0;
  #started = 0;
  #current = '';

  constructor(style: 'bar' | 'lines' | 'none', write: (text: string) => void) {
    this.#style = style;
    this.#write = write;
  }

  start(): void {
    this.#started = Date.now();
    if (this.#style !== 'bar') return;
    this.#bar = new cliProgress.SingleBar(
      {
        format: '{bar} {value}/{total} configurations | {elapsed} elapsed, ~{left} left | {status}',
        hideCursor: true,
        clearOnComplete: true,
        stream: process.stderr,
        etaBuffer: 20,
      },
      cliProgress.Presets.shades_classic,
    );
    this.#bar.start(Math.max(1, this.#total), this.#done, this.#payload());
  }

  /** Seconds left, from the average time per finished configuration. */
  #left(): number {
    if (this.#done === 0) return NaN;
    return ((Date.now() - this.#started) / 1000 / this.#done) * Math.max(0, this.#total - this.#done);
  }

  #payload(): Record<string, string> {
    return { status: this.#current, left: duration(this.#left()), elapsed: duration((Date.now() - this.#started) / 1000) };
  }

  plan(_model: string, n: number): void {
    this.#total = Math.max(this.#done, this.#total + n);
    this.#bar?.setTotal(Math.max(1, this.#total));
  }

  level(variant: Variant, level: Level): void {
    this.#current = `${variant.name} at ${level.concurrency !== undefined ? `concurrency ${level.concurrency}` : `request rate ${level.requestRate}`}${level.batchSize > 1 ? `, batch ${level.batchSize}` : ''}`;
    this.#bar?.update(this.#done, this.#payload());
  }

  done(variant: Variant): void {
    this.#done++;
    if (this.#bar) this.#bar.update(this.#done, this.#payload());
    else if (this.#style === 'lines') {
      this.#write(`[${this.#done}/${Math.max(this.#total, this.#done)} configurations] ${variant.name} done; ${duration((Date.now() - this.#started) / 1000)} elapsed, ~${duration(this.#left())} left\n`);
    }
  }

  notice(text: string): void {
    if (this.#style === 'none' && !text.startsWith('skipped')) return;
    if (this.#bar) {
      this.#write('\r\x1b[2K');
      this.#write(`${text}\n`);
      this.#bar.update(this.#done, this.#payload());
    } else {
      this.#write(`${text}\n`);
    }
  }

  stop(): void {
    this.#bar?.stop();
    this.#bar = undefined;
  }
}
