/**
 * NereidError → gRPC status, through the one mapping table of `@nereid/protocol`.
 */
import type { ServiceError } from '@grpc/grpc-js';
import { Metadata } from '@grpc/grpc-js';
import { clientErrorMessage, toNereidError } from '@nereid/protocol';

/** A grpc-js error object carrying the mapped status code and the message. */
export function grpcError(err: unknown): Partial<ServiceError> & { code: number; details: string } {
  const error = toNereidError(err);
  const message = clientErrorMessage(error.message, 'header');
  return { code: error.grpcStatus, details: message, message, metadata: new Metadata() };
}
