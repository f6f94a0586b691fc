/** The Prometheus query client against a local HTTP server answering as Prometheus's API does. */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { PrometheusClient } from './prometheus.js';

describe('PrometheusClient', () => {
  let server: Server;
  let url: string;
  const queries: string[] = [];

  before(async () => {
    server = createServer((req, res) => {
      const q = new URL(req.url ?? '/', 'http://x').searchParams.get('query') ?? '';
      queries.push(`${new URL(req.url ?? '/', 'http://x').pathname} ${q}`);
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(typeof body === 'string' ? body : JSON.stringify(body));
      };
      if (q === 'vector') {
        send(200, { status: 'success', data: { resultType: 'vector', result: [{ metric: { pod: 'a' }, value: [1, '2.5'] }, { metric: { pod: 'b' }, value: [1, '+Inf'] }] } });
      } else if (q === 'scalar') send(200, { status: 'success', data: { resultType: 'scalar', result: [1, '7'] } });
      else if (q === 'matrix') send(200, { status: 'success', data: { resultType: 'matrix', result: [] } });
      else if (q === 'html') send(502, '<html>bad gateway</html>');
      else send(400, { status: 'error', errorType: 'bad_data', error: 'parse error at char 3' });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('reads a vector and a scalar, with +Inf as Infinity, from /api/v1/query under the base URL', async () => {
    const client = new PrometheusClient(url);
    assert.deepEqual(await client.query('vector'), [
      { metric: { pod: 'a' }, value: 2.5 },
      { metric: { pod: 'b' }, value: Infinity },
    ]);
    assert.deepEqual(await client.query('scalar'), [{ metric: {}, value: 7 }]);
    assert.equal(queries[0], '/api/v1/query vector');
  });

  for (const [query, message] of [
    ['sum(', /Prometheus query "sum\(" at http:\/\/127\.0\.0\.1:\d+: HTTP 400 bad_data parse error at char 3/],
    ['html', /HTTP 502 with a body that is not JSON/],
    ['matrix', /a matrix result; the operator needs an instant vector or a scalar/],
  ] as const) {
    it(`fails with PROMETHEUS_QUERY naming the query for ${query}`, async () => {
      await assert.rejects(new PrometheusClient(url).query(query), (err: Error & { code?: string }) => err.code === 'PROMETHEUS_QUERY' && message.test(err.message));
    });
  }

  it('fails with PROMETHEUS_QUERY when Prometheus cannot be reached', async () => {
    await assert.rejects(new PrometheusClient('http://127.0.0.1:1', { timeoutMs: 2000 }).query('up'), (err: Error & { code?: string }) => err.code === 'PROMETHEUS_QUERY' && /failed: /.test(err.message));
  });
});
