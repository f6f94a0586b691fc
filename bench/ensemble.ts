/**
 * What an ensemble step costs (models-and-scheduling.md §6), measured in one run through the
 * `Server` facade on the ONNX Runtime identity model (FP32 [1, 16]), one request at a time:
 *   (a) an ensemble of 4 identity steps in a chain → mean latency per ensemble request;
 *   (b) baseline: the same 4 identity calls made one after another by the caller → mean latency
 *       per group of 4.
 * The added cost per step is (a − b) / 4, reported against one direct call. Targets alternate
 * over `--rounds` rounds of `--seconds`; medians are kept.
 *
 * Usage: node dist/bench/ensemble.js [--seconds N] [--rounds N] [--json out.json]
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server, silentLogger, type InferRequest } from '@nereid/server';
import { identityModel } from '@nereid/testkit';
import { alternate, benchArgs, compared, median, report, runLoad } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const STEPS = 4;

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-ensemble-'));
const ident = identityModel('FP32', [1, 16], { name: 'ident' });
await mkdir(join(repo, 'ident', '1'), { recursive: true });
await writeFile(join(repo, 'ident', '1', 'model.onnx'), ident.onnx.bytes);
await writeFile(
  join(repo, 'ident', 'config.pbtxt'),
  `name: "ident"
backend: "onnxruntime"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [1, 16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [1, 16] }]
instance_group [{ kind: KIND_CPU count: 1 }]
`,
);
const tensors = ['X', ...Array.from({ length: STEPS - 1 }, (_, i) => `t${i}`), 'Y'];
await mkdir(join(repo, 'chain', '1'), { recursive: true });
await writeFile(
  join(repo, 'chain', 'config.pbtxt'),
  `name: "chain"
platform: "ensemble"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_FP32 dims: [1, 16] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [1, 16] }]
ensemble_scheduling {
${Array.from({ length: STEPS }, (_, i) => `  step { model_name: "ident" model_version: -1 input_map { key: "INPUT0" value: "${tensors[i]}" } output_map { key: "OUTPUT0" value: "${tensors[i + 1]}" } }`).join('\n')}
}
`,
);

const server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
const data = new Float32Array(16).fill(1);
const viaEnsemble: InferRequest = { model: 'chain', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 16], data }] };
const direct = (d: Uint8Array | Float32Array): InferRequest => ({ model: 'ident', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: d }] });

const ops = [
  () => server.infer(viaEnsemble),
  async () => {
    let d: Uint8Array | Float32Array = data;
    for (let i = 0; i < STEPS; i++) d = (await server.infer(direct(d))).outputs[0]!.data;
  },
];
const results = await alternate(ops, rounds, (op) => runLoad(op, 1, seconds));
const ensembleUs = median(results[0]!.map((r) => r.meanLatencyUs));
const directUs = median(results[1]!.map((r) => r.meanLatencyUs));
await server.stop();
await rm(repo, { recursive: true, force: true });

report(
  [
    compared(`ensemble of ${STEPS} identity steps, latency`, 'us', ensembleUs, directUs, `${STEPS} direct calls`),
    compared('ensemble added per step', 'us', (ensembleUs - directUs) / STEPS, directUs / STEPS, 'one direct call'),
  ],
  jsonPath,
);
