/**
 * Helpers for the metrics tests: a metrics frontend on an ephemeral port, scraping, a reader of the
 * Prometheus text format, `promtool check metrics`, and a JavaScript backend whose executions wait
 * for the test (so queues, cancellations and failures happen deterministically).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  BACKEND_SPI_VERSION,
  MetricsFrontend,
  type Backend,
  type BackendInstance,
  type BackendRequest,
  type Server,
} from '@nereid/server';

export interface RunningMetrics {
  frontend: MetricsFrontend;
  /** `http://127.0.0.1:<port>/metrics` */
  url: string;
  close(): Promise<void>;
}

/** Starts a metrics frontend for `server` on 127.0.0.1, port 0. */
export async function startMetrics(server: Server): Promise<RunningMetrics> {
  const frontend = new MetricsFrontend(server, { address: '127.0.0.1', port: 0 });
  const port = await frontend.listen();
  return {
    frontend,
    url: `http://127.0.0.1:${port}/metrics`,
    async close() {
      const closing = frontend.close();
      frontend.closeAllConnections();
      await closing;
    },
  };
}

/** GETs the exposition text, checking the status and the Content-Type (protocol.md §5.1). */
export async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.equal(res.headers.get('content-type'), 'text/plain; charset=utf-8');
  return text;
}

/** The samples of an exposition, keyed `name{labels}` exactly as written. */
export function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    const raw = line.slice(space + 1);
    out.set(line.slice(0, space), raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw));
  }
  return out;
}

/** The value of one series; fails when it is absent. */
export function sample(text: string | Map<string, number>, series: string): number {
  const all = typeof text === 'string' ? samples(text) : text;
  const value = all.get(series);
  assert.ok(value !== undefined, `no series ${series} in\n${typeof text === 'string' ? text : [...all.keys()].join('\n')}`);
  return value;
}

/** Series of `family` (exact name, any labels). */
export function seriesOf(text: string, family: string): string[] {
  return [...samples(text).keys()].filter((k) => k === family || k.startsWith(`${family}{`));
}

/**
 * Lint findings that Triton's own family names produce on purpose (counters without `_total`,
 * `_us`/`_ms` units, `nv_inference_count`, `…_histogram_ms`) — protocol.md §5.3 fixes those names.
 */
const EXPECTED_LINT = [
  /^nv_\w+ counter metrics should have "_total" suffix$/,
  /^nv_\w+ metric names should not contain abbreviated units$/,
  /^nv_\w+_histogram(_us|_ms)? metric name should not include type 'histogram'$/,
  /^nv_\w+_count non-histogram and non-summary metrics should not have "_count" suffix$/,
];

/**
 * Checks `text` with `promtool check metrics` (Debian's `prometheus` package): it must parse, and
 * every lint finding must be one Triton's family names cause. Fails when promtool is missing.
 */
export function promtoolCheck(text: string): void {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (run.error !== undefined) {
    assert.fail(
      `promtool could not be run (${run.error.message}): install Debian's 'prometheus' package ` +
        `(apt-get install -y prometheus, or run npm test, which installs it) to validate the exposition format`,
    );
  }
  const findings = `${run.stdout}\n${run.stderr}`.split('\n').filter((l) => l.trim() !== '');
  // 0: clean; 3: lint findings only; anything else (1): the text does not parse.
  assert.ok(run.status === 0 || run.status === 3, `promtool check metrics exited ${run.status}:\n${findings.join('\n')}\n--- input ---\n${text}`);
  const unexpected = findings.filter((l) => !EXPECTED_LINT.some((re) => re.test(l)));
  assert.deepEqual(unexpected, [], `unexpected promtool findings:\n${unexpected.join('\n')}`);
}

/**
 * A backend (`backend: "gate"`, INT32 input `IN`, output `OUT` = `IN`) whose executions wait until
 * the test releases them. A batch holding the value 13 fails (a backend error).
 */
export class GateBackend {
  readonly backend: Backend;
  /** Executions started and not yet released, oldest first. */
  readonly #held: { requests: readonly BackendRequest[]; release: () => void }[] = [];
  #started = 0;
  #waiters: (() => void)[] = [];
  #open = false;

  constructor() {
    const execute = async (requests: readonly BackendRequest[]): Promise<void> => {
      this.#started++;
      if (!this.#open) {
        await new Promise<void>((release) => {
          this.#held.push({ requests, release });
          for (const w of this.#waiters.splice(0)) w();
        });
      }
      const values = requests.map((r) => new Int32Array(copy(r.inputs.get('IN')!.data))[0]!);
      if (values.includes(13)) throw new Error('the gate backend fails batches holding 13');
      requests.forEach((r, i) => {
        const out = new Uint8Array(new Int32Array([values[i]!]).buffer);
        r.respond({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: r.inputs.get('IN')!.shape, data: out }] });
      });
    };
    const instance: BackendInstance = { execute, async unload() {} };
    this.backend = {
      name: 'gate',
      spiVersion: BACKEND_SPI_VERSION,
      createModel: async () => ({ createInstance: async () => instance, unload: async () => {} }),
    };
  }

  get started(): number {
    return this.#started;
  }

  /** Resolves once `n` executions are being held. */
  async held(n: number): Promise<void> {
    while (this.#held.length < n) await new Promise<void>((r) => this.#waiters.push(r));
  }

  /** Releases every held execution and lets the following ones run at once. */
  open(): void {
    this.#open = true;
    for (const h of this.#held.splice(0)) h.release();
  }

  /** Holds executions again from now on. */
  close(): void {
    this.#open = false;
  }
}

function copy(data: Uint8Array): ArrayBuffer {
  return data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength) as ArrayBuffer;
}

/** A `gate` model's config: one instance, INT32 `IN`/`OUT` of dims [1]. */
export function gateConfig(name: string, options: { maxBatchSize?: number; extra?: string } = {}): string {
  return `
name: "${name}"
backend: "gate"
max_batch_size: ${options.maxBatchSize ?? 0}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${options.extra ?? ''}`;
}

/** A facade request for a `gate` model (`batched`: a batch of one, shape [1, 1]). */
export function gateRequest(
  model: string,
  value: number,
  batched = false,
): { model: string; inputs: { name: string; datatype: 'INT32'; shape: number[]; data: Int32Array }[] } {
  return { model, inputs: [{ name: 'IN', datatype: 'INT32', shape: batched ? [1, 1] : [1], data: new Int32Array([value]) }] };
}
