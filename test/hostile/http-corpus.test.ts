/**
 * The HTTP bad-input corpus: malformed JSON, binary-data framing that lies, wrong and huge
 * shapes, compression bombs, oversized headers, hostile shared-memory keys and ranges,
 * path-escaping repository calls and absurd request parameters. Each case is one line of a table:
 * what is sent, the status it must get and a pattern its `{"error": …}` message must match. After
 * every case the server must still answer a good request, and resident memory must stay bounded
 * over the whole corpus, run several times.
 *
 * A case whose status is not 4xx is Triton's own status for that input (for example 500 for a
 * `data` leaf of the wrong type, which Triton reports as an internal error).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { deflateSync, gzipSync } from 'node:zlib';
import { Agent, request } from 'node:http';
import { bytesElements, rawExchange, type HttpResult } from '../helpers/http.js';
import { MemoryWatch, SHM_BYTES, SIMPLE_A, SIMPLE_B, SIMPLE_SUM, startHostileServer, type HostileServer } from './support.js';

let srv: HostileServer;

before(async () => {
  srv = await startHostileServer();
});

after(async () => {
  await srv?.close();
});

// ---------------------------------------------------------------------------------------------
// Request builders: each returns what one case sends.

interface Send {
  method?: string;
  path: string;
  headers?: Record<string, string | number>;
  body?: string | Uint8Array;
}

type JsonValue = unknown;

const INFER = '/v2/models/simple/infer';

const in0 = (extra: Record<string, JsonValue> = {}) => ({ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: SIMPLE_A, ...extra });
const in1 = (extra: Record<string, JsonValue> = {}) => ({ name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: SIMPLE_B, ...extra });

/** A JSON infer request to `simple` (or `model`), with extra top-level fields. */
const infer = (doc: JsonValue, model = 'simple'): Send => ({ path: `/v2/models/${encodeURIComponent(model)}/infer`, body: typeof doc === 'string' ? doc : JSON.stringify(doc) });
/** `simple` with INPUT0 replaced by `input0` (INPUT1 stays good). */
const withInput0 = (input0: Record<string, JsonValue>, extra: Record<string, JsonValue> = {}): Send => infer({ inputs: [input0, in1()], ...extra });
/** `simple` with request-level parameters. */
const withParams = (parameters: JsonValue): Send => infer({ inputs: [in0(), in1()], parameters });

const int32Blob = (n: number): Buffer => Buffer.from(Int32Array.from({ length: n }, (_, i) => i).buffer);

/** A binary-data body (§3.8): JSON header then blobs; `headerLength` overrides the true length. */
function binary(header: JsonValue, blobs: Uint8Array[], headerLength?: string | number, model = 'simple'): Send {
  const json = Buffer.from(JSON.stringify(header));
  return {
    path: `/v2/models/${model}/infer`,
    headers: { 'Inference-Header-Content-Length': headerLength ?? json.byteLength },
    body: Buffer.concat([json, ...blobs]),
  };
}
const binIn = (name: string, shape: number[], size: JsonValue, datatype = 'INT32') => ({ name, datatype, shape, parameters: { binary_data_size: size } });

/** A body sent with `Content-Encoding`. */
const encoded = (coding: string, body: Uint8Array, path = INFER): Send => ({ path, headers: { 'Content-Encoding': coding }, body });

/** A body that inflates to `mib` MiB of zeros (gzip or zlib-wrapped deflate). */
function bomb(coding: 'gzip' | 'deflate', mib: number): Uint8Array {
  const zeros = Buffer.alloc(mib * 1024 * 1024);
  return coding === 'gzip' ? gzipSync(zeros, { level: 9 }) : deflateSync(zeros, { level: 9 });
}
const BOMB_GZIP = bomb('gzip', 96);
const BOMB_DEFLATE = bomb('deflate', 96);
const GOOD_JSON = JSON.stringify({ inputs: [in0(), in1()] });

const shmRegister = (region: string, body: JsonValue, kind = 'system'): Send => ({
  path: `/v2/${kind}sharedmemory/region/${encodeURIComponent(region)}/register`,
  body: typeof body === 'string' ? body : JSON.stringify(body),
});
const shmIn = (region: string, byteSize: JsonValue, offset?: JsonValue) =>
  in0({ data: undefined, parameters: { shared_memory_region: region, shared_memory_byte_size: byteSize, ...(offset === undefined ? {} : { shared_memory_offset: offset }) } });

/** A JSON text fragment sent as written (integers beyond 2^53). */
class Raw {
  constructor(readonly text: string) {}
}
/** A request to `seq` (INPUT INT32 [batch, 1]) with these parameters; Raw values are sent as written. */
function seq(parameters: Record<string, unknown>, batch = 1): Send {
  const params = Object.entries(parameters).map(([k, v]) => `${JSON.stringify(k)}:${v instanceof Raw ? v.text : JSON.stringify(v)}`);
  const inputs = JSON.stringify([{ name: 'INPUT', datatype: 'INT32', shape: [batch, 1], data: Array(batch).fill(1) as number[] }]);
  return infer(`{"parameters":{${params.join(',')}},"inputs":${inputs}}`, 'seq');
}

const load = (model: string, parameters?: JsonValue): Send => ({
  path: `/v2/repository/models/${model}/load`,
  body: parameters === undefined ? '' : JSON.stringify({ parameters }),
});
const unload = (model: string): Send => ({ path: `/v2/repository/models/${model}/unload`, body: '' });
const b64 = (text: string): string => Buffer.from(text).toString('base64');
const SIMPLE_CONFIG = JSON.stringify({ name: 'simple', backend: 'onnxruntime', max_batch_size: 8 });

const TWO_40 = 2 ** 40;
const TWO_53 = 2 ** 53;

// ---------------------------------------------------------------------------------------------
// The corpus: [what, send, status, message pattern].

type Case = [what: string, send: () => Send, status: number, message: RegExp];

/** The region registered over the shared-memory object in `before` of the shm cases. */
const REGION = 'hostile_region';

const CASES: Case[] = [
  // Malformed JSON
  ['empty body', () => infer(''), 400, /parse|JSON/i],
  ['truncated JSON', () => infer('{"inputs": [{"name": "INPUT0"'), 400, /parse|JSON/i],
  ['not JSON at all', () => infer('\u0000\u0001garbage'), 400, /parse|JSON/i],
  ['JSON array body', () => infer('[1,2,3]'), 400, /must be a JSON object/],
  ['JSON string body', () => infer('"inputs"'), 400, /must be a JSON object/],
  ['inputs not an array', () => infer({ inputs: { name: 'INPUT0' } }), 400, /'inputs'.*must be an array/],
  ['no inputs', () => infer({}), 400, /no 'inputs' array/],
  ['input is a number', () => infer({ inputs: [7] }), 400, /every entry of 'inputs'/],
  ['input without name', () => withInput0({ datatype: 'INT32', shape: [1, 16], data: SIMPLE_A }), 400, /no string 'name'/],
  ['unknown datatype', () => withInput0(in0({ datatype: 'INT33' })), 400, /unknown datatype 'INT33'/],
  ['datatype not a string', () => withInput0(in0({ datatype: 5 })), 400, /no string 'datatype'/],
  ['deeply nested JSON', () => infer('['.repeat(100_000) + ']'.repeat(100_000)), 400, /nest|deep|depth/i],
  ['deeply nested data', () => withInput0(in0({ data: JSON.parse('['.repeat(200) + '1' + ']'.repeat(200)) as JsonValue })), 500, /Unable to parse 'data'/],
  ['data leaf of the wrong type', () => withInput0(in0({ data: SIMPLE_A.map(String) })), 500, /Unable to parse 'data'/],
  ['data not an array', () => withInput0(in0({ data: { a: 1 } })), 500, /Unable to parse 'data'/],
  ['id not a string', () => infer({ id: 5, inputs: [in0(), in1()] }), 400, /'id'.*must be a string/],
  ['outputs not an array', () => infer({ inputs: [in0(), in1()], outputs: 'OUTPUT0' }), 400, /'outputs'.*must be an array/],
  ['output without name', () => infer({ inputs: [in0(), in1()], outputs: [{}] }), 400, /every entry of 'outputs'/],
  ['unknown output', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'NOPE' }] }), 400, /NOPE/],
  ['lone surrogate in a name', () => infer('{"inputs":[{"name":"\\ud800","datatype":"INT32","shape":[1,16],"data":[0]}]}'), 500, /.+/],
  ['duplicate input', () => infer({ inputs: [in0(), in0(), in1()] }), 400, /INPUT0/],
  ['unknown input', () => infer({ inputs: [in0(), in1(), in0({ name: 'INPUT9' })] }), 400, /INPUT9/],

  // Wrong and huge shapes
  ['2^40 elements of JSON data', () => withInput0(in0({ shape: [1, TWO_40] })), 500, /shape|elements/],
  ['2^40-row batch', () => withInput0(in0({ shape: [TWO_40, 16] })), 500, /shape|batch/i],
  ['2^53 dimension', () => withInput0(in0({ shape: [1, TWO_53] })), 400, /shape dimension|not a non-negative integer/],
  ['negative dimension', () => withInput0(in0({ shape: [1, -16] })), 400, /shape dimension -16/],
  ['fractional dimension', () => withInput0(in0({ shape: [1, 1.5] })), 400, /shape dimension 1.5/],
  ['dimension as a string', () => withInput0(in0({ shape: [1, '16'] })), 400, /shape dimension 16/],
  ['shape not an array', () => withInput0(in0({ shape: 16 })), 400, /'shape' must be an array/],
  ['product overflows to Infinity', () => withInput0(in0({ shape: Array(22).fill(TWO_53 - 1) as number[] })), 400, /input 'INPUT0' for model 'simple' has shape \[9007199254740991,.*\(22 dimensions\)\], whose element count exceeds/],
  ['product overflows then times 0', () => withInput0(in0({ shape: [...(Array(22).fill(TWO_53 - 1) as number[]), 0] })), 400, /batch size 9007199254740991/],
  ['10 000 dimensions', () => withInput0(in0({ shape: Array(10_000).fill(1) as number[] })), 500, /shape/],
  ['2^30 × 2^30 dimensions', () => withInput0(in0({ shape: [2 ** 30, 2 ** 30] })), 400, /whose element count exceeds/],
  ['2^40 elements as binary', () => binary({ inputs: [binIn('INPUT0', [1, TWO_40], 64), in1()] }, [int32Blob(16)]), 400, /shape|byte size/],
  ['huge FP32 shape for a variable-dims model', () => ({ ...infer({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, TWO_40], data: [1] }] }, 'identity_fp32') }), 500, /shape|elements/],
  ['1e21 dimension beside a zero', () => infer({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [0, 1e21], data: [] }] }, 'identity_fp32'), 400, /shape dimension 1e\+21/],
  ['2^53 dimension beside a zero, as binary', () => binary({ inputs: [binIn('INPUT0', [0, TWO_53], 0, 'FP32')] }, [], undefined, 'identity_fp32'), 400, /shape dimension 9007199254740992/],
  ['huge BYTES shape', () => infer({ inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, TWO_40], data: ['a'] }, { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: Array(16).fill('1') as string[] }] }, 'simple_string'), 500, /shape|elements/],

  // Binary-data framing
  ['header length not a number', () => binary({ inputs: [in0(), in1()] }, [], 'abc'), 400, /inference header size/],
  ['negative header length', () => binary({ inputs: [in0(), in1()] }, [], -5), 400, /inference header size/],
  ['header length past the body', () => binary({ inputs: [in0(), in1()] }, [], 1_000_000), 400, /inference header size/],
  ['header length 2^64', () => binary({ inputs: [in0(), in1()] }, [], '18446744073709551616'), 400, /inference header size/],
  ['header length cuts the JSON', () => binary({ inputs: [in0(), in1()] }, [], 20), 400, /parse|JSON/i],
  ['binary_data_size beyond the body', () => binary({ inputs: [binIn('INPUT0', [1, 16], 64), binIn('INPUT1', [1, 16], 1_000_000)] }, [int32Blob(16), int32Blob(16)]), 400, /expecting 1000000 additional bytes/],
  ['binary_data_size 2^53', () => binary({ inputs: [binIn('INPUT0', [1, 16], TWO_53), in1()] }, [int32Blob(16)]), 400, /binary_data_size/],
  ['binary_data_size negative', () => binary({ inputs: [binIn('INPUT0', [1, 16], -64), in1()] }, [int32Blob(16)]), 400, /binary_data_size/],
  ['binary_data_size a string', () => binary({ inputs: [binIn('INPUT0', [1, 16], '64'), in1()] }, [int32Blob(16)]), 400, /binary_data_size/],
  ['binary_data_size smaller than the shape', () => binary({ inputs: [binIn('INPUT0', [1, 16], 32), in1()] }, [int32Blob(8)]), 400, /byte size|Expected 64, got 32/],
  ['binary_data_size larger than the shape', () => binary({ inputs: [binIn('INPUT0', [1, 16], 128), in1()] }, [int32Blob(32)]), 400, /Expected 64, got 128/],
  ['bytes left over after the blobs', () => binary({ inputs: [binIn('INPUT0', [1, 16], 64), in1()] }, [int32Blob(17)]), 400, /unexpected additional input data/],
  ['blob not a whole number of elements', () => binary({ inputs: [binIn('INPUT0', [1, 16], 63), in1()] }, [int32Blob(16).subarray(0, 63)]), 400, /Expected 64, got 63/],
  ['data and binary_data_size both', () => binary({ inputs: [{ ...binIn('INPUT0', [1, 16], 64), data: SIMPLE_A }, in1()] }, [int32Blob(16)]), 400, /must set only one/],
  ['raw binary body for a two-input model', () => binary({}, [int32Blob(16)], 0), 400, /exactly one input/],
  ['raw binary body of the wrong size', () => ({ ...binary({}, [], 0, 'identity_fp32'), body: Buffer.alloc(7) }), 400, /raw binary request of 7 bytes/],
  ['BYTES element longer than its blob', () => binary({ inputs: [binIn('INPUT0', [1, 16], 8, 'BYTES'), binIn('INPUT1', [1, 16], 8, 'BYTES')] }, [Buffer.from([0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4]), Buffer.from([0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4])], undefined, 'simple_string'), 400, /INPUT0/],
  ['BYTES elements fewer than the shape', () => binary({ inputs: [binIn('INPUT0', [1, 16], 5, 'BYTES'), binIn('INPUT1', [1, 16], 5, 'BYTES')] }, [bytesElements(['a']), bytesElements(['b'])], undefined, 'simple_string'), 400, /BYTES elements|INPUT0/],

  // Compression
  ['gzip bomb (96 MiB of zeros)', () => encoded('gzip', BOMB_GZIP), 400, /maximum input size/],
  ['deflate bomb (96 MiB of zeros)', () => encoded('deflate', BOMB_DEFLATE), 400, /maximum input size/],
  ['gzip body that is not gzip', () => encoded('gzip', Buffer.from(GOOD_JSON)), 400, /failed to decompress/],
  ['truncated gzip body', () => encoded('gzip', gzipSync(GOOD_JSON).subarray(0, 20)), 400, /failed to decompress/],
  ['unknown content encoding', () => encoded('br', Buffer.from(GOOD_JSON)), 501, /Unsupported compression type/],
  // Only inference bodies are decompressed (as in Triton): other endpoints read the bytes as JSON.
  ['gzip bomb to the repository API', () => encoded('gzip', BOMB_GZIP, '/v2/repository/index'), 400, /failed to parse/],

  // Oversized names
  ['10 KB model name', () => infer({ inputs: [in0(), in1()] }, 'm'.repeat(10_000)), 404, /unknown model/],
  ['10 KB input name', () => withInput0(in0({ name: 'i'.repeat(10_000) })), 400, /.+/],
  ['1 MB id', () => infer({ id: 'x'.repeat(1_000_000), inputs: [in0(), in1()], outputs: [{ name: 'NOPE' }] }), 400, /NOPE/],

  // Absurd request parameters
  ['parameters not an object', () => withParams([1, 2]), 400, /parameters/],
  ['negative priority', () => withParams({ priority: -1 }), 400, /priority/],
  ['priority 2^64', () => withParams({ priority: 18446744073709551616n.toString() }), 400, /priority/],
  ['priority as a float', () => withParams({ priority: 1.5 }), 400, /priority/],
  ['negative timeout', () => withParams({ timeout: -1 }), 400, /timeout/],
  ['timeout a string', () => withParams({ timeout: 'soon' }), 400, /timeout/],
  ['sequence_id a float', () => withParams({ sequence_id: 1.5 }), 400, /sequence_id/],
  ['sequence_id an object', () => withParams({ sequence_id: { a: 1 } }), 400, /sequence_id/],
  ['sequence_start a number', () => withParams({ sequence_start: 1 }), 400, /sequence_start/],
  // Triton ignores sequence parameters on a model without a sequence batcher.
  ['sequence id on a non-sequence model', () => withParams({ sequence_id: 7, sequence_start: true }), 200, /^$/],
  ['reserved triton_ parameter', () => withParams({ triton_anything: 1 }), 400, /triton_/],
  ['parameter value null', () => withParams({ custom: null }), 400, /custom/],
  ['binary_data_output a string', () => withParams({ binary_data_output: 'yes' }), 400, /binary_data_output/],
  ['classification negative', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { classification: -3 } }] }), 400, /classification/],
  // More classes than the output has: all of them, as Triton answers.
  ['classification 2^53', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { classification: TWO_53 } }] }), 200, /^$/],
  ['binary_data a number', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { binary_data: 1 } }] }), 400, /binary_data/],

  // Sequence parameters on a sequence model (each case that starts a sequence also ends it)
  ['sequence: no sequence_id', () => seq({}), 400, /sequence/i],
  ['sequence: id 0', () => seq({ sequence_id: 0, sequence_start: true }), 400, /sequence/i],
  ['sequence: id -1', () => seq({ sequence_id: -1, sequence_start: true, sequence_end: true }), 400, /sequence_id/],
  ['sequence: id 2^64', () => seq({ sequence_id: new Raw('18446744073709551616'), sequence_start: true, sequence_end: true }), 400, /sequence_id|18446744073709551616/],
  ['sequence: id 2^64-1', () => seq({ sequence_id: new Raw('18446744073709551615'), sequence_start: true, sequence_end: true }), 200, /^$/],
  ['sequence: string id on a UINT64 model', () => seq({ sequence_id: 'abc', sequence_start: true, sequence_end: true }), 400, /sequence/i],
  ['sequence: 100 KB string id', () => seq({ sequence_id: 'x'.repeat(100_000), sequence_start: true, sequence_end: true }), 400, /sequence/i],
  ['sequence: no START for an unknown id', () => seq({ sequence_id: 987654321 }), 400, /987654321/],
  ['sequence: END only for an unknown id', () => seq({ sequence_id: 987654322, sequence_end: true }), 400, /987654322/],
  ['sequence: batch of 2', () => seq({ sequence_id: 5, sequence_start: true, sequence_end: true }, 2), 400, /batch/i],
  ['sequence: timeout 2^64', () => seq({ sequence_id: 6, sequence_start: true, sequence_end: true, timeout: new Raw('18446744073709551616') }), 400, /timeout/],
  ['sequence: priority 2^64-1', () => seq({ sequence_id: 7, sequence_start: true, sequence_end: true, priority: new Raw('18446744073709551615') }), 200, /^$/],

  // Shared memory: registration
  ['register key with ..', () => shmRegister('r1', { key: '/../../etc/passwd', byte_size: 16 }), 400, /key/],
  ['register absolute path key', () => shmRegister('r1', { key: '/etc/passwd', byte_size: 16 }), 400, /key/],
  ['register key without slash', () => shmRegister('r1', { key: 'etc', byte_size: 16 }), 500, /'etc'/],
  ['register key .. alone', () => shmRegister('r1', { key: '/..', byte_size: 16 }), 400, /key/],
  ['register key with NUL', () => shmRegister('r1', { key: '/a\u0000b', byte_size: 16 }), 400, /key/],
  ['register missing object', () => shmRegister('r1', { key: '/nereid-hostile-no-such-object', byte_size: 16 }), 500, /nereid-hostile-no-such-object/],
  ['register huge byte_size', () => shmRegister('r1', { key: srv.shmKey, byte_size: TWO_40 }), 500, /r1/],
  ['register huge offset', () => shmRegister('r1', { key: srv.shmKey, offset: TWO_40, byte_size: 16 }), 500, /r1/],
  ['register offset past the object', () => shmRegister('r1', { key: srv.shmKey, offset: SHM_BYTES, byte_size: 1 }), 500, /r1/],
  ['register negative byte_size', () => shmRegister('r1', { key: srv.shmKey, byte_size: -1 }), 400, /byte_size/],
  ['register byte_size a string', () => shmRegister('r1', { key: srv.shmKey, byte_size: '16' }), 400, /byte_size/],
  ['register without byte_size', () => shmRegister('r1', { key: srv.shmKey }), 400, /byte_size/],
  ['register body not JSON', () => shmRegister('r1', '{key'), 400, /parse/],
  ['register a taken name', () => shmRegister(REGION, { key: srv.shmKey, byte_size: 16 }), 400, /already|exists/i],
  ['register 10 KB region name', () => shmRegister('r'.repeat(10_000), { key: '/..', byte_size: 16 }), 400, /key/],
  ['CUDA register with garbage handle', () => shmRegister('c1', { raw_handle: { b64: '!!!' }, device_id: 0, byte_size: 16 }, 'cuda'), 400, /CUDA|cuda/],
  ['CUDA register huge device id', () => shmRegister('c1', { raw_handle: { b64: 'AAAA' }, device_id: TWO_53, byte_size: 16 }, 'cuda'), 400, /device_id|CUDA/],
  ['CUDA register without handle', () => shmRegister('c1', { device_id: 0, byte_size: 16 }, 'cuda'), 400, /raw_handle/],
  ['unregister unknown region', () => ({ path: '/v2/systemsharedmemory/region/no_such_region/unregister', body: '' }), 200, /^$/],
  ['status of unknown region', () => ({ method: 'GET', path: '/v2/systemsharedmemory/region/no_such_region/status' }), 404, /no_such_region/],

  // Shared memory: tensor references
  ['unregistered region', () => withInput0(shmIn('no_such_region', 64)), 404, /Unable to find shared memory region: 'no_such_region'/],
  ['offset past the region', () => withInput0(shmIn(REGION, 64, SHM_BYTES)), 400, /Invalid offset/],
  ['offset 2^53', () => withInput0(shmIn(REGION, 64, TWO_53)), 400, /offset/],
  ['offset + size past the region', () => withInput0(shmIn(REGION, 64, SHM_BYTES - 32)), 400, /Invalid offset \+ byte size/],
  ['byte size 2^40', () => withInput0(shmIn(REGION, TWO_40)), 400, /byte size|Invalid/],
  ['byte size negative', () => withInput0(shmIn(REGION, -64)), 400, /shared_memory_byte_size/],
  ['byte size disagrees with the shape', () => withInput0(shmIn(REGION, 32)), 400, /byte size|32/],
  ['region name not a string', () => withInput0(in0({ data: undefined, parameters: { shared_memory_region: 5, shared_memory_byte_size: 64 } })), 400, /shared_memory_region/],
  ['output into an unregistered region', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: 'no_such_region', shared_memory_byte_size: 64 } }] }), 404, /Unable to find shared memory region: 'no_such_region'/],
  // Triton's status: the output is found too large once computed, an internal error.
  ['output region too small', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: REGION, shared_memory_byte_size: 8 } }] }), 500, /\(8 bytes\) should be at least 64 bytes/],
  ['output offset + size past the region', () => infer({ inputs: [in0(), in1()], outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: REGION, shared_memory_byte_size: 64, shared_memory_offset: SHM_BYTES - 8 } }] }), 400, /Invalid offset/],

  // The generate extension
  ['generate body not JSON', () => ({ path: '/v2/models/identity_fp32/generate', body: '{"INPUT0":' }), 400, /parse/],
  ['generate input of the wrong type', () => ({ path: '/v2/models/identity_fp32/generate', body: JSON.stringify({ INPUT0: { a: 1 } }) }), 400, /INPUT0/],
  ['generate input nested 200 deep', () => ({ path: '/v2/models/identity_fp32/generate', body: JSON.stringify({ INPUT0: JSON.parse('['.repeat(200) + '1' + ']'.repeat(200)) as JsonValue }) }), 400, /INPUT0/],
  ['generate ragged input', () => ({ path: '/v2/models/identity_fp32/generate', body: JSON.stringify({ INPUT0: [[1, 2], [3]] }) }), 400, /INPUT0/],
  ['generate reserved triton_ key', () => ({ path: '/v2/models/identity_fp32/generate', body: JSON.stringify({ INPUT0: [1], triton_x: 1 }) }), 400, /triton_/],
  ['generate parameters not an object', () => ({ path: '/v2/models/identity_fp32/generate', body: JSON.stringify({ INPUT0: [1], parameters: 5 }) }), 400, /parameters/],
  ['generate_stream body not JSON', () => ({ path: '/v2/models/identity_fp32/generate_stream', body: '{' }), 400, /parse/],

  // Other endpoints
  ['logging: set the log file', () => ({ path: '/v2/logging', body: JSON.stringify({ log_file: '/etc/passwd' }) }), 501, /log file location can not be updated/],
  ['logging: negative verbose level', () => ({ path: '/v2/logging', body: JSON.stringify({ log_verbose_level: -1 }) }), 400, /log_verbose_level/],
  ['logging: verbose level 2^40', () => ({ path: '/v2/logging', body: JSON.stringify({ log_verbose_level: TWO_40 }) }), 400, /log_verbose_level/],
  ['logging: unknown format', () => ({ path: '/v2/logging', body: JSON.stringify({ log_format: '%n%n%n' }) }), 400, /log_format/],
  ['logging: body not JSON', () => ({ path: '/v2/logging', body: '[' }), 400, /parse|JSON/],
  ['trace: set the trace file', () => ({ path: '/v2/trace/setting', body: JSON.stringify({ trace_file: '/etc/passwd' }) }), 501, /trace file location can not be updated/],
  ['trace: set a model\'s trace file', () => ({ path: '/v2/models/simple/trace/setting', body: JSON.stringify({ trace_file: '../../x.json' }) }), 501, /trace file location can not be updated/],
  ['trace: rate 2^70', () => ({ path: '/v2/trace/setting', body: JSON.stringify({ trace_rate: '1180591620717411303424' }) }), 400, /out of range/],
  ['trace: level not a list', () => ({ path: '/v2/trace/setting', body: JSON.stringify({ trace_level: { a: 1 } }) }), 400, /trace_level/],
  ['trace: body not JSON', () => ({ path: '/v2/trace/setting', body: '{"trace_rate":' }), 400, /parse|JSON/],
  ['trace: unknown model', () => ({ path: '/v2/models/%ZZ/trace/setting', body: '{}' }), 400, /Request for unknown model/],
  // A version that is not digits matches no route, as in Triton's URL patterns.
  ['config of version abc', () => ({ method: 'GET', path: '/v2/models/simple/versions/abc/config' }), 404, /Not Found/],
  ['config of version 2^70', () => ({ method: 'GET', path: '/v2/models/simple/versions/1180591620717411303424/config' }), 400, /1180591620717411303424/],
  ['infer on version -1', () => ({ ...infer({ inputs: [in0(), in1()] }), path: '/v2/models/simple/versions/-1/infer' }), 404, /Not Found/],
  ['stats of version abc', () => ({ method: 'GET', path: '/v2/models/simple/versions/abc/stats' }), 404, /Not Found/],
  ['percent-encoded garbage in the model name', () => ({ method: 'GET', path: '/v2/models/%ZZ/config' }), 404, /unknown model: '%ZZ'/],
  ['DELETE on infer', () => ({ method: 'DELETE', path: INFER }), 405, /.+/],
  ['unknown path', () => ({ method: 'GET', path: '/v2/models/simple/secrets' }), 404, /Not Found/],

  // Repository API: path-escaping names and overrides
  ['load ..', () => load('..'), 400, /.+/],
  ['load %2e%2e', () => load('%2e%2e'), 400, /.+/],
  ['load ../simple', () => load('..%2Fsimple'), 400, /.+/],
  ['load an absolute path', () => load('%2Fetc'), 400, /.+/],
  // A name with no directory is Triton's internal error 'failed to poll from model repository'.
  ['load a name with NUL', () => load('a%00b'), 400, /must not contain a NUL character/],
  ['load an unknown model', () => load('no_such_model'), 500, /failed to load 'no_such_model', failed to poll/],
  ['unload ..', () => unload('..'), 400, /.+/],
  ['override file:../escape', () => load('simple', { config: SIMPLE_CONFIG, 'file:../escape.onnx': b64('x') }), 500, /file:..\/escape.onnx/],
  ['override file:/etc/passwd', () => load('simple', { config: SIMPLE_CONFIG, 'file:/etc/passwd': b64('x') }), 500, /file:\/etc\/passwd/],
  ['override file:1/../../x', () => load('simple', { config: SIMPLE_CONFIG, 'file:1/../../x': b64('x') }), 500, /file:1\/..\/..\/x/],
  ['override file: empty path', () => load('simple', { config: SIMPLE_CONFIG, 'file:': b64('x') }), 500, /file:/],
  ['override file without config', () => load('simple', { 'file:1/model.onnx': b64('x') }), 500, /config/],
  ['override file not a string', () => load('simple', { config: SIMPLE_CONFIG, 'file:1/model.onnx': 5 }), 400, /file:1\/model.onnx/],
  ['override config not JSON', () => load('simple', { config: '{name:' }), 500, /failed to poll from model repository: model configuration JSON/],
  ['override config with another name', () => load('simple', { config: JSON.stringify({ name: 'other', backend: 'onnxruntime' }) }), 500, /other|name/],
  ['load parameters not an object', () => ({ path: '/v2/repository/models/simple/load', body: JSON.stringify({ parameters: [1] }) }), 400, /parameters/],
  ['load body not JSON', () => ({ path: '/v2/repository/models/simple/load', body: '{' }), 400, /parse/],
  ['index ready a string', () => ({ path: '/v2/repository/index', body: JSON.stringify({ ready: 'yes' }) }), 400, /ready/],
  ['named repository', () => ({ path: '/v2/repository/other/models/simple/load', body: '' }), 501, /repository_name/],
];

// ---------------------------------------------------------------------------------------------

/**
 * Sends the path exactly as written (no URL normalisation folds `..` or `%2e%2e` away), on a
 * fresh connection or on `agent`'s.
 */
function send(s: Send, agent: Agent | false = false): Promise<HttpResult> {
  const body = s.body;
  const headers: Record<string, string | number> = { ...s.headers };
  if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: srv.srv.port, path: s.path, method: s.method ?? 'POST', headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function assertGood(after: string, agent: Agent | false = false): Promise<void> {
  const res = await send(infer({ inputs: [in0(), in1()] }), agent);
  assert.equal(res.status, 200, `after '${after}': a good request got ${res.status}: ${res.body.toString()}`);
  const out = JSON.parse(res.body.toString()) as { outputs: { name: string; data: number[] }[] };
  assert.deepEqual(out.outputs.find((o) => o.name === 'OUTPUT0')?.data, SIMPLE_SUM, `after '${after}'`);
}

function errorMessage(what: string, res: HttpResult, status: number): string {
  const text = res.body.toString();
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status}: ${text.slice(0, 500)}`);
  if (status === 200) return '';
  assert.match(String(res.headers['content-type']), /^application\/json/, `${what}: ${text.slice(0, 500)}`);
  const body = JSON.parse(text) as { error?: unknown };
  assert.equal(typeof body.error, 'string', `${what}: ${text.slice(0, 500)}`);
  return body.error as string;
}

async function registerRegion(): Promise<void> {
  const res = await send(shmRegister(REGION, { key: srv.shmKey, byte_size: SHM_BYTES }));
  assert.equal(res.status, 200, res.body.toString());
}

const PASSES = 3;

test(`HTTP corpus: ${CASES.length} bad requests × ${PASSES} passes each get their status and a message naming the fault; the server keeps answering in bounded memory`, async () => {
  await registerRegion();
  await assertGood('start');
  const watch = new MemoryWatch();
  const failures: string[] = [];
  for (let pass = 0; pass < PASSES; pass++) {
    for (const [what, make, status, message] of CASES) {
      watch.begin(what);
      try {
        const res = await send(make());
        const error = errorMessage(what, res, status);
        if (process.env.NEREID_HOSTILE_SHOW === "1" && pass === 0) console.log(`${what} → ${res.status} ${error.slice(0, 160)}`);
        assert.match(error, message, `${what}: the message does not match ${String(message)}: ${error.slice(0, 500)}`);
        await assertGood(what);
      } catch (err) {
        failures.push(`[pass ${pass}] ${(err as Error).message}`);
        if (pass > 0) continue;
      }
      if (pass === PASSES - 1) watch.sample(what);
    }
    if (failures.length > 0) break;
  }
  assert.deepEqual(failures, []);
  watch.check(256, 1024);
  // The models and the region are as they were: the repository calls changed nothing.
  const index = JSON.parse((await send({ path: '/v2/repository/index', body: '' })).body.toString()) as { name: string; state: string }[];
  assert.deepEqual(index.map((m) => [m.name, m.state]).sort(), [['identity_fp32', 'READY'], ['seq', 'READY'], ['simple', 'READY'], ['simple_string', 'READY']]);
});

test(`HTTP corpus on one keep-alive connection: after each of the ${CASES.length} bad requests the same connection answers a good one, unless the refusal announced its close`, async () => {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const sockets = new Set<unknown>();
  const failures: string[] = [];
  let closes = 0;
  try {
    for (const [what, make, status] of CASES) {
      try {
        const res = await send(make(), agent);
        assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status}: ${res.body.toString().slice(0, 300)}`);
        // A body over the input limit ends its connection, and the response says so.
        const announced = res.headers.connection === 'close';
        if (announced) closes++;
        await assertGood(what, agent);
        const before = sockets.size;
        for (const list of Object.values(agent.sockets)) for (const socket of list ?? []) sockets.add(socket);
        for (const list of Object.values(agent.freeSockets)) for (const socket of list ?? []) sockets.add(socket);
        if (sockets.size !== before && before > 0 && !announced) failures.push(`${what}: the connection was closed without 'Connection: close'`);
      } catch (err) {
        failures.push((err as Error).message);
      }
    }
  } finally {
    agent.destroy();
  }
  assert.deepEqual(failures, []);
  assert.equal(sockets.size, 1 + closes, `${sockets.size} connections were used, ${closes} closes announced`);
});

/** Transfers a well-formed request could never be: each must be refused or dropped, never crash. */
const RAW: [what: string, bytes: () => string | Buffer, answer: RegExp][] = [
  ['100 KB header', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\nContent-Length: 0\r\n\r\n`, /^HTTP\/1.1 431/],
  ['100 KB URL', () => `GET /v2/models/${'m'.repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, /^HTTP\/1.1 431/],
  ['10 000 headers', () => `GET /v2/health/live HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(10_000)}\r\n`, /^HTTP\/1.1 431/],
  ['Content-Length not a number', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}`, /^HTTP\/1.1 400/],
  ['two Content-Lengths', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`, /^HTTP\/1.1 400/],
  ['Content-Length 2^64', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n{}`, /^HTTP\/1.1 400/],
  ['Content-Length over the input limit', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n{}`, /^HTTP\/1.1 400[^]*maximum input size/],
  ['bad chunk size', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, /^HTTP\/1.1 400/],
  ['chunk size 2^64', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n{}\r\n0\r\n\r\n`, /^HTTP\/1.1 400/],
  ['not HTTP', () => Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0, 0, 0]), /^(HTTP\/1.1 400[^]*)?$/],
  ['body shorter than Content-Length, then FIN', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"inputs":`, /^(HTTP\/1.1 400[^]*)?$/],
  ['binary header length past a truncated body', () => `POST ${INFER} HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: 900\r\nContent-Length: 1000\r\n\r\n{"inputs":[]}`, /^(HTTP\/1.1 400[^]*)?$/],
];

test(`HTTP transfers: ${RAW.length} malformed transfers are refused or dropped and the server keeps answering`, async () => {
  const failures: string[] = [];
  for (const [what, bytes, answer] of RAW) {
    try {
      const got = await rawExchange(srv.srv.port, bytes(), { endAfterWrite: true, settleMs: 2000 }).catch((err: NodeJS.ErrnoException) => (err.code === "ECONNRESET" ? "" : Promise.reject(err)));
      const head = got.split('\r\n')[0] ?? '';
      assert.match(got, answer, `${what}: got ${JSON.stringify(head)}${got.includes('\r\n\r\n') ? ' ' + got.slice(got.indexOf('\r\n\r\n') + 4, 300) : ''}`);
      await assertGood(what);
    } catch (err) {
      failures.push((err as Error).message);
    }
  }
  assert.deepEqual(failures, []);
});
