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
 *
 * `--single-threaded-gc`: V8 runs its collections on the main thread only, with no background
 * marking, sweeping or parallel scavenging tasks. A serving machine's cores are busy with the
 * server's other threads, the model processes and often the clients: on 2 cores under load, the
 * background GC tasks waited for a core and stretched each young-generation pause to 7–18 ms
 * (the p99 spikes of docs/benchmarks.md's vs-triton run); with it, pauses were 3–6 ms and the GC
 * time per run fell to a third (docs/operations.md, "Node.js options"). Node.js refuses it in
 * NODE_OPTIONS, so it goes on node's command line.
 */
export const SERVE_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=64', '--single-threaded-gc'];

/**
 * The options of `SERVE_NODE_OPTIONS` whose flag this process was not started with, on its
 * command line (`execArgv`) or in `NODE_OPTIONS` (any value, or its `--no-` form, counts: an
 * operator's own choice).
 */
export function missingNodeOptions(execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  // `--no-<flag>` counts too: the operator chose against it.
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map((o) => o.split('=')[0]!.replace(/_/g, '-').replace(/^--no-/, '--'));
  return SERVE_NODE_OPTIONS.filter((o) => !given.includes(o.split('=')[0]!));
}
