/**
 * The `tritonserver` launcher's command line (docs/tritonserver-launcher.md): `tritonserver`'s
 * arguments, as tools that start a Triton server write them, turned into `nereid serve`'s.
 *
 * - every option of `nereid serve`'s table (options.ts) passes through, as `--name=value`: those
 *   with no effect in Nereid (GPU, TLS, tracing…) are then reported by `nereid serve` itself, one
 *   warning line each at start;
 * - an alias a tool writes for a `tritonserver` option is renamed, with a notice;
 * - `--help` (`-h`) and `--version` answer without starting anything;
 * - anything else is refused: an unknown option, an argument that is not an option.
 *
 * Values are not checked here: `nereid serve`'s parser does that.
 */
import { NereidError } from '@nereid/protocol';
import { SERVE_OPTIONS } from './options.js';

/** What the launcher does with its arguments. */
export type TritonserverCommand =
  | { readonly action: 'help' }
  | { readonly action: 'version' }
  | {
      readonly action: 'serve';
      /** `nereid serve`'s arguments, each `--name=value` (or `--name` for a flag). */
      readonly serveArgs: string[];
      /** One line each, for stderr: what the launcher renamed or what has no effect. */
      readonly notices: string[];
    };

/**
 * Names tools write that `tritonserver` spells otherwise, and the option they mean. Model
 * Analyzer's server configuration lists `buffer-management-thread-count` for tritonserver's
 * `--buffer-manager-thread-count`.
 */
export const TRITONSERVER_ALIASES: Readonly<Record<string, string>> = {
  'buffer-management-thread-count': 'buffer-manager-thread-count',
};

/**
 * Maps `tritonserver` arguments (`argv` without the program name) to `nereid serve`'s. `env` is
 * the environment the launcher runs in (unused: CUDA_VISIBLE_DEVICES reaches the server, whose GPU
 * discovery honours it). Throws a NereidError (REQUEST_PARAMETER) naming the argument it refuses.
 */
export function tritonserverArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>> = {}): TritonserverCommand {
  if (argv.some((a) => a === '--help' || a === '-h')) return { action: 'help' };
  if (argv.includes('--version')) return { action: 'version' };
  const serveArgs: string[] = [];
  const notices: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--') || arg === '--') {
      throw new NereidError('REQUEST_PARAMETER', `unexpected argument '${arg}': options look like --name=value or --name value`);
    }
    const eq = arg.indexOf('=');
    const given = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    let name = given;
    if (Object.hasOwn(TRITONSERVER_ALIASES, given)) {
      name = TRITONSERVER_ALIASES[given]!;
      notices.push(`--${given} taken as --${name}`);
    }
    const spec = Object.hasOwn(SERVE_OPTIONS, name) ? SERVE_OPTIONS[name]! : undefined;
    if (spec === undefined) {
      throw new NereidError('REQUEST_PARAMETER', `unrecognized option '--${given}'; run 'tritonserver --help' for the options Nereid takes`);
    }
    if (spec.kind === 'flag') {
      if (eq !== -1) throw new NereidError('REQUEST_PARAMETER', `option '--${given}' takes no value, got '${arg}'`);
      serveArgs.push(`--${name}`);
      continue;
    }
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else {
      const next = argv[i + 1];
      // As nereid serve reads it: only a string value may itself start with `--`.
      if (next === undefined || (next.startsWith('--') && spec.kind !== 'string')) {
        throw new NereidError('REQUEST_PARAMETER', `option '--${given}' needs a value`);
      }
      value = next;
      i++;
    }
    serveArgs.push(`--${name}=${value}`);
  }
  return { action: 'serve', serveArgs, notices };
}
