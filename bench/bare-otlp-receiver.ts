/**
 * The trace collector of the tracing benchmark: a bare `node:http` server that reads each OTLP/HTTP
 * export (`POST /v1/traces`), counts its bytes and answers 200 with an empty export response, so
 * the benchmark measures what tracing costs Nereid and not a collector's storage.
 *
 * Usage (child process): node bare-otlp-receiver.js
 * Prints `port <n>` on stdout once listening; on SIGTERM prints `exports <n> bytes <n>` and exits.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let exports = 0;
let bytes = 0;
const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  req.on('data', (c: Buffer) => void (bytes += c.byteLength));
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': 2 });
    res.end('{}');
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`port ${(server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => {
  process.stdout.write(`exports ${exports} bytes ${bytes}\n`);
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
