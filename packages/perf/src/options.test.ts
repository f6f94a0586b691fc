/**
 * perf_analyzer's flags as `nereid perf` reads them (perf-and-analyzer.md §1.3): defaults,
 * spellings, ranges, and PERF_OPTION errors for everything wrong.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { parsePerfArgs, parseRange } from './options.js';

function refused(argv: string[], pattern: RegExp): void {
  assert.throws(
    () => parsePerfArgs(argv),
    (err: unknown) => err instanceof NereidError && err.code === 'PERF_OPTION' && pattern.test(err.message),
  );
}

describe('parsePerfArgs', () => {
  it("has perf_analyzer's defaults", () => {
    const o = parsePerfArgs(['-m', 'simple']);
    assert.deepEqual(o.concurrency, { start: 1, end: 1, step: 1 });
    assert.equal(o.protocol, 'http');
    assert.equal(o.url, 'localhost:8000');
    assert.equal(o.measurementIntervalMs, 5000);
    assert.equal(o.measurementMode, 'time_windows');
    assert.equal(o.measurementRequestCount, 50);
    assert.equal(o.stabilityPercentage, 10);
    assert.equal(o.maxTrials, 10);
    assert.equal(o.percentile, undefined);
    assert.equal(o.batchSize, 1);
    assert.deepEqual(o.inputData, ['random']);
    assert.equal(parsePerfArgs(['-m', 'simple', '-i', 'grpc']).url, 'localhost:8001');
  });

  it('reads every spelling: -p 500, -p500, --measurement-interval=500', () => {
    for (const argv of [['-p', '500'], ['-p500'], ['--measurement-interval=500'], ['--measurement-interval', '500']]) {
      assert.equal(parsePerfArgs(['-m', 'm', ...argv]).measurementIntervalMs, 500);
    }
  });

  it('reads ranges, shapes, repeated --input-data and headers', () => {
    const o = parsePerfArgs(['-m', 'm', '--request-rate-range', '10.5:20:2.5', '--shape', 'IN:0:3,4', '--input-data', 'a.json', '--input-data', 'b.json', '-H', 'x-a: 1']);
    assert.deepEqual(o.requestRate, { start: 10.5, end: 20, step: 2.5 });
    assert.equal(o.concurrency, undefined);
    assert.deepEqual(o.shapes.get('IN:0'), [3, 4]);
    assert.deepEqual(o.inputData, ['a.json', 'b.json']);
    assert.deepEqual(o.headers, { 'x-a': '1' });
    assert.deepEqual(parseRange('concurrency-range', '4', false), { start: 4, end: 4, step: 1 });
  });

  it('refuses what perf_analyzer refuses', () => {
    refused([], /-m MODEL is required/);
    refused(['-m', 'm', '--nope'], /unknown option '--nope'/);
    refused(['-m', 'm', '--concurrency-range', '1:2', '--request-rate-range', '5'], /only one of/);
    refused(['-m', 'm', '--concurrency-range', '1:0'], /cannot both be 0/);
    refused(['-m', 'm', '--concurrency-range', '8:2'], /below the start/);
    refused(['-m', 'm', '--binary-search', '--concurrency-range', '1:8'], /--binary-search needs --latency-threshold/);
    refused(['-m', 'm', '--percentile', '100'], /between 0 and 100/);
    refused(['-m', 'm', '-b', '0'], /--batch-size needs an integer of at least 1/);
    refused(['-m', 'm', '--streaming'], /--streaming needs -i grpc/);
    refused(['-m', 'm', '--service-kind', 'in_process'], /needs --model-repository/);
    refused(['-m', 'm', '--measurement-mode', 'windows'], /must be one of time_windows, count_windows/);
    refused(['-m', 'm', '-p'], /-p needs a value/);
    refused(['-m', 'm', '--request-rate-range', '10', '--request-count', '5'], /concurrency mode only/);
  });

  it('refuses what is not supported, and misused sequence, shared-memory and metrics flags, saying why', () => {
    refused(['-m', 'm', '--shared-memory', 'cuda'], /needs CUDA devices.*use --shared-memory system or none/);
    refused(['-m', 'm', '--shared-memory', 'posix'], /--shared-memory must be one of none, system, cuda/);
    refused(['-m', 'm', '--output-shared-memory-size', '64'], /applies only with --shared-memory system/);
    refused(['-m', 'm', '--shared-memory', 'system', '--output-shared-memory-size', '0'], /--output-shared-memory-size needs an integer of at least 1/);
    refused(['-m', 'm', '--shared-memory', 'system', '--service-kind', 'in_process', '--model-repository', '.'], /needs a server to register regions/);
    refused(['-m', 'm', '--sequence-id-range', '5:2'], /end 2 is below the start 5/);
    refused(['-m', 'm', '--sequence-id-range', '0:9'], /--sequence-id-range needs an integer of at least 1/);
    refused(['-m', 'm', '--sequence-id-range', '1:2:3'], /takes start\[:end\]/);
    refused(['-m', 'm', '--sequence-length', '0'], /--sequence-length needs an integer of at least 1/);
    refused(['-m', 'm', '--sequence-length-variation', '-5'], /--sequence-length-variation needs a number of at least 0/);
    refused(['-m', 'm', '--num-of-sequences', '2'], /--num-of-sequences applies to --request-rate-range/);
    refused(['-m', 'm', '--metrics-url', 'localhost:8002/metrics'], /Must specify --collect-metrics when using the --metrics-url option/);
    refused(['-m', 'm', '--metrics-interval', '100'], /Must specify --collect-metrics when using the --metrics-interval option/);
    refused(['-m', 'm', '--collect-metrics', '--metrics-interval', '0'], /--metrics-interval needs an integer of at least 1/);
    refused(['-m', 'm', '--collect-metrics', '--service-kind', 'in_process', '--model-repository', '.'], /does not apply to --service-kind in_process/);
    refused(['-m', 'm', '--workers', '2', '--service-kind', 'in_process', '--model-repository', '.'], /--workers needs a server/);
    refused(['-m', 'm', '--grpc-compression-algorithm', 'gzip'], /applies only with -i grpc/);
    refused(['-m', 'm', '-i', 'grpc', '--grpc-compression-algorithm', 'br'], /--grpc-compression-algorithm must be one of none, gzip, deflate/);
  });

  it('reads --grpc-compression-algorithm', () => {
    assert.equal(parsePerfArgs(['-m', 'm']).grpcCompression, 'none');
    assert.equal(parsePerfArgs(['-m', 'm', '-i', 'grpc', '--grpc-compression-algorithm', 'deflate']).grpcCompression, 'deflate');
  });

  it('reads the sequence, shared-memory and metrics flags with perf_analyzer defaults', () => {
    const d = parsePerfArgs(['-m', 'm']);
    assert.equal(d.sequenceLength, undefined);
    assert.equal(d.sequenceLengthVariation, 20);
    assert.deepEqual([d.sequenceIdStart, d.sequenceIdEnd, d.numOfSequences, d.serialSequences], [1, 0, 4, false]);
    assert.deepEqual([d.sharedMemory, d.outputSharedMemorySize], ['none', 102400]);
    assert.deepEqual([d.collectMetrics, d.metricsUrl, d.metricsIntervalMs], [false, 'localhost:8002/metrics', 1000]);
    const o = parsePerfArgs([
      '-m', 'm', '--request-rate-range', '10', '--sequence-length', '7', '--sequence-length-variation', '0', '--sequence-id-range', '100:199',
      '--num-of-sequences', '8', '--serial-sequences', '--shared-memory=system', '--output-shared-memory-size', '4096',
      '--collect-metrics', '--metrics-url', 'h:9/m', '--metrics-interval', '250',
    ]);
    assert.deepEqual([o.sequenceLength, o.sequenceLengthVariation, o.sequenceIdStart, o.sequenceIdEnd, o.numOfSequences, o.serialSequences], [7, 0, 100, 199, 8, true]);
    assert.deepEqual([o.sharedMemory, o.outputSharedMemorySize], ['system', 4096]);
    assert.deepEqual([o.collectMetrics, o.metricsUrl, o.metricsIntervalMs], [true, 'h:9/m', 250]);
  });
});
