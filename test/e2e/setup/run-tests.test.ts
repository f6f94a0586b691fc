/**
 * The test runner's rule (scripts/run-tests.mjs): no test skips for a missing prerequisite. A
 * skipped or todo test fails the run unless its reason starts "needs a GPU"; the summary lists
 * every skip, suites included (Node's own totals do not count a skipped suite).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { REPO_ROOT } from '../../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'nereid-run-tests-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `source` as a test file through the runner; returns its exit code and output. */
function runFile(name: string, source: string): { code: number | null; out: string } {
  const file = join(dir, name);
  writeFileSync(file, `import { describe, it } from 'node:test';\n${source}\n`);
  const r = spawnSync(process.execPath, [join(REPO_ROOT, 'scripts', 'run-tests.mjs'), '--files', file], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('test runner: skips', () => {
  it('passes a run whose only skip needs a GPU, and lists it with its reason', () => {
    const r = runFile(
      'gpu.test.mjs',
      `describe('CUDA', () => { it('runs on the GPU', { skip: 'needs a GPU: no CUDA device here' }, () => {}); it('runs', () => {}); });`,
    );
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /Skipped \(1\):\n {2}skip .*gpu\.test\.mjs › CUDA › runs on the GPU: needs a GPU: no CUDA device here\n/);
    assert.doesNotMatch(r.out, /not allowed/);
  });

  it('fails a run with a skip for anything else, a skipped suite or a todo, naming each', () => {
    const r = runFile(
      'prereq.test.mjs',
      [
        `describe('Python', { skip: 'cannot import numpy' }, () => { it('a', () => {}); });`,
        `describe('more', () => { it('b', (t) => t.skip('no promtool')); it('c', { todo: 'later' }, () => {}); it('d', () => {}); });`,
      ].join('\n'),
    );
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /skip .*prereq\.test\.mjs › Python: cannot import numpy {2}\[not allowed\]/);
    assert.match(r.out, /skip .*prereq\.test\.mjs › more › b: no promtool {2}\[not allowed\]/);
    assert.match(r.out, /todo .*prereq\.test\.mjs › more › c: later {2}\[not allowed\]/);
    assert.match(r.out, /3 skipped or todo test\(s\) are not allowed/);
  });

  it('keeps a failing test a failure, with nothing skipped', () => {
    const r = runFile('fails.test.mjs', `it('fails', () => { throw new Error('boom'); });`);
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /Skipped: none/);
  });
});

describe('test runner: tiers', () => {
  it('leaves the Kubernetes tier out of the default run', () => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'scripts', 'run-tests.mjs'), 'kubernetes/harness/'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 1, `${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /No test file matches kubernetes\/harness\//);
  });

  it('refuses two tiers at once', () => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'scripts', 'run-tests.mjs'), '--kubernetes', '--conformance'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--conformance, --corpus and --kubernetes are separate tiers/);
  });
});
