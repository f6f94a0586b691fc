/**
 * What the protocol costs, measured by `nereid perf` itself (its `--json` output): the `simple`
 * model (INT32 [1,16] add/sub) measured
 *   (a) in process (`--service-kind in_process`: the `Server` facade in the load generator's
 *       process, perf_analyzer's C API mode), the baseline;
 *   (b) over HTTP with binary tensors against `nereid serve` in a child process;
 *   (c) over gRPC `ModelInfer` against the same server;
 * each at concurrency 1 (latency) and 8 (throughput). Every measurement is one `nereid perf`
 * process: three back-to-back windows of `--seconds`/3 (`-s` wide open, so the three windows are
 * what is reported), in alternating order (a, b, c, a, b, c, … `--rounds` times), medians kept.
 * Over HTTP and gRPC the client and the server are two processes on the same cores; in process
 * they are one, so (b) − (a) is what the protocol and the second process cost together.
 * Figures: latency at c1 and throughput at c8 of (b) and (c) against (a), and the server's own
 * average request time over HTTP against in process (from the statistics extension).
 *
 * Usage: node dist/bench/perf-protocols.js [--seconds N] [--rounds N] [--json out.json]
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { simpleModel, writeModelToRepository } from '@nereid/testkit';
import type { LevelSummary } from '@nereid/perf';
import { alternate, benchArgs, compared, median, nereidServeCommand, report, spawnServer, type Figure } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const root = fileURLToPath(new URL('../..', import.meta.url));
const perfBin = join(root, 'packages/perf/bin/nereid-perf.js');

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-perf-'));
await writeModelToRepository(repo, simpleModel());
const server = await spawnServer(
  [...nereidServeCommand(), `--model-repository=${repo}`, '--http-port=0', '--http-address=127.0.0.1', '--grpc-port=0', '--grpc-address=127.0.0.1', '--allow-metrics=false'],
  /Started HTTPService at [^:]+:(\d+)/,
  { grpc: /Started GRPCInferenceService at [^\s]+:(\d+)/ },
);

type Target = 'in_process' | 'http' | 'grpc';
const targets: Target[] = ['in_process', 'http', 'grpc'];

/** One `nereid perf` run: its level, read from `--json`. Throws with perf's stderr on failure. */
function perf(target: Target, concurrency: number): LevelSummary {
  const where =
    target === 'in_process'
      ? ['--service-kind', 'in_process', '--model-repository', repo]
      : target === 'http'
        ? ['-u', `127.0.0.1:${server.port}`]
        : ['-i', 'grpc', '-u', `127.0.0.1:${server.ports.grpc}`];
  const windowMs = String(Math.max(100, Math.round((seconds * 1000) / 3 / 1.2)));
  const argv = [perfBin, '-m', 'simple', ...where, '--concurrency-range', String(concurrency), '-p', windowMs, '-s', '100000', '-r', '3', '--warmup-request-count', '200', '--json'];
  const r = spawnSync(process.execPath, argv, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`nereid perf ${target} c${concurrency} exited ${r.status}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { levels: LevelSummary[] }).levels[0]!;
}

try {
  const [c1In, c1Http, c1Grpc] = await alternate(targets, rounds, async (t) => perf(t, 1));
  const [c8In, c8Http, c8Grpc] = await alternate(targets, rounds, async (t) => perf(t, 8));
  const lat = (runs: LevelSummary[]) => median(runs.map((l) => l.avgLatencyUs));
  const tput = (runs: LevelSummary[]) => median(runs.map((l) => l.throughput));
  const serverUs = (runs: LevelSummary[]) => median(runs.map((l) => l.server?.avgRequestUs ?? NaN));
  const figures: Figure[] = [
    { name: 'perf_inprocess_latency_c1', value: lat(c1In!), unit: 'us' },
    compared('perf_http_latency_c1', 'us', lat(c1Http!), lat(c1In!), 'in_process'),
    compared('perf_grpc_latency_c1', 'us', lat(c1Grpc!), lat(c1In!), 'in_process'),
    compared('perf_http_throughput_c8', 'infer/s', tput(c8Http!), tput(c8In!), 'in_process'),
    compared('perf_grpc_throughput_c8', 'infer/s', tput(c8Grpc!), tput(c8In!), 'in_process'),
    compared('perf_http_server_request_c1', 'us', serverUs(c1Http!), serverUs(c1In!), 'in_process'),
  ];
  report(figures, jsonPath);
} finally {
  await server.stop();
  await rm(repo, { recursive: true, force: true });
}
