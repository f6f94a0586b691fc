/**
 * The cache key of a request (models-and-scheduling.md §8.2): a SHA-256 digest of the model
 * name, the resolved version, then every input sorted by name — its name, datatype, shape,
 * byte length and bytes — and the sorted names of the requested outputs.
 *
 * Beyond Triton, whose 64-bit hash covers the name and bytes of each input only: datatype and
 * shape are in the key, so two requests with the same bytes in different shapes do not share
 * an entry, and so are the requested outputs (a backend computes only those, so a response
 * made for one set cannot answer another). Nothing else is: not the request id, priority,
 * timeout, classification or shared-memory placement of outputs (applied to the cached
 * response per request), nor custom request parameters, which Triton leaves out too.
 *
 * The bytes are hashed where they lie (HTTP body views, gRPC message views, mapped
 * shared-memory regions): no copy.
 */
import { createHash } from 'node:crypto';
import type { BackendTensor } from '../backends/spi.js';

const SEP = '\u0000';

export function requestKey(
  model: string,
  version: number,
  inputs: ReadonlyMap<string, BackendTensor>,
  requestedOutputs: readonly string[],
): string {
  const hash = createHash('sha256');
  hash.update(`${model}${SEP}${version}${SEP}${inputs.size}${SEP}`);
  const names = inputs.size === 1 ? [...inputs.keys()] : [...inputs.keys()].sort();
  for (const name of names) {
    const t = inputs.get(name)!;
    hash.update(`${name}${SEP}${t.datatype}${SEP}${t.shape.join(',')}${SEP}${t.data.byteLength}${SEP}`);
    hash.update(t.data);
  }
  const outputs = requestedOutputs.length > 1 ? [...requestedOutputs].sort() : requestedOutputs;
  hash.update(`${outputs.length}${SEP}${outputs.join(SEP)}`);
  return hash.digest('base64');
}
