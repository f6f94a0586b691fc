/**
 * Trace mode `opentelemetry` (docs/observability.md): each finished root trace becomes a tree of
 * OpenTelemetry spans, exported over OTLP/HTTP by the OpenTelemetry JS SDK (a batch span
 * processor and the OTLP/HTTP trace exporter), with Triton's span names, events and attributes:
 *
 *   InferRequest                    the request as the frontend saw it; events HTTP_RECV_START/END
 *   │                               (or GRPC_WAITREAD_START/END), INFER_RESPONSE_COMPLETE,
 *   │                               HTTP_SEND_START/END (GRPC_SEND_START/END)
 *   └─ <model>                      the model's request; events REQUEST_START, QUEUE_START,
 *      │                            REQUEST_END; attributes triton.model_name,
 *      │                            triton.model_version, triton.trace_id, triton.trace_parent_id
 *      │                            (and triton.request_id when the request has an id)
 *      ├─ compute                   events COMPUTE_START, COMPUTE_INPUT_END,
 *      │                            COMPUTE_OUTPUT_START, COMPUTE_END
 *      └─ <step model> …            an ensemble's steps: the same, recursively (an ensemble's own
 *                                   span has no compute child: its steps compute)
 *
 * Every span has kind SERVER. When the client sent a W3C `traceparent` (HTTP header or gRPC
 * metadata, `trace.carrier`), InferRequest continues the client's trace: same trace id, the
 * client's span as parent. Spans are built when the root trace is written (after the response was
 * sent), from the trace's recorded timestamps: nothing of this runs while the request runs.
 *
 * Export failures (the collector down, refusing, slow) never reach a request: they are logged,
 * the first at once and then at most once a minute with a count, and the server goes on serving.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, defaultTextMapGetter, trace as traceApi, type Attributes, type Context, type HrTime, type Tracer } from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { NereidError } from '@nereid/protocol';
import { epochNs, type Trace, type TraceSink } from './trace.js';

/** The settings of mode `opentelemetry` (`--trace-config opentelemetry,<key>=<value>`). */
export interface OpenTelemetrySettings {
  /** The OTLP/HTTP traces endpoint, a full URL (Triton's default http://localhost:4318/v1/traces). */
  url: string;
  /** Resource attributes, over the defaults (service.name=triton-inference-server) and OTEL_RESOURCE_ATTRIBUTES. */
  resource: Record<string, string>;
  /** The batch span processor's queue: spans beyond it are dropped until an export makes room. */
  bspMaxQueueSize: number;
  /** Milliseconds between two exports. */
  bspScheduleDelayMs: number;
  /** Spans per export at most; not more than `bspMaxQueueSize`. */
  bspMaxExportBatchSize: number;
}

export const OPENTELEMETRY_SETTING_KEYS = ['url', 'resource', 'bsp_max_queue_size', 'bsp_schedule_delay', 'bsp_max_export_batch_size'] as const;

const UINT32_MAX = 4294967295;

/** `Bad option: "<option>". <reason>`, Triton's wording for a --trace-config value it cannot take, then the fix. */
function badOption(option: string, reason: string): NereidError {
  return new NereidError('REQUEST_PARAMETER', `Bad option: "${option}". ${reason}`);
}

function parseUint32(option: string, value: string, min: number): number {
  const n = /^[0-9]+$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= min && n <= UINT32_MAX)) {
    throw badOption(option, `Invalid option value. Got ${value}; expected an integer from ${min} to ${UINT32_MAX}`);
  }
  return n;
}

/**
 * The settings before any `--trace-config opentelemetry,…`: Triton's defaults, the batch span
 * processor's taken from OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_SCHEDULE_DELAY and
 * OTEL_BSP_MAX_EXPORT_BATCH_SIZE where set (a value that is not an integer is refused, naming the
 * variable).
 */
export function defaultOpenTelemetrySettings(env: NodeJS.ProcessEnv = process.env): OpenTelemetrySettings {
  const fromEnv = (name: string, fallback: number, min: number) => {
    const v = env[name];
    return v === undefined || v === '' ? fallback : parseUint32(name, v, min);
  };
  return {
    url: 'http://localhost:4318/v1/traces',
    resource: {},
    bspMaxQueueSize: fromEnv('OTEL_BSP_MAX_QUEUE_SIZE', 2048, 1),
    bspScheduleDelayMs: fromEnv('OTEL_BSP_SCHEDULE_DELAY', 5000, 0),
    bspMaxExportBatchSize: fromEnv('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512, 1),
  };
}

/**
 * Applies one `--trace-config opentelemetry,<key>=<value>` to `settings`; refuses an unknown key
 * or a value it cannot use with a message naming the option and what it takes.
 */
export function applyOpenTelemetrySetting(settings: OpenTelemetrySettings, key: string, value: string): void {
  const option = `--trace-config opentelemetry,${key}`;
  switch (key) {
    case 'url': {
      let url: URL | undefined;
      try {
        url = new URL(value);
      } catch {
        url = undefined;
      }
      if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
        throw badOption(option, `Got ${value}; expected the OTLP/HTTP traces endpoint as an http:// or https:// URL, such as http://localhost:4318/v1/traces`);
      }
      settings.url = value;
      return;
    }
    case 'resource': {
      const eq = value.indexOf('=');
      if (eq <= 0) throw badOption(option, `Got ${value}; expected resource=<key>=<value>, such as resource=service.name=nereid`);
      settings.resource[value.slice(0, eq)] = value.slice(eq + 1);
      return;
    }
    case 'bsp_max_queue_size':
      settings.bspMaxQueueSize = parseUint32(option, value, 1);
      return;
    case 'bsp_schedule_delay':
      settings.bspScheduleDelayMs = parseUint32(option, value, 0);
      return;
    case 'bsp_max_export_batch_size':
      settings.bspMaxExportBatchSize = parseUint32(option, value, 1);
      return;
    default:
      throw badOption(`--trace-config opentelemetry,${key}`, `Unknown setting '${key}' of mode opentelemetry; the settings are ${OPENTELEMETRY_SETTING_KEYS.join(', ')}`);
  }
}

/** Checks the settings as a whole (after every option was applied). */
export function checkOpenTelemetrySettings(settings: OpenTelemetrySettings): void {
  if (settings.bspMaxExportBatchSize > settings.bspMaxQueueSize) {
    throw new NereidError(
      'REQUEST_PARAMETER',
      `--trace-config opentelemetry: bsp_max_export_batch_size (${settings.bspMaxExportBatchSize}) must not exceed bsp_max_queue_size (${settings.bspMaxQueueSize}); ` +
        'raise bsp_max_queue_size or lower bsp_max_export_batch_size',
    );
  }
}

/**
 * The settings as the trace extension answers them after the global ones, in Triton's order:
 * url, each resource attribute (`key=value`; none when none was given), bsp_schedule_delay,
 * bsp_max_export_batch_size, bsp_max_queue_size.
 */
export function openTelemetryAnswer(settings: OpenTelemetrySettings): [string, string[]][] {
  const resource = Object.entries(settings.resource).map(([k, v]) => `${k}=${v}`);
  return [
    ['url', [settings.url]],
    ...(resource.length > 0 ? [['resource', resource] as [string, string[]]] : []),
    ['bsp_schedule_delay', [String(settings.bspScheduleDelayMs)]],
    ['bsp_max_export_batch_size', [String(settings.bspMaxExportBatchSize)]],
    ['bsp_max_queue_size', [String(settings.bspMaxQueueSize)]],
  ];
}

/** Where the request's frontend stamps go: the InferRequest span. */
const FRONTEND_EVENTS = new Set([
  'HTTP_RECV_START',
  'HTTP_RECV_END',
  'GRPC_WAITREAD_START',
  'GRPC_WAITREAD_END',
  'INFER_RESPONSE_COMPLETE',
  'HTTP_SEND_START',
  'HTTP_SEND_END',
  'GRPC_SEND_START',
  'GRPC_SEND_END',
]);
const COMPUTE_EVENTS = new Set(['COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END']);

/** A `process.hrtime.bigint()` reading as the SDK's [seconds, nanoseconds] since the epoch. */
function hr(ns: bigint): HrTime {
  const e = epochNs(ns);
  return [Number(e / 1_000_000_000n), Number(e % 1_000_000_000n)];
}

/** Logs export failures: the first at once, then at most one line a minute with the count. */
class FailureReport {
  static readonly INTERVAL_MS = 60_000;
  readonly #log: (message: string) => void;
  #last = -Infinity;
  #since = 0;

  constructor(log: (message: string) => void) {
    this.#log = log;
  }

  failed(what: string): void {
    this.#since++;
    const now = Date.now();
    if (now - this.#last < FailureReport.INTERVAL_MS) return;
    const count = this.#since;
    this.#since = 0;
    this.#last = now;
    this.#log(`${what}${count > 1 ? ` (${count} failures since the last report)` : ''}`);
  }
}

/** The OTLP/HTTP exporter, its failures reported. */
class ReportingExporter implements SpanExporter {
  readonly #inner: OTLPTraceExporter;
  readonly #url: string;
  readonly #report: FailureReport;

  constructor(inner: OTLPTraceExporter, url: string, report: FailureReport) {
    this.#inner = inner;
    this.#url = url;
    this.#report = report;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.#inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) {
        this.#report.failed(`OpenTelemetry trace export to ${this.#url} failed: ${result.error?.message ?? 'unknown error'}; ${spans.length} spans lost`);
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.#inner.forceFlush();
  }
}

/**
 * The `TraceSink` of mode `opentelemetry`. `write` builds the spans of a finished root trace and
 * hands them to the batch span processor (it never throws: a trace it cannot turn into spans is
 * reported and skipped); `flush` exports what is queued; `close` flushes and stops the exporter.
 */
export class OpenTelemetrySink implements TraceSink {
  readonly #provider: BasicTracerProvider;
  readonly #tracer: Tracer;
  readonly #propagator = new W3CTraceContextPropagator();
  readonly #report: FailureReport;

  constructor(settings: OpenTelemetrySettings, log: (message: string) => void) {
    checkOpenTelemetrySettings(settings);
    this.#report = new FailureReport(log);
    const resource = defaultResource()
      .merge(resourceFromAttributes({ 'service.name': 'triton-inference-server' }))
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes(settings.resource));
    const exporter = new ReportingExporter(new OTLPTraceExporter({ url: settings.url }), settings.url, this.#report);
    this.#provider = new BasicTracerProvider({
      resource,
      // Nereid decided to trace this request (rate, count, or the client's context): record it
      // whatever the client's sampled flag says, as Triton does.
      sampler: new AlwaysOnSampler(),
      spanProcessors: [
        new BatchSpanProcessor(exporter, {
          maxQueueSize: settings.bspMaxQueueSize,
          maxExportBatchSize: settings.bspMaxExportBatchSize,
          scheduledDelayMillis: settings.bspScheduleDelayMs,
        }),
      ],
    });
    this.#tracer = this.#provider.getTracer('triton-server');
  }

  write(trace: Trace): void {
    try {
      const stamps = trace.timestamps();
      if (stamps.length === 0) return;
      const parent = this.#clientContext(trace.carrier);
      const root = this.#tracer.startSpan('InferRequest', { kind: SpanKind.SERVER, startTime: hr(stamps[0]![1]) }, parent);
      for (const [name, ns] of stamps) if (FRONTEND_EVENTS.has(name)) root.addEvent(name, hr(ns));
      if (trace.error !== undefined) root.setStatus({ code: SpanStatusCode.ERROR, message: trace.error });
      this.#modelSpans(trace, stamps, traceApi.setSpan(parent, root));
      root.end(hr(stamps[stamps.length - 1]![1]));
    } catch (err) {
      this.#report.failed(`OpenTelemetry spans of trace ${trace.id} (model '${trace.model}') could not be made: ${(err as Error).message}`);
    }
  }

  /** The context a root span continues: the client's `traceparent`, or none (a new trace). */
  #clientContext(carrier: Record<string, string> | undefined): Context {
    if (carrier === undefined || carrier.traceparent === undefined) return ROOT_CONTEXT;
    return this.#propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  }

  /** The model span of `trace` under `parent`, its compute span and its children's spans. */
  #modelSpans(trace: Trace, stamps: readonly [string, bigint][], parent: Context): void {
    let start: bigint | undefined;
    let end: bigint | undefined;
    for (const [name, ns] of stamps) {
      if (name === 'REQUEST_START') start = ns;
      else if (name === 'REQUEST_END') end = ns;
    }
    start ??= stamps[0]![1];
    end ??= stamps[stamps.length - 1]![1];
    const attributes: Attributes = {
      'triton.model_name': trace.model,
      'triton.model_version': /^[0-9]+$/.test(trace.version) ? Number(trace.version) : trace.version,
      'triton.trace_id': trace.id,
      'triton.trace_parent_id': trace.parentId,
    };
    if (trace.requestId !== '') attributes['triton.request_id'] = trace.requestId;
    const span = this.#tracer.startSpan(trace.model, { kind: SpanKind.SERVER, startTime: hr(start), attributes }, parent);
    const compute: [string, bigint][] = [];
    for (const stamp of stamps) {
      const [name, ns] = stamp;
      if (COMPUTE_EVENTS.has(name)) compute.push(stamp);
      // A step's INFER_RESPONSE_COMPLETE goes nowhere, as in Triton: its model span has
      // REQUEST_START, QUEUE_START and REQUEST_END only.
      else if (!FRONTEND_EVENTS.has(name)) span.addEvent(name, hr(ns));
    }
    if (trace.error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: trace.error });
    const context = traceApi.setSpan(parent, span);
    if (compute.length > 0) {
      const c = this.#tracer.startSpan('compute', { kind: SpanKind.SERVER, startTime: hr(compute[0]![1]) }, context);
      for (const [name, ns] of compute) c.addEvent(name, hr(ns));
      c.end(hr(compute[compute.length - 1]![1]));
    }
    for (const step of trace.children ?? []) {
      const s = step.timestamps();
      if (s.length > 0) this.#modelSpans(step, s, context);
    }
    span.end(hr(end));
  }

  /** Exports what is queued; never rejects (a failed export is reported). */
  async flush(): Promise<void> {
    try {
      await this.#provider.forceFlush();
    } catch (err) {
      this.#report.failed(`OpenTelemetry trace export failed while flushing: ${(err as Error).message}`);
    }
  }

  /**
   * Flushes and stops the exporter (server shutdown); never rejects, and waits at most
   * `CLOSE_LIMIT_MS` (the exporter retries an unreachable collector for longer than a shutdown
   * should wait), reporting what was not exported.
   */
  async close(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), OpenTelemetrySink.CLOSE_LIMIT_MS);
      timer.unref();
    });
    try {
      const outcome = await Promise.race([this.#provider.shutdown(), limit]);
      if (outcome === 'late') this.#report.failed(`OpenTelemetry spans still unexported ${OpenTelemetrySink.CLOSE_LIMIT_MS / 1000} s after shutdown began are dropped`);
    } catch (err) {
      this.#report.failed(`OpenTelemetry trace export failed at shutdown: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  static readonly CLOSE_LIMIT_MS = 3000;
}
