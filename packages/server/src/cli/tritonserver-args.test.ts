/**
 * The `tritonserver` launcher's argument mapping: Model Analyzer's local-mode command line maps
 * onto `nereid serve` unchanged but for the form, its misspelt option is renamed, options with no
 * effect pass through for `nereid serve` to report, and what cannot be mapped is refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseServeArgs, SERVE_OPTIONS } from './options.js';
import { TRITONSERVER_ALIASES, tritonserverArgs, type TritonserverCommand } from './tritonserver-args.js';

function serve(command: TritonserverCommand): { serveArgs: string[]; notices: string[] } {
  assert.equal(command.action, 'serve');
  return command as { serveArgs: string[]; notices: string[] };
}

/** The message a refused command line throws. */
function refusal(argv: string[]): string {
  try {
    tritonserverArgs(argv);
  } catch (err) {
    return (err as Error).message;
  }
  assert.fail(`${argv.join(' ')} was not refused`);
}

describe('tritonserver launcher: argument mapping', () => {
  it("maps Model Analyzer 1.44's local-mode command line (values as separate arguments)", () => {
    const argv = [
      '--model-repository', '/models',
      '--model-control-mode', 'explicit',
      '--http-port', '8000',
      '--grpc-port', '8001',
      '--metrics-port', '8002',
      '--metrics-interval-ms', '1000',
      '--strict-model-config', 'false',
    ];
    const { serveArgs, notices } = serve(tritonserverArgs(argv, { CUDA_VISIBLE_DEVICES: '' }));
    assert.deepEqual(serveArgs, [
      '--model-repository=/models',
      '--model-control-mode=explicit',
      '--http-port=8000',
      '--grpc-port=8001',
      '--metrics-port=8002',
      '--metrics-interval-ms=1000',
      '--strict-model-config=false',
    ]);
    assert.deepEqual(notices, []);
    const o = parseServeArgs(serveArgs);
    assert.deepEqual(o.modelRepositories, ['/models']);
    assert.equal(o.modelControlMode, 'explicit');
    assert.deepEqual([o.httpPort, o.grpcPort, o.metricsPort, o.metricsIntervalMs], [8000, 8001, 8002, 1000]);
    assert.equal(o.autoCompleteConfig, true);
  });

  it('keeps --name=value as given, repeated options in order, and a value that contains =', () => {
    const { serveArgs } = serve(
      tritonserverArgs(['--model-repository=/a', '--model-repository', '/b', '--backend-config', 'onnxruntime,k=v', '--load-model=simple']),
    );
    assert.deepEqual(serveArgs, ['--model-repository=/a', '--model-repository=/b', '--backend-config=onnxruntime,k=v', '--load-model=simple']);
  });

  it('passes a flag without a value and refuses one with a value', () => {
    assert.deepEqual(serve(tritonserverArgs(['--disable-auto-complete-config'])).serveArgs, ['--disable-auto-complete-config']);
    assert.match(refusal(['--disable-auto-complete-config=true']), /'--disable-auto-complete-config' takes no value/);
  });

  it('passes options with no effect in Nereid (GPU memory pools) and tracing options for nereid serve', () => {
    const argv = ['--model-repository=/m', '--cuda-memory-pool-byte-size', '0:0', '--pinned-memory-pool-byte-size=0', '--allow-gpu-metrics=false', '--trace-config', 'level=OFF'];
    const { serveArgs, notices } = serve(tritonserverArgs(argv));
    assert.deepEqual(serveArgs, ['--model-repository=/m', '--cuda-memory-pool-byte-size=0:0', '--pinned-memory-pool-byte-size=0', '--allow-gpu-metrics=false', '--trace-config=level=OFF']);
    assert.deepEqual(notices, []);
    const parsed = parseServeArgs(serveArgs);
    assert.deepEqual(parsed.ignored, ['cuda-memory-pool-byte-size', 'pinned-memory-pool-byte-size']);
    assert.equal(parsed.traceConfig.settings.level, 0);
  });

  it("renames Model Analyzer's --buffer-management-thread-count to tritonserver's name, with a notice", () => {
    const { serveArgs, notices } = serve(tritonserverArgs(['--buffer-management-thread-count', '4']));
    assert.deepEqual(serveArgs, ['--buffer-manager-thread-count=4']);
    assert.deepEqual(notices, ['--buffer-management-thread-count taken as --buffer-manager-thread-count']);
    for (const [alias, name] of Object.entries(TRITONSERVER_ALIASES)) {
      assert.ok(!Object.hasOwn(SERVE_OPTIONS, alias), `${alias} is an option of its own`);
      assert.ok(Object.hasOwn(SERVE_OPTIONS, name), `${alias} names ${name}, which nereid serve does not know`);
    }
  });

  it('takes every option of nereid serve', () => {
    for (const [name, spec] of Object.entries(SERVE_OPTIONS)) {
      const argv = spec.kind === 'flag' ? [`--${name}`] : [`--${name}=x`];
      assert.deepEqual(serve(tritonserverArgs(argv)).serveArgs, argv, name);
    }
  });

  it('gives no notice for CUDA_VISIBLE_DEVICES: the GPU discovery of the server honours it', () => {
    assert.deepEqual(serve(tritonserverArgs([], { CUDA_VISIBLE_DEVICES: 'GPU-1234,GPU-5678' })).notices, []);
    assert.deepEqual(serve(tritonserverArgs([], { CUDA_VISIBLE_DEVICES: '' })).notices, []);
    assert.deepEqual(serve(tritonserverArgs([], {})).notices, []);
  });

  it('answers --help, -h and --version wherever they stand, before anything is checked', () => {
    assert.deepEqual(tritonserverArgs(['--help']), { action: 'help' });
    assert.deepEqual(tritonserverArgs(['--bogus', '-h']), { action: 'help' });
    assert.deepEqual(tritonserverArgs(['--version']), { action: 'version' });
    assert.deepEqual(tritonserverArgs(['--model-repository=/m', '--version']), { action: 'version' });
  });

  it('refuses unknown options, underscores, positional arguments and a missing value', () => {
    assert.match(refusal(['--no-such-option=1']), /unrecognized option '--no-such-option'; run 'tritonserver --help'/);
    assert.match(refusal(['--model_repository=/m']), /unrecognized option '--model_repository'/);
    assert.match(refusal(['/models']), /unexpected argument '\/models'/);
    assert.match(refusal(['-v']), /unexpected argument '-v'/);
    assert.match(refusal(['--']), /unexpected argument '--'/);
    assert.match(refusal(['--http-port']), /'--http-port' needs a value/);
    assert.match(refusal(['--http-port', '--grpc-port=1']), /'--http-port' needs a value/);
  });

  it('leaves values to nereid serve: a string value may start with --, a bad number passes through', () => {
    assert.deepEqual(serve(tritonserverArgs(['--id', '--x'])).serveArgs, ['--id=--x']);
    assert.deepEqual(serve(tritonserverArgs(['--http-port', 'eighty'])).serveArgs, ['--http-port=eighty']);
  });
});
