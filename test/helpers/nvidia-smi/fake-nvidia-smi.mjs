// A stand-in for nvidia-smi in tests. It answers the command lines Nereid runs from the recorded
// output of the fixture set named by FAKE_NVIDIA_SMI_FIXTURE (a folder of ./fixtures, or a path)
// and fails loudly on any other command line, so that a changed query is noticed.
//
// FAKE_NVIDIA_SMI_HANG=1 makes every call hang (the caller's timeout must end it).
// --query-compute-apps answers with the processes of this machine that carry both
// FAKE_NVIDIA_SMI_FIXTURE and CUDA_VISIBLE_DEVICES in their environment (Python stubs started by
// a server under test), each using FAKE_NVIDIA_SMI_APP_MIB MiB (default 1536) of the device that
// CUDA_VISIBLE_DEVICES names (for a MIG instance, nvidia-smi names its GPU).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const COMMANDS = {
  '--query-gpu=index,uuid,name,memory.total,memory.used,mig.mode.current --format=csv,noheader,nounits': 'query-gpus.csv',
  '-L': 'list.txt',
  '-q -x': 'query.xml',
  '--query-gpu=uuid,utilization.gpu,memory.total,memory.used,power.draw,power.limit --format=csv,noheader,nounits': 'query-metrics.csv',
};
const COMPUTE_APPS = '--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits';

const fixture = process.env.FAKE_NVIDIA_SMI_FIXTURE;
if (!fixture) {
  process.stderr.write('fake nvidia-smi: FAKE_NVIDIA_SMI_FIXTURE is not set\n');
  process.exit(9);
}
if (process.env.FAKE_NVIDIA_SMI_HANG === '1') setInterval(() => {}, 1000);
else {
  const dir = isAbsolute(fixture) ? fixture : join(dirname(fileURLToPath(import.meta.url)), 'fixtures', fixture);
  const line = process.argv.slice(2).join(' ');
  if (line === COMPUTE_APPS) process.stdout.write(computeApps(dir));
  else if (COMMANDS[line] !== undefined) {
    const file = join(dir, COMMANDS[line]);
    if (!existsSync(file)) {
      process.stderr.write(`fake nvidia-smi: no recorded output ${file}\n`);
      process.exit(9);
    }
    process.stdout.write(readFileSync(file, 'utf8'));
    // `<file>.exit` holds the exit code of a recorded failure (nvidia-smi prints its errors on stdout).
    if (existsSync(`${file}.exit`)) process.exitCode = Number(readFileSync(`${file}.exit`, 'utf8').trim());
  }
  else {
    process.stderr.write(`fake nvidia-smi: unknown command line '${line}' (known: ${[...Object.keys(COMMANDS), COMPUTE_APPS].join(' | ')})\n`);
    process.exit(9);
  }
}

function computeApps(dir) {
  const list = readFileSync(join(dir, 'list.txt'), 'utf8');
  const gpuOf = new Map();
  let gpu;
  for (const l of list.split('\n')) {
    const g = /^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)/.exec(l);
    if (g) {
      gpu = g[2];
      gpuOf.set(g[2], g[2]);
      gpuOf.set(g[1], g[2]);
    }
    const m = /\(UUID: (MIG-[^)]+)\)/.exec(l);
    if (m && gpu) gpuOf.set(m[1], gpu);
  }
  const mib = process.env.FAKE_NVIDIA_SMI_APP_MIB ?? '1536';
  let out = '';
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let env;
    try {
      env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (!env.includes(`FAKE_NVIDIA_SMI_FIXTURE=${fixture}`)) continue;
    const visible = env.find((e) => e.startsWith('CUDA_VISIBLE_DEVICES='))?.slice('CUDA_VISIBLE_DEVICES='.length);
    if (!visible) continue;
    for (const device of visible.split(',')) {
      const uuid = gpuOf.get(device.trim());
      if (uuid) out += `${pid}, ${uuid}, ${mib}\n`;
    }
  }
  return out;
}
