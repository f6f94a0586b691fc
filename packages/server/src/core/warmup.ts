/**
 * Model warmup (`model_warmup`, models-and-scheduling.md §2.15, §8.3): samples are prepared once
 * per version from the configuration and the model directory's `warmup/` files, then run on every
 * instance before the version becomes READY. Every failure is a load error whose message starts
 * "failed to run warmup sample '<name>': " and names the input at fault.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomFillSync } from 'node:crypto';
import { NereidError, countBytesElements, elementCount, elementSize, fromConfigDataType } from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';
import { isInsideDirectory } from '../config/index.js';
import type { ModelConfig, ModelWarmup, ModelWarmupInput } from '../config/model-config.js';
import type { InstanceRunner } from '../scheduling/instance-runner.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import { DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS, InferenceRequest } from './inference-request.js';
import { applyReshape } from './request-validation.js';

/** One sample, ready to run: each of its `batchSize` requests carries `inputs`. */
export interface WarmupSample {
  readonly name: string;
  readonly batchSize: number;
  /** Executions of the sample per instance (`count`, at least 1). */
  readonly executions: number;
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  /** Outputs requested besides the configured ones (a sequence model's state outputs). */
  readonly extraOutputs: readonly string[];
}

/** Inputs every sample carries unless it lists them itself, and outputs to request besides the configured ones. */
export interface WarmupExtras {
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  readonly outputs: readonly string[];
}

function sampleError(sample: string, message: string, code: 'CONFIG_INVALID' | 'MODEL_LOAD_FAILED' = 'CONFIG_INVALID'): NereidError {
  return new NereidError(code, `failed to run warmup sample '${sample}': ${message}`);
}

const dimsText = (dims: readonly number[]) => `[${dims.join(', ')}]`;

/**
 * The samples of `config` in config order, `batch_size: 0` ones skipped. Reads input data files
 * from `<modelDirectory>/warmup/`. Throws a NereidError naming the sample and input for a sample
 * that cannot run: a batch size the model cannot take, a configured input missing, an input with
 * no data source, a data type or dims that differ from the model's, variable dims, a file
 * outside `warmup/`, unreadable or too short. `extras` (a sequence model's control and state
 * inputs, `sequenceWarmupInputs`) are added to every sample that does not list them.
 */
export async function prepareWarmup(config: ModelConfig, modelDirectory: string, extras?: WarmupExtras): Promise<WarmupSample[]> {
  const samples: WarmupSample[] = [];
  const batching = config.max_batch_size > 0;
  for (const warmup of config.model_warmup) {
    if (warmup.batch_size === 0) continue;
    const name = warmup.name;
    if (!batching && warmup.batch_size !== 1) {
      throw sampleError(name, `batch_size is ${warmup.batch_size}; a model that does not batch (max_batch_size 0) takes batch_size 1`);
    }
    if (batching && warmup.batch_size > config.max_batch_size) {
      throw sampleError(name, `batch_size ${warmup.batch_size} exceeds the model's max_batch_size ${config.max_batch_size}`);
    }
    for (const input of config.input) {
      if (!input.optional && warmup.inputs[input.name] === undefined) {
        throw sampleError(name, `input '${input.name}' of the model is not given; every required input needs data`);
      }
    }
    const inputs = new Map<string, BackendTensor>();
    for (const [inputName, spec] of Object.entries(warmup.inputs)) {
      inputs.set(inputName, await warmupTensor(config, warmup, inputName, spec, modelDirectory));
    }
    for (const [inputName, tensor] of extras?.inputs ?? []) if (!inputs.has(inputName)) inputs.set(inputName, tensor);
    samples.push({ name, batchSize: warmup.batch_size, executions: Math.max(1, warmup.count), inputs, extraOutputs: extras?.outputs ?? [] });
  }
  return samples;
}

async function warmupTensor(
  config: ModelConfig,
  warmup: ModelWarmup,
  name: string,
  spec: ModelWarmupInput,
  modelDirectory: string,
): Promise<BackendTensor> {
  const fail = (message: string) => sampleError(warmup.name, `input '${name}': ${message}`);
  const datatype = fromConfigDataType(spec.data_type);
  if (datatype === undefined) throw fail(`data_type ${spec.data_type} is not a tensor data type`);
  if (spec.dims.some((d) => d < 0)) throw fail(`dims ${dimsText(spec.dims)} must all be fixed (no -1)`);
  const modelInput = config.input.find((t) => t.name === name);
  if (modelInput !== undefined) {
    if (modelInput.data_type !== spec.data_type) {
      throw fail(`data_type is ${spec.data_type}, but the model's input has ${modelInput.data_type}`);
    }
    const fits = modelInput.dims.length === spec.dims.length && modelInput.dims.every((d, i) => d === -1 || d === spec.dims[i]);
    if (!fits) throw fail(`dims ${dimsText(spec.dims)} do not fit the model's input dims ${dimsText(modelInput.dims)}`);
  }
  const count = elementCount(spec.dims);
  const strings = datatype === 'BYTES';
  let data: Uint8Array;
  if (spec.zero_data) {
    // For BYTES, zero bytes are `count` empty strings (each a zero length prefix).
    data = new Uint8Array(strings ? 4 * count : count * elementSize(datatype));
  } else if (spec.random_data) {
    data = new Uint8Array(strings ? 4 * count : count * elementSize(datatype));
    if (!strings) randomFillSync(data);
  } else if (spec.input_data_file !== undefined) {
    const directory = join(modelDirectory, 'warmup');
    const file = spec.input_data_file;
    if (!isInsideDirectory(directory, file)) throw fail(`input_data_file '${file}' is outside the model's warmup directory`);
    let bytes: Buffer;
    try {
      bytes = await readFile(join(directory, file));
    } catch (err) {
      throw fail(`input_data_file '${join(directory, file)}' cannot be read: ${(err as Error).message}`);
    }
    if (strings) {
      let elements: number;
      try {
        elements = countBytesElements(bytes, `input_data_file '${file}'`);
      } catch (err) {
        throw fail((err as Error).message);
      }
      if (elements !== count) throw fail(`input_data_file '${file}' holds ${elements} strings; dims ${dimsText(spec.dims)} need ${count}`);
      data = bytes;
    } else {
      const needed = count * elementSize(datatype);
      if (bytes.byteLength < needed) {
        throw fail(`input_data_file '${file}' holds ${bytes.byteLength} bytes; dims ${dimsText(spec.dims)} of ${spec.data_type} need ${needed}`);
      }
      data = bytes.subarray(0, needed);
    }
  } else {
    throw fail('give one of zero_data, random_data or input_data_file');
  }
  let item = spec.dims;
  if (modelInput?.reshape !== undefined) item = applyReshape(spec.dims, modelInput.dims, modelInput.reshape.shape);
  return { name, datatype, shape: config.max_batch_size > 0 ? [1, ...item] : [...item], data };
}

/**
 * Runs every sample on every instance (instances in parallel, samples in order, each
 * `executions` times): each execution hands the instance all of the sample's requests as one
 * batch, as Triton does. Warmup is not counted in statistics. Rejects with the first failure
 * once every instance has stopped. A decoupled model's responses are discarded; each execution
 * waits for its requests' final responses, a request silent for `responseTimeoutMs` after
 * `execute` returned failing the warmup.
 */
export async function runWarmup(
  config: ModelConfig,
  samples: readonly WarmupSample[],
  runners: readonly InstanceRunner[],
  responseTimeoutMs = DEFAULT_DECOUPLED_RESPONSE_TIMEOUT_MS,
): Promise<void> {
  if (samples.length === 0) return;
  const outputs = config.output.map((o) => o.name);
  const decoupled = config.model_transaction_policy?.decoupled ?? false;
  const warmInstance = async (runner: InstanceRunner) => {
    for (const sample of samples) {
      for (let n = 0; n < sample.executions; n++) {
        const batch = Array.from(
          { length: sample.batchSize },
          () =>
            new InferenceRequest({
              id: '',
              model: config.name,
              inputs: sample.inputs,
              requestedOutputs: sample.extraOutputs.length === 0 ? outputs : [...new Set([...outputs, ...sample.extraOutputs])],
              parameters: {},
              batchSize: 1,
              priority: 0,
              timeoutUs: 0,
              signal: NEVER_ABORTED,
              requestTime: process.hrtime.bigint(),
              ...(decoupled ? { onResponse: () => undefined, responseTimeoutMs } : {}),
            }),
        );
        await runner.warm(batch);
        if (decoupled) await Promise.all(batch.map((r) => r.delivered.catch(() => undefined)));
        const failed = batch.find((r) => r.error !== undefined);
        if (failed !== undefined) {
          throw sampleError(sample.name, `instance '${runner.spec.name}': ${failed.error!.message}`, 'MODEL_LOAD_FAILED');
        }
      }
    }
  };
  const results = await Promise.allSettled(runners.map(warmInstance));
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
}
