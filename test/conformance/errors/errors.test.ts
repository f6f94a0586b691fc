/**
 * Error paths through Triton's Python client (errors.py): unknown model and version, wrong
 * shape, datatype and batch size, missing inputs, unknown outputs, BYTES the backend cannot carry,
 * async and aio forms, reserved parameters. The client must surface Nereid's message and status.
 */
import { simpleIdentityModel, simpleModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite('conformance: error paths (tritonclient)', 'errors/errors.py', () => [simpleModel(), simpleIdentityModel()], [
  'unknown_model',
  'unknown_version',
  'wrong_shape',
  'wrong_datatype',
  'batch_too_large',
  'missing_input_and_unknown_output',
  'bytes_the_backend_cannot_carry',
  'async_infer_errors',
  'aio_errors',
  'reserved_parameters',
]);
