/**
 * Micro-benchmark of the JSON tensor codec on 1e6 FP32 elements (and 1e6 INT64 for the exact
 * parser), each figure against a plain JSON.parse / JSON.stringify baseline of the same data.
 * Prints `name: value unit (baseline …, ratio …)` lines; `--json` adds one JSON line for tools.
 *
 *   node --import tsx packages/protocol/src/bench-json-tensor.ts [--json]
 */
import { jsonToTensorData, tensorDataToJson } from './json-tensor.js';
import { parseJson } from './json.js';

const N = 1_000_000;
const REPS = 7;
const WHAT = "input 'INPUT0' of model 'bench'";

/** Median wall time of `fn` in milliseconds, after one warm-up run. */
function time(fn: () => unknown): number {
  fn();
  const samples: number[] = [];
  for (let i = 0; i < REPS; i++) {
    const start = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  samples.sort((a, b) => a - b);
  return samples[REPS >> 1];
}

interface Figure {
  name: string;
  ms: number;
  baselineName: string;
  baselineMs: number;
}

const figures: Figure[] = [];

function compare(name: string, fn: () => unknown, baselineName: string, baseline: () => unknown): void {
  const baselineMs = time(baseline);
  const ms = time(fn);
  figures.push({ name, ms, baselineName, baselineMs });
  console.log(`${name}: ${ms.toFixed(1)} ms (baseline ${baselineName} ${baselineMs.toFixed(1)} ms, ratio ${(ms / baselineMs).toFixed(3)})`);
}

const f32 = new Float32Array(N);
for (let i = 0; i < N; i++) f32[i] = Math.sin(i) * 1000;
const plain = Array.from(f32);
const text = JSON.stringify(plain);
const bytes = Buffer.from(f32.buffer);

compare('fp32_1e6_json_to_tensor_data', () => jsonToTensorData('FP32', plain, N, WHAT), 'JSON.parse', () => JSON.parse(text));
compare('fp32_1e6_tensor_data_to_json', () => tensorDataToJson('FP32', bytes, WHAT), 'JSON.stringify', () => JSON.stringify(plain));
compare('fp32_1e6_parse_json', () => parseJson(text), 'JSON.parse', () => JSON.parse(text));
compare(
  'fp32_1e6_json_to_tensor_data_fill',
  () => jsonToTensorData('FP32', plain, N, WHAT),
  'validate+Float32Array.from',
  () => {
    for (let i = 0; i < N; i++) if (typeof plain[i] !== 'number') throw new TypeError('not a number');
    return Float32Array.from(plain);
  },
);

const i64 = new BigInt64Array(N);
for (let i = 0; i < N; i++) i64[i] = BigInt(i) * 9_223_372_036_853n - 4_611_686_018_427_387_904n;
const i64Text = `[${i64.join(',')}]`;
compare('int64_1e6_parse_json_exact', () => parseJson(i64Text), 'JSON.parse', () => JSON.parse(i64Text));

if (process.argv.includes('--json')) console.log(JSON.stringify({ bench: 'json-tensor', elements: N, figures }));
