/**
 * The order models unload in when the server shuts down (models-and-scheduling.md §1.11): a model
 * goes only once every model that depends on it has gone — ensembles before the models their
 * steps use — so nothing in flight loses a model it still needs.
 */

/**
 * Groups `models` into waves: every model of a wave can unload (in parallel) once the waves
 * before it have. `dependencies` maps a model to the models it uses; names it does not list as
 * keys are ignored. Models on a cycle (which loading refuses, so only stale state can hold one)
 * go together in a last wave. Within a wave, names are sorted.
 */
export function unloadWaves(dependencies: ReadonlyMap<string, readonly string[]>): string[][] {
  /** How many remaining models use each model. */
  const users = new Map<string, number>();
  for (const name of dependencies.keys()) users.set(name, 0);
  for (const [name, uses] of dependencies) {
    for (const used of new Set(uses)) {
      if (used !== name && users.has(used)) users.set(used, users.get(used)! + 1);
    }
  }
  const waves: string[][] = [];
  const left = new Set(dependencies.keys());
  while (left.size > 0) {
    const wave = [...left].filter((name) => users.get(name) === 0).sort();
    if (wave.length === 0) {
      waves.push([...left].sort());
      break;
    }
    for (const name of wave) {
      left.delete(name);
      for (const used of new Set(dependencies.get(name))) {
        if (used !== name && left.has(used)) users.set(used, users.get(used)! - 1);
      }
    }
    waves.push(wave);
  }
  return waves;
}
