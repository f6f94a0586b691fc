/**
 * `nereid serve --help`: every option of the option table (options.ts), by `tritonserver --help`'s
 * groups, with its value format, default, what it does, and whether it has an effect in Nereid.
 */
import { OPTION_GROUPS, SERVE_OPTIONS, optionFormat, type ServeOptionSpec } from './options.js';

const WIDTH = 100;
const INDENT = '      ';

/** `text` broken into lines of at most `WIDTH` columns (longer words stay whole), each indented. */
function wrap(text: string, indent: string): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter((w) => w !== '')) {
    if (line !== '' && indent.length + line.length + 1 + word.length > WIDTH) {
      lines.push(indent + line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(indent + line);
  return lines;
}

/** The bracketed facts after an option's name: `[default: 8000; repeatable; no effect]`. */
export function optionTags(spec: ServeOptionSpec): string[] {
  return [
    `default: ${spec.default}`,
    ...(spec.repeatable ? ['repeatable'] : []),
    ...(spec.nereidOnly ? ["Nereid's own"] : []),
    ...(spec.nereidMeaning !== undefined ? ["Nereid's meaning"] : []),
    ...(spec.ignored !== undefined ? ['no effect'] : []),
  ];
}

function optionHelp(name: string, spec: ServeOptionSpec): string[] {
  const format = optionFormat(spec);
  const text = [
    spec.description,
    ...(spec.nereidMeaning !== undefined ? [`In Nereid: ${spec.nereidMeaning}.`] : []),
    ...(spec.ignored !== undefined ? [`No effect: ${spec.ignored}.`] : []),
  ].join(' ');
  return [`  --${name} ${format}  [${optionTags(spec).join('; ')}]`, ...wrap(text, INDENT)];
}

export function formatServeHelp(): string {
  const out = [
    'Usage: nereid serve --model-repository=<path> [options]',
    '',
    ...wrap(
      'Serves the models of one or more model repositories over HTTP/REST and gRPC (the KServe v2 protocols, as ' +
        "NVIDIA Triton Inference Server speaks them), with Prometheus metrics. The options are tritonserver's, so " +
        'existing command lines run. Give them as --name=<value> or --name <value>; a <boolean> is true/false, on/off ' +
        'or 1/0.',
      '',
    ),
    '',
    ...wrap(
      "Each option shows its value and, in brackets, its default and these marks: \"Nereid's own\", an option " +
        "tritonserver does not have; \"Nereid's meaning\", a tritonserver option that means something else here; " +
        '"no effect", an option accepted so that tritonserver command lines run, which does nothing in this version ' +
        '(the server warns at start when it is given); "repeatable", an option that may be given more than once.',
      '',
    ),
  ];
  const names = Object.keys(SERVE_OPTIONS);
  for (const group of OPTION_GROUPS) {
    const members = names.filter((n) => SERVE_OPTIONS[n]!.group === group);
    if (members.length === 0) continue;
    out.push('', `${group}:`);
    for (const name of members) out.push(...optionHelp(name, SERVE_OPTIONS[name]!));
  }
  return out.join('\n') + '\n';
}
