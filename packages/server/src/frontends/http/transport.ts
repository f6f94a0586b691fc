/**
 * What the HTTP/REST frontend needs of a request and a response: the part of `node:http`'s
 * IncomingMessage and ServerResponse it uses, which both its transports provide — Nereid's own
 * HTTP/1.1 server (h1/server.ts, the default) and `node:http` (`--http-server=node`).
 */
import type { Socket } from 'node:net';

export type HttpHeaders = Record<string, string | string[] | undefined>;

export interface HttpRequest {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly headers: HttpHeaders & { 'content-length'?: string; 'content-encoding'?: string; 'transfer-encoding'?: string; accept?: string; 'accept-encoding'?: string };
  readonly socket: Socket;
  /** `data` (a Buffer of the body), `end`, `error`, `aborted`. */
  on(event: string, listener: (...args: any[]) => void): unknown;
  /** Reads and drops the body. */
  resume(): unknown;
}

export interface HttpResponse {
  readonly headersSent: boolean;
  readonly writableFinished: boolean;
  readonly destroyed: boolean;
  setHeader(name: string, value: string | number): unknown;
  writeHead(status: number, headers?: Record<string, string | number>): unknown;
  write(chunk: Uint8Array | string): boolean;
  end(chunk?: Uint8Array | string): unknown;
  cork(): void;
  destroy(): unknown;
  /** `finish` once the response is written out, `close` when the connection closes first. */
  once(event: 'finish' | 'close', listener: () => void): unknown;
  off(event: 'finish' | 'close', listener: () => void): unknown;
}
