/**
 * Prometheus's HTTP query API (`GET /api/v1/query`), as the operator's autoscaler (mode operator)
 * and canary analysis use it: instant queries whose result is a vector or a scalar.
 */
import { NereidError } from '@nereid/protocol';

export interface PromSample {
  /** The series' labels (empty for a scalar or an aggregate without labels). */
  metric: Record<string, string>;
  /** The sample value; NaN and ±Inf as Prometheus wrote them. */
  value: number;
}

const parseValue = (text: string): number => (text === '+Inf' ? Infinity : text === '-Inf' ? -Infinity : Number(text));

export class PrometheusClient {
  readonly url: string;
  readonly #timeoutMs: number;

  /** `url`: Prometheus's base URL (`http://prometheus:9090`, or with a path prefix). */
  constructor(url: string, options: { timeoutMs?: number } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /**
   * An instant query at `time` (default now). Throws PROMETHEUS_QUERY naming the query when
   * Prometheus cannot be reached, answers an error, or the result is a matrix or a string.
   */
  async query(promql: string, time?: Date): Promise<PromSample[]> {
    const params = new URLSearchParams({ query: promql });
    if (time) params.set('time', String(time.getTime() / 1000));
    const what = `Prometheus query ${JSON.stringify(promql.length > 300 ? `${promql.slice(0, 300)}…` : promql)} at ${this.url}`;
    let res: Response;
    try {
      res = await fetch(`${this.url}/api/v1/query?${params}`, { signal: AbortSignal.timeout(this.#timeoutMs) });
    } catch (err) {
      throw new NereidError('PROMETHEUS_QUERY', `${what} failed: ${(err as Error).message}`);
    }
    let body: { status?: string; error?: string; errorType?: string; data?: { resultType?: string; result?: unknown } };
    try {
      body = (await res.json()) as typeof body;
    } catch {
      throw new NereidError('PROMETHEUS_QUERY', `${what}: HTTP ${res.status} with a body that is not JSON`);
    }
    if (body.status !== 'success' || body.data === undefined) {
      throw new NereidError('PROMETHEUS_QUERY', `${what}: HTTP ${res.status} ${body.errorType ?? ''} ${body.error ?? ''}`.trim());
    }
    const { resultType, result } = body.data;
    if (resultType === 'scalar') {
      const [, v] = result as [number, string];
      return [{ metric: {}, value: parseValue(v) }];
    }
    if (resultType === 'vector') {
      return (result as { metric: Record<string, string>; value: [number, string] }[]).map((r) => ({ metric: r.metric ?? {}, value: parseValue(r.value[1]) }));
    }
    throw new NereidError('PROMETHEUS_QUERY', `${what}: a ${resultType} result; the operator needs an instant vector or a scalar`);
  }
}
