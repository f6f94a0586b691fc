/**
 * The error both clients raise for what a server answered (protocol.md §2.6). Errors the client
 * finds itself (bad input data, a parameter it cannot encode) are `NereidError`s instead.
 */
import { ERROR_KIND_STATUS, GrpcStatus } from '@nereid/protocol';

/**
 * An error answered by the server, with its message (HTTP: the body's `error`; gRPC: the status
 * details or a stream's `error_message`).
 *
 * `status` is an HTTP status: the response's own for `HttpClient`, and for `GrpcClient` the HTTP
 * status of the same error category (protocol.md §2.6; codes outside that table use gRPC's usual
 * HTTP equivalents, e.g. DEADLINE_EXCEEDED → 504). `grpcCode` is the gRPC status code, set only
 * by `GrpcClient`.
 */
export class InferenceServerError extends Error {
  readonly status: number;
  readonly grpcCode: number | undefined;

  constructor(status: number, message: string, options: { grpcCode?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'InferenceServerError';
    this.status = status;
    this.grpcCode = options.grpcCode;
  }
}

/** gRPC code → HTTP status: the inverse of the error-kind table, then the common equivalents. */
const GRPC_TO_HTTP = new Map<number, number>([
  [GrpcStatus.DEADLINE_EXCEEDED, 504],
  [GrpcStatus.PERMISSION_DENIED, 403],
  [GrpcStatus.RESOURCE_EXHAUSTED, 429],
  [GrpcStatus.FAILED_PRECONDITION, 400],
  [GrpcStatus.ABORTED, 409],
  [GrpcStatus.OUT_OF_RANGE, 400],
  [GrpcStatus.DATA_LOSS, 500],
  [GrpcStatus.UNAUTHENTICATED, 401],
]);
for (const { http, grpc } of Object.values(ERROR_KIND_STATUS)) GRPC_TO_HTTP.set(grpc, http);

/** The HTTP status that stands for gRPC status `code` (500 for a code gRPC does not define). */
export function httpStatusOfGrpc(code: number): number {
  return GRPC_TO_HTTP.get(code) ?? 500;
}

/** An InferenceServerError for a failed gRPC call: its code and details. */
export function grpcServerError(code: number, details: string, cause?: unknown): InferenceServerError {
  return new InferenceServerError(httpStatusOfGrpc(code), details, { grpcCode: code, cause });
}
