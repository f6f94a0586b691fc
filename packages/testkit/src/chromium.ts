/**
 * Headless Chromium for tests that check what a page looks like: `screenshot` renders an HTML
 * document (Debian's `chromium`, which the test profile of the setup step installs) and returns the
 * PNG's pixels, so a test can assert on colors and regions rather than on a file's existence. A
 * missing browser fails the test with the command that installs it; it never skips.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The screenshot as RGBA pixels (pngjs has no types of its own). */
export interface Png {
  width: number;
  height: number;
  data: Buffer;
}
const { PNG } = createRequire(import.meta.url)('pngjs') as { PNG: { sync: { read(buffer: Buffer): Png } } };

export const CHROMIUM = '/usr/bin/chromium';

/** Screenshots `html` with headless Chromium at 1280×2000; fails (never skips) when it is missing. */
export async function screenshot(html: string, timeoutMs = 60_000): Promise<{ png: Png; ms: number; file: string; shot: string }> {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (node scripts/setup.mjs test installs it)`);
  const dir = mkdtempSync(join(tmpdir(), 'nereid-page-'));
  const file = join(dir, 'report.html');
  const shot = join(dir, 'report.png');
  writeFileSync(file, html);
  const args = [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-dev-shm-usage',
    '--hide-scrollbars',
    '--force-color-profile=srgb',
    '--no-first-run',
    `--user-data-dir=${join(dir, 'profile')}`,
    '--window-size=1280,2000',
    `--screenshot=${shot}`,
    `file://${file}`,
  ];
  const started = Date.now();
  const output = await new Promise<string>((resolve, reject) => {
    const child = spawn(CHROMIUM, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => void (text += d));
    child.stderr.on('data', (d: Buffer) => void (text += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`chromium took over ${timeoutMs} ms:\n${text}`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(text);
      else reject(new Error(`chromium exited ${code}:\n${text}`));
    });
  });
  const ms = Date.now() - started;
  assert.ok(existsSync(shot), `chromium wrote no screenshot:\n${output}`);
  const png = PNG.sync.read(readFileSync(shot));
  return { png, ms, file, shot };
}

/** `#rrggbb` as its three channels. */
export function rgb(hex: string): [number, number, number] {
  return [parseInt(hex.slice(1, 3), 16), parseInt(hex.slice(3, 5), 16), parseInt(hex.slice(5, 7), 16)];
}

/** The pixels of exactly `hex` in `png`: how many, and the box around them. */
export function colorRegion(png: Png, hex: string): { count: number; minX: number; maxX: number; minY: number; maxY: number } {
  const [r, g, b] = rgb(hex);
  let count = 0;
  let minX = Infinity;
  let maxX = -Infinity;
  let minY = Infinity;
  let maxY = -Infinity;
  for (let y = 0; y < png.height; y++) {
    for (let x = 0; x < png.width; x++) {
      const i = (y * png.width + x) * 4;
      if (png.data[i] === r && png.data[i + 1] === g && png.data[i + 2] === b) {
        count++;
        minX = Math.min(minX, x);
        maxX = Math.max(maxX, x);
        minY = Math.min(minY, y);
        maxY = Math.max(maxY, y);
      }
    }
  }
  return { count, minX, maxX, minY, maxY };
}
