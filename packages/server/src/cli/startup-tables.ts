/**
 * The tables `nereid serve` logs at start, in `tritonserver`'s shape (protocol.md §6): the
 * backends, the model status and the options, all drawn by `formatTable`.
 */
import type { BackendDescription, ModelVersionStatus, ServerMetadata } from '../core/types.js';
import type { ServeOptions } from './options.js';

/**
 * A `+---+---+` table: the header, then one row per entry. A cell holding several lines takes
 * as many table lines, the other cells of its row left blank below their first line.
 */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const lines = rows.flatMap((row) => {
    const cells = row.map((c) => c.split('\n'));
    const height = Math.max(1, ...cells.map((c) => c.length));
    return Array.from({ length: height }, (_, i) => cells.map((c) => c[i] ?? ''));
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((r) => (r[i] ?? '').length)));
  const rule = `+${widths.map((w) => '-'.repeat(w + 2)).join('+')}+`;
  const row = (cells: readonly string[]) => `| ${widths.map((w, i) => (cells[i] ?? '').padEnd(w)).join(' | ')} |`;
  return [rule, row(header), rule, ...lines.map(row), rule].join('\n');
}

/** Triton-style status table: model, version, status (with the reason when not ready). */
export function formatModelTable(statuses: readonly ModelVersionStatus[]): string {
  return formatTable(
    ['Model', 'Version', 'Status'],
    statuses.map((s) => [s.name, s.version || '-', s.state === 'READY' ? 'READY' : `${s.state}: ${s.reason}`]),
  );
}

/**
 * Triton's backend table: name, what the backend is (Triton prints its shared library's path
 * there), and the settings it receives as Triton shows a backend's command-line config.
 */
export function formatBackendTable(backends: readonly BackendDescription[]): string {
  return formatTable(
    ['Backend', 'Path', 'Config'],
    backends.map((b) => [b.name, b.source, JSON.stringify({ cmdline: b.settings })]),
  );
}

const CONTROL_MODES: Readonly<Record<ServeOptions['modelControlMode'], string>> = {
  none: 'MODE_NONE',
  poll: 'MODE_POLL',
  explicit: 'MODE_EXPLICIT',
};

/**
 * The rows of Triton's option table, in its order, with this server's values. Triton's rows
 * about GPU memory (`pinned_memory_pool_byte_size`, `cuda_memory_pool_byte_size{i}`,
 * `min_supported_compute_capability`) are left out: Nereid uses no GPU and has no such pools.
 * Nereid's own rows follow: `model_config_limit[<limit>]` for each limit given, and
 * `options_without_effect` naming the options given that change nothing.
 */
export function optionTableRows(options: ServeOptions, metadata: ServerMetadata): [string, string][] {
  const rows: [string, string][] = [
    ['server_id', metadata.name],
    ['server_version', metadata.version],
    ['server_extensions', metadata.extensions.join(' ')],
    ...options.modelRepositories.map((path, i): [string, string] => [`model_repository_path[${i}]`, path]),
    ['model_control_mode', CONTROL_MODES[options.modelControlMode]],
  ];
  if (options.modelControlMode === 'explicit') {
    options.loadModels.forEach((model, i) => rows.push([`startup_models_${i}`, model]));
  }
  rows.push(
    ['strict_model_config', options.autoCompleteConfig ? '0' : '1'],
    ['model_config_name', options.modelConfigName],
    ['rate_limit', options.rateLimit === 'execution_count' ? 'EXEC_COUNT' : 'OFF'],
  );
  options.rateLimitResources.forEach((r, i) =>
    rows.push([`rate_limit_resource[${i}]`, JSON.stringify({ name: r.name, count: r.count, device: r.device ?? -1 })]),
  );
  rows.push(
    ['strict_readiness', options.strictReadiness ? '1' : '0'],
    ['exit_timeout', String(options.exitTimeoutSecs)],
    ['cache_enabled', options.cache !== undefined ? '1' : '0'],
  );
  // Nereid's rows: the limits given, and what was given that has no effect (each also warned about).
  for (const [name, value] of Object.entries(options.configLimits)) rows.push([`model_config_limit[${name}]`, String(value)]);
  const ineffective = [
    ...options.ignored.map((name) => `--${name}`),
    ...options.warnings.map((w) => /^(--backend-config=[^ ]*)/.exec(w)?.[1] ?? w),
  ];
  if (ineffective.length > 0) rows.push(['options_without_effect', ineffective.join(' ')]);
  return rows;
}

export function formatOptionTable(rows: readonly (readonly [string, string])[]): string {
  return formatTable(['Option', 'Value'], rows);
}
