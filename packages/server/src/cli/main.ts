/**
 * The `nereid` command line. `nereid serve` starts the server with `tritonserver`'s option names.
 */
import { Command } from 'commander';
import { toNereidError } from '@nereid/protocol';
import { NEREID_VERSION } from '../core/server.js';
import { knownOptionNames } from './options.js';
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

  try {
    await program.parseAsync(argv as string[], { from: 'user' });
  } catch (err) {
    process.stderr.write(`nereid: ${toNereidError(err).message}\n`);
    process.exitCode = 1;
  }
}
