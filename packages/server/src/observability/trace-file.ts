/**
 * The trace file of trace mode `triton` (docs/observability.md): a JSON array in Triton's form,
 * one object per event of a trace —
 *
 *   {"id":1,"model_name":"simple","model_version":1,"request_id":"r1"}       (parent_id for a child)
 *   {"id":1,"timestamps":[{"name":"REQUEST_START","ns":68540551567179}]}
 *   {"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"INPUT0","data":"1,2","shape":"2","dtype":"INT32"}}
 *
 * With a log frequency N > 0 every N root traces (each with its children) close a file
 * `<file>.<k>` (k = 0, 1, …); with 0 all go to `<file>`. Either way the last file is closed at
 * shutdown (`close`). Writes are batched: `write` only serialises, a timer appends what
 * gathered, in order, with `fs.promises`. The path is the operator's (`--trace-config
 * triton,file=`): nothing a client sends names a file.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { TRACE_TENSORS, TRACE_TIMESTAMPS, type Trace, type TraceSink } from './trace.js';

const FLUSH_DELAY_MS = 50;

/** One trace (and its children, after it) as the comma-separated objects of Triton's file. */
export function traceEvents(trace: Trace, out: string[] = []): string[] {
  const id = trace.id;
  // No version: the request failed before a version served it (an unknown model).
  let head = `{"id":${id},"model_name":${JSON.stringify(trace.model)}${/^[0-9]+$/.test(trace.version) ? `,"model_version":${trace.version}` : ''}`;
  if (trace.requestId !== '') head += `,"request_id":${JSON.stringify(trace.requestId)}`;
  if (trace.parentId !== 0) head += `,"parent_id":${trace.parentId}`;
  out.push(head + '}');
  const events: [bigint, string][] = [];
  if (trace.level & TRACE_TIMESTAMPS) {
    for (const [name, ns] of trace.timestamps()) events.push([ns, `{"id":${id},"timestamps":[{"name":"${name}","ns":${ns}}]}`]);
  }
  if (trace.level & TRACE_TENSORS && trace.tensors !== undefined) {
    for (const t of trace.tensors) {
      events.push([
        t.ns,
        `{"id":${id},"activity":"${t.activity}","tensor":{"name":${JSON.stringify(t.name)},"data":${JSON.stringify(t.data)},"shape":"${t.shape}","dtype":"${t.datatype}"}}`,
      ]);
    }
  }
  // Stable: a tensor event recorded at a timestamp's moment stays after it.
  events.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const e of events) out.push(e[1]);
  if (trace.children !== undefined) for (const c of trace.children) traceEvents(c, out);
  return out;
}

interface Op {
  path: string;
  /** Text before the trace (`[`, `,`) or the closing `]`. */
  text: string;
  /** Serialised when written, off the request's turn. */
  trace: Trace | undefined;
  /** The first write of a file: it replaces what was there. */
  create: boolean;
}

export class TraceFileWriter implements TraceSink {
  readonly #file: string;
  readonly #logFrequency: () => number;
  readonly #onError: (message: string) => void;
  /** The file being filled and how many root traces it holds (0: none open). */
  #path = '';
  #inFile = 0;
  #index = 0;
  #ops: Op[] = [];
  #timer: NodeJS.Timeout | undefined;
  #chain: Promise<void> = Promise.resolve();
  #failed = false;
  #closed = false;

  /**
   * `file`: the operator's trace file. `logFrequency`: read at each trace (the setting may change
   * while the server runs). `onError`: told once if a write fails (traces are then dropped).
   */
  constructor(file: string, logFrequency: () => number, onError: (message: string) => void) {
    this.#file = file;
    this.#logFrequency = logFrequency;
    this.#onError = onError;
  }

  write(trace: Trace): void {
    if (this.#closed) return;
    const frequency = this.#logFrequency();
    if (this.#inFile === 0) {
      this.#path = frequency > 0 ? `${this.#file}.${this.#index++}` : this.#file;
      this.#ops.push({ path: this.#path, text: '[', trace, create: true });
    } else {
      this.#ops.push({ path: this.#path, text: ',', trace, create: false });
    }
    this.#inFile++;
    if (frequency > 0 && this.#inFile >= frequency) this.#closeFile();
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      void this.#drain();
    }, FLUSH_DELAY_MS).unref();
  }

  #closeFile(): void {
    if (this.#inFile === 0) return;
    this.#ops.push({ path: this.#path, text: ']', trace: undefined, create: false });
    this.#inFile = 0;
  }

  /** Appends what gathered, after what is being written. */
  #drain(): Promise<void> {
    const ops = this.#ops;
    this.#ops = [];
    if (ops.length === 0) return this.#chain;
    const textOf = (op: Op) => (op.trace === undefined ? op.text : op.text + traceEvents(op.trace).join(','));
    this.#chain = this.#chain.then(async () => {
      // Consecutive writes to one file go as one.
      for (let i = 0; i < ops.length; ) {
        const { path, create } = ops[i]!;
        let text = textOf(ops[i]!);
        let j = i + 1;
        while (j < ops.length && ops[j]!.path === path && !ops[j]!.create) text += textOf(ops[j++]!);
        i = j;
        if (this.#failed) continue;
        try {
          await (create ? writeFile(path, text) : appendFile(path, text));
        } catch (err) {
          this.#failed = true;
          this.#onError(`cannot write the trace file '${path}': ${(err as Error).message}; traces are no longer written`);
        }
      }
    });
    return this.#chain;
  }

  flush(): Promise<void> {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    return this.#drain();
  }

  /** Closes the open file (its closing bracket) and writes everything out. */
  async close(): Promise<void> {
    if (this.#closed) return this.#chain;
    this.#closeFile();
    this.#closed = true;
    await this.flush();
  }
}
