/**
 * The `nereid` command line. `nereid serve` starts the server with `tritonserver`'s option names;
 * `nereid config MODEL_DIR` prints a model's effective configuration; `nereid perf` runs the load
 * generator of `@nereid/perf` (perf_analyzer's flags), loaded only when asked for.
 */
import { Command } from 'commander';
import { toNereidError } from '@nereid/protocol';
import { NEREID_VERSION } from '../core/server.js';
import { knownOptionNames } from './options.js';
import { runConfigCommand, type ConfigCommandOptions } from './config-command.js';
import { runServe } from './serve.js';

export async function main(argv: readonly string[]): Promise<void> {
  const program = new Command('nereid')
    .description('Nereid: an inference server that speaks NVIDIA Triton’s protocols')
    .version(NEREID_VERSION, '--version');

  program
    .command('serve')
    .description('serve the models of one or more model repositories over HTTP/REST')
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]', 'tritonserver-style options, e.g. --model-repository=DIR --http-port=8000')
    .addHelpText(
      'after',
      `\nOptions with an effect:\n  ${knownOptionNames().implemented.map((n) => `--${n}`).join('\n  ')}\n` +
        `\nOther tritonserver options are accepted and ignored with a warning.\n`,
    )
    .action(async (args: string[]) => {
      if (args.includes('--help') || args.includes('-h')) {
        program.commands.find((c) => c.name() === 'serve')!.outputHelp();
        return;
      }
      const code = await runServe(args);
      if (code !== undefined) process.exitCode = code;
    });

  program
    .command('config')
    .description('print the complete configuration Nereid would use for a model directory, and where each field came from')
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
    .description('measure a model with a perf_analyzer-compatible load generator (nereid perf -h; docs/perf.md)')
    .helpOption(false)
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .argument('[options...]', "perf_analyzer's options, e.g. -m simple --concurrency-range 1:4 -i grpc -u localhost:8001")
    .action(async (args: string[]) => {
      process.exitCode = await runPerfCommand(args);
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
 * imported only here, by name, when `nereid perf` runs.
 */
async function runPerfCommand(args: readonly string[]): Promise<number> {
  const specifier = '@nereid/perf';
  let perf: { runPerf(argv: readonly string[]): Promise<number> };
  try {
    perf = (await import(specifier)) as typeof perf;
  } catch {
    process.stderr.write('nereid perf needs the @nereid/perf package (npm install @nereid/perf)\n');
    return 99;
  }
  return perf.runPerf(args);
}
