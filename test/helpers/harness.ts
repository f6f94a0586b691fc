/**
 * End-to-end test helpers: build a model repository in a temporary directory, start a real Nereid
 * server on an ephemeral 127.0.0.1 port, and always shut it down.
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import {
  GrpcFrontend,
  HttpFrontend,
  Server,
  silentLogger,
  type GrpcFrontendOptions,
  type HttpFrontendOptions,
  type ServerOptions,
} from '@nereid/server';
import { GrpcClient, HttpClient, InferenceServerError } from '@nereid/client';

/** Files of one model directory, by path relative to it (`config.pbtxt`, `1/model.onnx`, …). */
export type ModelFiles = Record<string, string | Uint8Array>;

/** Writes `{ model: files }` into a fresh temporary repository and returns its path. */
export async function makeRepository(models: Record<string, ModelFiles>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'nereid-repo-'));
  await addModels(root, models);
  return root;
}

export async function addModels(root: string, models: Record<string, ModelFiles>): Promise<void> {
  for (const [model, files] of Object.entries(models)) {
    await mkdir(join(root, model), { recursive: true });
    for (const [path, content] of Object.entries(files)) {
      const full = join(root, model, path);
      await mkdir(dirname(full), { recursive: true });
      await writeFile(full, content);
    }
  }
}

export interface RunningServer {
  server: Server;
  http: HttpFrontend;
  port: number;
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** Closes the frontends (and their connections) and stops the server. */
  stop(): Promise<void>;
}

/** A server started with `grpc`: its gRPC frontend listens too. */
export interface RunningGrpcServer extends RunningServer {
  grpc: GrpcFrontend;
  grpcPort: number;
  /** `127.0.0.1:<grpcPort>`, a grpc-js channel target. */
  grpcTarget: string;
}

export type StartOptions = Partial<ServerOptions> & {
  modelRepositories: readonly string[];
  /** Also start a gRPC frontend on 127.0.0.1, port 0 (options other than address and port apply). */
  grpc?: boolean | GrpcFrontendOptions;
};

/**
 * Starts a server (quiet logger) and its HTTP frontend on an OS-chosen port; with `grpc`, also
 * its gRPC frontend on another.
 */
export async function startServer(options: StartOptions & { grpc: true | GrpcFrontendOptions }, http?: HttpFrontendOptions): Promise<RunningGrpcServer>;
export async function startServer(options: StartOptions, http?: HttpFrontendOptions): Promise<RunningServer>;
export async function startServer(options: StartOptions, http: HttpFrontendOptions = {}): Promise<RunningServer | RunningGrpcServer> {
  const { grpc: grpcOption, ...serverOptions } = options;
  const server = new Server({ logger: silentLogger(), ...serverOptions });
  await server.load();
  const frontend = new HttpFrontend(server, { address: '127.0.0.1', port: 0, ...http });
  const port = await frontend.listen();
  let grpc: GrpcFrontend | undefined;
  let grpcPort = 0;
  if (grpcOption !== undefined && grpcOption !== false) {
    grpc = new GrpcFrontend(server, { ...(grpcOption === true ? {} : grpcOption), address: '127.0.0.1', port: 0 });
    try {
      grpcPort = await grpc.listen();
    } catch (err) {
      const closing = frontend.close();
      frontend.closeAllConnections();
      await Promise.all([closing, server.stop()]);
      throw err;
    }
  }
  const running: RunningServer = {
    server,
    http: frontend,
    port,
    url: `http://127.0.0.1:${port}`,
    async stop() {
      const closing = [frontend.close(), ...(grpc ? [grpc.close()] : [])];
      await server.stop();
      frontend.closeAllConnections();
      grpc?.forceClose();
      await Promise.all(closing);
    },
  };
  return grpc === undefined ? running : { ...running, grpc, grpcPort, grpcTarget: `127.0.0.1:${grpcPort}` };
}

export async function removeDir(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true });
}

/** A repository, a server on it with both frontends, and an `@nereid/client` client of each. */
export interface ServedRepository {
  repo: string;
  srv: RunningGrpcServer;
  http: HttpClient;
  grpc: GrpcClient;
  /** Closes the gRPC client, stops the server and removes the repository. */
  close(): Promise<void>;
}

/**
 * Writes `models` into a fresh repository and serves it over HTTP and gRPC (`startServer` with
 * `options`); every model must load.
 */
export async function serveRepository(models: Record<string, ModelFiles>, options: Omit<StartOptions, 'modelRepositories' | 'grpc'> = {}): Promise<ServedRepository> {
  const repo = await makeRepository(models);
  let srv: RunningGrpcServer | undefined;
  try {
    srv = await startServer({ ...options, modelRepositories: [repo], grpc: true });
    assert.deepEqual(srv.server.startReport.failures, []);
  } catch (err) {
    await srv?.stop();
    await removeDir(repo);
    throw err;
  }
  const running = srv;
  const http = new HttpClient(running.url);
  const grpc = new GrpcClient(running.grpcTarget);
  return {
    repo,
    srv: running,
    http,
    grpc,
    async close() {
      grpc.close();
      await running.stop();
      await removeDir(repo);
    },
  };
}

/** The InferenceServerError a client call is refused with; fails if it succeeds or fails otherwise. */
export async function refusal(promise: Promise<unknown>): Promise<InferenceServerError> {
  return promise.then(
    (r) => assert.fail(`expected a refusal, got ${JSON.stringify(r)}`),
    (err: unknown) => {
      assert.ok(err instanceof InferenceServerError, String(err));
      return err;
    },
  );
}

/** A whole HTTP reply, body read as text. */
export interface HttpReply {
  status: number;
  headers: Headers;
  text: string;
}

/** `fetch` that reads the whole body; never throws for an HTTP error status. */
export async function httpRequest(url: string, init?: RequestInit): Promise<HttpReply> {
  const res = await fetch(url, init);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** The reply's body parsed as JSON, after checking it is labelled `application/json`. */
export function jsonBody(reply: HttpReply): unknown {
  const type = reply.headers.get('content-type');
  if (type !== 'application/json') throw new Error(`expected an application/json body, got ${String(type)}: ${reply.text}`);
  return JSON.parse(reply.text) as unknown;
}

/** One input tensor of a JSON inference request (protocol.md §3.7.1). */
export interface JsonInferInput {
  name: string;
  datatype: string;
  shape: readonly number[];
  data: readonly (number | string | boolean)[];
}

/** One output tensor of a JSON inference response (protocol.md §3.7.2). */
export interface JsonInferOutput {
  name: string;
  datatype: string;
  shape: number[];
  data: (number | string | boolean)[];
}

export interface JsonInferResponse {
  model_name: string;
  model_version: string;
  id?: string;
  outputs: JsonInferOutput[];
}

/** POSTs a JSON inference request to `/v2/models/{model}[/versions/{version}]/infer`. */
export async function inferJson(
  baseUrl: string,
  model: string,
  inputs: readonly JsonInferInput[],
  options: { version?: string; outputs?: readonly string[] } = {},
): Promise<HttpReply> {
  const path = options.version === undefined ? `/v2/models/${model}/infer` : `/v2/models/${model}/versions/${options.version}/infer`;
  const body: Record<string, unknown> = { inputs };
  if (options.outputs !== undefined) body.outputs = options.outputs.map((name) => ({ name }));
  return httpRequest(baseUrl + path, { method: 'POST', body: JSON.stringify(body) });
}

/** The output named `name` of a JSON inference response; throws if absent. */
export function outputNamed(response: JsonInferResponse, name: string): JsonInferOutput {
  const out = response.outputs.find((o) => o.name === name);
  if (out === undefined) throw new Error(`no output '${name}' in ${JSON.stringify(response)}`);
  return out;
}

/**
 * Inputs for Triton's `simple` model (INT32 [batch, 16] × 2) that differ by `seed`, with the
 * expected OUTPUT0 (sum) and OUTPUT1 (difference).
 */
export function simpleCase(batch: number, seed = 0): { inputs: JsonInferInput[]; sum: number[]; difference: number[] } {
  const n = batch * 16;
  const a = Array.from({ length: n }, (_, i) => i + seed);
  const b = Array.from({ length: n }, (_, i) => 1000 - 3 * i + 7 * seed);
  return {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: a },
      { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: b },
    ],
    sum: a.map((x, i) => x + b[i]!),
    difference: a.map((x, i) => x - b[i]!),
  };
}
