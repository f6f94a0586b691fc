/**
 * The logging extension (protocol.md §3.16; gRPC LogSettings, §4.8): settings read and updated
 * over HTTP and gRPC, the errors, and updates taking effect on the log of a running `nereid serve`.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { status, type Client } from '@grpc/grpc-js';
import type { pb } from '@nereid/protocol';
import { createLogger } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { assertStatus, inferenceClient, setFields, unary, unaryError } from '../../helpers/grpc.js';
import { httpRequest, jsonBody, makeRepository, removeDir, startServer, type HttpReply, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

after(stopAllNereid);

const DEFAULTS = {
  log_file: '',
  log_info: true,
  log_warning: true,
  log_error: true,
  log_verbose_level: 0,
  log_format: 'default',
};

let repo: string;
let logFile: string;
let srv: RunningGrpcServer;
let client: Client;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
  logFile = join(repo, 'server.log');
  srv = await startServer({ modelRepositories: [repo], grpc: true, logger: createLogger({ file: logFile }) });
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** Back to the defaults, except the log file (which the network protocols cannot change). */
beforeEach(() => {
  const { log_file: _file, ...rest } = DEFAULTS;
  srv.server.updateLogSettings(rest);
});

const logging = () => `${srv.url}/v2/logging`;
const post = (body: string): Promise<HttpReply> => httpRequest(logging(), { method: 'POST', body, headers: { 'Content-Type': 'application/json' } });
const current = async () => jsonBody(await httpRequest(logging()));

describe('HTTP /v2/logging (protocol.md §3.16)', () => {
  it('GET returns every setting', async () => {
    assert.deepEqual(await current(), { ...DEFAULTS, log_file: logFile });
  });

  it('POST updates the settings given, returns all of them, and later GETs agree', async () => {
    const update = { log_info: false, log_warning: false, log_error: false, log_verbose_level: 2, log_format: 'ISO8601' };
    const reply = await post(JSON.stringify(update));
    assert.equal(reply.status, 200, reply.text);
    const expected = { ...DEFAULTS, log_file: logFile, ...update };
    assert.deepEqual(jsonBody(reply), expected);
    assert.deepEqual(await current(), expected);
    // Only the given keys change; null values and unknown keys are ignored.
    const again = await post('{"log_info": true, "log_warning": null, "log_verbose_level": null, "log_something": 1}');
    assert.deepEqual(jsonBody(again), { ...expected, log_info: true });
  });

  it('an empty object changes nothing', async () => {
    assert.deepEqual(jsonBody(await post('{}')), { ...DEFAULTS, log_file: logFile });
  });

  it('log_file cannot be updated: 501 with the message clients expect; null is ignored', async () => {
    for (const value of ['"/tmp/elsewhere.log"', '""']) {
      const reply = await post(`{"log_file": ${value}, "log_info": false}`);
      assert.equal(reply.status, 501);
      assert.deepEqual(jsonBody(reply), { error: 'log file location can not be updated through network protocol' });
    }
    assert.equal(((await current()) as { log_info: boolean }).log_info, true, 'a refused update changes nothing');
    assert.equal((await post('{"log_file": null}')).status, 200);
  });

  it('wrong types and unknown formats are errors and change nothing', async () => {
    for (const [body, message] of [
      ['{"log_info": "false"}', /log setting 'log_info' expects a boolean, got "false"/],
      ['{"log_warning": 1}', /log setting 'log_warning' expects a boolean/],
      ['{"log_error": [true]}', /log setting 'log_error' expects a boolean/],
      ['{"log_verbose_level": -1}', /log setting 'log_verbose_level' expects an unsigned integer, got -1/],
      ['{"log_verbose_level": 1.5}', /expects an unsigned integer/],
      ['{"log_verbose_level": "1"}', /expects an unsigned integer/],
      ['{"log_verbose_level": 4294967296}', /expects an unsigned integer/],
      ['{"log_format": 8601}', /log setting 'log_format' expects a string/],
      ['{"log_format": "iso8601"}', /invalid argument for log_format, got 'iso8601'; expected 'default' or 'ISO8601'/],
      ['{"log_info": false, "log_format": "json"}', /invalid argument for log_format/],
    ] as const) {
      const reply = await post(body);
      assert.equal(reply.status, 400, `${body}: ${reply.text}`);
      assert.match((jsonBody(reply) as { error: string }).error, message);
    }
    assert.deepEqual(await current(), { ...DEFAULTS, log_file: logFile });
  });

  it('a body that is not a JSON object is 400', async () => {
    for (const body of ['', 'log_info=false', '[]', 'null', '"x"']) {
      const reply = await post(body);
      assert.equal(reply.status, 400, body);
      assert.ok((jsonBody(reply) as { error: string }).error.length > 0);
    }
  });

  it('other methods are 405', async () => {
    assert.equal((await httpRequest(logging(), { method: 'PUT', body: '{}' })).status, 405);
  });

  it('the verbose level takes effect on the server log', async () => {
    await httpRequest(`${srv.url}/v2/health/live?before`);
    await post('{"log_verbose_level": 1}');
    await httpRequest(`${srv.url}/v2/health/live?after`);
    await post('{"log_verbose_level": 0}');
    await httpRequest(`${srv.url}/v2/health/live?off-again`);
    const log = await readFile(logFile, 'utf8');
    assert.match(log, /^V.* HTTP request: GET \/v2\/health\/live\?after$/m);
    assert.doesNotMatch(log, /\?before|\?off-again/);
  });
});

type LogSettingValue = pb.LogSettingsRequest_SettingValue;

/** The response map as plain values (each setting's one choice). */
function settingsOf(response: pb.LogSettingsResponse): Record<string, unknown> {
  return Object.fromEntries(Object.entries(response.settings).map(([k, v]) => [k, v.bool_param ?? v.uint32_param ?? v.string_param]));
}

describe('gRPC LogSettings (protocol.md §4.8)', () => {
  it('with no settings returns every setting with its expected choice', async () => {
    const response = await unary(client, 'LogSettings', { settings: {} });
    // Exactly one choice set per setting.
    const choices = Object.fromEntries(Object.entries(response.settings).map(([k, v]) => [k, setFields(v)]));
    assert.deepEqual(choices, {
      log_file: { string_param: logFile },
      log_info: { bool_param: true },
      log_warning: { bool_param: true },
      log_error: { bool_param: true },
      log_verbose_level: { uint32_param: 0 },
      log_format: { string_param: 'default' },
    });
  });

  it('updates settings; HTTP sees the same state', async () => {
    const settings: Record<string, LogSettingValue> = {
      log_info: { bool_param: false },
      log_error: { bool_param: false },
      log_verbose_level: { uint32_param: 3 },
      log_format: { string_param: 'ISO8601' },
      log_unknown: { string_param: 'ignored' },
    };
    const expected = { ...DEFAULTS, log_file: logFile, log_info: false, log_error: false, log_verbose_level: 3, log_format: 'ISO8601' };
    assert.deepEqual(settingsOf(await unary(client, 'LogSettings', { settings })), expected);
    assert.deepEqual(await current(), expected);
  });

  it('a wrong choice or no choice is INVALID_ARGUMENT and changes nothing', async () => {
    const cases: [Record<string, LogSettingValue>, string][] = [
      [{ log_info: { uint32_param: 1 } }, "log setting 'log_info' expects a boolean"],
      [{ log_warning: { string_param: 'true' } }, "log setting 'log_warning' expects a boolean"],
      [{ log_verbose_level: { bool_param: true } }, "log setting 'log_verbose_level' expects an unsigned integer"],
      [{ log_format: { uint32_param: 1 } }, "log setting 'log_format' expects a string"],
      [{ log_format: { string_param: 'json' } }, 'invalid argument for log_format'],
      [{ log_info: {} }, "log setting 'log_info' expects a boolean, got no value"],
      [{ log_error: { bool_param: false }, log_verbose_level: { string_param: '2' } }, 'expects an unsigned integer'],
    ];
    for (const [settings, message] of cases) {
      const err = await unaryError(client, 'LogSettings', { settings });
      assertStatus(err, status.INVALID_ARGUMENT, message);
    }
    assert.deepEqual(await current(), { ...DEFAULTS, log_file: logFile });
  });

  it('log_file with any value is UNIMPLEMENTED', async () => {
    for (const value of [{ string_param: '/tmp/x.log' }, { string_param: '' }, {}]) {
      const err = await unaryError(client, 'LogSettings', { settings: { log_file: value, log_info: { bool_param: false } } });
      assertStatus(err, status.UNIMPLEMENTED, 'log file location can not be updated through network protocol');
    }
    assert.equal(((await current()) as { log_info: boolean }).log_info, true);
  });
});

describe('logging updates on a running nereid serve', () => {
  it('verbose level, format and severities change what the server writes', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`]);
    try {
      const set = async (body: object) => {
        const reply = await httpRequest(`${server.url}/v2/logging`, { method: 'POST', body: JSON.stringify(body) });
        assert.equal(reply.status, 200, reply.text);
      };
      await httpRequest(`${server.url}/v2/health/ready?quiet`);
      await set({ log_verbose_level: 1 });
      await httpRequest(`${server.url}/v2/health/ready?verbose`);
      await server.process.waitFor(/^V\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ nereid\] HTTP request: GET \/v2\/health\/ready\?verbose$/m);
      await set({ log_format: 'ISO8601' });
      await httpRequest(`${server.url}/v2/health/ready?iso`);
      await server.process.waitFor(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z V \d+ nereid\] HTTP request: GET \/v2\/health\/ready\?iso$/m);
      // With info off, the shutdown's info lines are not written.
      await set({ log_info: false, log_verbose_level: 0 });
    } finally {
      await server.process.stop();
    }
    assert.doesNotMatch(server.process.stdout, /\?quiet/);
    assert.doesNotMatch(server.process.stdout, /received SIGTERM|all models unloaded/, server.process.output);
  });
});
