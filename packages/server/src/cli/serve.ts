/**
 * `nereid serve`: load the repositories, report every model's state, listen, and shut down in
 * order on SIGINT/SIGTERM (unready → grace period → stop listening → drain → unload → exit).
 */
import { toNereidError } from '@nereid/protocol';
import { mappingUnavailableReason } from '../core/mapped-file.js';
import { Server } from '../core/server.js';
import { GrpcFrontend } from '../frontends/grpc/grpc-frontend.js';
import { HttpFrontend } from '../frontends/http/http-frontend.js';
import { MetricsFrontend } from '../frontends/metrics/metrics-frontend.js';
import { createLogger } from '../observability/logger.js';
import { missingNodeOptions } from './node-options.js';
import { ignoredReason, openTelemetrySettings, parseServeArgs } from './options.js';
import { formatBackendTable, formatModelTable, formatOptionTable, optionTableRows } from './startup-tables.js';

/** Runs the server until a signal stops it; returns the exit code for early failures. */
export async function runServe(args: readonly string[]): Promise<number | undefined> {
  let options;
  try {
    options = parseServeArgs(args);
  } catch (err) {
    process.stderr.write(`nereid serve: ${toNereidError(err).message}\n`);
    return 3;
  }
  const logger = createLogger({
    info: options.logInfo,
    warning: options.logWarning,
    error: options.logError,
    verboseLevel: options.logVerbose,
    format: options.logFormat,
    file: options.logFile,
  });
  for (const name of options.ignored) {
    logger.warning(`option --${name} is not supported by this version of Nereid and has no effect: ${ignoredReason(name)}`);
  }
  for (const warning of options.warnings) logger.warning(warning);
  if (
    options.grpcServer === 'grpc-js' &&
    (options.grpcKeepalivePermitWithoutCalls || options.grpcMaxPingsWithoutData !== 2 || options.grpcMinRecvPingIntervalWithoutDataMs !== 300_000 || options.grpcMaxPingStrikes !== 2)
  ) {
    logger.warning(
      '--grpc-server=grpc-js does not apply --grpc-keepalive-permit-without-calls or the --grpc-http2-* ping settings (grpc-js has no such options); the default server, --grpc-server=http2, does',
    );
  }
  if (options.responseCacheByteSize > 0) {
    logger.warning(
      "'--response-cache-byte-size' has been deprecated! This will default to the 'local' cache implementation with the provided byte size " +
        "for its config. Please use '--cache-config' instead. The equivalent --cache-config CLI args would be: " +
        `'--cache-config=local,size=${options.responseCacheByteSize}'`,
    );
  }
  if (options.allowMetrics && options.metricsConfig.summaryLatencies) {
    logger.warning('--metrics-config summary_latencies=true has no effect: this version of Nereid has no summaries; use histogram_latencies=true');
  }
  const missing = missingNodeOptions(process.execArgv, process.env.NODE_OPTIONS);
  if (missing.length > 0) {
    logger.verbose(1, `started without the Node.js options ${missing.join(' ')}: more garbage collection per request (docs/operations.md, "Node.js options")`);
  }
  if (options.modelRepositories.length === 0) {
    logger.error('no model repository given: pass --model-repository=<directory>');
    return 1;
  }
  const trace = options.traceConfig.settings;
  let opentelemetry;
  if (trace.mode === 'opentelemetry') {
    try {
      opentelemetry = openTelemetrySettings(options.traceConfig);
    } catch (err) {
      process.stderr.write(`nereid serve: ${toNereidError(err).message}\n`);
      return 3;
    }
  } else {
    if (trace.level !== 0 && trace.rate === 0) {
      logger.error('--trace-config rate=0: the sample rate must be non-zero while tracing is on (level=TIMESTAMPS or TENSORS) in mode triton; mode opentelemetry takes rate 0');
      return 1;
    }
    if (options.traceConfig.opentelemetry.length > 0) {
      logger.warning(`--trace-config opentelemetry,${options.traceConfig.opentelemetry[0]![0]}=… has no effect in trace mode ${trace.mode}; add --trace-config mode=opentelemetry`);
    }
    if (trace.level !== 0 && trace.file === '') {
      logger.warning('tracing is on (--trace-config level=...) but no trace file is set: no request is traced; add --trace-config triton,file=<path>');
    }
  }

  const server = new Server({
    modelRepositories: options.modelRepositories,
    id: options.id,
    strictReadiness: options.strictReadiness,
    autoCompleteConfig: options.autoCompleteConfig,
    modelConfigName: options.modelConfigName,
    modelLoadThreadCount: options.modelLoadThreadCount,
    modelLoadRetryCount: options.modelLoadRetryCount,
    configLimits: options.configLimits,
    modelControlMode: options.modelControlMode,
    loadModels: options.loadModels,
    ...(options.modelControlMode !== 'explicit' || options.repositoryPollSecsGiven ? { repositoryPollSecs: options.repositoryPollSecs } : {}),
    ...(options.modelRepositoryCacheDir !== '' ? { modelRepositoryCacheDir: options.modelRepositoryCacheDir } : {}),
    repositorySettleSecs: options.repositorySettleSecs,
    backendConfig: options.backendConfig,
    ...(options.backendDirectory !== '' ? { backendDirectory: options.backendDirectory } : {}),
    rateLimit: options.rateLimit,
    rateLimitResources: options.rateLimitResources,
    decoupledResponseTimeoutMs: options.decoupledResponseTimeoutSecs * 1000,
    allowClientShm: options.allowClientShm,
    memoryBudgetBytes: options.memoryBudgetBytes,
    modelMemoryLimitBytes: options.modelMemoryLimitBytes,
    memorySampleIntervalMs: options.memorySampleIntervalMs,
    ...(options.cache !== undefined ? { cache: options.cache } : {}),
    trace: options.traceConfig.settings,
    ...(opentelemetry !== undefined && { opentelemetry }),
    logger,
    metrics: {
      counterLatencies: options.metricsConfig.counterLatencies,
      // Without the endpoint nobody reads histograms: do not pay for them per request.
      histogramLatencies: options.allowMetrics && options.metricsConfig.histogramLatencies,
      histogramBatchSize: options.allowMetrics && options.metricsConfig.histogramBatchSize,
      buckets: options.metricsConfig.buckets,
      cpu: options.allowMetrics && options.allowCpuMetrics,
      gpu: options.allowMetrics && options.allowGpuMetrics,
      intervalMs: options.metricsIntervalMs,
    },
  });
  let report;
  try {
    report = await server.load();
  } catch (err) {
    logger.error(toNereidError(err).message);
    return 1;
  }
  const unmapped = mappingUnavailableReason();
  if (unmapped !== undefined) {
    logger.warning(`shared-memory regions and Python tensor rings are read and written with positioned I/O, slower for large tensors than mapped memory: ${unmapped}`);
  }
  // Triton's start-up report: each table is one log message starting on the line after the
  // prefix, followed by an empty line; the option table comes last, also before an exit.
  logger.info(`\n${formatBackendTable(server.backends())}\n`);
  logger.info(`\n${formatModelTable(server.modelStatuses())}\n`);
  logger.info(`\n${formatOptionTable(optionTableRows(options, server.metadata()))}\n`);
  if (report.failures.length > 0 && options.exitOnError) {
    logger.error('failed to load all models; exiting (start with --exit-on-error=false to serve the models that did load)');
    await server.stop();
    return 1;
  }

  if (
    options.allowHttp &&
    options.allowGrpc &&
    options.httpPort === options.grpcPort &&
    options.httpPort !== 0 &&
    options.httpAddress === options.grpcAddress
  ) {
    logger.error(`the HTTP and gRPC services are both configured on ${options.httpAddress}:${options.httpPort}; give them different ports`);
    await server.stop();
    return 1;
  }
  const metricsAddress = options.metricsAddress || options.httpAddress;
  if (options.allowMetrics && options.metricsPort !== 0) {
    const clash = [
      ...(options.allowHttp ? [{ name: 'HTTP', address: options.httpAddress, port: options.httpPort }] : []),
      ...(options.allowGrpc ? [{ name: 'gRPC', address: options.grpcAddress, port: options.grpcPort }] : []),
    ].find((e) => e.address === metricsAddress && e.port === options.metricsPort);
    if (clash !== undefined) {
      logger.error(`the metrics and ${clash.name} services are both configured on ${metricsAddress}:${options.metricsPort}; give them different ports`);
      await server.stop();
      return 1;
    }
  }

  /**
   * A started endpoint. Shutdown calls `stopAccepting` (new requests refused, still listening;
   * what is in flight goes on), waits for `idle`, unloads the models, then `close`s it.
   */
  interface Endpoint {
    /** The grace period begins: keep serving, but ask clients not to reuse connections. */
    drain(): void;
    stopAccepting(): void;
    /** Resolves once nothing accepted is still being answered. */
    idle(): Promise<void>;
    /** Stops listening and closes every connection; resolves once they are closed. */
    close(): Promise<void>;
    /** Closes everything now (a start-up failure). */
    closeNow(): void;
  }
  const endpoints: Endpoint[] = [];
  // A signal that arrives while the endpoints open (between the first "Started" line and the
  // last) is held and answered with the full shutdown once they are open, instead of killing the
  // process with requests the first endpoint already accepted.
  // One listener for the whole life of the process: removing a signal's last listener stops
  // Node's watcher for it, and a signal already received but not yet dispatched is then lost.
  let held: string | undefined;
  let open = false;
  const onSignal = (signal: string) => {
    if (open) void shutdown(signal);
    else held ??= signal;
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  /** The metrics endpoint stays up until the models are unloaded, so a drain can be watched. */
  let metricsEndpoint: Endpoint | undefined;
  const closeAll = () => {
    for (const e of [...endpoints, ...(metricsEndpoint ? [metricsEndpoint] : [])]) e.closeNow();
  };
  const start = async (name: string, address: string, listen: () => Promise<number>): Promise<boolean> => {
    try {
      const port = await listen();
      logger.info(`Started ${name} at ${address}:${port}`);
      return true;
    } catch (err) {
      logger.error(toNereidError(err).message);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      closeAll();
      await server.stop();
      return false;
    }
  };
  /**
   * Listening stops once no connection has arrived for this long (at most LISTEN_LINGER_MS):
   * closing a listening socket resets connections the kernel completed and the server had not
   * yet accepted, whose clients would get no answer.
   */
  const QUIET_MS = 100;
  const LISTEN_LINGER_MS = 2000;
  if (options.allowGrpc) {
    const grpc = new GrpcFrontend(server, {
      address: options.grpcAddress,
      port: options.grpcPort,
      keepaliveTimeMs: options.grpcKeepaliveTimeMs,
      keepaliveTimeoutMs: options.grpcKeepaliveTimeoutMs,
      maxConcurrentStreams: options.grpcMaxConcurrentStreams,
      maxInputSize: options.grpcMaxInputSize,
      server: options.grpcServer,
      keepalivePermitWithoutCalls: options.grpcKeepalivePermitWithoutCalls,
      maxPingsWithoutData: options.grpcMaxPingsWithoutData,
      minRecvPingIntervalWithoutDataMs: options.grpcMinRecvPingIntervalWithoutDataMs,
      maxPingStrikes: options.grpcMaxPingStrikes,
      ...(options.grpcMaxConnectionAgeMs !== undefined ? { maxConnectionAgeMs: options.grpcMaxConnectionAgeMs } : {}),
      ...(options.grpcMaxConnectionAgeGraceMs !== undefined ? { maxConnectionAgeGraceMs: options.grpcMaxConnectionAgeGraceMs } : {}),
    });
    if (!(await start('GRPCInferenceService', options.grpcAddress, () => grpc.listen()))) return 1;
    let closing: Promise<void> | undefined;
    endpoints.push({
      drain: () => undefined,
      stopAccepting: () => grpc.stopAccepting(),
      idle: () => grpc.idle(),
      // Nothing is in flight any more: the sessions close as soon as their clients read the GOAWAY.
      close: () => (closing ??= grpc.close(LISTEN_LINGER_MS)),
      closeNow: () => {
        closing ??= grpc.close(0);
        grpc.forceClose();
      },
    });
  }
  if (options.allowHttp) {
    const http = new HttpFrontend(server, {
      address: options.httpAddress,
      port: options.httpPort,
      maxInputSize: options.httpMaxInputSize,
      headersTimeoutMs: options.httpHeadersTimeoutMs,
      requestTimeoutMs: options.httpRequestTimeoutMs,
      keepAliveTimeoutMs: options.httpKeepAliveTimeoutMs,
      maxConnections: options.httpMaxConnections,
      server: options.httpServer,
    });
    if (!(await start('HTTPService', options.httpAddress, () => http.listen()))) return 1;
    let closing: Promise<void> | undefined;
    endpoints.push({
      drain: () => http.drain(),
      stopAccepting: () => http.stopAccepting(),
      idle: () => http.idle(),
      close: async () => {
        await http.quiet(QUIET_MS, LISTEN_LINGER_MS);
        closing ??= http.close();
        // Connections left are idle: every response since the drain asked its client to close.
        http.closeAllConnections();
        await closing;
      },
      closeNow: () => {
        closing ??= http.close();
        http.closeAllConnections();
      },
    });
  }
  if (options.allowMetrics) {
    const metrics = new MetricsFrontend(server, { address: metricsAddress, port: options.metricsPort });
    if (!(await start('Metrics Service', metricsAddress, () => metrics.listen()))) return 1;
    metricsEndpoint = {
      drain: () => undefined,
      stopAccepting: () => undefined,
      idle: () => Promise.resolve(),
      close: () => {
        const closing = metrics.close();
        metrics.closeAllConnections();
        return closing;
      },
      closeNow: () => {
        void metrics.close();
        metrics.closeAllConnections();
      },
    };
  }

  let stopping = false;
  // The shutdown sequence (docs/operations.md): unready → grace period → no new connections →
  // in-flight requests and streams answered → models unloaded in dependency order → exit 0.
  const shutdown = async (signal: string) => {
    if (stopping) {
      logger.warning(`received ${signal} again; exiting now`);
      process.exit(1);
    }
    stopping = true;
    server.withdrawReadiness();
    for (const e of endpoints) e.drain();
    const grace = options.exitGraceSecs;
    if (grace > 0) {
      logger.info(`received ${signal}: no longer ready; still serving for ${grace}s (--exit-grace-secs)`);
      await new Promise((resolve) => setTimeout(resolve, grace * 1000));
    } else {
      logger.info(`received ${signal}: no longer ready`);
    }
    logger.info(`refusing new requests; waiting up to ${options.exitTimeoutSecs}s for in-flight requests`);
    const timer = setTimeout(() => {
      logger.warning(`in-flight requests did not finish within --exit-timeout-secs=${options.exitTimeoutSecs}; exiting`);
      process.exit(1);
    }, options.exitTimeoutSecs * 1000);
    timer.unref();
    for (const e of endpoints) e.stopAccepting();
    await Promise.all(endpoints.map((e) => e.idle()));
    await server.stop();
    await Promise.all(endpoints.map((e) => e.close()));
    if (metricsEndpoint) await metricsEndpoint.close();
    logger.info('all models unloaded; exiting');
    process.exit(0);
  };
  open = true;
  if (held !== undefined) void shutdown(held);
  return undefined;
}
