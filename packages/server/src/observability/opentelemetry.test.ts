import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { applyOpenTelemetrySetting, checkOpenTelemetrySettings, defaultOpenTelemetrySettings } from './opentelemetry.js';

function refusal(fn: () => unknown): NereidError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof NereidError, String(err));
    return err;
  }
  assert.fail('expected a NereidError');
}

describe('OpenTelemetry trace settings', () => {
  it("start from Triton's defaults", () => {
    assert.deepEqual(defaultOpenTelemetrySettings({}), {
      url: 'http://localhost:4318/v1/traces',
      resource: {},
      bspMaxQueueSize: 2048,
      bspScheduleDelayMs: 5000,
      bspMaxExportBatchSize: 512,
    });
  });

  it('take the batch span processor defaults from OTEL_BSP_* and refuse one that is not an integer', () => {
    const s = defaultOpenTelemetrySettings({ OTEL_BSP_MAX_QUEUE_SIZE: '4096', OTEL_BSP_SCHEDULE_DELAY: '250', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '64' });
    assert.equal(s.bspMaxQueueSize, 4096);
    assert.equal(s.bspScheduleDelayMs, 250);
    assert.equal(s.bspMaxExportBatchSize, 64);
    assert.match(refusal(() => defaultOpenTelemetrySettings({ OTEL_BSP_SCHEDULE_DELAY: 'soon' })).message, /^Bad option: "OTEL_BSP_SCHEDULE_DELAY"\. Invalid option value\. Got soon/);
  });

  it('apply url, repeated resource attributes and the batch span processor settings', () => {
    const s = defaultOpenTelemetrySettings({});
    applyOpenTelemetrySetting(s, 'url', 'https://collector.example:4318/v1/traces');
    applyOpenTelemetrySetting(s, 'resource', 'service.name=nereid');
    applyOpenTelemetrySetting(s, 'resource', 'deployment=a=b');
    applyOpenTelemetrySetting(s, 'bsp_max_queue_size', '8192');
    applyOpenTelemetrySetting(s, 'bsp_schedule_delay', '0');
    applyOpenTelemetrySetting(s, 'bsp_max_export_batch_size', '8192');
    assert.deepEqual(s, {
      url: 'https://collector.example:4318/v1/traces',
      resource: { 'service.name': 'nereid', deployment: 'a=b' },
      bspMaxQueueSize: 8192,
      bspScheduleDelayMs: 0,
      bspMaxExportBatchSize: 8192,
    });
    checkOpenTelemetrySettings(s);
  });

  it('refuse what they cannot use, naming the option and what it takes', () => {
    const s = defaultOpenTelemetrySettings({});
    const cases: [string, string, RegExp][] = [
      ['url', 'localhost:4318', /^Bad option: "--trace-config opentelemetry,url"\. Got localhost:4318; expected .* http:\/\/ or https:\/\/ URL/],
      ['url', 'grpc://x:4317', /http:\/\/ or https:\/\//],
      ['resource', 'novalue', /expected resource=<key>=<value>/],
      ['resource', '=v', /expected resource=<key>=<value>/],
      ['bsp_max_queue_size', '0', /Got 0; expected an integer from 1 to 4294967295/],
      ['bsp_max_queue_size', '4294967296', /Got 4294967296/],
      ['bsp_schedule_delay', '-1', /Invalid option value\. Got -1/],
      ['bsp_max_export_batch_size', '1.5', /Got 1\.5/],
      ['timeout', '10', /Unknown setting 'timeout' of mode opentelemetry; the settings are url, resource, bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size/],
    ];
    for (const [key, value, message] of cases) {
      const err = refusal(() => applyOpenTelemetrySetting(s, key, value));
      assert.equal(err.code, 'REQUEST_PARAMETER');
      assert.match(err.message, message, `${key}=${value}`);
    }
    assert.deepEqual(s, defaultOpenTelemetrySettings({}), 'a refused setting changes nothing');
  });

  it('refuse an export batch larger than the queue', () => {
    const s = { ...defaultOpenTelemetrySettings({}), bspMaxQueueSize: 100, bspMaxExportBatchSize: 200 };
    assert.match(refusal(() => checkOpenTelemetrySettings(s)).message, /bsp_max_export_batch_size \(200\) must not exceed bsp_max_queue_size \(100\)/);
  });
});
