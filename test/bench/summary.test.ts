/** The `npm run bench` summary (bench/summary.ts): summary lines read back, targets judged. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compared, report } from '../../bench/lib.js';
import { KEY_FIGURES, parseFigureLine, summaryTable, type ParsedFigure } from '../../bench/summary.js';

/** What bench/lib.ts `report` prints for `figures`. */
function printed(figures: Parameters<typeof report>[0]): string[] {
  const lines: string[] = [];
  const log = console.log;
  console.log = (line: string) => void lines.push(line);
  try {
    report(figures);
  } finally {
    console.log = log;
  }
  return lines;
}

describe('bench summary', () => {
  it('reads back every line report() prints: names with spaces, baselines with spaces, units or none', () => {
    const lines = printed([
      compared('http_throughput_c16', 'req/s', 8182, 11088, 'bare_node_http'),
      compared('custom JS backend, main thread, FP32[1,16] throughput at concurrency 16', 'req/s', 900.5, 1800, 'onnxruntime identity'),
      { name: 'grpc_client_loop_utilization_c16', value: 0.5, unit: '' },
      { name: 'python added latency per request (16 FP32)', value: 216.4, unit: 'us' },
    ]);
    const parsed = lines.map(parseFigureLine);
    assert.deepEqual(parsed[0], { name: 'http_throughput_c16', value: 8182, unit: 'req/s', baselineName: 'bare_node_http', baseline: 11088, ratio: 0.738 });
    assert.deepEqual(parsed[1], { name: 'custom JS backend, main thread, FP32[1,16] throughput at concurrency 16', value: 901, unit: 'req/s', baselineName: 'onnxruntime identity', baseline: 1800, ratio: 0.5 });
    assert.deepEqual(parsed[2], { name: 'grpc_client_loop_utilization_c16', value: 0.5, unit: '' });
    assert.deepEqual(parsed[3], { name: 'python added latency per request (16 FP32)', value: 216, unit: 'us' });
    assert.equal(parseFigureLine('# http-overhead'), undefined);
    assert.equal(parseFigureLine('[WARNING] something'), undefined);
  });

  it('judges each target on the ratio or the value, and says which figures are missing', () => {
    const figures = (list: ParsedFigure[]) => ({ code: 0, figures: list });
    const table = summaryTable(
      KEY_FIGURES.filter((k) => ['http-overhead', 'ensemble', 'sequence', 'grpc-overhead'].includes(k.bench)),
      new Map([
        ['http-overhead', figures([
          { name: 'http_throughput_c16', value: 8182, unit: 'req/s', baseline: 11088, baselineName: 'bare', ratio: 0.738 },
          { name: 'facade_overhead_c1', value: 35, unit: 'us', baseline: 22, baselineName: 'ort', ratio: 1.6 },
        ])],
        ['ensemble', figures([{ name: 'ensemble added per step', value: 7.5, unit: 'us', baseline: 33, baselineName: 'one', ratio: 0.2 }])],
        ['sequence', figures([{ name: 'sequence batcher throughput', value: 66439, unit: 'req/s', baseline: 42966, baselineName: 'dyn', ratio: 1.546 }])],
        ['grpc-overhead', { code: 1, figures: [] }],
      ]),
    );
    const row = (label: string) => table.split('\n').find((l) => l.includes(label)) ?? '';
    assert.match(row('HTTP throughput vs bare node:http'), /\| 8182 req\/s +\| 0\.738 +\| ratio >= 0\.5 +\| met +\|$/);
    assert.match(row('facade overhead per request'), /\| 35\.0 us +\| 1\.600 +\| value < 20 +\| not met +\|$/);
    assert.match(row('ensemble added per step'), /\| met +\|$/);
    assert.match(row('sequence batcher vs dynamic'), /\| 1\.546 +\| +\| – +\|$/);
    assert.match(row('gRPC ModelInfer throughput'), /\| missing \(exit 1\) +\|$/);
  });

  it('judges an at-most target (vs-triton p99) as met at the bound and not met above it', () => {
    const p99 = (ratio: number) => ({ name: 'vs_triton_pa_add_sub_grpc_c16_p99', value: 5000 * ratio, unit: 'us', baseline: 5000, baselineName: 'triton', ratio });
    const keys = KEY_FIGURES.filter((k) => k.figure === 'vs_triton_pa_add_sub_grpc_c16_p99');
    assert.equal(keys.length, 1);
    const result = (ratio: number) => summaryTable(keys, new Map([['vs-triton', { code: 0, figures: [p99(ratio)] }]])).split('\n').find((l) => l.includes('p99 vs Triton')) ?? '';
    assert.match(result(1), /\| ratio <= 1 +\| met +\|$/);
    assert.match(result(1.3), /\| ratio <= 1 +\| not met +\|$/);
  });
});
