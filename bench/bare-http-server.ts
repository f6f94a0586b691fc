/**
 * The baseline of the HTTP benchmark: a bare `node:http` server that reads each request body and
 * answers with fixed bytes (the response Nereid gives to the same request), so the difference to
 * Nereid is everything Nereid does per request beyond HTTP itself.
 *
 * Usage (child process): node bare-http-server.js <response-file> <header-length>
 * Prints `port <n>` on stdout once listening.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const body = readFileSync(process.argv[2]!);
const headerLength = process.argv[3]!;
const headers = {
  'Content-Type': 'application/octet-stream',
  'Inference-Header-Content-Length': headerLength,
  'Content-Length': body.byteLength,
};

const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    Buffer.concat(chunks);
    res.writeHead(200, headers);
    res.end(body);
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`port ${(server.address() as AddressInfo).port}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
