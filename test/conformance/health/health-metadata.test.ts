/**
 * Health, metadata and config through Triton's Python client, all four flavours
 * (tritonclient.http / .http.aio / .grpc / .grpc.aio), and the logging extension:
 * health_metadata.py.
 */
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite('conformance: health and metadata (tritonclient)', 'health/health_metadata.py', () => [simpleModel(), simpleStringModel()], [
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
  'http_log_settings',
  'grpc_log_settings',
]);
