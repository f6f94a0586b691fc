/**
 * The result of an inference, the same for both clients: each client decodes its wire form into
 * `InferResultInit` and the accessors work on that.
 */
import { NereidError, decodeBytesElements, jsonToTensorData, typedArrayOf, type DataType } from '@nereid/protocol';

/**
 * One output tensor of a response. `data` holds its bytes in the layout of protocol.md §2.3 (BYTES
 * with 4-byte length prefixes); an output that came as JSON `data` (HTTP) has `json` instead and is
 * converted on first access.
 */
export interface ResultOutput {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly data?: Uint8Array;
  readonly json?: unknown;
}

/** What a client decoded from a response. */
export interface InferResultInit {
  readonly model: string;
  readonly version: string;
  /** The request id; undefined when the request had none (gRPC's empty id included). */
  readonly id: string | undefined;
  /** Response parameters; integers beyond ±(2^53−1) are bigints. */
  readonly parameters: Record<string, unknown>;
  readonly outputs: readonly ResultOutput[];
}

interface Output {
  datatype: DataType;
  shape: number[];
  data: Uint8Array | undefined;
  json: unknown;
}

/**
 * A decoded inference response. Output bytes may be views over the received message: they stay
 * valid as long as the result is referenced, and the caller should copy them to keep them longer
 * than that without the rest of the message.
 */
export class InferResult {
  readonly model: string;
  readonly version: string;
  readonly id: string | undefined;
  readonly parameters: Record<string, unknown>;
  readonly #outputs: Map<string, Output>;

  constructor(init: InferResultInit) {
    this.model = init.model;
    this.version = init.version;
    this.id = init.id;
    this.parameters = init.parameters;
    this.#outputs = new Map();
    for (const o of init.outputs) {
      this.#outputs.set(o.name, { datatype: o.datatype, shape: [...o.shape], data: o.data, json: o.json });
    }
  }

  outputNames(): string[] {
    return [...this.#outputs.keys()];
  }

  shape(name: string): number[] {
    return this.#get(name).shape;
  }

  datatype(name: string): DataType {
    return this.#get(name).datatype;
  }

  /** Raw bytes of an output (JSON outputs are converted). */
  bytes(name: string): Uint8Array {
    const o = this.#get(name);
    if (o.data === undefined) {
      const count = o.shape.reduce((a, b) => a * b, 1);
      o.data = jsonToTensorData(o.datatype, o.json, count, `output '${name}'`);
    }
    return o.data;
  }

  /** The output as a typed array of its datatype (BYTES: use `strings`). */
  typed(name: string): ReturnType<typeof typedArrayOf> {
    return typedArrayOf(this.datatype(name), this.bytes(name));
  }

  /** BYTES output elements decoded as UTF-8 strings. */
  strings(name: string): string[] {
    return decodeBytesElements(this.bytes(name), `output '${name}'`).map((b) => b.toString('utf8'));
  }

  #get(name: string): Output {
    const o = this.#outputs.get(name);
    if (o === undefined) throw new NereidError('OUTPUT_UNKNOWN', `the response has no output '${name}'`);
    return o;
  }
}
