import test from 'node:test';
import assert from 'node:assert/strict';
import { NereidError } from '@nereid/protocol';
import { modelConfigToJson, parseModelConfigText, printModelConfigText } from './index.js';

/** The NereidError the parser throws for `lines`, checked to be CONFIG_PARSE. */
function parseError(lines: readonly string[], options: { fileName?: string } = { fileName: 'config.pbtxt' }): string {
  try {
    parseModelConfigText(lines.join('\n'), options);
  } catch (err) {
    assert.ok(err instanceof NereidError, `expected a NereidError, got ${String(err)}`);
    assert.equal(err.code, 'CONFIG_PARSE');
    assert.equal(err.kind, 'INVALID_ARG');
    return err.message;
  }
  assert.fail(`expected a parse error for:\n${lines.join('\n')}`);
}

test('errors: unknown field, with file:line:column', () => {
  assert.equal(
    parseError(['name: "m"', 'max_batch: 8']),
    "config.pbtxt:2:1: unknown field 'max_batch' in message ModelConfig",
  );
  assert.equal(
    parseError(['name: "m"', 'input {', '  nme: "x"', '}']),
    "config.pbtxt:3:3: unknown field 'nme' in message ModelInput",
  );
  assert.equal(
    parseError(['dynamic_batching { priority_queue_policy { key: 1 val: { } } }']),
    "config.pbtxt:1:51: unknown field 'val' in message ModelDynamicBatching.PriorityQueuePolicyEntry",
  );
});

test('errors: without a file name the message starts with line:column', () => {
  assert.equal(parseError(['', '  bogus: 1'], {}), "2:3: unknown field 'bogus' in message ModelConfig");
});

test('errors: the file name may be given as a plain string', () => {
  assert.throws(() => parseModelConfigText('bogus: 1', '/models/m/config.pbtxt'), {
    message: "/models/m/config.pbtxt:1:1: unknown field 'bogus' in message ModelConfig",
  });
});

test('errors: a non-repeated field given twice', () => {
  assert.equal(
    parseError(['name: "a"', 'backend: "onnxruntime"', 'name: "b"']),
    "config.pbtxt:3:1: field 'name' in message ModelConfig is specified more than once (it is not repeated; first set at 1:1)",
  );
  assert.equal(
    parseError(['optimization { graph { level: 1 } graph { level: 2 } }']),
    "config.pbtxt:1:35: field 'graph' in message ModelOptimizationPolicy is specified more than once (it is not repeated; first set at 1:16)",
  );
});

test('a singular scalar may be given again while it holds its default, as protobuf allows', () => {
  // proto3 scalars have no presence: protobuf's parser refuses a second occurrence only when the
  // field already holds a value other than its default (found by pbtxt-reference.test.ts).
  assert.equal(parseModelConfigText('max_batch_size: 0 max_batch_size: 4').max_batch_size, 4);
  assert.deepEqual(parseModelConfigText('input { name: "" name: "x" }').input, [{ name: 'x' }]);
  assert.deepEqual(parseModelConfigText('instance_group { passive: false passive: true kind: KIND_AUTO kind: 2 }').instance_group, [
    { passive: true, kind: 'KIND_CPU' },
  ]);
  assert.deepEqual(parseModelConfigText('parameters { key: "" key: "k" value { } }').parameters, { k: {} });
  assert.equal(
    parseError(['max_batch_size: 0', 'max_batch_size: 4', 'max_batch_size: 5']),
    "config.pbtxt:3:1: field 'max_batch_size' in message ModelConfig is specified more than once (it is not repeated; first set at 2:1)",
  );
  assert.equal(
    parseError(['max_batch_size: 4 max_batch_size: 0']),
    "config.pbtxt:1:19: field 'max_batch_size' in message ModelConfig is specified more than once (it is not repeated; first set at 1:1)",
  );
  // -0 is not the default bit for bit; oneof members and messages have presence.
  assert.match(parseError(['sequence_batching { direct { minimum_slot_utilization: -0 minimum_slot_utilization: 0.5 } }']), /^config\.pbtxt:1:59: field 'minimum_slot_utilization' .* specified more than once/);
  assert.match(parseError(['model_warmup { inputs { value { zero_data: false zero_data: true } } }']), /^config\.pbtxt:1:50: field 'zero_data' .* specified more than once/);
  assert.match(parseError(['version_policy { latest { } latest { } }']), /^config\.pbtxt:1:29: field 'latest' .* specified more than once/);
});

test('errors: two members of the same oneof', () => {
  assert.equal(
    parseError(['dynamic_batching { }', 'sequence_batching { }']),
    "config.pbtxt:2:1: field 'sequence_batching' and field 'dynamic_batching' (set at 1:1) are members of the same oneof 'scheduling_choice' in message ModelConfig; only one may be set",
  );
  assert.equal(
    parseError(['version_policy { latest { num_versions: 1 } all { } }']),
    "config.pbtxt:1:45: field 'all' and field 'latest' (set at 1:18) are members of the same oneof 'policy_choice' in message ModelVersionPolicy; only one may be set",
  );
  assert.match(
    parseError(['model_warmup { inputs { key: "a" value { zero_data: true random_data: true } } }']),
    /^config\.pbtxt:1:58: field 'random_data' and field 'zero_data' .* oneof 'input_data_type' in message ModelWarmup\.Input;/,
  );
});

test('errors: type mismatches', () => {
  assert.equal(
    parseError(['max_batch_size: "8"']),
    `config.pbtxt:1:17: expected an integer for field 'max_batch_size' (int32), found "8"`,
  );
  assert.equal(parseError(['name: 8']), "config.pbtxt:1:7: expected a string for field 'name', found '8'");
  assert.equal(
    parseError(['input { dims: [ 1.5 ] }']),
    "config.pbtxt:1:17: expected an integer for field 'dims' (int64), found '1.5' (a fractional or exponent form is not an integer)",
  );
  assert.equal(
    parseError(['instance_group { passive: yes }']),
    "config.pbtxt:1:27: invalid value 'yes' for bool field 'passive': expected true, false, True, False, t, f, 1 or 0",
  );
  assert.equal(
    parseError(['instance_group { passive: 2 }']),
    "config.pbtxt:1:27: invalid value 2 for bool field 'passive': expected 0 or 1",
  );
  assert.equal(
    parseError(['input { data_type: "TYPE_FP32" }']),
    `config.pbtxt:1:20: expected an enum name or number for field 'data_type' (DataType), found "TYPE_FP32"`,
  );
  assert.equal(
    parseError(['sequence_batching { direct { minimum_slot_utilization: high } }']),
    "config.pbtxt:1:56: expected a number for field 'minimum_slot_utilization' (float), found 'high'",
  );
  assert.equal(
    parseError(['dynamic_batching: 1']),
    "config.pbtxt:1:19: expected '{' to start message field 'dynamic_batching' (ModelDynamicBatching), found '1'",
  );
});

test('errors: unknown enum names and numbers', () => {
  assert.equal(
    parseError(['input {', '  data_type: TYPE_FLOAT32', '}']),
    "config.pbtxt:2:14: unknown enum value 'TYPE_FLOAT32' for field 'data_type' (DataType); expected one of TYPE_INVALID, TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING, TYPE_BF16",
  );
  assert.equal(
    parseError(['instance_group { kind: 7 }']),
    "config.pbtxt:1:24: unknown enum number 7 for field 'kind' (ModelInstanceGroup.Kind); expected one of KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL",
  );
});

test('errors: integers out of range and not exactly representable', () => {
  assert.equal(
    parseError(['max_batch_size: 2147483648']),
    "config.pbtxt:1:17: value 2147483648 is out of range for field 'max_batch_size' (int32: -2147483648 to 2147483647)",
  );
  assert.equal(
    parseError(['max_batch_size: -0x80000001']),
    "config.pbtxt:1:17: value -0x80000001 is out of range for field 'max_batch_size' (int32: -2147483648 to 2147483647)",
  );
  assert.equal(
    parseError(['ensemble_scheduling { max_inflight_requests: 4294967296 }']),
    "config.pbtxt:1:46: value 4294967296 is out of range for field 'max_inflight_requests' (uint32: 0 to 4294967295)",
  );
  assert.equal(
    parseError(['dynamic_batching { priority_levels: -1 }']),
    "config.pbtxt:1:37: value -1 is out of range for field 'priority_levels' (uint64: 0 to 18446744073709551615)",
  );
  assert.equal(
    parseError(['input { dims: [ 9223372036854775808 ] }']),
    "config.pbtxt:1:17: value 9223372036854775808 is out of range for field 'dims' (int64: -9223372036854775808 to 9223372036854775807)",
  );
  assert.equal(
    parseError(['input { dims: [ 1, 9007199254740993 ] }']),
    "config.pbtxt:1:20: value 9007199254740993 of field 'dims' (int64) cannot be represented exactly; Nereid accepts 64-bit integers only up to magnitude 9007199254740991 (2^53-1)",
  );
  assert.match(
    parseError(['dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }']),
    /^config\.pbtxt:1:50: value 18446744073709551615 of field 'max_queue_delay_microseconds' \(uint64\) cannot be represented exactly/,
  );
});

test('errors: float fields take decimal numbers only, as protobuf requires', () => {
  assert.equal(
    parseError(['sequence_batching { direct { minimum_slot_utilization: 0x10 } }']),
    "config.pbtxt:1:56: expected a decimal number for field 'minimum_slot_utilization' (float), found '0x10' (hex and octal forms are for integer fields)",
  );
  assert.match(parseError(['sequence_batching { direct { minimum_slot_utilization: 010 } }']), /^config\.pbtxt:1:56: expected a decimal number .* found '010'/);
  assert.match(parseError(['model_metrics { metric_control { histogram_options { buckets: [ 1, -0x1 ] } } }']), /^config\.pbtxt:1:69: expected a decimal number for field 'buckets' \(double\), found '0x1'/);
  assert.match(parseError(['model_metrics { metric_control { histogram_options { buckets: 00 } } }']), /found '00'/);
});

test('errors: unsigned fields refuse a minus sign, even before 0', () => {
  assert.equal(
    parseError(['dynamic_batching { priority_levels: -0 }']),
    "config.pbtxt:1:37: a minus sign is not allowed before a value of unsigned field 'priority_levels' (uint64)",
  );
  assert.match(parseError(['ensemble_scheduling { max_inflight_requests: -0 }']), /^config\.pbtxt:1:46: a minus sign .* 'max_inflight_requests' \(uint32\)/);
  assert.match(parseError(['dynamic_batching { priority_queue_policy { key: -0 } }']), /^config\.pbtxt:1:49: a minus sign .* 'key' \(uint64\)/);
  assert.equal(parseModelConfigText('max_batch_size: -0').max_batch_size, 0);
});

test('errors: a decimal point after a hex or octal number, or a second one', () => {
  const buckets = (value: string): string[] => [`model_metrics { metric_control { histogram_options { buckets: ${value} } } }`];
  assert.equal(parseError(buckets('0x1.5')), 'config.pbtxt:1:66: hex and octal numbers must be integers');
  assert.equal(parseError(buckets('00.5')), 'config.pbtxt:1:65: hex and octal numbers must be integers');
  assert.equal(parseError(buckets('1.5.5')), "config.pbtxt:1:66: a number cannot have a second decimal point or a '.' after its exponent");
  assert.equal(parseError(buckets('1e5.5')), "config.pbtxt:1:66: a number cannot have a second decimal point or a '.' after its exponent");
});

test('errors: strings', () => {
  assert.equal(
    parseError(['name: "abc', 'backend: "x"']),
    'config.pbtxt:1:7: unterminated string: string literals cannot span lines',
  );
  assert.equal(
    parseError(['backend: "x"', "name: 'abc"]),
    'config.pbtxt:2:7: unterminated string: end of input before the closing quote',
  );
  assert.equal(parseError(['name: "a\\qb"']), "config.pbtxt:1:9: invalid escape sequence '\\q' in string literal");
  assert.equal(parseError(['name: "a\\X41"']), "config.pbtxt:1:9: invalid escape sequence '\\X' in string literal");
  assert.equal(parseError(['name: "\\xff"']), "config.pbtxt:1:7: string for field 'name' is not valid UTF-8");
  assert.equal(parseError(['name: "\\u12"']), "config.pbtxt:1:8: '\\u' must be followed by 4 hex digits and '\\U' by 8");
});

test('errors: syntax', () => {
  assert.equal(parseError(['name "m"']), `config.pbtxt:1:6: expected ':' after field 'name', found "m"`);
  assert.equal(parseError(['max_batch_size: [ 1 ]']), "config.pbtxt:1:17: field 'max_batch_size' is not repeated; a list value is not allowed");
  assert.equal(
    parseError(['input { dims: [ 1 2 ] }']),
    "config.pbtxt:1:19: expected ',' or ']' in the list of field 'dims', found '2'",
  );
  assert.equal(
    parseError(['input {', '  name: "x"']),
    "config.pbtxt:2:12: unexpected end of input: expected '}' to close message field 'input'",
  );
  assert.equal(parseError(['input { name: "x" >']), "config.pbtxt:1:19: expected a field name in message ModelInput, found '>'");
  assert.equal(parseError(['input { dims: [ 09 ] }']), 'config.pbtxt:1:17: numbers starting with a leading zero must be in octal');
  assert.equal(parseError(['input { dims: [ 12ab ] }']), 'config.pbtxt:1:19: need space between number and identifier');
  assert.equal(
    parseError(['[inference.ext]: 1']),
    "config.pbtxt:1:1: extension and Any fields ('[...]') are not supported in message ModelConfig",
  );
  assert.equal(parseError(['name: "a" $']), "config.pbtxt:1:11: expected a field name in message ModelConfig, found '$'");
});

test('accepts every construct of §2.1', () => {
  const text = [
    '# comment line',
    "name: 'm' \"odel\"  # adjacent literals concatenate",
    'max_batch_size: 0x8;',
    'input [ { name: "a" data_type: 11 dims: 2 dims: [ 3, 4 ], dims: [ ] }, { name: "b" } ],',
    'input < name: "c" format: FORMAT_NCHW >',
    'output: { name: "o" dims: [ -1, 010 ] }',
    'instance_group { kind: KIND_GPU gpus: [ ] passive: True host_policy: "\\101\\x42\\u00e9" }',
    'dynamic_batching: {',
    '  priority_queue_policy [ { key: 2 value { max_queue_size: 1 } }, { key: 2 value { max_queue_size: 3 } } ]',
    '  priority_queue_policy { key: 0x3 }',
    '}',
    'model_metrics { metric_control { histogram_options { buckets: [ .5, 1e-3, 2.5f, 7, -inf, nan ] } } }',
    'parameters { value { string_value: "no key" } }',
  ].join('\n');
  const c = parseModelConfigText(text);
  assert.equal(c.name, 'model');
  assert.equal(c.max_batch_size, 8);
  assert.deepEqual(c.input, [
    { name: 'a', data_type: 'TYPE_FP32', dims: [2, 3, 4] },
    { name: 'b' },
    { name: 'c', format: 'FORMAT_NCHW' },
  ]);
  assert.deepEqual(c.output, [{ name: 'o', dims: [-1, 8] }]);
  assert.deepEqual(c.instance_group, [{ kind: 'KIND_GPU', gpus: [], passive: true, host_policy: 'ABé' }]);
  assert.deepEqual(c.dynamic_batching?.priority_queue_policy, { 2: { max_queue_size: 3 }, 3: {} });
  const buckets = c.model_metrics?.metric_control?.[0]?.histogram_options?.buckets ?? [];
  assert.deepEqual(buckets.slice(0, 5), [0.5, 0.001, 2.5, 7, -Infinity]);
  assert.ok(Number.isNaN(buckets[5]));
  assert.deepEqual(c.parameters, { '': { string_value: 'no key' } });
  assert.deepStrictEqual(parseModelConfigText(printModelConfigText(c)), c);
});

test('float fields hold single precision as protobuf prints it', () => {
  const c = parseModelConfigText(
    'sequence_batching { direct { minimum_slot_utilization: 0.3 } control_input { control { fp32_false_true: [ 0.1, 16777217, 3.4e38 ] } } }',
  );
  assert.equal(c.sequence_batching?.direct?.minimum_slot_utilization, 0.3);
  assert.deepEqual(c.sequence_batching?.control_input?.[0]?.control?.[0]?.fp32_false_true, [0.1, 16777216, 3.4e38]);
  // double fields keep full precision
  const m = parseModelConfigText('model_metrics { metric_control { histogram_options { buckets: [ 0.1000000001 ] } } }');
  assert.deepEqual(m.model_metrics?.metric_control?.[0]?.histogram_options?.buckets, [0.1000000001]);
});

test('map keys such as __proto__ are ordinary keys', () => {
  const c = parseModelConfigText('metric_tags { key: "__proto__" value: "x" } metric_tags { key: "toString" value: "y" }');
  assert.deepEqual(Object.keys(c.metric_tags ?? {}), ['__proto__', 'toString']);
  assert.equal(Object.getPrototypeOf(c.metric_tags), Object.prototype);
  assert.deepEqual(modelConfigToJson(c, { emitDefaults: false, int64AsString: false }).metric_tags, JSON.parse('{"__proto__":"x","toString":"y"}'));
});

test('printer: deterministic, readable layout', () => {
  const c = parseModelConfigText(
    'name: "m" instance_group [ { count: 2 } ] input { name: "i" dims: [1,2] reshape { } } metric_tags { key: "k" value: "v\\n" } output [ ] ' +
      'sequence_batching { direct { } control_input { control { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] fp32_false_true: [ 0.5, -0 ] } } }',
  );
  assert.equal(
    printModelConfigText(c),
    [
      'name: "m"',
      'input {',
      '  name: "i"',
      '  dims: [ 1, 2 ]',
      '  reshape { }',
      '}',
      'output [ ]',
      'sequence_batching {',
      '  direct { }',
      '  control_input {',
      '    control {',
      '      kind: CONTROL_SEQUENCE_START',
      '      fp32_false_true: [ 0.5, -0 ]',
      '      bool_false_true: [ false, true ]',
      '    }',
      '  }',
      '}',
      'instance_group {',
      '  count: 2',
      '}',
      'metric_tags {',
      '  key: "k"',
      '  value: "v\\n"',
      '}',
      '',
    ].join('\n'),
  );
  assert.equal(printModelConfigText({}), '');
});
