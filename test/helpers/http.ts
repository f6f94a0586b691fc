/**
 * Plain HTTP helpers for end-to-end tests: requests over `node:http` (which, unlike `fetch`, can
 * send any header, e.g. an empty `Expect:`), raw socket writes for malformed transfers, and the
 * binary tensor data framing of protocol.md §3.8 built by hand.
 */
import { request, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { connect } from 'node:net';

export interface HttpResult {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body exactly as received (still compressed if the server compressed it). */
  body: Buffer;
}

export interface HttpRequestOptions {
  /** Default: POST when a body is given, else GET. */
  method?: string;
  headers?: OutgoingHttpHeaders;
  body?: string | Uint8Array;
  /** Aborts the request (the socket is destroyed). */
  signal?: AbortSignal;
}

/** One request on a fresh connection (no keep-alive pool); resolves once the whole body is in. */
export function nodeRequest(baseUrl: string, path: string, options: HttpRequestOptions = {}): Promise<HttpResult> {
  const url = new URL(path, baseUrl);
  const method = options.method ?? (options.body === undefined ? 'GET' : 'POST');
  const headers: OutgoingHttpHeaders = { ...options.headers };
  if (options.body !== undefined && headers['Content-Length'] === undefined && headers['content-length'] === undefined) {
    headers['Content-Length'] = Buffer.byteLength(options.body);
  }
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers, agent: false, signal: options.signal },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** POSTs `body` (an object is sent as JSON) to `/v2/models/<model>/infer`. */
export function postInfer(
  baseUrl: string,
  model: string,
  body: unknown,
  headers: OutgoingHttpHeaders = {},
  version?: string,
): Promise<HttpResult> {
  const path = `/v2/models/${encodeURIComponent(model)}${version === undefined ? '' : `/versions/${version}`}/infer`;
  const payload = typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body);
  return nodeRequest(baseUrl, path, { method: 'POST', headers, body: payload });
}

/**
 * Writes `bytes` on a fresh TCP connection, then either waits for the server to answer (resolving
 * with everything it sent until it closed or `settleMs` passed without data) or, with
 * `destroyAfterWrite`, closes the socket at once and resolves with ''. `endAfterWrite` half-closes
 * the socket (sends FIN) after writing and still reads the answer.
 */
export function rawExchange(
  port: number,
  bytes: string | Uint8Array,
  options: { destroyAfterWrite?: boolean; endAfterWrite?: boolean; settleMs?: number } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(Buffer.concat(chunks).toString('latin1'));
    };
    socket.on('connect', () => {
      socket.write(bytes, () => {
        if (options.destroyAfterWrite) finish();
        else if (options.endAfterWrite) socket.end();
      });
    });
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      clearTimeout(timer);
      timer = setTimeout(finish, options.settleMs ?? 200);
    });
    socket.on('end', finish);
    socket.on('close', finish);
    socket.on('error', (err) => {
      clearTimeout(timer);
      if (chunks.length > 0) finish();
      else reject(err);
    });
  });
}

/** The bytes of a typed array (a view, no copy). */
export function bytesOf(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

/** A binary-extension request body (§3.8): the JSON header, then the blobs back to back. */
export function binaryBody(header: unknown, blobs: readonly Uint8Array[] = []): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  return { body: Buffer.concat([json, ...blobs]), headerLength: json.byteLength };
}

export interface SplitResponse {
  /** The JSON header text (parse with JSON.parse, or inspect raw for exact 64-bit values). */
  text: string;
  /** The bytes after the JSON header (empty when the response is pure JSON). */
  binary: Buffer;
}

/** Splits an (already decompressed) infer response at its `Inference-Header-Content-Length`. */
export function splitResponse(headers: IncomingHttpHeaders, body: Buffer): SplitResponse {
  const h = headers['inference-header-content-length'];
  if (h === undefined) return { text: body.toString('utf8'), binary: body.subarray(body.byteLength) };
  const n = Number(h);
  return { text: body.subarray(0, n).toString('utf8'), binary: body.subarray(n) };
}

/** A JSON output object of an infer response (§3.7.2). */
export interface ResponseOutput {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown[];
  parameters?: { binary_data_size?: number };
}

export interface ResponseHeader {
  id?: string;
  model_name: string;
  model_version: string;
  parameters?: Record<string, unknown>;
  outputs: ResponseOutput[];
}

/**
 * Parses an infer response: the JSON header, and the binary blob of each binary output by name
 * (located by walking `outputs` in order and summing `binary_data_size`, as clients do).
 */
export function parseInferResponse(headers: IncomingHttpHeaders, body: Buffer): { header: ResponseHeader; text: string; blobs: Map<string, Buffer> } {
  const { text, binary } = splitResponse(headers, body);
  const header = JSON.parse(text) as ResponseHeader;
  const blobs = new Map<string, Buffer>();
  let offset = 0;
  for (const out of header.outputs) {
    const size = out.parameters?.binary_data_size;
    if (size === undefined) continue;
    blobs.set(out.name, binary.subarray(offset, offset + size));
    offset += size;
  }
  if (offset !== binary.byteLength) throw new Error(`response has ${binary.byteLength} binary bytes but its outputs declare ${offset}`);
  return { header, text, blobs };
}

/** The §2.3 serialization of BYTES elements. */
export function bytesElements(elements: readonly (string | Uint8Array)[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of elements) {
    const b = typeof e === 'string' ? Buffer.from(e, 'utf8') : Buffer.from(e);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(b.byteLength);
    parts.push(len, b);
  }
  return Buffer.concat(parts);
}

/** Splits §2.3-serialized BYTES data into UTF-8 strings. */
export function readBytesElements(data: Uint8Array): string[] {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const out: string[] = [];
  let off = 0;
  while (off < buf.byteLength) {
    const len = buf.readUInt32LE(off);
    out.push(buf.subarray(off + 4, off + 4 + len).toString('utf8'));
    off += 4 + len;
  }
  return out;
}

/** A response whose headers arrived; `body()` reads the rest (resuming a stalled read). */
export interface StalledResponse {
  body(): Promise<Float32Array>;
}

/**
 * POSTs one FP32 tensor to `model` as binary data (protocol.md §3.8) on a fresh connection and
 * asks for its output `output` as binary data; resolves once the response headers arrived. With
 * `stall`, nothing of the body is read until `body()` is called, so the server cannot finish
 * sending a large response meanwhile.
 */
export function postFp32(
  baseUrl: string,
  model: string,
  input: string,
  output: string,
  shape: readonly number[],
  data: Float32Array,
  stall: boolean,
): Promise<StalledResponse> {
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: input, datatype: 'FP32', shape, parameters: { binary_data_size: data.byteLength } }],
      outputs: [{ name: output, parameters: { binary_data: true } }],
    }),
  );
  const payload = Buffer.concat([header, Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(`/v2/models/${model}/infer`, baseUrl),
      { method: 'POST', agent: false, headers: { 'Content-Length': payload.byteLength, 'Inference-Header-Content-Length': header.byteLength } },
      (res) => {
        if (stall) res.pause();
        const chunks: Buffer[] = [];
        const done = new Promise<Float32Array>((ok, fail) => {
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const all = Buffer.concat(chunks);
            if (res.statusCode !== 200) return fail(new Error(`HTTP ${res.statusCode}: ${all.toString()}`));
            const blob = all.subarray(Number(res.headers['inference-header-content-length']));
            ok(new Float32Array(blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.byteLength)));
          });
          res.on('error', fail);
        });
        resolve({
          body: () => {
            res.resume();
            return done;
          },
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}
