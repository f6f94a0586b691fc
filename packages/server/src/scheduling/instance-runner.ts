/**
 * Runs batches on one backend instance: one batch at a time, timestamps recorded, and the
 * guarantee that every request of the batch ends with a final response whatever the backend does.
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import type { BackendInstance, InstanceSpec } from '../backends/spi.js';
import type { ScheduledRequest } from './scheduler.js';

export class InstanceRunner {
  readonly spec: InstanceSpec;
  readonly #instance: BackendInstance;
  readonly #backendName: string;
  readonly #decoupled: boolean;
  #busy = false;

  /**
   * @param decoupled  decoupled models may keep responding after `execute` returns
   *                   (models-and-scheduling.md §8.1); others must have answered every request.
   */
  constructor(spec: InstanceSpec, instance: BackendInstance, backendName: string, decoupled = false) {
    this.spec = spec;
    this.#instance = instance;
    this.#backendName = backendName;
    this.#decoupled = decoupled;
  }

  get busy(): boolean {
    return this.#busy;
  }

  /**
   * Executes one batch. Never rejects: backend failures become error responses for the requests
   * that have no final response yet.
   */
  async run(batch: readonly ScheduledRequest[]): Promise<void> {
    if (this.#busy) throw new Error(`instance ${this.spec.name} is already executing a batch`);
    this.#busy = true;
    const start = process.hrtime.bigint();
    let inputEnd = 0n;
    let outputStart = 0n;
    for (const r of batch) r.times.computeStart = start;
    try {
      await this.#instance.execute(batch, {
        markInputsReady: () => {
          inputEnd = process.hrtime.bigint();
        },
        markOutputsStart: () => {
          outputStart = process.hrtime.bigint();
        },
      });
    } catch (err) {
      const error = toNereidError(err, 'BACKEND_ERROR', `backend '${this.#backendName}' failed to execute instance '${this.spec.name}'`);
      for (const r of batch) r.fail(error);
    } finally {
      const end = process.hrtime.bigint();
      if (inputEnd === 0n) inputEnd = start;
      if (outputStart === 0n) outputStart = end;
      for (const r of batch) {
        r.times.computeInputEnd = inputEnd;
        r.times.computeOutputStart = outputStart;
        r.times.computeEnd = end;
      }
      this.#busy = false;
    }
    if (this.#decoupled) return;
    for (const r of batch) {
      if (!r.completed) {
        r.fail(
          new NereidError(
            'BACKEND_ERROR',
            `backend '${this.#backendName}' returned from execute without sending a final response for request '${r.id}' on instance '${this.spec.name}'`,
          ),
        );
      }
    }
  }

  unload(): Promise<void> {
    return this.#instance.unload();
  }
}
