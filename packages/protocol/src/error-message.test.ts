import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { clientErrorMessage, MAX_CLIENT_ERROR_MESSAGE, MAX_ECHOED_RUN } from './error-message.js';

describe('clientErrorMessage', () => {
  it('leaves an ordinary message as it is', () => {
    const m = "Request for unknown model: 'simple' is not found";
    assert.equal(clientErrorMessage(m, 'header'), m);
    assert.equal(clientErrorMessage(m, 'body'), m);
  });

  it('shortens a long run to its start and its length', () => {
    const name = 'x'.repeat(MAX_ECHOED_RUN + 1);
    const m = clientErrorMessage(`Request for unknown model: '${name}' is not found`, 'body');
    assert.match(m, /^Request for unknown model: 'x{128}… \(257 characters\)' is not found$/);
    assert.equal(clientErrorMessage(`'${'x'.repeat(MAX_ECHOED_RUN)}'`, 'body').length, MAX_ECHOED_RUN + 2);
  });

  it('cuts a message of many short words, or of characters a header encodes, to the limit', () => {
    const words = 'ab '.repeat(20_000);
    assert.ok(clientErrorMessage(words, 'body').length <= MAX_CLIENT_ERROR_MESSAGE.body);
    const wide = 'é '.repeat(10_000);
    const cut = clientErrorMessage(wide, 'header');
    assert.match(cut, /message cut, 20000 characters\)$/);
    // gRPC percent-encodes each byte outside printable ASCII, and '%'.
    const encoded = cut.replace(/[^\x20-\x24\x26-\x7e]/gu, (c) => '%XX'.repeat(Buffer.byteLength(c)));
    assert.ok(encoded.length <= MAX_CLIENT_ERROR_MESSAGE.header, `${encoded.length}`);
  });
});
