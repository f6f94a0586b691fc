/**
 * The model repository extension through tritonclient on a server in explicit mode
 * (repository.py): index, load, unload, configuration and file overrides, errors.
 */
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

conformanceSuite(
  'conformance: repository control (tritonclient)',
  'repository/repository.py',
  () => [simpleModel(), simpleStringModel()],
  [
    'index_lists_loaded_and_unloaded',
    'http_load_and_unload',
    'grpc_load_and_unload',
    'load_with_config_override',
    'load_with_file_override',
    'aio_load_and_unload',
    'control_errors',
  ],
  { args: ['--model-control-mode=explicit', '--load-model=simple'], passRepository: true },
);
