/**
 * The start-up tables of `nereid serve` in tritonserver's shape: the one formatter, and the rows
 * of the option table for the options given.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseServeArgs } from './options.js';
import { formatBackendTable, formatModelTable, formatTable, optionTableRows } from './startup-tables.js';

const METADATA = { name: 'triton', version: '0.1.0', extensions: ['classification', 'model_repository'] };

describe('formatTable', () => {
  it('draws a +---+ table with columns as wide as their widest cell', () => {
    assert.equal(
      formatTable(['Option', 'Value'], [['server_id', 'triton'], ['model_config_name', '']]),
      [
        '+-------------------+--------+',
        '| Option            | Value  |',
        '+-------------------+--------+',
        '| server_id         | triton |',
        '| model_config_name |        |',
        '+-------------------+--------+',
      ].join('\n'),
    );
  });

  it('gives a cell of several lines as many table lines, as Triton does for a load error', () => {
    assert.equal(
      formatModelTable([
        { name: 'bad', version: '1', state: 'UNAVAILABLE', reason: 'boom\n  at model.py(1)' },
        { name: 'simple', version: '1', state: 'READY', reason: '' },
      ]),
      [
        '+--------+---------+-------------------+',
        '| Model  | Version | Status            |',
        '+--------+---------+-------------------+',
        '| bad    | 1       | UNAVAILABLE: boom |',
        '|        |         |   at model.py(1)  |',
        '| simple | 1       | READY             |',
        '+--------+---------+-------------------+',
      ].join('\n'),
    );
  });

  it('draws an empty model table with its header, as Triton does when no model is loaded', () => {
    assert.equal(formatModelTable([]), ['+-------+---------+--------+', '| Model | Version | Status |', '+-------+---------+--------+', '+-------+---------+--------+'].join('\n'));
  });
});

describe('the backend table', () => {
  it("shows each backend's settings as Triton shows a backend's command-line config", () => {
    const table = formatBackendTable([{ name: 'python', source: 'built in: model.py', settings: { 'python-executable': '/usr/bin/python3' } }]);
    assert.match(table, /^\| Backend \| Path +\| Config +\|$/m);
    assert.match(table, /^\| python {2}\| built in: model\.py \| \{"cmdline":\{"python-executable":"\/usr\/bin\/python3"\}\} \|$/m);
  });
});

describe('optionTableRows', () => {
  it("has Triton's rows in Triton's order with the defaults' values", () => {
    assert.deepEqual(optionTableRows(parseServeArgs(['--model-repository=/models']), METADATA), [
      ['server_id', 'triton'],
      ['server_version', '0.1.0'],
      ['server_extensions', 'classification model_repository'],
      ['model_repository_path[0]', '/models'],
      ['model_control_mode', 'MODE_NONE'],
      ['strict_model_config', '0'],
      ['model_config_name', ''],
      ['rate_limit', 'OFF'],
      ['strict_readiness', '1'],
      ['exit_timeout', '30'],
      ['cache_enabled', '0'],
    ]);
  });

  it('says what the options given set: repositories, mode and start-up models, config, rate limiter, readiness, timeout', () => {
    const options = parseServeArgs([
      '--model-repository=/a',
      '--model-store',
      '/b',
      '--model-control-mode=explicit',
      '--load-model=simple',
      '--load-model=mlp',
      '--disable-auto-complete-config',
      '--model-config-name=cpu',
      '--rate-limit=execution_count',
      '--rate-limit-resource=R1:4',
      '--rate-limit-resource=R2:2:0',
      '--strict-readiness=false',
      '--exit-timeout-secs=7',
      '--cache-config=local,size=1048576',
      '--model-config-limit=instances-per-model=256',
      '--http-thread-count=16',
      '--backend-config=python,shm-growth-byte-size=1048576',
    ]);
    const rows = optionTableRows(options, METADATA);
    assert.deepEqual(rows.slice(3), [
      ['model_repository_path[0]', '/a'],
      ['model_repository_path[1]', '/b'],
      ['model_control_mode', 'MODE_EXPLICIT'],
      ['startup_models_0', 'simple'],
      ['startup_models_1', 'mlp'],
      ['strict_model_config', '1'],
      ['model_config_name', 'cpu'],
      ['rate_limit', 'EXEC_COUNT'],
      ['rate_limit_resource[0]', '{"name":"R1","count":4,"device":-1}'],
      ['rate_limit_resource[1]', '{"name":"R2","count":2,"device":0}'],
      ['strict_readiness', '0'],
      ['exit_timeout', '7'],
      ['cache_enabled', '1'],
      ['model_config_limit[instances-per-model]', '256'],
      ['options_without_effect', '--http-thread-count --backend-config=python,shm-growth-byte-size=…'],
    ]);
  });
});
