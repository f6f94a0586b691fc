/**
 * End-to-end test helpers: build a model repository in a temporary directory, start a real Nereid
 * server on an ephemeral 127.0.0.1 port, and always shut it down.
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { HttpFrontend, Server, silentLogger, type ServerOptions, type HttpFrontendOptions } from '@nereid/server';

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
  stop(): Promise<void>;
}

/** Starts a server (quiet logger) and its HTTP frontend on an OS-chosen port. */
export async function startServer(
  options: Partial<ServerOptions> & { modelRepositories: readonly string[] },
  http: HttpFrontendOptions = {},
): Promise<RunningServer> {
  const server = new Server({ logger: silentLogger(), ...options });
  await server.load();
  const frontend = new HttpFrontend(server, { address: '127.0.0.1', port: 0, ...http });
  const port = await frontend.listen();
  return {
    server,
    http: frontend,
    port,
    url: `http://127.0.0.1:${port}`,
    async stop() {
      const closing = frontend.close();
      await server.stop();
      frontend.closeAllConnections();
      await closing;
    },
  };
}

export async function removeDir(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true });
}
