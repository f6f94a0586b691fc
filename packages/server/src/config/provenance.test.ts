import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  type ConfigStages,
  type ModelConfig,
  completeModelConfig,
  configProvenance,
  deriveModelConfig,
  modelConfigFromJson,
  normalizeInstanceGroups,
  normalizeModelConfig,
  parseModelConfigText,
  printModelConfigText,
} from './index.js';
import { fixturesDir } from './test-support.js';

/** What a load does before the backend's auto-complete (models-and-scheduling.md §3.1 steps 1–6). */
function before(source: ReturnType<typeof parseModelConfigText>, name = 'm'): ModelConfig {
  const derived = deriveModelConfig(completeModelConfig(source), name, new Map([['model.onnx', 'file']]));
  return normalizeInstanceGroups(normalizeModelConfig(derived), { gpus: [], defaultCpuCount: 2 });
}

/** A stand-in for the ONNX Runtime backend's auto-complete: adds what the graph would give. */
function autoComplete(config: ModelConfig, graphInputs: string[]): ModelConfig {
  const tensor = (name: string) => ({ ...completeModelConfig({ input: [{ name }] }).input[0]!, data_type: 'TYPE_FP32' as const, dims: [4] });
  const inputs = graphInputs.map((name) => config.input.find((i) => i.name === name) ?? tensor(name));
  return {
    ...structuredClone(config),
    max_batch_size: config.max_batch_size || 4,
    input: inputs,
    output: config.output.length ? config.output : [{ ...completeModelConfig({ output: [{ name: 'Y' }] }).output[0]!, data_type: 'TYPE_FP32', dims: [4] }],
    dynamic_batching: config.dynamic_batching ?? completeModelConfig({ dynamic_batching: {} }).dynamic_batching!,
  };
}

function stages(text: string, graphInputs: string[], sourceKind: ConfigStages['sourceKind'] = 'file'): ConfigStages {
  const source = sourceKind === 'override' ? modelConfigFromJson(text) : parseModelConfigText(text);
  const beforeAutoComplete = before(source);
  const afterAutoComplete = autoComplete(beforeAutoComplete, graphInputs);
  return { source, sourceKind, beforeAutoComplete, afterAutoComplete, effective: normalizeModelConfig(afterAutoComplete) };
}

const PARTIAL = `
name: "m"
max_batch_size: 8
instance_group [ { kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
`;

describe('configProvenance', () => {
  it('tells file, auto-complete and default values apart', () => {
    const p = configProvenance(stages(PARTIAL, ['A', 'B']));
    assert.equal(p['name'], 'file');
    assert.equal(p['max_batch_size'], 'file');
    assert.equal(p['parameters["intra_op_thread_count"].string_value'], 'file');
    assert.equal(p['instance_group[0].kind'], 'file');
    // Named and counted by normalisation although the group itself is from the file.
    assert.equal(p['instance_group[0].name'], 'default');
    assert.equal(p['instance_group[0].count'], 'default');
    // Derived from the model directory.
    assert.equal(p['backend'], 'default');
    assert.equal(p['platform'], 'default');
    assert.equal(p['default_model_filename'], 'default');
    assert.equal(p['version_policy.latest.num_versions'], 'default');
    // Made by the backend from the graph.
    for (const path of ['input[0].name', 'input[0].data_type', 'input[0].dims', 'input[1].name', 'output[0].name', 'output[0].dims']) {
      assert.equal(p[path], 'auto-complete', path);
    }
    assert.equal(p['dynamic_batching.max_queue_delay_microseconds'], 'auto-complete');
    // Filled by normalisation after auto-complete added dynamic batching.
    assert.equal(p['dynamic_batching.preferred_batch_size'], 'default');
    // Lists nobody filled.
    assert.equal(p['batch_input'], 'default');
    assert.equal(p['model_warmup'], 'default');
  });

  it('matches repeated elements by name: a configured input keeps its origin when auto-complete adds one before it', () => {
    const p = configProvenance(stages(`${PARTIAL} input [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]`, ['A', 'B']));
    assert.equal(p['input[0].name'], 'auto-complete');
    assert.equal(p['input[1].name'], 'file');
    assert.equal(p['input[1].dims'], 'file');
    assert.equal(p['input[1].format'], 'default');
  });

  it('reports a config override as override, and nothing as file without a file', () => {
    const override = configProvenance(stages('{"name":"m","max_batch_size":2}', ['A'], 'override'));
    assert.equal(override['max_batch_size'], 'override');
    assert.equal(override['name'], 'override');
    assert.equal(override['input[0].name'], 'auto-complete');
    const none = configProvenance(stages('', ['A'], 'none'));
    assert.ok(!Object.values(none).includes('file') && !Object.values(none).includes('override'));
    assert.equal(none['max_batch_size'], 'auto-complete');
    assert.equal(none['name'], 'default');
  });

  it('a value the file set and a later step changed is not the file’s', () => {
    const p = configProvenance(stages('name: "m" instance_group [ { count: 0 kind: KIND_CPU } ] max_batch_size: 4', ['A']));
    assert.equal(p['instance_group[0].count'], 'default');
    assert.equal(p['instance_group[0].kind'], 'file');
  });
});

describe('annotated printing', () => {
  it('annotates every value line with its origin, and the text still parses to the same config', () => {
    const s = stages(PARTIAL, ['A', 'B']);
    const provenance = configProvenance(s);
    const seen = new Set<string>();
    const text = printModelConfigText(s.effective, {
      annotate: (path) => {
        seen.add(path);
        return provenance[path];
      },
    });
    // Every leaf the printer writes has an origin, and every origin is printed once.
    assert.deepEqual([...seen].sort(), Object.keys(provenance).sort());
    for (const line of text.split('\n')) {
      if (line === '' || /[{[]$/.test(line.trim()) || line.trim() === '}' || /^\s*key: /.test(line)) continue;
      assert.match(line, /  # (file|override|auto-complete|default)$/, line);
    }
    assert.match(text, /^max_batch_size: 8 {2}# file$/m);
    assert.match(text, /^ {2}dims: \[ 4 \] {2}# auto-complete$/m);
    assert.deepEqual(parseModelConfigText(text), parseModelConfigText(printModelConfigText(s.effective)));
  });

  it('prints exactly as before without annotate (the hand-written fixtures)', () => {
    for (const file of readdirSync(fixturesDir()).filter((f) => f.endsWith('.pbtxt'))) {
      const config = parseModelConfigText(readFileSync(join(fixturesDir(), file), 'utf8'));
      assert.equal(printModelConfigText(config, { annotate: () => undefined }), printModelConfigText(config), file);
      assert.doesNotMatch(printModelConfigText(config), /#/, file);
    }
  });
});
