/**
 * Sequences through tritonclient.http and tritonclient.grpc (sequence.py): integer and string
 * sequence ids, start/end flags, per-sequence state, gRPC streams, errors.
 */
import { sequenceAccumulatorModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite(
  'conformance: sequences (tritonclient)',
  'sequence/sequence.py',
  () => [sequenceAccumulatorModel({ maxBatchSize: 4 }), sequenceAccumulatorModel({ name: 'sequence_string', corrid: 'STRING', maxBatchSize: 4 })],
  ['http_sequence_integer_ids', 'grpc_sequence_integer_ids', 'http_and_grpc_sequence_string_ids', 'grpc_stream_sequences', 'sequence_errors'],
);
