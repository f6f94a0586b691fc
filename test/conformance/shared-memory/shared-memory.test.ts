/**
 * System and CUDA shared memory through Triton's Python client (shared_memory.py):
 * `tritonclient.utils.shared_memory` regions over HTTP and gRPC, status, unregister, misuse errors,
 * CUDA registration refused on a server without GPUs. The server runs with `--allow-client-shm=true`.
 */
import { simpleModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite(
  'conformance: shared memory (tritonclient)',
  'shared-memory/shared_memory.py',
  () => [simpleModel()],
  ['system_shm_simple', 'system_shm_status_and_unregister', 'system_shm_misuse', 'cuda_shm_without_gpus'],
  { args: ['--allow-client-shm=true'] },
);
