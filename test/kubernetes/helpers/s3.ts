/**
 * A real S3-compatible store for tests: SeaweedFS (`weed mini`) on loopback, every port it opens
 * chosen free, its own temporary directory and identity file; `stop()` kills its process group
 * and removes the directory. The binary comes from `node scripts/fleet-infra.mjs path weed`.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateBucketCommand, ListBucketsCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort, stopGroup } from '../../helpers/processes.js';

export interface S3Store {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly region: string;
  /** A client with the identity's credentials (path-style addressing). */
  readonly client: S3Client;
  createBucket(name: string): Promise<void>;
  stop(): Promise<void>;
}

const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));

/** The path of the built `weed` binary; rejects saying how to build it. */
export function weedPath(): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [join(REPO_ROOT, 'scripts', 'fleet-infra.mjs'), 'path', 'weed'], (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`no weed binary (${stderr.trim() || err.message}); build it with: node scripts/fleet-infra.mjs build weed`));
      else resolve(stdout.trim());
    });
  });
}

/** A port that was free a moment ago on 127.0.0.1. */
export { freePort };

/** Ports of `weed mini`'s servers, each given a free one: every HTTP port and its gRPC port. */
const PORT_FLAGS = [
  'master.port',
  'master.port.grpc',
  'volume.port',
  'volume.port.grpc',
  'filer.port',
  'filer.port.grpc',
  's3.port',
  's3.port.grpc',
  'admin.port',
  'admin.port.grpc',
];

/** Listeners turned off (0): the admin server's legacy port, the Iceberg and Lance catalogs. */
const DISABLED_PORTS = ['admin.port.legacy', 's3.port.iceberg', 's3.port.lance'];

export function clientFor(endpoint: string, accessKeyId: string, secretAccessKey: string, region = 'us-east-1'): S3Client {
  return new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: { accessKeyId, secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

export async function startS3(): Promise<S3Store> {
  const weed = await weedPath();
  const dir = await mkdtemp(join(tmpdir(), 'nereid-s3-'));
  const accessKeyId = 'nereidtest';
  const secretAccessKey = 'nereid-test-secret-key';
  const region = 'us-east-1';
  const identities = {
    identities: [{ name: 'nereid', credentials: [{ accessKey: accessKeyId, secretKey: secretAccessKey }], actions: ['Admin', 'Read', 'List', 'Tagging', 'Write'] }],
  };
  await writeFile(join(dir, 's3.json'), JSON.stringify(identities));
  const ports = new Map<string, number>();
  const taken = new Set<number>();
  for (const flag of PORT_FLAGS) {
    let port: number;
    do port = await freePort();
    while (taken.has(port));
    taken.add(port);
    ports.set(flag, port);
  }
  const args = [
    'mini',
    `-dir=${join(dir, 'data')}`,
    '-ip=127.0.0.1',
    '-ip.bind=127.0.0.1',
    `-s3.config=${join(dir, 's3.json')}`,
    '-webdav=false',
    '-admin.ui=false',
    '-master.telemetry=false',
    `-filer.localSocket=${join(dir, 'filer.sock')}`,
    `-s3.localSocket=${join(dir, 's3.sock')}`,
    ...[...ports].map(([flag, port]) => `-${flag}=${port}`),
    ...DISABLED_PORTS.map((flag) => `-${flag}=0`),
  ];
  await mkdir(join(dir, 'data'));
  const child = spawn(weed, args, { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (output = (output + s).slice(-20_000)));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (output = (output + s).slice(-20_000)));
  let exited = false;
  const closed = new Promise<void>((resolve) => child.once('close', () => ((exited = true), resolve())));
  const endpoint = `http://127.0.0.1:${ports.get('s3.port')}`;
  const client = clientFor(endpoint, accessKeyId, secretAccessKey, region);
  const stop = async () => {
    client.destroy();
    if (!exited) await stopGroup(child.pid, closed);
    await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`weed mini exited before S3 answered:\n${output}`);
    }
    try {
      await client.send(new ListBucketsCommand({}));
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`weed mini's S3 did not answer within 60 s (${(err as Error).message}):\n${output}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return {
    endpoint,
    accessKeyId,
    secretAccessKey,
    region,
    client,
    async createBucket(name: string) {
      await client.send(new CreateBucketCommand({ Bucket: name }));
    },
    stop,
  };
}
