/**
 * Inference through Triton's Python client (infer.py): HTTP and gRPC, sync, async and aio, every
 * datatype, BYTES, binary and JSON tensors, classification, ids, parameters, compression.
 */
import assert from 'node:assert/strict';
import { ORT_NODE_DATATYPES, identityModel, simpleIdentityModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { modelFiles } from '../../helpers/models.js';
import { conformanceSuite } from '../helpers/tier.js';

const CASES = [
  'http_infer_simple_binary_and_json',
  'http_infer_without_requested_outputs',
  'http_request_id_version_and_parameters',
  'http_compression',
  'http_async_infer',
  'http_aio_infer',
  'grpc_infer_simple',
  'grpc_compression',
  'grpc_async_infer',
  'grpc_aio_infer',
  'http_every_datatype_binary',
  'http_every_datatype_json',
  'grpc_every_datatype',
  'strings_simple_string',
  'strings_simple_identity',
  'classification',
];

/** identity FP32 [-1, -1] with labels on OUTPUT0, for the classification extension. */
function labelledModel(): [string, Record<string, string | Uint8Array>] {
  const model = identityModel('FP32', [-1, -1], { name: 'labelled' });
  const config = model.config!.replace(/(output \[\n  \{\n    name: "OUTPUT0"\n)/, '$1    label_filename: "labels.txt"\n');
  assert.notEqual(config, model.config, 'label_filename was not inserted');
  return ['labelled', modelFiles(model, { config, extra: { 'labels.txt': 'cat\ndog\nbird\nfish\n' } })];
}

conformanceSuite(
  'conformance: inference (tritonclient)',
  'infer/infer.py',
  () => [simpleModel(), simpleStringModel(), simpleIdentityModel(), ...ORT_NODE_DATATYPES.map((datatype) => identityModel(datatype, [-1, -1])), labelledModel()],
  CASES,
);
