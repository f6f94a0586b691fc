import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseMetrics, summarizeMetrics } from './metrics.js';

const scrape = (util: number, power: number, used: number, pending: number) => `# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-a"} ${util}
nv_gpu_utilization{gpu_uuid="GPU-b"} ${util / 2}
nv_gpu_power_usage{gpu_uuid="GPU-a"} ${power}
nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} ${used}
nv_gpu_memory_total_bytes{gpu_uuid="GPU-a"} ${used * 10}
nv_cpu_utilization ${util}
nv_cpu_memory_used_bytes ${used}
nv_inference_pending_request_count{model="m",version="1"} ${pending}
nv_inference_pending_request_count{model="m",version="2"} 1
nv_inference_pending_request_count{model="other",version="1"} 100
`;

describe('metrics', () => {
  it('reads the per-GPU families by gpu_uuid, the CPU families and the model\'s pending requests', () => {
    const s = parseMetrics(scrape(0.5, 100, 1000, 3), 'm', 7);
    assert.deepEqual(s.gpuUtilization, { 'GPU-a': 0.5, 'GPU-b': 0.25 });
    assert.deepEqual([s.gpuPowerUsage, s.gpuMemoryUsed, s.gpuMemoryTotal], [{ 'GPU-a': 100 }, { 'GPU-a': 1000 }, { 'GPU-a': 10000 }]);
    assert.deepEqual([s.cpuUtilization, s.cpuMemoryUsed, s.pendingRequests, s.at], [0.5, 1000, 4, 7]);
    assert.deepEqual(parseMetrics('nv_inference_count{model="m"} 3\n', 'm', 0).gpuUtilization, {});
  });

  it('aggregates as perf_analyzer does: utilization and power averaged, used memory the maximum, total memory the first', () => {
    const m = summarizeMetrics([parseMetrics(scrape(0.2, 50, 3000, 2), 'm', 1), parseMetrics(scrape(0.6, 150, 1000, 6), 'm', 2)]);
    assert.equal(m.samples, 2);
    assert.ok(Math.abs(m.gpuUtilization['GPU-a']! - 0.4) < 1e-9);
    assert.equal(m.gpuPowerUsage['GPU-a'], 100);
    assert.equal(m.gpuMemoryUsed['GPU-a'], 3000);
    assert.equal(m.gpuMemoryTotal['GPU-a'], 30000);
    assert.deepEqual([m.avgPendingRequests, m.maxPendingRequests], [5, 7]);
  });
});
