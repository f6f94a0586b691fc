/**
 * Worker-thread entry of one instance of a worker-thread custom backend (`worker-backend.ts`).
 * Imports the backend module, creates its model and one instance, then runs `execute` messages
 * one at a time in arrival order. Responses and timing marks go back as messages; output bytes
 * are copied into one fresh buffer per response and transferred, so the backend may keep or
 * reuse what it responded with.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { NereidError, type ParameterValue } from '@nereid/protocol';
import type { Logger, LogSettings } from '../../observability/logger.js';
import type { BackendInstance, BackendModel, BackendRequest, BackendResponse, BackendTensor, ExecutionTiming } from '../spi.js';
import { backendError, backendFromModule, describeModule, importBackendModule } from './module-loader.js';
import type { FromWorker, TensorRange, ToWorker, WireError, WireMarks, WireRequest } from './worker-protocol.js';
import type { WorkerInit } from './worker-protocol.js';

const init = workerData as WorkerInit;
const port = parentPort!;
const where = describeModule(init.model.name, init.backend, init.modulePath);

/**
 * Messages wait in an outbox and go in one postMessage: at the end of each execution, or on the
 * next turn of this thread's event loop for what is sent outside one (waking the main thread
 * costs more than the message).
 */
let outbox: FromWorker[] = [];
let outboxTransfer: ArrayBuffer[] = [];
let flushScheduled = false;

function flush(): void {
  flushScheduled = false;
  if (outbox.length === 0) return;
  port.postMessage(outbox, outboxTransfer);
  outbox = [];
  outboxTransfer = [];
}

function post(message: FromWorker, transfer: ArrayBuffer[] = []): void {
  outbox.push(message);
  outboxTransfer.push(...transfer);
  if (!flushScheduled) {
    flushScheduled = true;
    setImmediate(flush);
  }
}

function wireError(err: unknown, context: string): WireError {
  const e = backendError(err, 'BACKEND_ERROR', context);
  return { code: e.code, message: e.message };
}

const settings: LogSettings = { info: true, warning: true, error: true, verboseLevel: init.verboseLevel, format: 'default', file: '' };
const logger: Logger = {
  info: (message) => post({ type: 'log', level: 'info', message }),
  warning: (message) => post({ type: 'log', level: 'warning', message }),
  error: (message) => post({ type: 'log', level: 'error', message }),
  verbose: (level, message) => {
    if (level <= settings.verboseLevel) post({ type: 'log', level: 'verbose', verbose: level, message });
  },
  isVerbose: (level) => level <= settings.verboseLevel,
  settings,
  update: () => undefined,
};

/** Aborters of the requests of running and queued executions, by execution id. */
const aborters = new Map<number, AbortController[]>();
let model: BackendModel | undefined;
let instance: BackendInstance | undefined;
let queue: Promise<void> = Promise.resolve();

/** Packs a response's tensors into one fresh buffer; throws for a tensor that is not one. */
function packOutputs(outputs: unknown): { ranges: TensorRange[]; buffer: ArrayBuffer } {
  if (!Array.isArray(outputs)) throw new NereidError('BACKEND_ERROR', `${where} responded without an 'outputs' array`);
  let total = 0;
  const views: Uint8Array[] = [];
  for (const t of outputs as Partial<BackendTensor>[]) {
    const data = t?.data as unknown;
    if (!ArrayBuffer.isView(data)) {
      throw new NereidError('BACKEND_ERROR', `${where} responded with output '${String(t?.name)}' whose data is not a Uint8Array (or another typed array)`);
    }
    views.push(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    total += data.byteLength;
  }
  const buffer = new ArrayBuffer(total);
  const bytes = new Uint8Array(buffer);
  const ranges: TensorRange[] = [];
  let offset = 0;
  (outputs as BackendTensor[]).forEach((t, i) => {
    bytes.set(views[i]!, offset);
    ranges.push({ name: t.name, datatype: t.datatype, shape: [...t.shape], offset, length: views[i]!.byteLength });
    offset += views[i]!.byteLength;
  });
  return { ranges, buffer };
}

function request(exec: number, index: number, wire: WireRequest, buffer: ArrayBuffer, aborter: AbortController): BackendRequest {
  const inputs = new Map<string, BackendTensor>();
  for (const r of wire.inputs) {
    inputs.set(r.name, { name: r.name, datatype: r.datatype, shape: r.shape, data: new Uint8Array(buffer, r.offset, r.length) });
  }
  if (wire.aborted) aborter.abort();
  let final = false;
  return {
    id: wire.id,
    inputs,
    requestedOutputs: wire.requestedOutputs,
    parameters: wire.parameters,
    batchSize: wire.batchSize,
    signal: aborter.signal,
    respond(response: BackendResponse | NereidError | Error | null, isFinal = true) {
      if (final) return;
      final = isFinal;
      if (response === null) {
        post({ type: 'respond', exec, index, final: isFinal, empty: true });
      } else if (response instanceof Error) {
        post({ type: 'respond', exec, index, final: isFinal, error: wireError(response, `${where} responded with an error`) });
      } else {
        let packed;
        try {
          packed = packOutputs((response as Partial<BackendResponse> | undefined)?.outputs);
        } catch (err) {
          post({ type: 'respond', exec, index, final: true, error: wireError(err, where) });
          final = true;
          return;
        }
        const parameters = (response.parameters ?? {}) as Record<string, ParameterValue>;
        post({ type: 'respond', exec, index, final: isFinal, outputs: packed.ranges, parameters, buffer: packed.buffer }, [packed.buffer]);
      }
    },
  };
}

async function execute(message: Extract<ToWorker, { type: 'execute' }>): Promise<void> {
  const marks: WireMarks = {};
  const aborter = aborters.get(message.exec) ?? [];
  const requests = message.requests.map((r, i) => request(message.exec, i, r, message.buffer, aborter[i]!));
  const timing: ExecutionTiming = {
    markComputeStart: (at) => void (marks.computeStart = at ?? process.hrtime.bigint()),
    markInputsReady: (at) => void (marks.inputsReady = at ?? process.hrtime.bigint()),
    markOutputsStart: (at) => void (marks.outputsStart = at ?? process.hrtime.bigint()),
    markComputeEnd: (at) => void (marks.computeEnd = at ?? process.hrtime.bigint()),
  };
  const start = process.hrtime.bigint();
  let error: WireError | undefined;
  try {
    await instance!.execute(requests, timing);
  } catch (err) {
    error = wireError(err, `backend '${init.backend}' failed to execute instance '${init.spec.name}'`);
  }
  marks.computeStart ??= start;
  marks.computeEnd ??= process.hrtime.bigint();
  aborters.delete(message.exec);
  post({ type: 'done', exec: message.exec, marks, ...(error ? { error } : {}) });
  flush();
}

port.on('message', (messages: ToWorker[]) => {
  for (const message of messages) receive(message);
});

function receive(message: ToWorker): void {
  switch (message.type) {
    case 'execute':
      aborters.set(message.exec, message.requests.map(() => new AbortController()));
      queue = queue.then(() => execute(message));
      break;
    case 'abort':
      aborters.get(message.exec)?.[message.index]?.abort();
      break;
    case 'unload':
      queue = queue.then(async () => {
        let error: WireError | undefined;
        try {
          await instance?.unload();
          await model?.unload();
        } catch (err) {
          error = wireError(err, `${where}: unload failed`);
        }
        post({ type: 'unloaded', ...(error ? { error } : {}) });
        flush();
      });
      break;
  }
}

try {
  const ns = await importBackendModule(init.moduleUrl, init.modulePath, where);
  const backend = await backendFromModule(ns, { name: init.backend, spiVersion: 1, backendConfig: init.model.backendConfig, logger }, where);
  model = await backend.createModel({ ...init.model, logger });
  instance = await model.createInstance(init.spec);
  const depth = instance.pipelineDepth;
  post({ type: 'ready', pipelineDepth: typeof depth === 'number' && depth >= 1 ? Math.floor(depth) : 1 });
} catch (err) {
  post({ type: 'failed', error: wireError(err, where) });
  flush();
  await model?.unload().catch(() => undefined);
  port.close();
}
