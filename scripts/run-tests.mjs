#!/usr/bin/env node
// Runs every compiled test file of one tier with Node's built-in test runner.
//
// Node 20's `node --test DIR` does not expand directories of compiled TypeScript reliably, so the
// files are listed here explicitly: every `*.test.js` under packages/*/dist and dist/test whose
// TypeScript source still exists (stale outputs of deleted tests are left out, not run).
// Tiers (docs/testing.md): the default one (unit and end-to-end tests); --conformance, the files
// under test/conformance (Triton's own clients and tools, from the virtual environment that
// `node scripts/setup.mjs conformance` makes); --corpus, the `*.corpus.test.js` files (the
// reference config corpus of a team checkout); --kubernetes, the files under test/kubernetes (a real
// kube-apiserver, etcd and S3 server per file, from `node scripts/setup.mjs kubernetes`). Each runs
// nothing of the others.
//
// No test may skip for a missing prerequisite: a skipped or todo test fails the run, unless its
// reason starts with "needs a GPU" (hardware this machine may lack). The summary lists every skip
// with its reason.
// Usage: node scripts/run-tests.mjs [--conformance | --corpus | --kubernetes] [substring ...]   (only files whose
// path contains one)
//        node scripts/run-tests.mjs --files FILE...   (exactly these compiled test files, any tier)
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** [compiled dir, source dir] pairs; a.test.js in the first maps to a.test.ts in the second. */
const trees = [];
for (const pkg of readdirSync(join(root, 'packages'))) {
  trees.push([join(root, 'packages', pkg, 'dist'), join(root, 'packages', pkg, 'src')]);
}
trees.push([join(root, 'dist', 'test'), join(root, 'test')]);

function walk(dir, out) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (name.endsWith('.test.js')) out.push(path);
  }
  return out;
}

const args = process.argv.slice(2);
const explicit = args[0] === '--files' ? args.slice(1) : undefined;
const conformance = args.includes('--conformance');
const corpus = args.includes('--corpus');
const kubernetes = args.includes('--kubernetes');
if ([conformance, corpus, kubernetes].filter(Boolean).length > 1) {
  console.error('--conformance, --corpus and --kubernetes are separate tiers: run them one at a time');
  process.exit(2);
}
const tier = conformance ? 'conformance' : corpus ? 'corpus' : kubernetes ? 'kubernetes' : 'default';
const filters = args.filter((a) => a !== '--conformance' && a !== '--corpus' && a !== '--kubernetes');
const conformanceDir = join(root, 'dist', 'test', 'conformance') + '/';
const kubernetesDir = join(root, 'dist', 'test', 'kubernetes') + '/';
/** The tier a compiled test file belongs to. */
const tierOf = (file) =>
  file.startsWith(conformanceDir) ? 'conformance' : file.startsWith(kubernetesDir) ? 'kubernetes' : file.endsWith('.corpus.test.js') ? 'corpus' : 'default';
const files = explicit ?? [];
let sources = explicit?.length ?? 0;
for (const [dist, src] of explicit ? [] : trees) {
  for (const file of walk(dist, [])) {
    const source = join(src, relative(dist, file)).replace(/\.js$/, '.ts');
    if (!existsSync(source)) continue;
    if (tierOf(file) !== tier) continue;
    sources++;
    // Matched against the path from the repository root, so a filter such as `cli/` does not
    // match the directory the repository itself was cloned into.
    const shown = relative(root, file);
    if (filters.length === 0 || filters.some((f) => shown.includes(f))) files.push(file);
  }
}

// Every test source must have been compiled; a missing output means the build skipped it.
const missing = [];
for (const [dist, src] of explicit ? [] : trees) {
  const walkSrc = (dir) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walkSrc(path);
      else if (name.endsWith('.test.ts')) {
        const out = join(dist, relative(src, path)).replace(/\.ts$/, '.js');
        if (!existsSync(out)) missing.push(relative(root, path));
      }
    }
  };
  walkSrc(src);
}
if (missing.length > 0) {
  console.error(`These test sources have no compiled output (run npm run build):\n  ${missing.join('\n  ')}`);
  process.exit(1);
}
if (files.length === 0) {
  console.error(filters.length ? `No test file matches ${filters.join(', ')}` : 'No test files found');
  process.exit(1);
}

console.log(`Running ${files.length} of ${sources} test files (${explicit ? 'as listed' : `${tier} tier`})`);
// Conformance files drive the server with external processes (Python clients, perf_analyzer,
// Model Analyzer) that each want the machine's cores, and each Kubernetes file runs a control plane
// of its own (about 500 MB): one file at a time.
const concurrency = conformance || kubernetes ? ['--test-concurrency=1'] : [];
const skipsDir = mkdtempSync(join(tmpdir(), 'nereid-test-skips-'));
const skipsFile = join(skipsDir, 'skips.jsonl');
const reporters = [
  '--test-reporter=spec',
  '--test-reporter-destination=stdout',
  `--test-reporter=${join(root, 'scripts', 'skip-reporter.mjs')}`,
  `--test-reporter-destination=${skipsFile}`,
];
// A runner of its own, even when started from inside a test (Node's NODE_TEST_CONTEXT would make
// the child report to that test's runner and run nothing).
const env = { ...process.env };
delete env.NODE_TEST_CONTEXT;
const child = spawn(process.execPath, ['--test', ...reporters, ...concurrency, ...files], { stdio: 'inherit', cwd: root, env });
child.on('exit', (code, signal) => {
  const skips = existsSync(skipsFile)
    ? readFileSync(skipsFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line))
    : [];
  rmSync(skipsDir, { recursive: true, force: true });
  const allowed = (s) => s.kind === 'skip' && /^needs a GPU\b/.test(s.reason);
  const refused = skips.filter((s) => !allowed(s));
  const where = (file) => (file.startsWith(root) ? relative(root, file) : file);
  const line = (s) =>
    `  ${s.kind} ${where(s.file)} › ${s.path.join(' › ')}: ${s.reason || '(no reason given)'}${allowed(s) ? '' : '  [not allowed]'}`;
  console.log(skips.length > 0 ? `\nSkipped (${skips.length}):\n${skips.map(line).join('\n')}` : '\nSkipped: none');
  if (refused.length > 0) {
    console.error(
      `\n${refused.length} skipped or todo test(s) are not allowed: only a test that needs hardware this machine lacks may skip, ` +
        'with a reason starting "needs a GPU". A missing prerequisite is a failure (npm test installs what is missing; docs/testing.md).',
    );
  }
  const status = code ?? (signal ? 1 : 0);
  process.exit(status !== 0 ? status : refused.length > 0 ? 1 : 0);
});
