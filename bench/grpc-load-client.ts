/**
 * One load-generating process of the gRPC and dynamic-batching benchmarks (forked by
 * `LoadClientPool`, bench/lib.ts): a closed loop of `ModelInfer` calls or `ModelStreamInfer`
 * messages against 127.0.0.1:<port>, sending pre-encoded request bytes and taking responses as raw
 * bytes (no protobuf work in the client: its CPU goes to the transport alone).
 *
 * Two gRPC transports, the same bytes on the wire (h2c, gRPC length-prefixed messages):
 *   - `grpc-js`: @grpc/grpc-js's `Client` (about 10k unary calls per second and process at best);
 *   - `http2`: gRPC framed by hand over `node:http2`, without grpc-js's client-side call stack
 *     (interceptors, filters, load balancing), at a fraction of its CPU per call.
 * And `http`: the request file is the body of a KServe v2 HTTP/REST inference request (JSON
 * header and binary tensor data), POSTed on keep-alive connections by bench/lean-http.ts, one per
 * call in flight (unary only; the response body's length is checked).
 *
 * Usage (child process with IPC): node grpc-load-client.js <request-file>
 * Protocol (messages from the parent):
 *   { type: 'start', options: GrpcLoadOptions } → connects, loops run (warm-up), answers { type: 'started' }
 *   { type: 'measure' }                        → counting starts
 *   { type: 'stop' }                           → loops end, connection closed, answers { type: 'result', … }
 *   { type: 'exit' }
 * Every response's status and length are checked; a failure answers { type: 'error', message }.
 */
import { readFileSync } from 'node:fs';
import { connect, constants, type ClientHttp2Session, type IncomingHttpHeaders } from 'node:http2';
import { performance } from 'node:perf_hooks';
import { Client, credentials } from '@grpc/grpc-js';
import { frameGrpcMessage, GRPC_INFERENCE_SERVICE } from '@nereid/protocol';
import { httpPoster, type LoadClientMessage, type LoadClientResult } from './lib.js';

export interface GrpcLoadOptions {
  port: number;
  transport: 'grpc-js' | 'http2' | 'http';
  /** For the `http` transport (KServe v2 over HTTP/1.1, unary only): the path and headers of the POST. */
  http?: { path: string; headers: Record<string, string | number> };
  /** `unary`: `inflight` concurrent ModelInfer calls; `stream`: `streams` streams with `inflight` messages in flight each. */
  mode: 'unary' | 'stream';
  inflight: number;
  streams: number;
  /** Byte length every response message must have (Nereid's response to this request). */
  expectedLength: number;
}

const INFER = GRPC_INFERENCE_SERVICE.ModelInfer.path;
const STREAM = GRPC_INFERENCE_SERVICE.ModelStreamInfer.path;
const request = readFileSync(process.argv[2]!);
/** The request as one gRPC length-prefixed message (uncompressed), for the http2 transport. */
const framed = frameGrpcMessage(request);
const h2Headers = (path: string) => ({
  [constants.HTTP2_HEADER_METHOD]: 'POST',
  [constants.HTTP2_HEADER_PATH]: path,
  'content-type': 'application/grpc',
  te: 'trailers',
});
const identity = (b: Buffer) => b;
const send = (m: LoadClientMessage) => process.send!(m);

let latencies: number[] = [];
let completed = 0;
let measuring = false;
let stopping = false;
let t0 = 0;
let cpu0 = process.cpuUsage();
let elu0 = performance.eventLoopUtilization();
let close: (() => void) | undefined;
let running: Promise<void>[] = [];

function fail(message: string): void {
  if (!stopping) send({ type: 'error', message });
  stopping = true;
}

function record(start: number): void {
  if (!measuring) return;
  latencies.push((performance.now() - start) * 1000);
  completed++;
}

/** One unary call: resolves with the response message's length, rejects with a message. */
type UnaryCall = (callback: (error: string | undefined, length: number) => void) => void;

/** `call` in a closed loop until stopping. */
function unaryLoop(call: UnaryCall, expected: number): Promise<void> {
  return new Promise((done) => {
    const once = () => {
      const start = performance.now();
      call((error, length) => {
        if (error !== undefined) return fail(`ModelInfer: ${error}`), done();
        if (length !== expected) return fail(`ModelInfer: response of ${length} bytes, expected ${expected}`), done();
        record(start);
        if (stopping) done();
        else once();
      });
    };
    once();
  });
}

/**
 * A closed loop on one stream: `inflight` requests written at once, another for each response
 * (responses come in request order), the write side ended once stopping and drained.
 */
function streamDriver(write: () => void, end: () => void, inflight: number, expected: number) {
  const sent: number[] = [];
  let head = 0;
  const send = () => {
    sent.push(performance.now());
    write();
  };
  const begin = () => {
    for (let i = 0; i < inflight; i++) send();
  };
  const onResponse = (length: number) => {
    if (length !== expected) fail(`ModelStreamInfer: response of ${length} bytes, expected ${expected}`);
    record(sent[head++]!);
    if (head > 4096) {
      sent.splice(0, head);
      head = 0;
    }
    if (!stopping) send();
    else if (head === sent.length) end();
  };
  return { begin, onResponse };
}

/** Splits gRPC length-prefixed messages out of DATA chunks; calls `onMessage` with each length. */
function messageReader(onMessage: (length: number) => void): (chunk: Buffer) => void {
  let pending: Buffer | undefined;
  return (chunk) => {
    let buf = pending ? Buffer.concat([pending, chunk]) : chunk;
    while (buf.byteLength >= 5) {
      const length = buf.readUInt32BE(1);
      if (buf.byteLength < 5 + length) break;
      onMessage(length);
      buf = buf.subarray(5 + length);
    }
    pending = buf.byteLength > 0 ? buf : undefined;
  };
}

/** '' for grpc-status 0, else a description (status in trailers, or headers of a trailers-only response). */
function grpcStatus(headers: IncomingHttpHeaders, trailers: IncomingHttpHeaders | undefined): string {
  const status = trailers?.['grpc-status'] ?? headers['grpc-status'];
  if (status === '0') return '';
  const detail = trailers?.['grpc-message'] ?? headers['grpc-message'];
  return `grpc-status ${String(status)}${detail ? ` ${decodeURIComponent(String(detail))}` : ''} (HTTP ${String(headers[':status'])})`;
}

function grpcJsLoops(o: GrpcLoadOptions, client: Client): Promise<void>[] {
  if (o.mode === 'unary') {
    const call: UnaryCall = (cb) =>
      client.makeUnaryRequest(INFER, identity, identity, request, (err, response) => (err ? cb(err.message, 0) : cb(undefined, response!.byteLength)));
    return Array.from({ length: o.inflight }, () => unaryLoop(call, o.expectedLength));
  }
  return Array.from(
    { length: o.streams },
    () =>
      new Promise<void>((done) => {
        const stream = client.makeBidiStreamRequest(STREAM, identity, identity);
        const driver = streamDriver(() => stream.write(request), () => stream.end(), o.inflight, o.expectedLength);
        stream.on('data', (response: Buffer) => driver.onResponse(response.byteLength));
        stream.on('error', (err) => (fail(`ModelStreamInfer: ${err.message}`), done()));
        stream.on('status', () => done());
        driver.begin();
      }),
  );
}

function http2Loops(o: GrpcLoadOptions, session: ClientHttp2Session): Promise<void>[] {
  if (o.mode === 'unary') {
    const headers = h2Headers(INFER);
    const call: UnaryCall = (cb) => {
      const req = session.request(headers);
      let responseHeaders: IncomingHttpHeaders = {};
      let trailers: IncomingHttpHeaders | undefined;
      let length = -1;
      req.on('response', (h) => (responseHeaders = h));
      req.on('trailers', (t) => (trailers = t));
      req.on('data', messageReader((l) => (length = l)));
      req.on('error', (err) => cb(err.message, 0));
      req.on('end', () => {
        const status = grpcStatus(responseHeaders, trailers);
        cb(status || undefined, length);
      });
      req.end(framed);
    };
    return Array.from({ length: o.inflight }, () => unaryLoop(call, o.expectedLength));
  }
  return Array.from(
    { length: o.streams },
    () =>
      new Promise<void>((done) => {
        const req = session.request(h2Headers(STREAM));
        let responseHeaders: IncomingHttpHeaders = {};
        let trailers: IncomingHttpHeaders | undefined;
        const driver = streamDriver(() => req.write(framed), () => req.end(), o.inflight, o.expectedLength);
        req.on('response', (h) => (responseHeaders = h));
        req.on('trailers', (t) => (trailers = t));
        req.on('data', messageReader(driver.onResponse));
        req.on('error', (err) => (fail(`ModelStreamInfer: ${err.message}`), done()));
        req.on('end', () => {
          const status = grpcStatus(responseHeaders, trailers);
          if (status) fail(`ModelStreamInfer: ${status}`);
          done();
        });
        driver.begin();
      }),
  );
}

/** `inflight` POSTs of the request file's bytes on keep-alive connections (one per call in flight). */
function httpLoops(o: GrpcLoadOptions): Promise<void>[] {
  if (o.mode !== 'unary' || o.http === undefined) throw new Error('the http transport takes unary loads with `http` options');
  const poster = httpPoster(o.port, o.http.path, request, o.http.headers, o.inflight);
  close = () => poster.close();
  const call: UnaryCall = (cb) =>
    poster.post().then(
      (length) => cb(undefined, length),
      (err: Error) => cb(err.message, 0),
    );
  return Array.from({ length: o.inflight }, () => unaryLoop(call, o.expectedLength));
}

/** Connects and starts the loops of `o`; answers 'started'. */
function start(o: GrpcLoadOptions): void {
  const started = (loops: Promise<void>[]) => {
    running = loops;
    send({ type: 'started' });
  };
  if (o.transport === 'http') {
    try {
      started(httpLoops(o));
    } catch (err) {
      fail(String(err));
    }
    return;
  }
  if (o.transport === 'http2') {
    const session = connect(`http://127.0.0.1:${o.port}`);
    close = () => session.close();
    session.once('error', (err) => fail(`connect: ${err.message}`));
    session.once('connect', () => started(http2Loops(o, session)));
    return;
  }
  const client = new Client(`127.0.0.1:${o.port}`, credentials.createInsecure(), {
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': -1,
  });
  close = () => client.close();
  client.waitForReady(Date.now() + 10_000, (err) => (err ? fail(`connect: ${err.message}`) : started(grpcJsLoops(o, client))));
}

// The parent is gone (it failed, or was killed): nothing left to report to.
process.on('disconnect', () => process.exit(0));

process.on('message', (message: LoadClientMessage<GrpcLoadOptions>) => {
  switch (message.type) {
    case 'start':
      stopping = false;
      measuring = false;
      start(message.options);
      break;
    case 'measure':
      latencies = [];
      completed = 0;
      measuring = true;
      t0 = performance.now();
      cpu0 = process.cpuUsage();
      elu0 = performance.eventLoopUtilization();
      break;
    case 'stop': {
      measuring = false;
      stopping = true;
      const seconds = (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      const elu = performance.eventLoopUtilization(elu0);
      void Promise.all(running).then(() => {
        close?.();
        close = undefined;
        running = [];
        const result: LoadClientResult = {
          type: 'result',
          completed,
          seconds,
          latencies: Float64Array.from(latencies),
          cpuUs: cpu.user + cpu.system,
          loopUtilization: elu.utilization,
        };
        send(result);
      });
      break;
    }
    case 'exit':
      process.exit(0);
  }
});
