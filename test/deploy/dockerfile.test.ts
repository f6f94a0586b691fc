/**
 * deploy/Dockerfile without building it (building takes minutes and root: scripts/build-image.mjs
 * does that): every file it copies from the build context exists and is not left out by
 * .dockerignore, every workspace's manifest reaches `npm ci`, the runtime tree holds every
 * package the server and operator import, and the image's `nereid` command runs Nereid's CLI.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const run = promisify(execFile);

interface Instruction {
  keyword: string;
  args: string;
  stage: number;
}

/** The Dockerfile's instructions, continuation lines joined, comments dropped; stage counts FROMs. */
function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  let stage = -1;
  const joined = text.replace(/\\\n/g, ' ');
  for (const raw of joined.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [keyword, ...rest] = line.split(/\s+/);
    const upper = keyword!.toUpperCase();
    if (upper === 'FROM') stage++;
    out.push({ keyword: upper, args: rest.join(' '), stage });
  }
  return out;
}

/** .dockerignore's patterns as regular expressions over context-relative paths. */
function ignorePatterns(text: string): RegExp[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((pattern) => {
      assert.ok(!pattern.startsWith('!'), 'this check does not handle exceptions (!) in .dockerignore');
      const source = pattern
        .replace(/\/$/, '')
        .split('/')
        .map((part) => (part === '**' ? '\u0000' : part.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]')))
        .join('/')
        .replace(/\u0000\//g, '(?:.*/)?')
        .replace(/\u0000/g, '.*');
      return new RegExp(`^${source}$`);
    });
}

/** True when .dockerignore leaves `path` (or a directory above it) out of the context. */
function ignored(path: string, patterns: RegExp[]): boolean {
  const parts = path.replace(/\/$/, '').split('/');
  for (let i = 1; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    if (patterns.some((p) => p.test(prefix))) return true;
  }
  return false;
}

const dockerfile = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8');
const steps = instructions(dockerfile);
const patterns = ignorePatterns(readFileSync(join(root, '.dockerignore'), 'utf8'));
/** The context paths of every COPY that reads the build context (not --from another stage). */
const copied = steps
  .filter((s) => s.keyword === 'COPY' && !/--from=/.test(s.args))
  .flatMap((s) => {
    const words = s.args.split(/\s+/).filter((w) => !w.startsWith('--'));
    return words.slice(0, -1);
  });
const finalStage = Math.max(...steps.map((s) => s.stage));
const runtime = steps.filter((s) => s.stage === finalStage);

test('every path the Dockerfile copies from the context exists and is not ignored', () => {
  assert.ok(copied.length >= 8, `expected the Dockerfile's COPY sources, found ${copied.join(', ')}`);
  for (const path of copied) {
    assert.ok(existsSync(join(root, path)), `COPY ${path}: no such file in the repository`);
    assert.ok(!ignored(path, patterns), `COPY ${path}: .dockerignore leaves it out of the build context`);
  }
});

test('.dockerignore keeps build outputs and dependencies out of the context but not the sources the build needs', () => {
  for (const path of ['node_modules', 'packages/server/node_modules', 'packages/server/dist', 'packages/server/tsconfig.tsbuildinfo', 'packages/protocol/src/generated', '.git']) {
    assert.ok(ignored(path, patterns), `${path} should be left out of the build context`);
  }
  for (const path of ['packages/server/src/cli/main.ts', 'packages/server/native/addon.c', 'packages/server/python/nereid_stub/stub.py', 'packages/protocol/proto', 'packages/operator/src/index.ts']) {
    assert.ok(existsSync(join(root, path)), `${path} is missing from the repository`);
    assert.ok(!ignored(path, patterns), `${path} is needed by the build but .dockerignore leaves it out`);
  }
});

test('every workspace manifest is copied before npm ci, so the install sees the whole workspace', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { workspaces: string[] };
  const npmCi = steps.findIndex((s) => s.keyword === 'RUN' && /npm ci\b/.test(s.args));
  assert.ok(npmCi > 0, 'the build stage runs npm ci');
  const before = steps.slice(0, npmCi).filter((s) => s.keyword === 'COPY').map((s) => s.args);
  for (const file of ['package.json', 'package-lock.json', '.npmrc', ...pkg.workspaces.map((w) => `${w}/package.json`)]) {
    assert.ok(before.some((args) => args.split(/\s+/).includes(file)), `${file} is not copied before npm ci`);
  }
});

test('the runtime tree holds every workspace package the server and the operator depend on', () => {
  const install = steps.find((s) => s.keyword === 'RUN' && /npm ci --omit=dev/.test(s.args));
  assert.ok(install, 'the build stage installs the production dependencies with npm ci --omit=dev');
  const kept = [...install.args.matchAll(/--workspace=packages\/([a-z]+)/g)].map((m) => m[1]!);
  assert.deepEqual([...kept].sort(), ['client', 'operator', 'protocol', 'server']);
  const compiled = /for p in ([a-z ]+); do cp -a packages\/\$p\/dist/.exec(install.args)?.[1]?.trim().split(/\s+/) ?? [];
  assert.deepEqual([...compiled].sort(), ['client', 'operator', 'protocol', 'server'], 'the compiled code of each installed package is copied');
  for (const name of ['server', 'operator', 'protocol', 'client']) {
    const manifest = JSON.parse(readFileSync(join(root, 'packages', name, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    for (const dep of Object.keys(manifest.dependencies ?? {}).filter((d) => d.startsWith('@nereid/'))) {
      assert.ok(kept.includes(dep.slice('@nereid/'.length)), `${name} depends on ${dep}, which the image leaves out`);
    }
  }
});

test('the runtime stage: non-root user, the nereid entrypoint, serve as the command, the three ports, labels', () => {
  const one = (keyword: string) => runtime.filter((s) => s.keyword === keyword).map((s) => s.args);
  assert.deepEqual(one('ENTRYPOINT'), ['["nereid"]']);
  assert.deepEqual(one('CMD'), ['["serve", "--model-repository=/models"]']);
  assert.deepEqual(one('EXPOSE'), ['8000 8001 8002']);
  const user = one('USER');
  assert.equal(user.length, 1);
  assert.match(user[0]!, /^[1-9]\d*:[1-9]\d*$/, 'a numeric non-root user, so that runAsNonRoot can verify it');
  assert.match(one('LABEL').join(' '), /org\.opencontainers\.image\.title="Nereid"/);
  assert.match(one('LABEL').join(' '), /org\.opencontainers\.image\.version=/);
  assert.ok(runtime.some((s) => s.keyword === 'RUN' && /python3-numpy/.test(s.args)), 'the Python backend needs python3 with numpy');
  assert.ok(steps.some((s) => s.keyword === 'ARG' && /^BASE_IMAGE=docker\.io\/library\/node:20-bookworm-slim$/.test(s.args)));
});

test("the image's nereid command runs Nereid's CLI: --help, serve --help, operator --help", async () => {
  const script = join(root, 'deploy', 'nereid.sh');
  const env = { ...process.env, NEREID_HOME: root };
  const [help, serve, operator, version] = await Promise.all([
    run('sh', [script, '--help'], { env }),
    run('sh', [script, 'serve', '--help'], { env }),
    run('sh', [script, 'operator', '--help'], { env }),
    run('sh', [script, '--version'], { env }),
  ]);
  assert.match(operator.stdout, /Usage: nereid operator/, 'the operator runs from the same tree');
  assert.match(help.stdout, /Usage: nereid/);
  assert.match(help.stdout, /\bserve\b/);
  assert.match(serve.stdout, /--model-repository <path>/);
  const pkg = JSON.parse(readFileSync(join(root, 'packages', 'server', 'package.json'), 'utf8')) as { version: string };
  assert.equal(version.stdout.trim(), pkg.version);
});

test("the image's nereid command starts node with the Node.js options serve is meant to run with; NEREID_NODE_FLAGS replaces them", async () => {
  const script = join(root, 'deploy', 'nereid.sh');
  // `serve` without a repository stops at once, after the check of its Node.js options (verbose).
  const serve = (extra: Record<string, string>) =>
    run('sh', [script, 'serve', '--log-verbose=1'], { env: { ...process.env, NEREID_HOME: root, NODE_OPTIONS: '', ...extra } }).then(
      () => assert.fail('serve without a model repository exited 0'),
      (err: { stdout: string; stderr: string }) => err,
    );
  const [plain, replaced] = await Promise.all([serve({}), serve({ NEREID_NODE_FLAGS: '--max-semi-space-size=8' })]);
  assert.match(plain.stdout + plain.stderr, /no model repository given/);
  assert.doesNotMatch(plain.stdout + plain.stderr, /started without the Node\.js options/);
  assert.match(replaced.stdout + replaced.stderr, /started without the Node\.js options --single-threaded-gc:/);
});
