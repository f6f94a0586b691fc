import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { silentLogger } from '../observability/logger.js';
import { applyLogSettingsUpdate, logSettingsReport } from './log-settings.js';

const rejects = (kind: string, message: RegExp) => (err: unknown) => err instanceof NereidError && err.kind === kind && message.test(err.message);

describe('log settings updates (protocol.md §3.16, §4.8)', () => {
  it('applies the known keys, ignores null values and unknown keys', () => {
    const logger = silentLogger();
    applyLogSettingsUpdate(logger, { log_info: true, log_verbose_level: 5, log_format: 'ISO8601', log_error: null, other: 'x' });
    assert.deepEqual(logSettingsReport(logger), {
      log_file: '',
      log_info: true,
      log_warning: false,
      log_error: false,
      log_verbose_level: 5,
      log_format: 'ISO8601',
    });
  });

  it('is all or nothing: one invalid setting changes none', () => {
    const logger = silentLogger();
    assert.throws(() => applyLogSettingsUpdate(logger, { log_info: true, log_verbose_level: -2 }), rejects('INVALID_ARG', /unsigned integer, got -2/));
    assert.equal(logger.settings.info, false);
  });

  it('log_file: UNSUPPORTED for any value but null, including a present key without a value', () => {
    const logger = silentLogger();
    for (const value of ['x', '', undefined]) {
      assert.throws(() => applyLogSettingsUpdate(logger, { log_file: value }), rejects('UNSUPPORTED', /can not be updated through network protocol/));
    }
    applyLogSettingsUpdate(logger, { log_file: null });
  });

  it('a key present without a value (undefined) is a wrong type', () => {
    assert.throws(() => applyLogSettingsUpdate(silentLogger(), { log_warning: undefined }), rejects('INVALID_ARG', /expects a boolean, got no value/));
  });
});
