/**
 * The `nereid` command explains itself: `nereid --help` lists the commands and how to get each
 * one's help; `nereid serve --help` (also `-h`, `nereid help serve`) describes every option the
 * parser knows, in tritonserver's groups, with its value format, default, and whether and why it
 * has no effect.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OPTION_GROUPS, SERVE_OPTIONS, optionFormat, parseServeArgs } from '@nereid/server';
import { REPO_ROOT, runNereid, stopAllNereid } from '../../helpers/cli.js';

after(stopAllNereid);

/** One option as `nereid serve --help` shows it. */
interface HelpEntry {
  group: string;
  format: string;
  /** The bracketed facts: `default: …`, `repeatable`, `no effect`, … */
  tags: string[];
  /** The description, its wrapped lines joined. */
  text: string;
}

/** Reads `nereid serve --help`: `Group:` headers, `  --name <format>  [tags]` lines, indented text. */
function parseHelp(help: string): { entries: Map<string, HelpEntry>; groups: string[]; duplicates: string[] } {
  const entries = new Map<string, HelpEntry>();
  const groups: string[] = [];
  const duplicates: string[] = [];
  let group = '';
  let current: HelpEntry | undefined;
  for (const line of help.split('\n')) {
    const header = /^([A-Z][A-Za-z/ ]*):$/.exec(line);
    const option = /^ {2}--([a-z0-9-]+) (\(no value\)|\S+) {2}\[([^\]]+)\]$/.exec(line);
    if (header) {
      group = header[1]!;
      groups.push(group);
      current = undefined;
    } else if (option) {
      if (entries.has(option[1]!)) duplicates.push(option[1]!);
      current = { group, format: option[2]!, tags: option[3]!.split('; '), text: '' };
      entries.set(option[1]!, current);
    } else if (current && line.startsWith('      ')) {
      current.text = `${current.text} ${line.trim()}`.trim();
    } else {
      current = undefined;
    }
  }
  return { entries, groups, duplicates };
}

describe('nereid --help', () => {
  it('lists serve, config, perf, analyze and operator, one line each, and says how to get each one\'s help', async () => {
    const { exit, stdout } = await runNereid(['--help']);
    assert.deepEqual(exit, { code: 0, signal: null });
    for (const command of ['serve', 'config', 'perf', 'analyze', 'operator']) {
      assert.match(stdout, new RegExp(`^ {2}${command} +\\S.*$`, 'm'), stdout);
      assert.match(stdout, new RegExp(`^ {2}nereid ${command} --help +\\S`, 'm'), stdout);
    }
    // Commander wraps long descriptions onto indented lines of their own: only command lines count.
    const commandLines = stdout.slice(stdout.indexOf('Commands:')).split('\n').slice(1).filter((l) => /^ {2}\S/.test(l)).slice(0, 5);
    assert.deepEqual(commandLines.map((l) => l.trim().split(/\s+/)[0]), ['serve', 'config', 'perf', 'analyze', 'operator'], stdout);
  });

  it('nereid help <command> is <command> --help', async () => {
    assert.equal((await runNereid(['help', 'serve'])).stdout, (await runNereid(['serve', '--help'])).stdout);
    const perf = await runNereid(['help', 'perf']);
    assert.equal(perf.exit.code, 0);
    assert.match(perf.stdout, /^Usage: nereid perf /);
    const analyze = await runNereid(['help', 'analyze']);
    assert.equal(analyze.exit.code, 0);
    assert.match(analyze.stdout, /^Usage: nereid analyze /);
    const config = await runNereid(['help', 'config']);
    assert.equal(config.exit.code, 0);
    assert.match(config.stdout, /^Usage: nereid config \[options\] <model-directory>/);
    const operator = await runNereid(['help', 'operator']);
    assert.equal(operator.exit.code, 0);
    assert.match(operator.stdout, /^Usage: nereid operator \[options\]/);
    assert.equal(operator.stdout, (await runNereid(['operator', '--help'])).stdout);
  });

  it('nereid operator rejects a bad flag with status 2, naming it', async () => {
    const bad = await runNereid(['operator', '--metrics-port=eighty']);
    assert.equal(bad.exit.code, 2);
    assert.match(bad.stderr, /nereid operator: --metrics-port must be a whole number, got "eighty"/);
  });
});

describe('nereid serve --help', () => {
  let help: string;
  let parsed: ReturnType<typeof parseHelp>;

  before(async () => {
    const { exit, stdout } = await runNereid(['serve', '--help']);
    assert.deepEqual(exit, { code: 0, signal: null });
    help = stdout;
    parsed = parseHelp(help);
  });

  it('-h prints the same help, and so does --help among other options; nothing is served', async () => {
    const short = await runNereid(['serve', '-h']);
    assert.deepEqual(short.exit, { code: 0, signal: null });
    assert.equal(short.stdout, help);
    const among = await runNereid(['serve', '--model-repository=/nonexistent', '--help']);
    assert.deepEqual(among.exit, { code: 0, signal: null });
    assert.equal(among.stdout, help);
    assert.match(help, /^Usage: nereid serve --model-repository=<path> \[options\]$/m);
    assert.doesNotMatch(help, /Started HTTPService/);
  });

  it("groups the options as tritonserver --help does, in its order", () => {
    assert.deepEqual(parsed.groups, [
      'Server',
      'Logging',
      'Model Repository',
      'HTTP',
      'GRPC',
      'Sagemaker',
      'Vertex',
      'Metrics',
      'Tracing',
      'Backend',
      'Repository Agent',
      'Response Cache',
      'Rate Limiter',
      'Memory/Device Management',
      'Deprecated',
    ]);
    assert.deepEqual(parsed.groups, [...OPTION_GROUPS]);
  });

  it('lists every option the parser knows, once, with its group, value format and default', () => {
    assert.deepEqual(parsed.duplicates, []);
    assert.deepEqual([...parsed.entries.keys()].sort(), Object.keys(SERVE_OPTIONS).sort());
    for (const [name, entry] of parsed.entries) {
      const spec = SERVE_OPTIONS[name]!;
      assert.equal(entry.group, spec.group, `--${name}`);
      assert.equal(entry.format, optionFormat(spec), `--${name}`);
      assert.equal(entry.tags[0], `default: ${spec.default}`, `--${name}`);
      assert.ok(entry.text.length > 0, `--${name} has no description`);
      // The parser takes every name help lists.
      const value = spec.kind === 'flag' ? [] : [spec.kind === 'bool' ? 'false' : spec.kind === 'int' ? '1' : 'x'];
      const special: Record<string, string[]> = {
        'model-control-mode': ['none'],
        'log-format': ['default'],
        'grpc-server': ['http2'],
        'http-server': ['nereid'],
        'rate-limit': ['off'],
        'rate-limit-resource': ['R:1'],
        'backend-config': ['default-max-batch-size=4'],
        'cache-config': ['local,size=1048576'],
        'model-config-limit': ['max-batch-size=8'],
        'metrics-config': ['counter_latencies=true'],
        'trace-config': ['rate=10'],
        'trace-level': ['TIMESTAMPS'],
        'trace-file': ['/tmp/trace.json'],
        'metrics-interval-ms': ['1000'],
        'decoupled-response-timeout-secs': ['1'],
        'memory-budget': ['8GiB'],
        'model-memory-limit': ['512MiB'],
      };
      if (name === 'load-model') continue; // valid only with --model-control-mode=explicit: below
      assert.doesNotThrow(() => parseServeArgs([`--${name}`, ...(special[name] ?? value)]), `--${name}`);
    }
    assert.deepEqual(parseServeArgs(['--model-control-mode=explicit', '--load-model', 'simple']).loadModels, ['simple']);
    assert.throws(() => parseServeArgs(['--not-an-option=1']), /unrecognized option '--not-an-option'/);
  });

  it('says for each option without an effect that it has none, and why', () => {
    let ignored = 0;
    for (const [name, entry] of parsed.entries) {
      const spec = SERVE_OPTIONS[name]!;
      assert.equal(entry.tags.includes('no effect'), spec.ignored !== undefined, `--${name}`);
      if (spec.ignored === undefined) continue;
      ignored++;
      assert.ok(entry.text.endsWith(`No effect: ${spec.ignored}.`), `--${name}: ${entry.text}`);
    }
    assert.ok(ignored >= 30, `${ignored} options without an effect`);
  });

  it('gives the facts of options checked one by one against the code', () => {
    const entry = (name: string) => {
      const e = parsed.entries.get(name);
      assert.ok(e, `--${name} missing from help:\n${help}`);
      return e;
    };
    const cases: [string, string, string, string[], RegExp][] = [
      ['http-port', 'HTTP', '<integer>', ['default: 8000'], /port of the HTTP endpoint; 0 lets the system choose/],
      ['http-address', 'HTTP', '<host>', ['default: 0.0.0.0'], /address the HTTP endpoint listens on/],
      ['model-repository', 'Model Repository', '<path>', ['default: (required)', 'repeatable'], /model repository directory/],
      ['strict-readiness', 'Model Repository', '<boolean>', ['default: true'], /\/v2\/health\/ready/],
      ['model-control-mode', 'Model Repository', '<none|poll|explicit>', ['default: none'], /explicit: only the --load-model models/],
      ['exit-timeout-secs', 'Server', '<integer>', ['default: 30'], /in-flight requests/],
      ['exit-grace-secs', 'Server', '<integer>', ['default: 0', "Nereid's own"], /keep serving for this long while readiness answers "not ready"/],
      ['decoupled-response-timeout-secs', 'Server', '<number>', ['default: 300', "Nereid's own"], /RESPONSE_TIMEOUT/],
      ['allow-client-shm', 'Server', '<boolean>', ['default: false', "Nereid's meaning"], /In Nereid: system shared memory only/],
      ['backend-directory', 'Backend', '<path>', ['default: (none)', "Nereid's meaning"], /JavaScript backend packages/],
      ['backend-config', 'Backend', '<backend>,<key>=<value>', ['default: (none)', 'repeatable'], /module=<specifier>/],
      ['metrics-config', 'Metrics', '<key>=<value>', ['default: (none)', 'repeatable'], /histogram_latencies/],
      ['disable-auto-complete-config', 'Model Repository', '(no value)', ['default: (auto-complete on)'], /complete config\.pbtxt/],
      ['grpc-use-ssl', 'GRPC', '<boolean>', ['default: false', 'no effect'], /No effect: no TLS in this version/],
      ['allow-gpu-metrics', 'Metrics', '<boolean>', ['default: true'], /nv_gpu_utilization/],
      ['trace-config', 'Tracing', '[<mode>,]<key>=<value>', ['default: (level OFF, rate 1000, count -1, mode triton)', 'repeatable'], /triton,file=<path>/],
      ['http-thread-count', 'HTTP', '<integer>', ['default: 8', 'no effect'], /event loop/],
      ['cache-config', 'Response Cache', '<cache>,<key>=<value>', ['default: (no cache)', 'repeatable'], /local,size=<bytes>/],
      ['strict-model-config', 'Deprecated', '<boolean>', ['default: false'], /--disable-auto-complete-config/],
    ];
    for (const [name, group, format, tags, text] of cases) {
      const e = entry(name);
      assert.equal(e.group, group, `--${name}`);
      assert.equal(e.format, format, `--${name}`);
      assert.deepEqual(e.tags, tags, `--${name}`);
      assert.match(e.text, text, `--${name}`);
    }
  });
});

describe("docs/configuration.md's option reference", () => {
  /** The rows of the generated section by option: group heading, cells with Markdown undone. */
  async function documented(): Promise<Map<string, { group: string; value: string; default: string; text: string }>> {
    const page = await readFile(join(REPO_ROOT, 'docs', 'configuration.md'), 'utf8');
    const begin = page.indexOf('<!-- serve-options:begin');
    const end = page.indexOf('<!-- serve-options:end -->');
    assert.ok(begin !== -1 && end > begin, 'docs/configuration.md has no serve-options section');
    const plain = (cell: string) => cell.trim().replace(/^`(.*)`$/, '$1').replace(/\\([\\|<*])/g, '$1');
    const rows = new Map<string, { group: string; value: string; default: string; text: string }>();
    let group = '';
    for (const line of page.slice(begin, end).split('\n')) {
      const heading = /^### (.+)$/.exec(line);
      if (heading) group = heading[1]!;
      if (!line.startsWith('| `--')) continue;
      const cells = line.slice(1, -1).split(/(?<!\\)\|/).map(plain);
      assert.equal(cells.length, 4, line);
      assert.ok(!rows.has(cells[0]!), `${cells[0]} documented twice`);
      rows.set(cells[0]!.slice(2), { group, value: cells[1]!, default: cells[2]!, text: cells[3]! });
    }
    return rows;
  }

  it('documents every option as the table does (else run node scripts/serve-options-doc.mjs)', async () => {
    const rows = await documented();
    assert.deepEqual([...rows.keys()].sort(), Object.keys(SERVE_OPTIONS).sort());
    for (const [name, row] of rows) {
      const spec = SERVE_OPTIONS[name]!;
      assert.equal(row.group, spec.group, `--${name}`);
      assert.equal(row.value, optionFormat(spec), `--${name}`);
      assert.equal(row.default, spec.default, `--${name}`);
      assert.ok(row.text.includes(spec.description), `--${name}: ${row.text}`);
      assert.equal(row.text.includes(`**No effect:** ${spec.ignored}.`), spec.ignored !== undefined, `--${name}: ${row.text}`);
      assert.equal(row.text.startsWith("*Nereid's own.*"), spec.nereidOnly === true, `--${name}: ${row.text}`);
      assert.equal(row.text.includes(`*In Nereid:* ${spec.nereidMeaning}.`), spec.nereidMeaning !== undefined, `--${name}: ${row.text}`);
    }
  });
});
