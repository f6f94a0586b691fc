/**
 * The metrics endpoint (protocol.md §5.1): its own HTTP listener, `GET /metrics` (a trailing `/`
 * tolerated) answering the server's Prometheus text. Other GET paths get 200 with an empty body
 * and other methods 405, as Triton's metrics port does.
 */
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { clientErrorMessage, toNereidError } from '@nereid/protocol';
import type { Server } from '../../core/server.js';
import { DEFAULT_HTTP_LIMITS } from '../http/http-frontend.js';
import { boundPort, listenHttp } from '../http/listen.js';

export interface MetricsFrontendOptions {
  /** `--metrics-address`; default 0.0.0.0 (`nereid serve` defaults it to the HTTP address). */
  address?: string;
  /** `--metrics-port`, default 8002; 0 picks a free port. */
  port?: number;
}

export class MetricsFrontend {
  readonly #server: Server;
  readonly #http: HttpServer;
  readonly #options: Required<MetricsFrontendOptions>;

  constructor(server: Server, options: MetricsFrontendOptions = {}) {
    this.#server = server;
    this.#options = { address: options.address ?? '0.0.0.0', port: options.port ?? 8002 };
    // The HTTP endpoint's default limits: a scraper sends small requests, and nothing here should
    // let a client hold connections longer or in greater number than there.
    this.#http = createServer(
      {
        keepAliveTimeout: DEFAULT_HTTP_LIMITS.keepAliveTimeoutMs,
        headersTimeout: DEFAULT_HTTP_LIMITS.headersTimeoutMs,
        requestTimeout: DEFAULT_HTTP_LIMITS.requestTimeoutMs,
        connectionsCheckingInterval: 1000,
      },
      (req, res) => void this.#handle(req, res),
    );
    this.#http.maxConnections = DEFAULT_HTTP_LIMITS.maxConnections;
  }

  /** Starts listening; resolves with the bound port. */
  listen(): Promise<number> {
    return listenHttp(this.#http, 'Metrics', this.#options.address, this.#options.port);
  }

  get port(): number {
    return boundPort(this.#http, this.#options.port);
  }

  /** Stops accepting connections and closes idle ones; resolves once every connection is closed. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      this.#http.close(() => resolve());
      this.#http.closeIdleConnections();
    });
  }

  /** Closes every remaining connection, idle or kept alive. */
  closeAllConnections(): void {
    this.#http.closeAllConnections();
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    req.resume();
    if (req.method !== 'GET') {
      const body = '{"error":"Method Not Allowed"}';
      res.writeHead(405, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (path !== '/metrics' && path !== '/metrics/') {
      res.writeHead(200, { 'Content-Length': 0 });
      res.end();
      return;
    }
    let text: string;
    try {
      text = await this.#server.metrics.text();
    } catch (err) {
      const body = JSON.stringify({ error: clientErrorMessage(toNereidError(err).message, 'body') });
      res.writeHead(500, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    res.writeHead(200, { 'Content-Type': this.#server.metrics.contentType, 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  }
}
