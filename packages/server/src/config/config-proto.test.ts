// Every fixture config, completed, survives encoding as the protobuf ModelConfig message and
// decoding back: the gRPC ModelConfig RPC sends exactly what the HTTP config endpoint shows.
// (The same check over the 410 reference configs is in triton-configs.corpus.test.ts.)
import test from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fixturesDir, protoRoundTripFailures } from './test-support.js';

test('every fixture config round-trips through the protobuf ModelConfig', () => {
  const files = readdirSync(fixturesDir())
    .filter((f) => f.endsWith('.pbtxt'))
    .map((f) => join(fixturesDir(), f));
  assert.ok(files.length > 0, `no fixtures in ${fixturesDir()}`);
  assert.deepEqual(protoRoundTripFailures(files), []);
});
