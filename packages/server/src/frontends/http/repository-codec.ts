/**
 * Request bodies of the HTTP model repository extension (protocol.md §3.13): an optional JSON
 * object, `{"ready": bool}` for the index and `{"parameters": {…}}` for load and unload.
 */
import { NereidError } from '@nereid/protocol';
import {
  loadOptionsFromParameters,
  unloadOptionsFromParameters,
  type RepositoryParameter,
} from '../../core/repository-parameters.js';
import { jsonObjectBody } from './body.js';
import type { LoadModelOptions, UnloadModelOptions } from '../../core/types.js';

function parametersOf(body: Record<string, unknown>, what: string): Record<string, RepositoryParameter> {
  const params = body.parameters;
  if (params === undefined || params === null) return {};
  if (typeof params !== 'object' || Array.isArray(params)) {
    throw new NereidError('REQUEST_MALFORMED', `'parameters' of a ${what} request must be a JSON object`);
  }
  const out: Record<string, RepositoryParameter> = {};
  for (const [key, value] of Object.entries(params)) {
    out[key] =
      typeof value === 'string'
        ? { kind: 'string', value }
        : typeof value === 'boolean'
          ? { kind: 'bool', value }
          : { kind: 'json', value };
  }
  return out;
}

/** `POST /v2/repository/index`: `ready` must be a bool when present. */
export function decodeIndexRequest(body: Buffer): { ready: boolean } {
  const ready = jsonObjectBody(body, 'repository index', true).ready;
  if (ready === undefined) return { ready: false };
  if (typeof ready !== 'boolean') throw new NereidError('REQUEST_PARAMETER', `'ready' of a repository index request must be a bool, got ${JSON.stringify(ready)}`);
  return { ready };
}

/** `POST /v2/repository/models/{m}/load`: every parameter a string; `file:` ones base64. */
export function decodeLoadRequest(model: string, body: Buffer): LoadModelOptions {
  return loadOptionsFromParameters(model, parametersOf(jsonObjectBody(body, 'load', true), 'load'), 'base64');
}

/** `POST /v2/repository/models/{m}/unload`: `unload_dependents` a bool; other keys ignored. */
export function decodeUnloadRequest(body: Buffer): UnloadModelOptions {
  return unloadOptionsFromParameters(parametersOf(jsonObjectBody(body, 'unload', true), 'unload'));
}
