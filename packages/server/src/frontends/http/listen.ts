/** Binding an HTTP listener the way every HTTP-based frontend (inference, metrics) reports it. */
import type { AddressInfo, Server as NetServer } from 'node:net';
import { NereidError } from '@nereid/protocol';

/**
 * Starts `server` listening on `address:port`; resolves with the bound port (an ephemeral one
 * when `port` is 0). A failure to bind rejects with UNAVAILABLE naming `service` and the address.
 */
export function listenHttp(server: NetServer, service: string, address: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) =>
      reject(new NereidError('UNAVAILABLE', `${service} service could not listen on ${address}:${port}: ${err.message}`));
    server.once('error', onError);
    server.listen(port, address, () => {
      server.off('error', onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** The port `server` is bound to, or `configured` while it is not listening. */
export function boundPort(server: NetServer, configured: number): number {
  return (server.address() as AddressInfo | null)?.port ?? configured;
}
