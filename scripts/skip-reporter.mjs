// A reporter for Node's test runner that writes one JSON line per skipped or todo test or suite
// (file, name path, reason). scripts/run-tests.mjs gives it a file as destination, lists the
// lines in its summary, and fails the run for any skip that is not for missing hardware.
export default async function* skipReporter(source) {
  /** Names of the suites enclosing the current test, by nesting level, per file. */
  const stacks = new Map();
  for await (const event of source) {
    if (event.type === 'test:start') {
      const stack = stacks.get(event.data.file) ?? [];
      stack.length = event.data.nesting;
      stack.push(event.data.name);
      stacks.set(event.data.file, stack);
      continue;
    }
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { skip, todo, file, nesting, name } = event.data;
    if (skip === undefined && todo === undefined) continue;
    const path = [...(stacks.get(file) ?? []).slice(0, nesting), name];
    yield `${JSON.stringify({ file, path, kind: skip !== undefined ? 'skip' : 'todo', reason: typeof (skip ?? todo) === 'string' ? (skip ?? todo) : '' })}\n`;
  }
}
