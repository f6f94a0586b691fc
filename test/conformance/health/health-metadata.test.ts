/**
 * Health, metadata and config through Triton's Python client, all four flavours
 * (tritonclient.http / .http.aio / .grpc / .grpc.aio): health_metadata.py.
 */
import { after, before, describe, it } from 'node:test';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { assertCasePassed, assertCasesAre, runCases, startConformanceServer, type CaseResult, type ConformanceServer } from '../helpers/tier.js';

const CASES = [
  'http_health',
  'grpc_health',
  'http_server_metadata',
  'grpc_server_metadata',
  'http_model_metadata',
  'grpc_model_metadata',
  'http_model_config',
  'grpc_model_config',
  'http_aio_health_and_metadata',
  'grpc_aio_health_and_metadata',
  'metadata_of_unknown_model',
];

describe('conformance: health and metadata (tritonclient)', () => {
  let srv: ConformanceServer | undefined;
  let results: Map<string, CaseResult> | undefined;
  before(async () => {
    srv = await startConformanceServer([simpleModel(), simpleStringModel()]);
    results = await runCases('health/health_metadata.py', srv.endpoints);
  });
  after(async () => {
    await srv?.stop();
  });
  for (const name of CASES) it(name, () => assertCasePassed(results, name));
  it('runs exactly the listed cases', () => assertCasesAre(results, CASES));
});
