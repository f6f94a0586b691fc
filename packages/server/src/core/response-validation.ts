/**
 * Checks an output tensor a backend produced against the model's configuration before it goes on
 * the wire, so a faulty backend (a custom one, typically) gives the client a clear error naming
 * the model and output instead of a malformed response.
 */
import { fixedByteSize, NereidError } from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';
import type { TensorSpec } from './request-validation.js';

/** Throws BACKEND_ERROR when `tensor` does not match `spec` (datatype, shape, byte size). */
export function checkBackendOutput(model: string, spec: TensorSpec, tensor: BackendTensor): void {
  const fail = (what: string) => new NereidError('BACKEND_ERROR', `model '${model}' produced output '${spec.name}' ${what}`);
  if (tensor.datatype !== spec.datatype) throw fail(`with datatype ${String(tensor.datatype)}, but its configuration says ${spec.datatype}`);
  if (!Array.isArray(tensor.shape) || !tensor.shape.every((d) => Number.isInteger(d) && d >= 0)) {
    throw fail(`with shape ${JSON.stringify(tensor.shape)}; a shape is a list of non-negative integers`);
  }
  if (!(tensor.data instanceof Uint8Array)) throw fail('whose data is not a Uint8Array');
  const expected = fixedByteSize(tensor.datatype, tensor.shape);
  if (expected !== undefined && expected !== tensor.data.byteLength) {
    throw fail(`with shape [${tensor.shape.join(', ')}] (${expected} bytes of ${spec.datatype}) but ${tensor.data.byteLength} bytes of data`);
  }
}
