/**
 * The Node.js options `nereid serve` is meant to run with (docs/operations.md, "Node.js
 * options"). V8 reads them when it creates the heap, so they cannot be set from inside the
 * process: `npm run serve` and the benchmarks pass them on the command line, other launches pass
 * them there or in `NODE_OPTIONS`.
 *
 * `--max-semi-space-size=64`: a request leaves kilobytes of short-lived objects behind (decoded
 * messages, tensors' views, promises, responses), so young-generation collections dominate the
 * server's garbage collection. V8's default 16 MiB semi-space fills many times a second under
 * load; 64 MiB collects up to a quarter as often, and as little survives each collection it
 * costs about the same, so the total falls. On the MLP example at 64 gRPC-stream clients this
 * took throughput from about 27 500 to 32 000 infer/s on a 2-core machine for about 50 MB more
 * resident memory at that load (docs/benchmarks.md).
 */
export const SERVE_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=64'];

/**
 * The options of `SERVE_NODE_OPTIONS` whose flag this process was not started with, on its
 * command line (`execArgv`) or in `NODE_OPTIONS` (any value counts: an operator's own choice).
 */
export function missingNodeOptions(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map((o) => o.split('=')[0]!.replace(/_/g, '-'));
  return SERVE_NODE_OPTIONS.filter((o) => !given.includes(o.split('=')[0]!));
}
