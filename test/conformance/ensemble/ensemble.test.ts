/**
 * Ensembles through tritonclient.http and tritonclient.grpc (ensemble.py): a two-step pipeline
 * of the ONNX `simple` model served as one model, its metadata and config, composing-model
 * statistics, and a request missing an input.
 */
import { simpleModel } from '@nereid/testkit';
import { conformanceSuite } from '../helpers/tier.js';

/** simple(INPUT0, INPUT1) → (sum, difference), then simple(sum, difference) → (2·INPUT0, 2·INPUT1). */
const DOUBLE_CONFIG = `
name: "double"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT0" value: "sum" }
      output_map { key: "OUTPUT1" value: "difference" }
    },
    {
      model_name: "simple"
      model_version: -1
      input_map { key: "INPUT0" value: "sum" }
      input_map { key: "INPUT1" value: "difference" }
      output_map { key: "OUTPUT0" value: "OUTPUT0" }
      output_map { key: "OUTPUT1" value: "OUTPUT1" }
    }
  ]
}
`;

conformanceSuite(
  'conformance: ensembles (tritonclient)',
  'ensemble/ensemble.py',
  () => [simpleModel(), ['double', { 'config.pbtxt': DOUBLE_CONFIG, '1/.keep': '' }]],
  ['http_ensemble_infer', 'grpc_ensemble_infer', 'ensemble_metadata_and_config', 'ensemble_statistics', 'ensemble_missing_input'],
);
