/**
 * Error messages as they go to a client. A message repeats what the request named (model,
 * version, tensor, shared-memory region, key …), and a client may send a name of any length: a
 * 100 KB model name echoed into a gRPC status makes its `grpc-message` header larger than a
 * client accepts (grpcio: RESOURCE_EXHAUSTED instead of the NOT_FOUND it should see). Every
 * frontend passes its error messages through `clientErrorMessage` before sending them.
 */

/** Longest run of characters without blank or quote that a message repeats whole. */
export const MAX_ECHOED_RUN = 256;
/** What is kept of a longer run: its start. */
const ECHO_KEPT = 128;

/**
 * The most a message may occupy where it goes: in a response body (HTTP, a gRPC stream's
 * `error_message`) in characters; in a header (a gRPC status's `grpc-message`) percent-encoded,
 * well under the 8 KiB of headers a gRPC client accepts by default.
 */
export const MAX_CLIENT_ERROR_MESSAGE = { body: 16_384, header: 4_096 } as const;

const LONG_RUN = new RegExp(`[^\\s'"]{${MAX_ECHOED_RUN + 1},}`, 'g');

/** The size of `s` in a gRPC `grpc-message` header (percent-encoded UTF-8). */
function grpcEncodedLength(s: string): number {
  let n = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c >= 0x20 && c <= 0x7e && c !== 0x25) n += 1;
    else n += 3 * Buffer.byteLength(ch, 'utf8');
  }
  return n;
}

/**
 * `message` with every run of more than MAX_ECHOED_RUN characters (a name, a number, a path
 * without blanks) shortened to its start and its length, and the whole cut to the limit of `where`.
 */
export function clientErrorMessage(message: string, where: 'body' | 'header'): string {
  let out = message.length > MAX_ECHOED_RUN ? message.replace(LONG_RUN, (run) => `${run.slice(0, ECHO_KEPT)}… (${run.length} characters)`) : message;
  const limit = MAX_CLIENT_ERROR_MESSAGE[where];
  const size = where === 'header' ? grpcEncodedLength : (s: string) => s.length;
  if (size(out) <= limit) return out;
  const total = out.length;
  const suffix = ` … (message cut, ${total} characters)`;
  let keep = Math.min(out.length, limit - suffix.length);
  while (keep > 0 && size(out.slice(0, keep)) > limit - suffix.length) keep = Math.floor(keep * 0.8);
  out = out.slice(0, keep) + suffix;
  return out;
}
