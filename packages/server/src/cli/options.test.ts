/**
 * `nereid serve`'s option table: every entry documents itself (the type requires the fields, this
 * file that they say something), the defaults help shows are the parser's, and options without
 * an effect are still checked and reported.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OPTION_GROUPS, SERVE_OPTIONS, openTelemetrySettings, optionFormat, parseServeArgs, type ServeOptionSpec, type ServeOptions } from './options.js';
import { formatServeHelp } from './serve-help.js';

// Compile-time checks: `tsc -b` fails the build if any of these entries type-checks.
export const typeChecks: ServeOptionSpec[] = [
  // @ts-expect-error an option without a description
  { group: 'Server', kind: 'int', default: '0', apply: () => undefined },
  // @ts-expect-error an option without a default
  { group: 'Server', kind: 'int', description: 'd', apply: () => undefined },
  // @ts-expect-error an option without a group
  { kind: 'int', default: '0', description: 'd', apply: () => undefined },
  // @ts-expect-error an option with neither an effect nor a reason for having none
  { group: 'Server', kind: 'int', default: '0', description: 'd' },
  // @ts-expect-error an option with both
  { group: 'Server', kind: 'int', default: '0', description: 'd', apply: () => undefined, ignored: 'why' },
];

const names = Object.keys(SERVE_OPTIONS);

/** `options` without the list of ignored options, to compare parses. */
function effective(options: ServeOptions): Omit<ServeOptions, 'ignored'> {
  const { ignored: _ignored, ...rest } = options;
  return rest;
}

/** What a table entry must say; empty when it says all of it. */
function problems(name: string, spec: ServeOptionSpec): string[] {
  const found: string[] = [];
  if (!/^[a-z][a-z0-9-]*$/.test(name)) found.push('a name of lower-case words joined by -');
  if (!OPTION_GROUPS.includes(spec.group)) found.push(`a group among OPTION_GROUPS (got '${spec.group}')`);
  if (spec.description.trim().length < 10) found.push('a description');
  if (spec.default.trim() === '' || /[;\]]/.test(spec.default)) found.push("a default, without ';' or ']' (help brackets it)");
  if (spec.kind === 'flag' ? spec.format !== undefined : !/^\S+$/.test(optionFormat(spec))) found.push('a value format without spaces (none for a flag)');
  if (spec.ignored !== undefined && spec.ignored.trim().length < 10) found.push('a reason for having no effect');
  if (spec.nereidMeaning !== undefined && spec.nereidMeaning.trim().length < 10) found.push("what Nereid's meaning is");
  if (spec.nereidOnly && (spec.nereidMeaning !== undefined || spec.ignored !== undefined)) found.push("no Nereid's meaning or ignored reason for an option of Nereid's own");
  return found;
}

describe('the nereid serve option table', () => {
  it('documents every option: group, value format, default, description, and why one without an effect has none', () => {
    const bad = names.flatMap((name) => problems(name, SERVE_OPTIONS[name]!).map((p) => `--${name} needs ${p}`));
    assert.deepEqual(bad, []);
  });

  it('the check above catches an entry without a description, default, reason or format', () => {
    const base = { group: 'Server', kind: 'int', default: '1', description: 'A real description.', apply: () => undefined } as const;
    assert.deepEqual(problems('ok', base), []);
    assert.equal(problems('x', { ...base, description: '' }).length, 1);
    assert.equal(problems('x', { ...base, default: ' ' }).length, 1);
    assert.equal(problems('x', { ...base, format: '<two words>' }).length, 1);
    assert.equal(problems('x', { group: 'Server', kind: 'bool', default: 'false', description: 'A real description.', ignored: '' }).length, 1);
    assert.equal(problems('x', { ...base, group: 'Elsewhere' as ServeOptionSpec['group'] }).length, 1);
  });

  it('shows as default what the parser does without the option: giving the default changes nothing', () => {
    const defaults = effective(parseServeArgs([]));
    const checked: string[] = [];
    for (const name of names) {
      const spec = SERVE_OPTIONS[name]!;
      if (spec.ignored !== undefined || spec.kind === 'flag' || spec.default.startsWith('(')) continue;
      assert.deepEqual(effective(parseServeArgs([`--${name}=${spec.default}`])), defaults, `--${name}=${spec.default} is not the default`);
      checked.push(name);
    }
    // Most options state their default as a value; the others say in words what happens without them.
    assert.ok(checked.length >= 30, `only ${checked.length} defaults checked`);
    assert.ok(checked.includes('http-port') && checked.includes('exit-timeout-secs') && checked.includes('strict-model-config'));
  });

  it('a default that is not the parser\'s is caught: --http-port=8001 is not the default', () => {
    assert.notDeepEqual(effective(parseServeArgs(['--http-port=8001'])), effective(parseServeArgs([])));
  });

  it('takes every option without an effect, checks its value against its kind, and lists it as ignored', () => {
    const ignored = names.filter((n) => SERVE_OPTIONS[n]!.ignored !== undefined);
    assert.ok(ignored.includes('grpc-use-ssl') && ignored.includes('allow-sagemaker') && ignored.includes('enable-peer-access'));
    for (const name of ignored) {
      const spec = SERVE_OPTIONS[name]!;
      const value = spec.kind === 'bool' ? 'false' : spec.kind === 'int' ? '3' : 'x';
      assert.deepEqual(parseServeArgs([`--${name}=${value}`, `--${name}`, value]).ignored, [name]);
      if (spec.kind === 'bool') assert.throws(() => parseServeArgs([`--${name}=maybe`]), /expects a boolean/);
      if (spec.kind === 'int') assert.throws(() => parseServeArgs([`--${name}=many`]), new RegExp(`--${name} expects an integer, got 'many'`));
    }
  });

  it('refuses a value given to a flag', () => {
    assert.throws(() => parseServeArgs(['--disable-auto-complete-config=false']), /option '--disable-auto-complete-config' takes no value/);
    assert.equal(parseServeArgs(['--disable-auto-complete-config']).autoCompleteConfig, false);
  });

  it('help has a line for every option, in its group, in table order', () => {
    const help = formatServeHelp();
    let group = '';
    const seen: { name: string; group: string }[] = [];
    for (const line of help.split('\n')) {
      const header = /^(\S.*):$/.exec(line);
      if (header) group = header[1]!;
      const option = /^ {2}--([a-z0-9-]+) /.exec(line);
      if (option) seen.push({ name: option[1]!, group });
    }
    const expected = OPTION_GROUPS.flatMap((g) => names.filter((n) => SERVE_OPTIONS[n]!.group === g).map((name) => ({ name, group: g })));
    assert.deepEqual(seen, expected);
  });
});

describe('--backend-config keys', () => {
  it("refuses a key a built-in backend does not know, listing the ones it knows", () => {
    assert.throws(
      () => parseServeArgs(['--backend-config=python,shm-region-bytesize=1']),
      /--backend-config=python,shm-region-bytesize=…: the python backend does not know the key 'shm-region-bytesize'; known keys: .*shm-region-byte-size/,
    );
    assert.throws(() => parseServeArgs(['--backend-config=onnxruntime,nonsense=1']), /the onnxruntime backend does not know the key 'nonsense'/);
    assert.throws(() => parseServeArgs(['--backend-config=nonsense=1']), /--backend-config=nonsense=…: the built-in backends do not know the key 'nonsense'/);
  });

  it("takes a key Triton's backend knows and Nereid's does not use, with a warning that says what is missing", () => {
    const options = parseServeArgs(['--backend-config=python,shm-default-byte-size=1048576', '--backend-config=python,shm-default-byte-size=2097152']);
    assert.deepEqual(options.warnings, [
      "--backend-config=python,shm-default-byte-size=… has no effect in this version of Nereid: Nereid's stubs use two fixed rings; size them with shm-region-byte-size",
    ]);
    assert.equal(options.backendConfig.get('python')?.['shm-default-byte-size'], '2097152');
  });

  it('takes the keys with an effect silently, and any key of a custom backend (its module reads them)', () => {
    const options = parseServeArgs([
      '--backend-config=python,python-executable=/usr/bin/python3',
      '--backend-config=default-max-batch-size=2',
      '--backend-config=mybackend,module=./my-backend.mjs',
      '--backend-config=mybackend,anything=1',
    ]);
    assert.deepEqual(options.warnings, []);
    assert.deepEqual(options.backendConfig.get('mybackend'), { module: './my-backend.mjs', anything: '1' });
  });
});

describe('--model-config-limit', () => {
  it('sets a limit by name and refuses unknown limits and values that are not positive integers', () => {
    assert.deepEqual(parseServeArgs(['--model-config-limit=instances-per-model=512', '--model-config-limit', 'max-batch-size=8']).configLimits, {
      'instances-per-model': 512,
      'max-batch-size': 8,
    });
    assert.throws(() => parseServeArgs(['--model-config-limit=instances=4']), /--model-config-limit expects <limit>=<positive integer> with a limit among instances-per-model, /);
    assert.throws(() => parseServeArgs(['--model-config-limit=max-batch-size=0']), /--model-config-limit max-batch-size expects a positive integer, got '0'/);
    assert.throws(() => parseServeArgs(['--model-config-limit=max-batch-size=1.5']), /expects a positive integer/);
  });
});

describe('server implementations', () => {
  it("--http-server and --grpc-server pick a transport, Nereid's own by default, and refuse others naming the choices", () => {
    const defaults = parseServeArgs([]);
    assert.deepEqual([defaults.httpServer, defaults.grpcServer], ['nereid', 'http2']);
    const o = parseServeArgs(['--http-server=node', '--grpc-server', 'node-http2']);
    assert.deepEqual([o.httpServer, o.grpcServer], ['node', 'node-http2']);
    assert.throws(() => parseServeArgs(['--http-server=evhtp']), /--http-server must be 'nereid' or 'node', got 'evhtp'/);
    assert.throws(() => parseServeArgs(['--grpc-server=h3']), /--grpc-server must be 'http2', 'node-http2' or 'grpc-js', got 'h3'/);
  });
});

describe('memory options', () => {
  it('read byte sizes and the sample interval, none by default', () => {
    const defaults = parseServeArgs([]);
    assert.deepEqual([defaults.memoryBudgetBytes, defaults.modelMemoryLimitBytes, defaults.memorySampleIntervalMs], [0, 0, 1000]);
    const o = parseServeArgs(['--memory-budget=8GiB', '--model-memory-limit', '512M', '--memory-sample-interval-ms=0']);
    assert.deepEqual([o.memoryBudgetBytes, o.modelMemoryLimitBytes, o.memorySampleIntervalMs], [8 * 2 ** 30, 512e6, 0]);
  });
  it('refuse what is not a byte size, naming the option', () => {
    assert.throws(() => parseServeArgs(['--memory-budget=lots']), /--memory-budget expects a byte size such as 512MiB, 8GiB or 1000000, got 'lots'/);
    assert.throws(() => parseServeArgs(['--model-memory-limit=-1']), /--model-memory-limit expects a byte size/);
    assert.throws(() => parseServeArgs(['--memory-sample-interval-ms=0.5']), /--memory-sample-interval-ms expects an integer >= 0/);
  });
});

describe('--trace-config and the deprecated --trace-* options', () => {
  it("takes tritonserver's forms: global settings, triton's file and log frequency, levels that add up", () => {
    const o = parseServeArgs([
      '--trace-config', 'level=TIMESTAMPS',
      '--trace-config=level=TENSORS',
      '--trace-config', 'rate=1',
      '--trace-config', 'count=50',
      '--trace-config', 'triton,file=/var/log/trace.json',
      '--trace-config', 'triton,log-frequency=100',
      '--trace-config', 'opentelemetry,url=http://collector:4318/v1/traces',
    ]);
    assert.deepEqual(o.traceConfig.settings, { level: 3, rate: 1, count: 50, logFrequency: 100, file: '/var/log/trace.json', mode: 'triton' });
    assert.deepEqual(o.traceConfig.opentelemetry, [['url', 'http://collector:4318/v1/traces']]);
    // rate 0 parses: refused at start where it would trace in mode triton; mode opentelemetry takes it.
    assert.equal(parseServeArgs(['--trace-config=rate=0']).traceConfig.settings.rate, 0);
    assert.deepEqual(o.ignored, []);
    assert.equal(parseServeArgs(['--trace-config=level=TIMESTAMPS', '--trace-config=level=OFF']).traceConfig.settings.level, 0);
    assert.equal(parseServeArgs(['--trace-config=mode=opentelemetry']).traceConfig.settings.mode, 'opentelemetry');
  });

  it('takes the deprecated options as their --trace-config forms', () => {
    const o = parseServeArgs(['--trace-file=/t.json', '--trace-level=TIMESTAMPS', '--trace-rate=10', '--trace-count=3', '--trace-log-frequency=2']);
    assert.deepEqual(o.traceConfig.settings, { level: 1, rate: 10, count: 3, logFrequency: 2, file: '/t.json', mode: 'triton' });
  });

  it('refuses what tritonserver would not trace with, naming the option and the value', () => {
    const cases: [string[], RegExp][] = [
      [['--trace-config=level=LOUD'], /--trace-config level=LOUD: Unable to parse 'trace_level', got: LOUD/],
      [['--trace-config=opentelemetry,bsp_max_queue_size=lots'], /Bad option: "--trace-config opentelemetry,bsp_max_queue_size"\. Invalid option value\. Got lots/],
      [['--trace-config=count=-5'], /Expecting value >= -1/],
      [['--trace-config=file=/x'], /unknown global trace setting 'file'.*triton,file=<path>/],
      [['--trace-config=triton,url=x'], /unknown setting 'url' of trace mode triton/],
      [['--trace-config=jaeger,url=x'], /unknown trace mode 'jaeger'/],
      [['--trace-config=mode=zipkin'], /Unknown trace mode 'zipkin'/],
      [['--trace-config=level'], /expects \[<mode>,\]<setting>=<value>, got 'level'/],
      [['--trace-config=triton,file='], /triton,file= needs a path/],
      [['--trace-rate=fast'], /--trace-rate=fast: Unable to parse 'trace_rate', got: fast/],
    ];
    for (const [argv, message] of cases) assert.throws(() => parseServeArgs(argv), message, argv.join(' '));
  });

  it("builds mode opentelemetry's settings: defaults, then OTEL_BSP_* variables, then the options in order", () => {
    const o = parseServeArgs([
      '--trace-config=mode=opentelemetry',
      '--trace-config=opentelemetry,resource=service.name=nereid',
      '--trace-config=opentelemetry,resource=zone=a',
      '--trace-config=opentelemetry,bsp_max_queue_size=4096',
    ]);
    assert.deepEqual(openTelemetrySettings(o.traceConfig, { OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_SCHEDULE_DELAY: '250' }), {
      url: 'http://localhost:4318/v1/traces',
      resource: { 'service.name': 'nereid', zone: 'a' },
      bspMaxQueueSize: 4096,
      bspScheduleDelayMs: 250,
      bspMaxExportBatchSize: 512,
    });
    assert.throws(() => openTelemetrySettings(o.traceConfig, { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 'x' }), /Bad option: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"/);
    const tooBig = parseServeArgs(['--trace-config=opentelemetry,bsp_max_export_batch_size=5000']);
    assert.throws(() => openTelemetrySettings(tooBig.traceConfig, {}), /bsp_max_export_batch_size \(5000\) must not exceed bsp_max_queue_size \(2048\)/);
  });
});
