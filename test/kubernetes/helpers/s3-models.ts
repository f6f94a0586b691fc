/** Putting model directories into an S3 bucket for the S3 repository tests. */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { ModelFiles } from '../../helpers/harness.js';

/** The `SHA256SUMS` manifest of `files` (as `sha256sum` writes it). */
export function manifestOf(files: ModelFiles): string {
  return Object.entries(files)
    .map(([path, content]) => `${createHash('sha256').update(content).digest('hex')}  ${path}\n`)
    .join('');
}

export async function putObject(client: S3Client, bucket: string, key: string, body: string | Uint8Array): Promise<void> {
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

/**
 * Puts `files` under `<prefix><model>/`, one object at a time in the order given; with
 * `manifest`, a `SHA256SUMS` of them last.
 */
export async function putModel(client: S3Client, bucket: string, prefix: string, model: string, files: ModelFiles, options: { manifest?: boolean } = {}): Promise<void> {
  for (const [path, content] of Object.entries(files)) await putObject(client, bucket, `${prefix}${model}/${path}`, content);
  if (options.manifest) await putObject(client, bucket, `${prefix}${model}/SHA256SUMS`, manifestOf(files));
}

/** Every file under a local model directory, by path relative to it. */
export async function readModelDirectory(dir: string): Promise<ModelFiles> {
  const files: ModelFiles = {};
  const walk = async (d: string) => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const full = join(d, e.name);
      if (e.isDirectory()) await walk(full);
      else files[relative(dir, full).split('\\').join('/')] = await readFile(full);
    }
  };
  await walk(dir);
  return files;
}

/** Deletes every object under `<prefix><model>/`. */
export async function deleteModel(client: S3Client, bucket: string, prefix: string, model: string): Promise<void> {
  const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${prefix}${model}/` }));
  for (const o of page.Contents ?? []) await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key! }));
}
