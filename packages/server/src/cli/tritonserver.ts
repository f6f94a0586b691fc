/**
 * The `tritonserver` launcher (packages/server/bin/tritonserver, docs/tritonserver-launcher.md):
 * tools that start a Triton server by running a `tritonserver` binary (Model Analyzer's local
 * launch mode) start Nereid instead, in the launcher's own process, so that the process they
 * started, measure and signal is the server.
 */
import { toNereidError } from '@nereid/protocol';
import { NEREID_VERSION } from '../core/server.js';
import { parseServeArgs } from './options.js';
import { formatServeHelp } from './serve-help.js';
import { runServe } from './serve.js';
import { tritonserverArgs } from './tritonserver-args.js';

/** `tritonserver --help`: the launcher in a paragraph, then `nereid serve`'s options. */
export function formatTritonserverHelp(): string {
  const serveHelp = formatServeHelp().split('\n').slice(1).join('\n');
  return (
    'Usage: tritonserver --model-repository=<path> [options]\n\n' +
    "Nereid's tritonserver-compatible launcher: runs `nereid serve` in this process with tritonserver's command\n" +
    "line, for tools that start a `tritonserver` binary. It takes nereid serve's options, listed below; an option\n" +
    "marked \"no effect\" is accepted and reported with a warning at start. --version prints Nereid's version.\n" +
    serveHelp
  );
}

/**
 * Runs the launcher: answers `--help` and `--version`, refuses what it cannot map (exit 3, as
 * `nereid serve` does for its arguments), writes its notices to stderr, then serves until
 * SIGINT/SIGTERM. Returns an exit code for an early end, undefined while the server runs.
 */
export async function runTritonserver(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<number | undefined> {
  let serveArgs: string[];
  try {
    const command = tritonserverArgs(argv, env);
    if (command.action === 'help') {
      process.stdout.write(formatTritonserverHelp());
      return 0;
    }
    if (command.action === 'version') {
      process.stdout.write(`tritonserver (Nereid) ${NEREID_VERSION}\n`);
      return 0;
    }
    for (const notice of command.notices) process.stderr.write(`tritonserver: ${notice}\n`);
    serveArgs = command.serveArgs;
    // Checked here too so that a bad value is reported under the name it was run as.
    parseServeArgs(serveArgs);
  } catch (err) {
    process.stderr.write(`tritonserver: ${toNereidError(err).message}\n`);
    return 3;
  }
  return runServe(serveArgs);
}
