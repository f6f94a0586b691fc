/**
 * NereidError → gRPC status, through the one mapping table of `@nereid/protocol`.
 */
import type { ServiceError } from '@grpc/grpc-js';
import { Metadata } from '@grpc/grpc-js';
import { toNereidError } from '@nereid/protocol';

/** A grpc-js error object carrying the mapped status code and the message. */
export function grpcError(err: unknown): Partial<ServiceError> & { code: number; details: string } {
  const error = toNereidError(err);
  return { code: error.grpcStatus, details: error.message, message: error.message, metadata: new Metadata() };
}
