/**
 * The Python backend and decoupled models through Triton's own clients (python_backend.py):
 * Triton's add_sub `model.py` over tritonclient.http and .grpc, and a decoupled `model.py` streamed
 * with tritonclient.grpc and .grpc.aio (several responses per request, the final-response flag,
 * the opted-in empty final response), refused on unary infer.
 */
import { ADD_SUB_CONFIG, ADD_SUB_PY, REPEAT_CONFIG, REPEAT_PY } from '../../helpers/python.js';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite(
  'conformance: Python backend and decoupled models (tritonclient)',
  'python/python_backend.py',
  () => [
    ['add_sub', { 'config.pbtxt': ADD_SUB_CONFIG, '1/model.py': ADD_SUB_PY }],
    ['repeat', { 'config.pbtxt': REPEAT_CONFIG, '1/model.py': REPEAT_PY }],
  ],
  ['http_add_sub', 'grpc_add_sub', 'grpc_decoupled_stream', 'grpc_decoupled_error_in_band', 'grpc_aio_decoupled_stream', 'decoupled_refused_on_unary_infer'],
);
