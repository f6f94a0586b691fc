/**
 * The trace extension through tritonclient (trace.py), unchanged, against real Triton 2.51 and
 * Nereid side by side: the same settings calls and errors over HTTP and gRPC must get the same
 * answers, and the same traced requests (HTTP, gRPC, an ensemble with its steps) the same traces.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { ADD_SUB_ENSEMBLE_MODELS } from '../helpers/python-models.js';
import { assertCasePassed, assertCasesAre, runCases, startConformanceServer, type CaseResult, type ConformanceServer } from '../helpers/tier.js';
import { requireTriton, startTriton, type TritonServer } from '../helpers/triton.js';

const MODELS = ADD_SUB_ENSEMBLE_MODELS;

const CASES = ['global_and_model_settings', 'refused_settings', 'trace_file_per_trace'];

describe('conformance: the trace extension against real Triton 2.51 (tritonclient)', () => {
  let triton: TritonServer | undefined;
  let tritonRepository: string | undefined;
  let nereid: ConformanceServer | undefined;
  let results: Map<string, CaseResult> | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'nereid-trace-conformance-'));
  const files = { triton: join(dir, 'triton.json'), nereid: join(dir, 'nereid.json') };

  before(async () => {
    requireTriton();
    tritonRepository = await makeRepository(MODELS);
    [triton, nereid] = await Promise.all([
      startTriton(tritonRepository, [`--trace-config=triton,file=${files.triton}`]),
      startConformanceServer(Object.entries(MODELS), [`--trace-config=triton,file=${files.nereid}`]),
    ]);
    try {
      results = await runCases('trace/trace.py', nereid.endpoints, {
        timeoutMs: 180_000,
        extra: { triton: triton.endpoints, nereid: nereid.endpoints, files },
      });
    } catch (err) {
      throw new Error(`${(err as Error).message}\n--- tritonserver log ---\n${triton.log}`);
    }
  });

  after(async () => {
    await Promise.all([triton?.stop(), nereid?.stop()]);
    if (tritonRepository !== undefined) await removeDir(tritonRepository);
    rmSync(dir, { recursive: true, force: true });
  });

  for (const name of CASES) it(name, () => assertCasePassed(results, name));
  it('runs exactly the listed cases', () => assertCasesAre(results, CASES));
});
