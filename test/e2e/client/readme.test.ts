/**
 * The TypeScript examples of packages/client/README.md type-check against the client's real
 * declarations (strict mode): each ```ts block becomes a function body, after the block that
 * makes the clients.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { it } from 'node:test';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');

it('every TypeScript example of the client README type-checks', async () => {
  const readme = await readFile(join(ROOT, 'packages/client/README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(blocks.length >= 8, `found ${blocks.length} examples`);
  const [imports, ...rest] = blocks;
  assert.match(imports!, /^import /);
  const prelude = `${imports}
import type { ClientInput } from '@nereid/client';
declare const inputs: ClientInput[];
`;
  const bodies = rest.map((b, i) => `export async function example${i}(): Promise<void> {\n${b}\n}\n`);
  // Under the repository root, so '@nereid/client' resolves through the workspace.
  const dir = await mkdtemp(join(ROOT, '.readme-check-'));
  try {
    const file = join(dir, 'examples.ts');
    await writeFile(file, prelude + bodies.join('\n'));
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: ['node'],
      skipLibCheck: true,
    });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .map((d) => {
        const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
        const line = where ? (d.file!.text.split('\n')[where.line] ?? '') : '';
        return `${ts.flattenDiagnosticMessageText(d.messageText, '\n')}\n    at: ${line.trim()}`;
      });
    assert.deepEqual(problems, []);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
