/**
 * `pb_utils.ModelConfig`, the object `auto_complete_config` receives (models-and-scheduling.md
 * §3.5), and the pure helpers of `triton_python_backend_utils.py`, run by the system Python.
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { before, describe, it } from 'node:test';
import { PYTHON_DIR } from './stub-process.js';
import { requireNumpy } from './test-support.js';


/**
 * Runs `body` after `import triton_python_backend_utils as pb_utils`, with `err(f)` returning the
 * ValueError message of calling `f` ("no error" if none); returns what the body prints, as JSON.
 */
function python(body: string): unknown {
  const prelude = [
    'import json',
    'import numpy as np',
    'import triton_python_backend_utils as pb_utils',
    'def err(f):',
    '    try:',
    '        f()',
    '        return "no error"',
    '    except ValueError as e:',
    '        return str(e)',
  ].join('\n');
  const r = spawnSync('/usr/bin/python3', ['-c', `${prelude}\n${body}`], { env: { ...process.env, PYTHONPATH: PYTHON_DIR }, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

describe('pb_utils.ModelConfig (auto_complete_config)', () => {
  before(requireNumpy);
  it('adds inputs and outputs, fills an existing entry, and keeps as_dict read-only', () => {
    const out = python(`
c = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": [{"name": "A", "data_type": "TYPE_INVALID", "dims": []}]}))
c.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2], "optional": True})
c.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [-1]})
c.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
d = c.as_dict()
d["input"].clear()
print(json.dumps(c.as_dict()))
`);
    assert.deepEqual(out, {
      name: 'm',
      max_batch_size: 0,
      input: [
        { name: 'A', data_type: 'TYPE_FP32', dims: [2], optional: true },
        { name: 'B', data_type: 'TYPE_INT32', dims: [-1] },
      ],
      output: [{ name: 'Y', data_type: 'TYPE_FP32', dims: [2] }],
    });
  });

  it('refuses conflicting or malformed tensors, naming the model and tensor', () => {
    const base = `c = pb_utils.ModelConfig({"name": "m", "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [2], "optional": False}], "output": []})`;
    const cases: [string, RegExp][] = [
      ['c.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [2]})', /input 'A' of model 'm' has data_type TYPE_FP32/],
      ['c.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})', /input 'A' of model 'm' has dims \[2\]/],
      ['c.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2], "optional": True})', /optional/],
      ['c.add_input({"name": "C", "data_type": "TYPE_FP32"})', /'dims' is required/],
      ['c.add_input({"name": "C", "data_type": "TYPE_FP32", "dims": [1], "format": "x"})', /key 'format' is not allowed/],
      ['c.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "optional": True})', /key 'optional' is not allowed/],
    ];
    for (const [call, message] of cases) assert.match(python(`${base}\nprint(json.dumps(err(lambda: ${call})))`) as string, message, call);
  });

  it('applies the max_batch_size, dynamic batching and transaction policy rules', () => {
    const out = python(`
c = pb_utils.ModelConfig({"name": "m", "max_batch_size": 8})
results = [err(lambda: c.set_max_batch_size(4))]
c.set_max_batch_size(16)
results.append(c.as_dict()["max_batch_size"])
c.set_dynamic_batching()
c.set_dynamic_batching()
results.append(c.as_dict()["dynamic_batching"])
s = pb_utils.ModelConfig({"name": "s", "sequence_batching": {}})
results.append(err(lambda: s.set_dynamic_batching()))
c.set_model_transaction_policy({"decoupled": True})
results.append(err(lambda: c.set_model_transaction_policy({"decoupled": False})))
results.append(err(lambda: c.set_model_transaction_policy({"other": 1})))
results.append(c.as_dict()["model_transaction_policy"])
print(json.dumps(results))
`) as unknown[];
    assert.match(out[0] as string, /max_batch_size 8 for model 'm'/);
    assert.equal(out[1], 16);
    assert.deepEqual(out[2], {});
    assert.match(out[3] as string, /sequence_batching/);
    assert.match(out[4] as string, /decoupled/);
    assert.match(out[5] as string, /key 'other' is not allowed/);
    assert.deepEqual(out[6], { decoupled: true });
  });

  it('converts type names and serialises BYTES tensors as length-prefixed elements', () => {
    const out = python(`
t = np.array([b"ab", b"", "c\\u00e9"], dtype=np.object_)
s = pb_utils.serialize_byte_tensor(t)
print(json.dumps([
    pb_utils.triton_string_to_numpy("TYPE_FP32").__name__,
    pb_utils.triton_string_to_numpy("TYPE_STRING").__name__,
    list(s.tobytes()),
    [x.decode() for x in pb_utils.deserialize_bytes_tensor(s)],
    pb_utils.using_decoupled_model_transaction_policy({"model_transaction_policy": {"decoupled": True}}),
    pb_utils.get_output_config_by_name({"output": [{"name": "Y", "dims": [1]}]}, "Y"),
    pb_utils.TritonError("x", pb_utils.TritonError.NOT_FOUND).code(),
]))
`) as unknown[];
    assert.deepEqual(out[0], 'float32');
    assert.deepEqual(out[1], 'object_');
    assert.deepEqual(out[2], [2, 0, 0, 0, 97, 98, 0, 0, 0, 0, 3, 0, 0, 0, 99, 0xc3, 0xa9]);
    assert.deepEqual(out[3], ['ab', '', 'cé']);
    assert.equal(out[4], true);
    assert.deepEqual(out[5], { name: 'Y', dims: [1] });
    assert.equal(out[6], 2);
  });
});

describe("the stub's frames and tensor encoding (nereid_stub/transport.py)", () => {
  before(requireNumpy);
  it('round-trips frames through the cached C codec and refuses a malformed one with a ValueError', () => {
    const out = python(`
from nereid_stub import transport as T
m = {"t": "done", "x": 7, "a": [1, 2.5, None, True, "é\\"\\n"], "b": {}}
body = T.encode_frame(m)
print(json.dumps({"same": T.decode_frame(body) == m, "ascii": body.decode("ascii"), "bad": err(lambda: T.decode_frame(b'{"t":')), "trunc": err(lambda: T.decode_frame(b'{bad'))}))
`) as Record<string, unknown>;
    assert.equal(out['same'], true);
    assert.equal(out['ascii'], '{"t":"done","x":7,"a":[1,2.5,null,true,"\\u00e9\\"\\n"],"b":{}}');
    assert.match(String(out['bad']), /malformed frame|Expecting/);
    assert.match(String(out['trunc']), /Expecting property name/);
  });

  it('encodes scalars, empty, half-precision, boolean, non-contiguous and BYTES arrays as their wire bytes', () => {
    const out = python(`
from nereid_stub import transport as T
rows = []
for a in [np.float32(3).reshape(()), np.zeros((0, 16), np.float32), np.ones((2, 3), np.float16), np.array([True, False]), np.arange(6, dtype=np.int64).reshape(2, 3).T, np.array([b"ab", b"c"], dtype=object)]:
    d, s, data = T.encode(a)
    rows.append([d, s, data.nbytes, bytes(data).hex()])
print(json.dumps(rows))
`);
    assert.deepEqual(out, [
      ['FP32', [], 4, '00004040'],
      ['FP32', [0, 16], 0, ''],
      ['FP16', [2, 3], 12, '003c'.repeat(6)],
      ['BOOL', [2], 2, '0100'],
      ['INT64', [3, 2], 48, [0, 3, 1, 4, 2, 5].map((v) => v.toString(16).padStart(2, '0') + '00000000000000').join('')],
      ['BYTES', [2], 11, '020000006162' + '0100000063'],
    ]);
  });
});
