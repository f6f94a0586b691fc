/**
 * gRPC streaming for non-decoupled models through tritonclient.grpc and .grpc.aio (streaming.py).
 * Decoupled models are added by the issue that lands them (docs/compatibility.md).
 */
import { simpleModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite('conformance: gRPC streaming (tritonclient)', 'streaming/streaming.py', () => [simpleModel()], [
  'stream_in_order',
  'stream_compressed',
  'stream_errors_in_band',
  'stream_final_response_flag',
  'aio_stream_infer',
]);
