/**
 * The differential test (differential.py): real Triton 2.51 (the nvidia-pytriton wheel that
 * `node scripts/setup.mjs conformance` unpacks) and Nereid on copies of the same repository of
 * Python models, sent the same requests, good and bad, over HTTP and gRPC; each case passes when
 * the normalised answers agree or the difference is one docs/differences.md lists.
 */
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, type ModelFiles } from '../../helpers/harness.js';
import { assertCasePassed, assertCasesAre, runCases, startConformanceServer, type CaseResult, type ConformanceServer } from '../helpers/tier.js';
import { requireTriton, startTriton, type TritonServer } from '../helpers/triton.js';

const MODEL_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("OUTPUT1", x * 2)]))
        return responses
`;

const FAILING_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("failing on purpose")) for _ in requests]
`;

const RAISING_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("raising on purpose")
`;

function config(name: string, extra = '', batch = true): string {
  const dims = batch ? '[ 16 ]' : '[ -1, 16 ]';
  return `name: "${name}"
backend: "python"
max_batch_size: ${batch ? 8 : 0}
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: ${dims} } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: ${dims} }, { name: "OUTPUT1", data_type: TYPE_FP32, dims: ${dims} } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
${extra}`;
}

const MODELS: Record<string, ModelFiles> = {
  ident: { 'config.pbtxt': config('ident'), '1/model.py': MODEL_PY },
  counted: { 'config.pbtxt': config('counted'), '1/model.py': MODEL_PY },
  spare: { 'config.pbtxt': config('spare'), '1/model.py': MODEL_PY },
  failing: { 'config.pbtxt': config('failing'), '1/model.py': FAILING_PY },
  raising: { 'config.pbtxt': config('raising'), '1/model.py': RAISING_PY },
  nobatch: { 'config.pbtxt': config('nobatch', '', false), '1/model.py': MODEL_PY },
  latest: {
    'config.pbtxt': config('latest', 'version_policy: { latest: { num_versions: 2 } }'),
    '1/model.py': MODEL_PY,
    '2/model.py': MODEL_PY,
    '3/model.py': MODEL_PY,
  },
  versioned: {
    'config.pbtxt': config('versioned', 'version_policy: { specific: { versions: [ 1, 3 ] } }'),
    '1/model.py': MODEL_PY,
    '2/model.py': MODEL_PY,
    '3/model.py': MODEL_PY,
  },
};

/** The script's cases, in its order. */
const CASES = [
  'health',
  'model_ready',
  'model_ready_unknown',
  'server_metadata',
  'server_metadata_extensions',
  'server_metadata_sequence_extension',
  'model_metadata',
  'model_metadata_unknown',
  'versioned_metadata',
  'model_config',
  'infer_good',
  'infer_requested_outputs',
  'infer_output_named_twice',
  'infer_unknown_output',
  'infer_binary_data',
  'infer_binary_size_mismatch',
  'infer_wrong_datatype',
  'infer_wrong_shape',
  'infer_zero_batch',
  'infer_batch_too_large',
  'infer_unknown_input',
  'infer_input_wrong_name',
  'infer_missing_input',
  'infer_data_count_mismatch',
  'infer_unknown_model',
  'infer_unknown_version',
  'infer_bad_json',
  'infer_grpc_typed_contents',
  'infer_parameters',
  'infer_parameter_wrong_type',
  'infer_version_strings',
  'infer_version_not_integer',
  'infer_binary_framing',
  'infer_classification',
  'infer_model_error',
  'infer_model_raises',
  'version_selection',
  'version_policy_latest',
  'infer_without_batching',
  'statistics_after_good_and_errors',
  'statistics_model_error_response',
  'statistics_model_raises',
  'statistics_response_stats',
  'statistics_versions',
  'statistics_memory_usage',
  'statistics_unknown',
  'repository_index',
  'repository_unload_load',
  'repository_parameters',
  'repository_parameters_malformed',
  'repository_load_unknown_parameter',
  'repository_unknown',
  'repository_config_override',
  'repository_load_broken_config',
  'repository_invalid_config_override',
  'repository_grpc_errors',
  'repository_config_override_not_string',
  'repository_bad_config_override',
  'repository_file_override',
  'repository_file_override_content',
  'repository_file_override_absolute',
  'repository_file_override_not_base64',
  'shm_status',
  'shm_unregister_default',
  'shm_register_infer_unregister',
  'shm_register_bad',
  'shm_register_default',
  'repository_load_initialize_fails',
  'trace_setting',
  'log_settings',
  'log_settings_bad_json',
];

describe('conformance: differential against real Triton 2.51', () => {
  let triton: TritonServer | undefined;
  let tritonRepository: string | undefined;
  let nereid: ConformanceServer | undefined;
  /** A second Nereid with client shared memory on, for the cases that register regions. */
  let nereidShm: ConformanceServer | undefined;
  let results: Map<string, CaseResult> | undefined;

  before(async () => {
    requireTriton();
    tritonRepository = await makeRepository(MODELS);
    const explicit = ['--model-control-mode=explicit', '--load-model=*'];
    [triton, nereid, nereidShm] = await Promise.all([
      startTriton(tritonRepository, [...explicit, '--exit-on-error=false', '--strict-readiness=false']),
      startConformanceServer(Object.entries(MODELS), [...explicit, '--exit-on-error=false', '--strict-readiness=false']),
      startConformanceServer([['ident', MODELS['ident']!]], ['--allow-client-shm=true']),
    ]);
    try {
      results = await runCases('differential/differential.py', nereid.endpoints, {
        timeoutMs: 300_000,
        extra: { triton: triton.endpoints, nereid: nereid.endpoints, nereid_shm: nereidShm.endpoints, repositories: { triton: tritonRepository, nereid: nereid.repository }, model_py: MODEL_PY, init_fails_config: config('init_fails') },
      });
    } catch (err) {
      throw new Error(`${(err as Error).message}\n--- tritonserver log ---\n${triton.log}`);
    }
  });

  after(async () => {
    const pids = [nereid, nereidShm].map((s) => s?.process.child.pid).filter((p): p is number => p !== undefined);
    await Promise.all([triton?.stop(), nereid?.stop(), nereidShm?.stop()]);
    // The Python backend's ring files of a model whose initialize failed outlive the server (the
    // fault suite checks that they do not); this test removes what its servers left.
    for (const f of readdirSync('/dev/shm')) {
      if (pids.some((pid) => f.startsWith(`nereid-${pid}-`))) rmSync(join('/dev/shm', f), { force: true });
    }
    if (tritonRepository !== undefined) await removeDir(tritonRepository);
  });

  for (const name of CASES) it(name, () => assertCasePassed(results, name));
  it('runs exactly the listed cases', () => assertCasesAre(results, CASES));
});
