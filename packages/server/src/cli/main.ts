/**
 * The `nereid` command line. `nereid serve` starts the server with `tritonserver`'s option names;
 * `nereid config MODEL_DIR` prints a model's effective configuration; `nereid perf` runs the load
 * generator of `@nereid/perf` (perf_analyzer's flags) and `nereid analyze` its configuration search
 * (Model Analyzer's keys), both loaded only when asked for; `nereid operator` runs the Kubernetes
 * operator of `@nereid/operator`, loaded the same way.
 *
 * Every command explains itself with `--help` (`-h`), and `nereid help <command>` is the same.
 * `serve` and `perf` parse their own options (tritonserver's and perf_analyzer's syntaxes), so
 * commander only routes to them; `serve`'s help comes from its option table (serve-help.ts).
 */
import { Command } from 'commander';
import { toNereidError } from '@nereid/protocol';
import { NEREID_VERSION } from '../core/server.js';
import { runConfigCommand, type ConfigCommandOptions } from './config-command.js';
import { formatServeHelp } from './serve-help.js';
import { runServe } from './serve.js';

const COMMANDS = ['serve', 'config', 'perf', 'analyze', 'operator'];

const wantsHelp = (args: readonly string[]): boolean => args.includes('--help') || args.includes('-h');

export async function main(argv: readonly string[]): Promise<void> {
  // `nereid help <command>` is `nereid <command> --help`, also for perf, whose help is its package's.
  if (argv[0] === 'help' && argv[1] !== undefined && COMMANDS.includes(argv[1])) argv = [argv[1], '--help'];

  const program = new Command('nereid')
    .description('Nereid: an inference server that speaks NVIDIA Triton’s protocols')
    .version(NEREID_VERSION, '--version')
    .configureHelp({ subcommandTerm: (cmd) => cmd.name() })
    .addHelpText(
      'after',
      '\nEach command explains itself:\n' +
        "  nereid serve --help     tritonserver's options, their defaults and effect\n" +
        "  nereid config --help    the config command's options\n" +
        "  nereid perf --help      perf_analyzer's options\n" +
        "  nereid analyze --help   the configuration search's options (Model Analyzer's keys)\n" +
        "  nereid operator --help  the Kubernetes operator's options\n" +
        "'nereid help <command>' does the same.\n",
    );

  program
    .command('serve')
    .description('serve model repositories over HTTP/REST, gRPC and metrics')
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]')
    .configureHelp({ formatHelp: () => formatServeHelp() })
    .action(async (args: string[]) => {
      if (wantsHelp(args)) {
        process.stdout.write(formatServeHelp());
        return;
      }
      const code = await runServe(args);
      if (code !== undefined) process.exitCode = code;
    });

  program
    .command('config')
    .description("print a model's effective configuration and each field's origin")
    .argument('<model-directory>', 'a model directory (<repository>/<model>)')
    .option('--json', 'print JSON ({ name, version, source, config, provenance, … }) instead of annotated protobuf text')
    .option('--model-version <n>', 'the version whose model file auto-complete reads (default: the newest the version policy selects)')
    .option('--config-override <json>', "a load's config parameter: ModelConfig JSON used instead of the config file")
    .option('--model-config-name <name>', 'use configs/<name>.pbtxt where present, as nereid serve does')
    .option('--disable-auto-complete-config', 'no auto-complete, as nereid serve does')
    .option('--strict-model-config <bool>', 'deprecated form of --disable-auto-complete-config')
    .option('--backend-config <setting>', '<backend>,<key>=<value> or <key>=<value>; repeatable', (v: string, all: string[]) => [...all, v], [])
    .option('--backend-directory <dir>', 'custom backend packages, as nereid serve finds them (<dir>/<backend>/)')
    .action(async (directory: string, options: ConfigCommandOptions) => {
      process.exitCode = await runConfigCommand(directory, options);
    });

  program
    .command('perf')
    .description("measure a model's throughput and latency under load")
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]')
    .action(async (args: string[]) => {
      process.exitCode = await runPerfCommand(args);
    });

  program
    .command('analyze')
    .description('search model configurations for the best throughput and latency (Model Analyzer)')
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]')
    .action(async (args: string[]) => {
      process.exitCode = await runPerfCommand(args, 'analyze');
    });

  program
    .command('operator')
    .description('run the Kubernetes operator (NereidServer, NereidModel resources)')
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]')
    .action(async (args: string[]) => {
      process.exitCode = await runOperatorCommand(args);
    });

  try {
    await program.parseAsync(argv as string[], { from: 'user' });
  } catch (err) {
    process.stderr.write(`nereid: ${toNereidError(err).message}\n`);
    process.exitCode = 1;
  }
}

/**
 * `@nereid/perf` is an optional companion package: the server does not depend on it, and it is
 * imported only here, by name, when `nereid perf` or `nereid analyze` runs.
 */
async function runPerfCommand(args: readonly string[], command: 'perf' | 'analyze' = 'perf'): Promise<number> {
  const specifier = '@nereid/perf';
  let perf: { runPerf(argv: readonly string[]): Promise<number>; runAnalyze(argv: readonly string[]): Promise<number> };
  try {
    perf = (await import(specifier)) as typeof perf;
  } catch {
    process.stderr.write(`nereid ${command} needs the @nereid/perf package (npm install @nereid/perf)\n`);
    return 99;
  }
  return command === 'perf' ? perf.runPerf(args) : perf.runAnalyze(args);
}

/**
 * `@nereid/operator` builds after the server (it is a separate package the server does not
 * depend on), so it is imported here by a variable specifier, only when `nereid operator` runs.
 */
async function runOperatorCommand(args: readonly string[]): Promise<number> {
  const specifier = '@nereid/operator';
  let operator: { runOperator(argv: readonly string[]): Promise<number> };
  try {
    operator = (await import(specifier)) as typeof operator;
  } catch (err) {
    process.stderr.write(`nereid operator needs the @nereid/operator package (npm install @nereid/operator): ${(err as Error).message}\n`);
    return 99;
  }
  return operator.runOperator(args);
}
