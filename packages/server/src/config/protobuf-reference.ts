/**
 * Test support, not part of the config layer's surface: protobuf's reference text-format parser
 * (Python's `google.protobuf.text_format`, Debian's python3-protobuf) run over a batch of texts,
 * and the comparison of its result with Nereid's.
 *
 * `model_config.proto` is compiled into a temporary directory with `python3 -m grpc_tools.protoc`
 * (Debian's python3-grpc-tools) on every call, so the reference always reads the project's
 * schema. One Python process parses the whole batch.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JsonObject, JsonValue } from './message-object.js';
import { type MessageSchema, MODEL_CONFIG_SCHEMA, type ValueSchema } from './schema.js';
import { projectRoot } from './test-support.js';

/** The interpreter that runs the reference, with Debian's packages. */
export const PYTHON = '/usr/bin/python3';
/** What to install when the reference cannot run. */
export const REFERENCE_INSTALL = 'apt-get install -y python3-protobuf python3-grpc-tools';
const PYTHON_INSTALL = 'apt-get install -y python3 python3-protobuf python3-grpc-tools';

/** The reference's answer for one text: the message as protobuf JSON, or its parse error. */
export type ReferenceResult = { readonly ok: JsonObject } | { readonly error: string };

export interface ReferenceRun {
  /** `google.protobuf.__version__` of the interpreter that ran. */
  readonly version: string;
  readonly results: readonly ReferenceResult[];
}

// argv[1]: the directory of the generated model_config_pb2. stdin: a JSON array of texts.
// stdout: {"version": ..., "results": [{"ok": dict} | {"error": str}, ...]}.
const SCRIPT = String.raw`
import json
import sys

sys.path.insert(0, sys.argv[1])
import google.protobuf
from google.protobuf import json_format, text_format
import model_config_pb2

texts = json.load(sys.stdin)
results = []
for text in texts:
    message = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as err:
        results.append({'error': str(err)})
        continue
    results.append({'ok': json_format.MessageToDict(message, preserving_proto_field_name=True)})
json.dump({'version': google.protobuf.__version__, 'results': results}, sys.stdout, allow_nan=False)
`;

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly spawnError?: Error;
}

function run(args: readonly string[], input?: string): Promise<Ran> {
  return new Promise((resolve) => {
    const child = spawn(PYTHON, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', (spawnError) => resolve({ code: null, stdout: '', stderr: '', spawnError }));
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') }),
    );
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
}

function lastLine(text: string): string {
  return text.trim().split('\n').pop() ?? '';
}

/**
 * Parses every text with the reference parser, in one Python process. Throws an Error naming
 * what is missing (the interpreter, google.protobuf or grpc_tools, with the Debian packages to
 * install) when the reference cannot run.
 */
export async function parseWithReference(texts: readonly string[]): Promise<ReferenceRun> {
  const check = await run(['-c', 'import google.protobuf.text_format, google.protobuf.json_format, grpc_tools.protoc']);
  if (check.spawnError !== undefined) {
    throw new Error(
      `the protobuf reference parser needs ${PYTHON} (${check.spawnError.message}); install Debian's python3, python3-protobuf and python3-grpc-tools: ${PYTHON_INSTALL}`,
    );
  }
  if (check.code !== 0) {
    throw new Error(
      `${PYTHON} cannot import google.protobuf and grpc_tools (${lastLine(check.stderr)}); the protobuf reference parser needs Debian's python3-protobuf and python3-grpc-tools: ${REFERENCE_INSTALL}`,
    );
  }
  const dir = await mkdtemp(join(tmpdir(), 'nereid-pbtxt-reference-'));
  try {
    const protoDir = join(projectRoot(), 'packages/protocol/proto');
    const protoc = await run(['-m', 'grpc_tools.protoc', `-I${protoDir}`, `--python_out=${dir}`, join(protoDir, 'model_config.proto')]);
    if (protoc.code !== 0) throw new Error(`grpc_tools.protoc could not compile model_config.proto (${protoc.code}): ${protoc.stderr.trim()}`);
    const script = join(dir, 'reference_parse.py');
    await writeFile(script, SCRIPT);
    const ran = await run([script, dir], JSON.stringify(texts));
    if (ran.code !== 0) throw new Error(`the reference parser failed (${ran.code}): ${ran.stderr.trim()}`);
    const parsed = JSON.parse(ran.stdout) as ReferenceRun;
    if (parsed.results.length !== texts.length) {
      throw new Error(`the reference parser answered ${parsed.results.length} results for ${texts.length} texts`);
    }
    return parsed;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * `text` with the string escapes that protobuf's Python parser decodes differently from its C++
 * parser (Triton's) rewritten to equivalent ones it decodes right: `\u` and `\U` escapes become
 * the octal escapes of their UTF-8 bytes, `\?` becomes `?`. Everything else, comments included,
 * is copied unchanged. (Python's parser turns `\u00e9` into the single byte 0xe9 and keeps
 * `\U0001F600` and `\?` as written; see REFERENCE_QUIRKS in pbtxt-reference.test.ts.)
 */
export function toReferenceDialect(text: string): string {
  return text.replace(STRING_OR_COMMENT, (token) => (token.startsWith('#') ? token : token.replace(ESCAPE, rewriteEscape)));
}

/** A string literal (either quote) or a comment; matched left to right, so each hides the other. */
const STRING_OR_COMMENT = /"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|#[^\n]*/g;
/** An escape inside a string literal: a surrogate pair, `\u`, `\U`, or any other. */
const ESCAPE = /\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})|\\[^]/g;

function rewriteEscape(escape: string, high?: string, low?: string, u4?: string, u8?: string): string {
  let cp: number;
  if (high !== undefined && low !== undefined) cp = 0x10000 + ((parseInt(high, 16) - 0xd800) << 10) + (parseInt(low, 16) - 0xdc00);
  else if (u4 !== undefined) cp = parseInt(u4, 16);
  else if (u8 !== undefined) cp = parseInt(u8, 16);
  else return escape === '\\?' ? '?' : escape;
  if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return escape;
  let out = '';
  for (const b of new TextEncoder().encode(String.fromCodePoint(cp))) out += `\\${b.toString(8).padStart(3, '0')}`;
  return out;
}

/**
 * `json` (protobuf JSON of a ModelConfig, from either parser) with every `float` field's number
 * replaced by the single-precision value it denotes. The two sides print a float's value with
 * different decimal digits (protobuf's Python printer never uses fewer than 6 significant
 * digits: 1.4013e-45 where Nereid writes 1e-45); the value is what must agree. Doubles, integers
 * and strings are left as they are.
 */
export function canonicalFloats(json: JsonObject): JsonObject {
  return canonicalMessage(json, MODEL_CONFIG_SCHEMA);
}

function canonicalMessage(json: JsonObject, schema: MessageSchema): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(json)) {
    const field = schema.field(key);
    let canonical: JsonValue = value;
    if (field !== undefined) {
      const element: ValueSchema =
        field.type === 'map'
          ? field.value
          : field.type === 'message'
            ? { type: 'message', message: field.message }
            : field.type === 'enum'
              ? { type: 'enum', enum: field.enum }
              : { type: field.type };
      if (field.type === 'map' && isObject(value)) {
        canonical = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, canonicalValue(v, element)]));
      } else if (field.repeated && Array.isArray(value)) {
        canonical = value.map((v) => canonicalValue(v, element));
      } else {
        canonical = canonicalValue(value, element);
      }
    }
    Object.defineProperty(out, key, { value: canonical, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function canonicalValue(value: JsonValue, schema: ValueSchema): JsonValue {
  if (schema.type === 'message' && isObject(value)) return canonicalMessage(value, schema.message);
  if (schema.type === 'float' && typeof value === 'number') return Math.fround(value);
  return value;
}

function isObject(value: JsonValue): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
