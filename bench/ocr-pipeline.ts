/**
 * The OCR example pipeline (examples/ocr) as one ensemble request against the same steps called
 * one after another by a client, both over gRPC to a `nereid serve` child process serving
 * examples/ocr/model_repository, one request at a time, on examples/ocr/sample.png (two lines):
 *   (a) `ocr` (ensemble): PNG in, text out → mean latency;
 *   (b) baseline: the client calls ocr_preprocess, text_detection, text_crop, text_recognition
 *       and ctc_decode itself, sending each step the tensors the previous ones returned (the
 *       detector's input alone is 3 × 96 × 480 FP32) → mean latency per image.
 * Both give the same text (checked before measuring). Targets alternate over `--rounds` rounds
 * of `--seconds`; medians are kept. Needs `npm run build` (it copies the models).
 *
 * Usage: node dist/bench/ocr-pipeline.js [--seconds N] [--rounds N] [--json out.json]
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GrpcClient, type InferResult } from '@nereid/client';
import { alternate, benchArgs, compared, median, nereidServeCommand, report, runLoad, spawnServer } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const root = fileURLToPath(new URL('../../', import.meta.url));

const server = await spawnServer(
  [
    ...nereidServeCommand(),
    '--model-repository',
    join(root, 'examples', 'ocr', 'model_repository'),
    '--http-address=127.0.0.1',
    '--http-port=0',
    '--grpc-address=127.0.0.1',
    '--grpc-port=0',
    '--metrics-port=0',
  ],
  /Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/,
);
const client = new GrpcClient(`127.0.0.1:${server.port}`);
const png = await readFile(join(root, 'examples', 'ocr', 'sample.png'));

const tensor = (result: InferResult, output: string, input: string) => ({
  name: input,
  datatype: result.datatype(output),
  shape: result.shape(output),
  data: result.bytes(output),
});

async function viaEnsemble(): Promise<string[]> {
  const r = await client.infer({ model: 'ocr', inputs: [{ name: 'IMAGE', datatype: 'BYTES', shape: [1], data: [png] }], outputs: [{ name: 'TEXT' }] });
  return r.strings('TEXT');
}

async function stepByStep(): Promise<string[]> {
  const pre = await client.infer({ model: 'ocr_preprocess', inputs: [{ name: 'IMAGE', datatype: 'BYTES', shape: [1], data: [png] }] });
  const det = await client.infer({ model: 'text_detection', inputs: [tensor(pre, 'DET_INPUT', 'x')] });
  const crop = await client.infer({ model: 'text_crop', inputs: [tensor(det, 'sigmoid_0.tmp_0', 'PROB'), tensor(pre, 'IMAGE_RGB', 'IMAGE_RGB')] });
  const rec = await client.infer({ model: 'text_recognition', inputs: [tensor(crop, 'REC_INPUT', 'x')] });
  const text = await client.infer({
    model: 'ctc_decode',
    inputs: [tensor(rec, 'softmax_11.tmp_0', 'PROBS'), tensor(crop, 'BOXES', 'BOXES')],
    outputs: [{ name: 'TEXT' }],
  });
  return text.strings('TEXT');
}

try {
  const [a, b] = [await viaEnsemble(), await stepByStep()];
  if (JSON.stringify(a) !== JSON.stringify(b) || a.length !== 2) throw new Error(`the ensemble read ${JSON.stringify(a)}, the steps ${JSON.stringify(b)}`);
  const results = await alternate([viaEnsemble, stepByStep], rounds, (op) => runLoad(op, 1, seconds));
  const ensembleUs = median(results[0]!.map((r) => r.meanLatencyUs));
  const stepsUs = median(results[1]!.map((r) => r.meanLatencyUs));
  report([compared('ocr ensemble (5 steps), latency per image', 'us', ensembleUs, stepsUs, '5 calls by the client')], jsonPath);
} finally {
  client.close();
  await server.stop();
}
