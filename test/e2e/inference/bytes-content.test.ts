/**
 * BYTES elements the onnxruntime backend cannot pass unchanged (not UTF-8, or holding a NUL) are
 * refused with INPUT_BYTES_UNSUPPORTED naming the model, input and element, instead of reaching
 * the model altered; the other requests of the same batch are served. Found by the conformance
 * tier (tritonclient sends arbitrary bytes).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleIdentityModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { binaryBody, bytesElements, parseInferResponse, postInfer, readBytesElements } from '../../helpers/http.js';

let repo: string;
let srv: RunningServer;

before(async () => {
  const model = simpleIdentityModel();
  // A queue delay long enough that concurrent requests are batched together.
  const config = `${model.config!}dynamic_batching { max_queue_delay_microseconds: 200000 }\n`;
  repo = await makeRepository({ simple_identity: modelFiles(model, { config }) });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function identity(elements: readonly (string | Uint8Array)[]) {
  const blob = bytesElements(elements);
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, elements.length], parameters: { binary_data_size: blob.length } }], outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }] },
    [blob],
  );
  return postInfer(srv.url, 'simple_identity', body, { 'Inference-Header-Content-Length': headerLength });
}

describe('BYTES content the onnxruntime backend cannot carry', () => {
  it('an element that is not UTF-8, or holds a NUL, is a 501 naming the model, input and element; its batch-mates are served', async () => {
    const [good, notUtf8, nul, alsoGood] = await Promise.all([
      identity(['plain', 'na\u00efve']),
      identity(['ok', Uint8Array.from([0xff, 0x31])]),
      identity([Uint8Array.from([0x61, 0x00, 0x62])]),
      identity(['']),
    ]);
    assert.equal(notUtf8.status, 501, notUtf8.body.toString());
    assert.match(JSON.parse(notUtf8.body.toString()).error, /^input 'INPUT0' of model 'simple_identity': element 1 is not valid UTF-8, .*send UTF-8 text without NUL/);
    assert.equal(nul.status, 501, nul.body.toString());
    assert.match(JSON.parse(nul.body.toString()).error, /element 0 contains a NUL byte/);
    for (const [res, want] of [[good, ['plain', 'na\u00efve']], [alsoGood, ['']]] as const) {
      assert.equal(res.status, 200, res.body.toString());
      const { blobs } = parseInferResponse(res.headers, res.body);
      assert.deepEqual(readBytesElements(blobs.get('OUTPUT0')!), want);
    }
  });
});
