/**
 * `nereid serve` started with and without the Node.js options it is meant to run with
 * (`SERVE_NODE_OPTIONS`, docs/operations.md "Node.js options"): the verbose log says which are
 * missing, and says nothing when they are given through NODE_OPTIONS.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { SERVE_NODE_OPTIONS } from '@nereid/server';
import { EXAMPLE_REPOSITORY, REPO_ROOT, startNereidServe, stopAllNereid } from '../../helpers/cli.js';

after(stopAllNereid);

const HINT = /started without the Node\.js options (.*): more garbage collection per request/;

describe('nereid serve and its Node.js options', () => {
  it('are passed by `npm run serve` (the README quick start), which cannot import them', async () => {
    const pkg = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const serve = pkg.scripts['serve']!;
    const node = serve.slice(serve.indexOf('node '), serve.indexOf('packages/server/bin/nereid.js'));
    for (const option of SERVE_NODE_OPTIONS) assert.ok(node.split(/\s+/).includes(option), `npm run serve starts node without ${option}: ${serve}`);
  });

  it('logs the missing options at --log-verbose=1', async () => {
    const { process: p } = await startNereidServe([`--model-repository=${EXAMPLE_REPOSITORY}`, '--log-verbose=1'], { NODE_OPTIONS: '' });
    try {
      const m = HINT.exec(p.stdout);
      assert.ok(m, p.output);
      assert.equal(m[1], SERVE_NODE_OPTIONS.join(' '));
    } finally {
      await p.stop();
    }
  });

  it('is silent about them when they are given, and serves', async () => {
    // NODE_OPTIONS takes the semi-space size but refuses --single-threaded-gc: that one goes on
    // node's command line, as `npm run serve` and the container's `nereid` pass them.
    const inEnv = SERVE_NODE_OPTIONS.filter((o) => o.startsWith('--max-semi-space-size'));
    const onCommandLine = SERVE_NODE_OPTIONS.filter((o) => !inEnv.includes(o));
    const { process: p, url } = await startNereidServe(
      [`--model-repository=${EXAMPLE_REPOSITORY}`, '--log-verbose=1'],
      { NODE_OPTIONS: inEnv.join(' ') },
      onCommandLine,
    );
    try {
      assert.doesNotMatch(p.stdout + p.stderr, HINT);
      const ready = await fetch(`${url}/v2/health/ready`);
      assert.equal(ready.status, 200);
    } finally {
      await p.stop();
    }
  });
});
