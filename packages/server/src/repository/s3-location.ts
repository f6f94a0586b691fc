/**
 * S3 model repository locations: the `s3://` URIs `--model-repository` accepts (as Triton does),
 * and the object keys a mirror may write (docs/model-repository-s3.md).
 */
import { NereidError } from '@nereid/protocol';

export interface S3Location {
  /** The URI as given, for messages. */
  readonly uri: string;
  readonly bucket: string;
  /** The key prefix of the repository: '' or ending in '/'. */
  readonly prefix: string;
  /** `http(s)://host:port` when the URI names an endpoint; undefined: the environment's or AWS's. */
  readonly endpoint: string | undefined;
}

/** Whether a `--model-repository` value names an S3 repository. */
export function isS3Uri(text: string): boolean {
  return text.startsWith('s3://');
}

/**
 * Parses `s3://bucket[/prefix]` and Triton's endpoint form `s3://[http://|https://]host:port/bucket[/prefix]`
 * (http when no scheme is given). Throws REPOSITORY_INVALID for anything else.
 */
export function parseS3Uri(uri: string): S3Location {
  const bad = (why: string) =>
    new NereidError(
      'REPOSITORY_INVALID',
      `model repository '${uri}': ${why}; an S3 repository is s3://<bucket>[/<prefix>] or s3://<host>:<port>/<bucket>[/<prefix>]`,
    );
  if (!isS3Uri(uri)) throw bad('not an s3:// URI');
  let rest = uri.slice('s3://'.length);
  let endpoint: string | undefined;
  const withScheme = /^(https?):\/\/([^/]+)\/(.*)$/.exec(rest);
  const hostPort = /^([0-9A-Za-z.-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})\/(.*)$/.exec(rest);
  if (withScheme !== null) {
    if (!/:[0-9]{1,5}$/.test(withScheme[2]!)) throw bad('an endpoint needs a port');
    endpoint = `${withScheme[1]}://${withScheme[2]}`;
    rest = withScheme[3]!;
  } else if (hostPort !== null) {
    endpoint = `http://${hostPort[1]}:${hostPort[2]}`;
    rest = hostPort[3]!;
  }
  const slash = rest.indexOf('/');
  const bucket = slash === -1 ? rest : rest.slice(0, slash);
  let prefix = slash === -1 ? '' : rest.slice(slash + 1);
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) throw bad(`'${bucket}' is not a bucket name`);
  prefix = prefix.replace(/\/+$/, '');
  if (prefix !== '') {
    if (prefix.split('/').some((s) => s === '' || s === '.' || s === '..') || /[\\\0]/.test(prefix)) throw bad(`'${prefix}' is not a key prefix`);
    prefix += '/';
  }
  return { uri, bucket, prefix, endpoint };
}

/** A key of the repository, split into its model and its path in the model directory. */
export interface ModelKey {
  readonly model: string;
  /** `/`-separated path inside the model directory, e.g. `1/model.onnx`; a directory's ends with '/'. */
  readonly path: string;
}

/**
 * The model and path of `relativeKey` (the key less the repository prefix), undefined for keys
 * that are no file or directory of a model (a file or marker at the repository root); throws
 * REPOSITORY_INVALID for a key that a mirror must not write: one with a `..` or `.` segment, an
 * empty segment, a backslash, a NUL or another control character, or one that starts with `/`.
 */
export function modelKey(relativeKey: string): ModelKey | undefined {
  const refuse = (why: string) => new NereidError('REPOSITORY_INVALID', `object key '${JSON.stringify(relativeKey).slice(1, -1)}' refused: ${why}`);
  if (/[\u0000-\u001f\u007f]/.test(relativeKey)) throw refuse('it contains a control character');
  if (relativeKey.includes('\\')) throw refuse('it contains a backslash');
  if (relativeKey.startsWith('/')) throw refuse('it is absolute');
  if (relativeKey.endsWith('/')) {
    // A directory marker (an empty version directory of an ensemble, say): `path` ends with '/'.
    const segments = relativeKey.slice(0, -1).split('/');
    if (segments.some((s) => s === '..' || s === '.' || s === '')) throw refuse("it has a '.', '..' or empty segment");
    if (segments.length < 2) return undefined;
    return { model: segments[0]!, path: `${segments.slice(1).join('/')}/` };
  }
  const segments = relativeKey.split('/');
  if (segments.some((s) => s === '..' || s === '.' || s === '')) throw refuse("it has a '.', '..' or empty segment");
  if (segments.length < 2) return undefined;
  return { model: segments[0]!, path: segments.slice(1).join('/') };
}
