/**
 * `nereid analyze` configuration (perf-and-analyzer.md §2.3–§2.6): Model Analyzer's keys in the
 * YAML file and as flags, their value forms and defaults, and ANALYZE_CONFIG errors that name the
 * key and the fix.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { ANALYZE_USAGE, HelpRequested, loadAnalyzeConfig, parseAnalyzeArgs } from './config.js';
import type { AnalyzeConfig } from './types.js';

let dir: string;
let env: { cwd: string; stdoutIsTty: boolean };

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'nereid-analyze-config-'));
  env = { cwd: dir, stdoutIsTty: false };
  for (const m of ['mlp', 'cnn']) mkdirSync(join(dir, 'repo', m), { recursive: true });
  writeFileSync(join(dir, 'repo', 'a-file'), '');
});
after(() => rmSync(dir, { recursive: true, force: true }));

let fileCount = 0;
function yamlFile(text: string): string {
  const name = `c${fileCount++}.yaml`;
  writeFileSync(join(dir, name), text);
  return name;
}

function load(yaml: string, extra: string[] = []) {
  return loadAnalyzeConfig(['-f', yamlFile(yaml), ...extra], env);
}

const BASE = 'model_repository: repo\nprofile_models: [mlp]\n';

function refused(argv: string[] | string, ...patterns: RegExp[]): void {
  const args = typeof argv === 'string' ? ['-f', yamlFile(argv)] : argv;
  assert.throws(
    () => parseAnalyzeArgs(args, env),
    (err: unknown) => {
      assert.ok(err instanceof NereidError, String(err));
      assert.equal(err.code, 'ANALYZE_CONFIG');
      for (const p of patterns) assert.match(err.message, p);
      return true;
    },
  );
}

describe('loadAnalyzeConfig: a full file', () => {
  it('reads every supported key', () => {
    const { config, warnings } = load(`
model_repository: repo
profile_models:
  mlp:
    parameters: {concurrency: [1, 2], batch_sizes: [1, 4]}
    model_config_parameters:
      max_batch_size: [8, 16]
    perf_analyzer_flags: {percentile: 99}
    objectives: [perf_latency_p99]
    constraints: {perf_latency_p99: {max: 5}}
    cpu_only: true
    weighting: 2
  cnn: {}
run_config_search_mode: quick
run_config_search_min_concurrency: 2
run_config_search_max_concurrency: 64
run_config_search_min_model_batch_size: 2
run_config_search_max_model_batch_size: 32
run_config_search_min_instance_count: 2
run_config_search_max_instance_count: 3
run_config_search_min_request_rate: 10
run_config_search_max_request_rate: 100
request_rate_search_enable: true
run_config_search_disable: true
run_config_search_max_binary_search_steps: 3
concurrency_sweep_disable: true
run_config_profile_models_concurrently_enable: true
batch_sizes: 2
request_rate: [10, 20]
objectives: {perf_throughput: 1}
constraints: {cpu_used_ram: {max: 2048}}
latency_budget: 10
min_throughput: 50
triton_launch_mode: remote
triton_http_endpoint: host:9000
triton_grpc_endpoint: host:9001
triton_metrics_url: http://host:9002/metrics
triton_server_path: /opt/nereid/bin/nereid
triton_server_flags: {log-verbose: 1, strict-readiness: true}
triton_server_environment: {OMP_NUM_THREADS: 2}
client_protocol: http
output_model_repository_path: out
override_output_model_repository: true
checkpoint_directory: ck
export_path: results
num_configs_per_model: 4
num_top_model_configs: 2
perf_analyzer_flags: {measurement-interval: 1000, shape: ['INPUT0:1,16', 'INPUT1:4'], async: true}
perf_analyzer_timeout: 120
perf_analyzer_max_auto_adjusts: 2
mode: offline
time_budget: 15m
progress: none
skip_summary_reports: true
skip_detailed_reports: true
`);
    assert.deepEqual(warnings, []);
    const expected: AnalyzeConfig = {
      modelRepository: join(dir, 'repo'),
      models: [
        {
          name: 'mlp',
          objectives: { perf_latency_p99: 1 },
          constraints: { perf_latency_p99: { max: 5 } },
          concurrency: [1, 2],
          batchSizes: [1, 4],
          modelConfigParameters: { max_batch_size: [8, 16] },
          perfAnalyzerFlags: { 'measurement-interval': '1000', shape: ['INPUT0:1,16', 'INPUT1:4'], async: 'true', percentile: '99' },
          cpuOnly: true,
          weighting: 2,
        },
        {
          name: 'cnn',
          objectives: { perf_throughput: 1 },
          constraints: { cpu_used_ram: { max: 2048 }, perf_latency_p99: { max: 10 }, perf_throughput: { min: 50 } },
          requestRate: [10, 20],
          batchSizes: [2],
          perfAnalyzerFlags: { 'measurement-interval': '1000', shape: ['INPUT0:1,16', 'INPUT1:4'], async: 'true' },
          cpuOnly: true,
          weighting: 1,
        },
      ],
      mode: 'offline',
      searchMode: 'quick',
      launchMode: 'remote',
      profileModelsConcurrently: true,
      search: {
        minConcurrency: 2,
        maxConcurrency: 64,
        minModelBatchSize: 2,
        maxModelBatchSize: 32,
        minInstanceCount: 2,
        maxInstanceCount: 3,
        minRequestRate: 10,
        maxRequestRate: 100,
        requestRateSearchEnable: true,
        disable: true,
        maxBinarySearchSteps: 3,
        concurrencySweepDisable: true,
      },
      clientProtocol: 'http',
      httpEndpoint: 'host:9000',
      grpcEndpoint: 'host:9001',
      metricsUrl: 'http://host:9002/metrics',
      serverPath: '/opt/nereid/bin/nereid',
      serverFlags: { 'log-verbose': '1', 'strict-readiness': 'true' },
      serverEnvironment: { OMP_NUM_THREADS: '2' },
      outputModelRepositoryPath: join(dir, 'out'),
      overrideOutputModelRepository: true,
      checkpointDirectory: join(dir, 'ck'),
      exportPath: join(dir, 'results'),
      numConfigsPerModel: 4,
      numTopModelConfigs: 2,
      perfAnalyzerFlags: { 'measurement-interval': '1000', shape: ['INPUT0:1,16', 'INPUT1:4'], async: 'true' },
      perfAnalyzerTimeout: 120,
      perfAnalyzerMaxAutoAdjusts: 2,
      timeBudgetSeconds: 900,
      skipSummaryReports: true,
      skipDetailedReports: true,
      progress: 'none',
    };
    assert.deepEqual(config, expected);
  });

  it("has Model Analyzer's defaults", () => {
    const c = parseAnalyzeArgs(['-m', 'repo', '--profile-models', 'mlp'], env);
    assert.equal(c.searchMode, 'brute');
    assert.equal(c.launchMode, 'local');
    assert.equal(c.mode, 'online');
    assert.equal(c.clientProtocol, 'grpc');
    assert.deepEqual(c.search, {
      minConcurrency: 1,
      maxConcurrency: 1024,
      minModelBatchSize: 1,
      maxModelBatchSize: 128,
      minInstanceCount: 1,
      maxInstanceCount: 5,
      minRequestRate: 16,
      maxRequestRate: 8192,
      requestRateSearchEnable: false,
      disable: false,
      maxBinarySearchSteps: 5,
      concurrencySweepDisable: false,
    });
    assert.equal(c.httpEndpoint, 'localhost:8000');
    assert.equal(c.grpcEndpoint, 'localhost:8001');
    assert.equal(c.metricsUrl, 'http://localhost:8002/metrics');
    assert.equal(c.serverPath, undefined);
    assert.equal(c.outputModelRepositoryPath, join(dir, 'output_model_repository'));
    assert.equal(c.checkpointDirectory, join(dir, 'checkpoints'));
    assert.equal(c.exportPath, dir);
    assert.equal(c.numConfigsPerModel, 3);
    assert.equal(c.numTopModelConfigs, 0);
    assert.equal(c.perfAnalyzerTimeout, 600);
    assert.equal(c.perfAnalyzerMaxAutoAdjusts, 10);
    assert.equal(c.timeBudgetSeconds, 0);
    assert.equal(c.progress, 'lines');
    assert.deepEqual(c.models, [
      { name: 'mlp', objectives: { perf_throughput: 1 }, constraints: {}, batchSizes: [1], perfAnalyzerFlags: {}, cpuOnly: true, weighting: 1 },
    ]);
    assert.equal(parseAnalyzeArgs(['-m', 'repo', '--profile-models', 'mlp'], { cwd: dir, stdoutIsTty: true }).progress, 'bar');
  });
});

describe('value forms', () => {
  it('reads a list, a comma string and {start, stop, step}', () => {
    for (const [form, expected] of [
      ['[1, 2, 4]', [1, 2, 4]],
      ["'1,2,4'", [1, 2, 4]],
      ['{start: 2, stop: 8, step: 2}', [2, 4, 6, 8]],
      ['{start: 1, stop: 3}', [1, 2, 3]],
      ['8', [8]],
    ] as const) {
      const c = load(`${BASE}concurrency: ${form}\nbatch_sizes: ${form}\n`).config;
      assert.deepEqual(c.models[0].concurrency, expected, form);
      assert.deepEqual(c.models[0].batchSizes, expected, form);
    }
    assert.deepEqual(load(`${BASE}request_rate: {start: 0.5, stop: 1.5, step: 0.5}\n`).config.models[0].requestRate, [0.5, 1, 1.5]);
    assert.deepEqual(parseAnalyzeArgs(['-m', 'repo', '--profile-models', 'mlp,cnn', '--concurrency', '1,8'], env).models.map((m) => m.concurrency), [[1, 8], [1, 8]]);
  });

  it('normalizes objective weights; a list gives equal weights', () => {
    assert.deepEqual(load(`${BASE}objectives: {perf_throughput: 2, perf_latency_p99: 3}\n`).config.models[0].objectives, { perf_throughput: 0.4, perf_latency_p99: 0.6 });
    assert.deepEqual(load(`${BASE}objectives: [perf_throughput, perf_latency_p99]\n`).config.models[0].objectives, { perf_throughput: 0.5, perf_latency_p99: 0.5 });
    assert.deepEqual(parseAnalyzeArgs(['-m', 'repo', '--profile-models', 'mlp', '--objectives', 'cpu_used_ram'], env).models[0].objectives, { cpu_used_ram: 1 });
  });

  it('turns latency_budget and min_throughput into constraints', () => {
    const c = load(`${BASE}latency_budget: 25\nmin_throughput: 100\nconstraints: {gpu_used_memory: {max: 4000}}\n`).config;
    assert.deepEqual(c.models[0].constraints, { gpu_used_memory: { max: 4000 }, perf_latency_p99: { max: 25 }, perf_throughput: { min: 100 } });
    const cli = parseAnalyzeArgs(['-m', 'repo', '--profile-models', 'mlp', '--latency-budget', '7'], env);
    assert.deepEqual(cli.models[0].constraints, { perf_latency_p99: { max: 7 } });
  });

  it("expands model_config_parameters into complete candidates per top-level field", () => {
    const c = load(`${BASE.replace('[mlp]', '')}  mlp:
    model_config_parameters:
      max_batch_size: 8
      dynamic_batching: {max_queue_delay_microseconds: [100, 200], preferred_batch_size: [[4], [4, 8]]}
      instance_group: [[{kind: KIND_CPU, count: [1, 2]}], [{kind: KIND_CPU, count: 4}]]
      parameters: {threads: {string_value: ['1', '2']}}
`).config;
    assert.deepEqual(c.models[0].modelConfigParameters, {
      max_batch_size: [8],
      dynamic_batching: [
        { max_queue_delay_microseconds: 100, preferred_batch_size: [4] },
        { max_queue_delay_microseconds: 100, preferred_batch_size: [4, 8] },
        { max_queue_delay_microseconds: 200, preferred_batch_size: [4] },
        { max_queue_delay_microseconds: 200, preferred_batch_size: [4, 8] },
      ],
      instance_group: [[{ kind: 'KIND_CPU', count: 1 }], [{ kind: 'KIND_CPU', count: 2 }], [{ kind: 'KIND_CPU', count: 4 }]],
      parameters: [{ threads: { string_value: '1' } }, { threads: { string_value: '2' } }],
    });
  });

  it('takes a plain list for a list field as one value (a list of lists sweeps it)', () => {
    const c = load(`${BASE.replace('[mlp]', '')}  mlp:
    model_config_parameters:
      instance_group: [{kind: KIND_CPU, count: [1, 2]}]
      dynamic_batching: {preferred_batch_size: [4, 8]}
`).config;
    assert.deepEqual(c.models[0].modelConfigParameters, {
      instance_group: [[{ kind: 'KIND_CPU', count: 1 }], [{ kind: 'KIND_CPU', count: 2 }]],
      dynamic_batching: [{ preferred_batch_size: [4, 8] }],
    });
  });
});

describe('overrides', () => {
  it('lets a model override the global objectives, constraints, sweeps and perf_analyzer_flags', () => {
    const c = load(`model_repository: repo
profile_models:
  mlp:
    parameters: {request_rate: [5], batch_sizes: [2]}
    objectives: {perf_latency_p99: 1}
    constraints: {perf_throughput: {min: 10}}
    perf_analyzer_flags: {percentile: 95}
  cnn:
concurrency: [4]
objectives: [perf_throughput]
latency_budget: 30
perf_analyzer_flags: {percentile: 99, measurement-mode: count_windows}
`).config;
    const [mlp, cnn] = c.models;
    assert.deepEqual(mlp.objectives, { perf_latency_p99: 1 });
    assert.deepEqual(mlp.constraints, { perf_throughput: { min: 10 } });
    assert.equal(mlp.concurrency, undefined);
    assert.deepEqual(mlp.requestRate, [5]);
    assert.deepEqual(mlp.batchSizes, [2]);
    assert.deepEqual(mlp.perfAnalyzerFlags, { percentile: '95', 'measurement-mode': 'count_windows' });
    assert.deepEqual(cnn.objectives, { perf_throughput: 1 });
    assert.deepEqual(cnn.constraints, { perf_latency_p99: { max: 30 } });
    assert.deepEqual(cnn.concurrency, [4]);
    assert.deepEqual(cnn.perfAnalyzerFlags, { percentile: '99', 'measurement-mode': 'count_windows' });
  });

  it('lets the command line override the file', () => {
    const file = yamlFile(`model_repository: nowhere
profile_models:
  mlp: {weighting: 3}
run_config_search_max_concurrency: 16
mode: offline
skip_summary_reports: false
`);
    const c = parseAnalyzeArgs(
      ['-f', file, '-m', 'repo', '--profile-models', 'mlp,cnn', '--run-config-search-max-concurrency=32', '--mode', 'online', '--skip-summary-reports', '-e', 'exp', '--time-budget', '90'],
      env,
    );
    assert.equal(c.modelRepository, join(dir, 'repo'));
    assert.deepEqual(c.models.map((m) => [m.name, m.weighting]), [['mlp', 3], ['cnn', 1]]);
    assert.equal(c.search.maxConcurrency, 32);
    assert.equal(c.mode, 'online');
    assert.equal(c.skipSummaryReports, true);
    assert.equal(c.exportPath, join(dir, 'exp'));
    assert.equal(c.timeBudgetSeconds, 90);
  });

  it("accepts Model Analyzer's profile subcommand word, and -h", () => {
    const file = yamlFile(BASE);
    assert.deepEqual(parseAnalyzeArgs(['profile', '-f', file], env), parseAnalyzeArgs(['--config-file', file], env));
    assert.throws(() => parseAnalyzeArgs(['profile', '-h'], env), HelpRequested);
    assert.match(ANALYZE_USAGE, /--run-config-search-max-concurrency V +highest searched client concurrency \[1024\]/);
    assert.match(ANALYZE_USAGE, /--time-budget/);
  });
});

describe('accepted-but-ignored keys', () => {
  it('records a warning naming the key and why', () => {
    const { config, warnings } = load(`${BASE.replace('[mlp]', '')}  mlp: {cpu_only: false}
gpus: [0]
dcgm_disable: true
collect_cpu_metrics: true
perf_output: true
duration_seconds: 5
perf_analyzer_flags: {concurrency-range: '1:4', percentile: 95}
`);
    assert.equal(config.models[0].cpuOnly, true);
    assert.deepEqual(config.perfAnalyzerFlags, { percentile: '95' });
    assert.deepEqual(warnings, [
      'gpus: accepted and ignored: Nereid serves on CPU only, so no GPU is used or measured',
      'dcgm_disable: accepted and ignored: Nereid collects no GPU metrics, so DCGM is never used',
      'collect_cpu_metrics: accepted and ignored: CPU memory (cpu_used_ram) is always collected',
      'perf_output: accepted and ignored: the load generator runs inside nereid analyze; its results are in the checkpoints and reports',
      'duration_seconds: accepted and ignored: no server-only GPU metrics are recorded',
      'perf_analyzer_flags.concurrency-range: accepted and ignored: nereid analyze sets --concurrency-range itself for every measurement',
      'profile_models.mlp.cpu_only: accepted and ignored: Nereid serves on CPU only, so no GPU is used or measured; the model is profiled with KIND_CPU instance groups',
    ]);
    const cli = loadAnalyzeConfig(['-m', 'repo', '--profile-models', 'mlp', '--dcgm-disable', '--gpus', 'all'], env);
    assert.equal(cli.warnings.length, 2);
    assert.match(cli.warnings[0], /^--dcgm-disable: accepted and ignored/);
  });
});

describe('errors', () => {
  it('names an unknown key and the closest known one', () => {
    refused(`${BASE}run_config_search_max_concurency: 8\n`, /^unknown key 'run_config_search_max_concurency': did you mean 'run_config_search_max_concurrency'\?$/);
    refused(`${BASE}frobnicate: 1\n`, /unknown key 'frobnicate': remove it/);
    refused(`${BASE.replace('[mlp]', '')}  mlp: {paramters: {}}\n`, /^unknown key 'paramters' in profile_models\.mlp: did you mean 'parameters'\?$/);
    refused(`${BASE.replace('[mlp]', '')}  mlp: {parameters: {concurency: [1]}}\n`, /unknown key 'concurency' in profile_models\.mlp\.parameters: did you mean 'concurrency'/);
    refused(`${BASE.replace('[mlp]', '')}  mlp: {model_config_parameters: {max_batch: [1]}}\n`, /unknown model configuration field 'max_batch' in profile_models\.mlp\.model_config_parameters: did you mean 'max_batch_size'/);
    refused(['-m', 'repo', '--profile-models', 'mlp', '--concurency', '2'], /^unknown option '--concurency': did you mean '--concurrency'\?$/);
  });

  it('refuses wrong types, negative counts, zero and min above max', () => {
    refused(`${BASE}run_config_search_max_concurrency: lots\n`, /^run_config_search_max_concurrency: needs a whole number above 0, got the string 'lots'; set it to a whole number above 0$/);
    refused(`${BASE}run_config_search_min_instance_count: -1\n`, /run_config_search_min_instance_count: needs a whole number above 0, got -1/);
    refused(`${BASE}num_configs_per_model: 0\n`, /num_configs_per_model: needs a whole number above 0, got 0; set it/);
    refused(`${BASE}concurrency: [1, 0]\n`, /concurrency\[1\]: needs a whole number above 0, got 0/);
    refused(`${BASE}batch_sizes: {start: 8, stop: 2}\n`, /batch_sizes: stop 2 is below start 8; make stop at least start/);
    refused(`${BASE}override_output_model_repository: yes please\n`, /override_output_model_repository: needs true or false, got the string 'yes please'; set it to true or false/);
    refused(`${BASE}run_config_search_min_concurrency: 64\nrun_config_search_max_concurrency: 8\n`, /^run_config_search_min_concurrency \(64\) is above run_config_search_max_concurrency \(8\); lower the min or raise the max$/);
    refused(['-m', 'repo', '--profile-models', 'mlp', '--run-config-search-min-model-batch-size', '256'], /--run-config-search-min-model-batch-size \(256\) is above the default run_config_search_max_model_batch_size \(128\); lower the min or raise the max/);
    refused(`${BASE}concurrency: [1]\nrequest_rate: [10]\n`, /concurrency and request_rate are both given; give one of them/);
    refused(`${BASE}time_budget: soon\n`, /time_budget: needs seconds or a duration such as 90s, 15m or 2h, got the string 'soon'/);
  });

  it('refuses unknown metric tags and bad bounds with their path', () => {
    refused(`${BASE}objectives: [perf_throughput, perf_latency_p999]\n`, /^unknown metric 'perf_latency_p999' in objectives: did you mean 'perf_latency_p99'\?$/);
    refused(`${BASE.replace('[mlp]', '')}  mlp: {constraints: {perf_latency_p99: {max: fast}}}\n`, /^profile_models\.mlp\.constraints\.perf_latency_p99\.max: needs a number above 0, got the string 'fast'; set it to a number above 0$/);
    refused(`${BASE}constraints: {perf_throughput: {least: 5}}\n`, /unknown bound 'least' in constraints\.perf_throughput/);
    refused(`${BASE}constraints: {perf_throughput: {min: 50, max: 10}}\n`, /constraints\.perf_throughput: min 50 is above max 10; lower min or raise max/);
    refused(`${BASE}objectives: {perf_throughput: 0}\n`, /objectives: the weights sum to 0; give at least one weight above 0/);
  });

  it('refuses optuna, docker and c_api with what to use instead', () => {
    refused(`${BASE}run_config_search_mode: optuna\n`, /^run_config_search_mode: 'optuna' is not supported: .*use brute .* or quick/);
    refused(`${BASE}run_config_search_mode: fast\n`, /run_config_search_mode: unknown value 'fast'; use one of brute, quick/);
    refused(`${BASE}triton_launch_mode: docker\n`, /^triton_launch_mode: 'docker' is not supported: Nereid needs no container: use local .* or remote/);
    refused(['-m', 'repo', '--profile-models', 'mlp', '--triton-launch-mode', 'c_api'], /^--triton-launch-mode: 'c_api' is not supported: .*use local .* or remote/);
  });

  it('needs an existing repository directory that holds every profiled model', () => {
    refused(['--profile-models', 'mlp'], /^model_repository is required: give -m DIR/);
    refused(['-m', 'repo'], /^profile_models is required: give --profile-models/);
    refused(['-m', 'missing', '--profile-models', 'mlp'], /^--model-repository: .*missing does not exist; give the directory that holds the models$/);
    refused(['-m', 'repo/a-file', '--profile-models', 'mlp'], /--model-repository: .*a-file is not a directory/);
    refused(`model_repository: repo\nprofile_models: [mlp, cnm]\n`, /^profile_models\.cnm: the model repository .*repo has no directory 'cnm'; did you mean 'cnn'\?$/);
    refused(`model_repository: repo\nprofile_models: [mlp, mlp]\n`, /profile_models\[1\]: model 'mlp' is listed twice; list it once/);
  });

  it('reports YAML syntax errors with their line and column', () => {
    refused(`${BASE}objectives: [perf_throughput\n`, /c\d+\.yaml: YAML syntax error at line 4, column 1: Flow sequence .*; fix the file's syntax there$/);
    refused(`model_repository: repo\nprofile_models: [mlp]\n  bad: : indent\n`, /c\d+\.yaml: YAML syntax error at line 3, column 1: All mapping items must start at the same column; fix the file's syntax there$/);
    refused(['-f', 'no-such.yaml'], /--config-file .*no-such\.yaml: cannot read the file \(ENOENT\); check the path/);
  });

  it('refuses a sweep of a list field that mixes lists and single values', () => {
    refused(`${BASE.replace('[mlp]', '')}  mlp: {model_config_parameters: {instance_group: [[{count: 1}], {count: 2}]}}\n`, /profile_models\.mlp\.model_config_parameters\.instance_group: mixes lists and single values; instance_group is a list field/);
  });
});
