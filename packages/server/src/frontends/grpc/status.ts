/**
 * NereidError → gRPC status, through the one mapping table of `@nereid/protocol`.
 */
import { clientErrorMessage, toNereidError } from '@nereid/protocol';

/** A status object carrying the mapped status code and the message (both gRPC servers take it). */
export function grpcError(err: unknown): { code: number; details: string; message: string } {
  const error = toNereidError(err);
  const message = clientErrorMessage(error.message, 'header');
  return { code: error.grpcStatus, details: message, message };
}
