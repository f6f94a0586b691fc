/**
 * The fallback gRPC server (`--grpc-server=grpc-js`): @grpc/grpc-js's server behind the same small
 * surface as `H2GrpcServer`, configured through grpc-js's channel options.
 */
import { Server as GrpcServer, ServerCredentials, type UntypedServiceImplementation } from '@grpc/grpc-js';
import type { GrpcMethodDefinition, H2ServerOptions } from './h2-server.js';

export class GrpcJsServer {
  readonly #grpc: GrpcServer;

  constructor(options: H2ServerOptions) {
    const channelOptions: Record<string, number> = {
      // grpc-js inflates a compressed message only up to this length, then refuses it.
      'grpc.max_receive_message_length': options.maxReceiveMessageLength,
      'grpc.max_send_message_length': options.maxSendMessageLength,
      'grpc.keepalive_time_ms': options.keepaliveTimeMs,
      'grpc.keepalive_timeout_ms': options.keepaliveTimeoutMs,
    };
    if (options.maxConcurrentStreams > 0) channelOptions['grpc.max_concurrent_streams'] = options.maxConcurrentStreams;
    if (options.maxConnectionAgeMs !== undefined) channelOptions['grpc.max_connection_age_ms'] = options.maxConnectionAgeMs;
    if (options.maxConnectionAgeGraceMs !== undefined) channelOptions['grpc.max_connection_age_grace_ms'] = options.maxConnectionAgeGraceMs;
    this.#grpc = new GrpcServer(channelOptions);
  }

  addService(service: Record<string, GrpcMethodDefinition>, implementation: Record<string, unknown>): void {
    this.#grpc.addService(service as never, implementation as UntypedServiceImplementation);
  }

  listen(host: string, port: number): Promise<number> {
    const address = host.includes(':') ? `[${host}]` : host;
    return new Promise((resolve, reject) => {
      this.#grpc.bindAsync(`${address}:${port}`, ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
    });
  }

  tryShutdown(done: () => void): void {
    this.#grpc.tryShutdown(() => done());
  }

  forceShutdown(): void {
    this.#grpc.forceShutdown();
  }
}
