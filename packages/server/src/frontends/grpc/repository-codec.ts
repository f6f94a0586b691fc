/**
 * The gRPC model repository RPCs (protocol.md §4.8): RepositoryIndex, RepositoryModelLoad and
 * RepositoryModelUnload as facade calls.
 */
import { NereidError, type pb } from '@nereid/protocol';
import {
  loadOptionsFromParameters,
  unloadOptionsFromParameters,
  type RepositoryParameter,
} from '../../core/repository-parameters.js';
import type { Server } from '../../core/server.js';

/** Each `ModelRepositoryParameter` by the choice it carries. */
function parametersOf(parameters: Readonly<Record<string, pb.ModelRepositoryParameter>>): Record<string, RepositoryParameter> {
  const out: Record<string, RepositoryParameter> = {};
  for (const [key, p] of Object.entries(parameters)) {
    out[key] =
      p.string_param !== undefined
        ? { kind: 'string', value: p.string_param }
        : p.bytes_param !== undefined
          ? { kind: 'bytes', value: p.bytes_param }
          : p.bool_param !== undefined
            ? { kind: 'bool', value: p.bool_param }
            : p.int64_param !== undefined
              ? { kind: 'int64', value: p.int64_param }
              : { kind: 'none' };
  }
  return out;
}

function checkRepositoryName(name: string): void {
  if (name !== '') throw new NereidError('REPOSITORY_NAME_UNSUPPORTED', "'repository_name' specification is not supported");
}

export async function repositoryIndex(server: Server, request: pb.RepositoryIndexRequest): Promise<pb.RepositoryIndexResponse> {
  checkRepositoryName(request.repository_name);
  const entries = await server.repositoryIndex({ ready: request.ready });
  // Absent fields are empty strings (protocol.md §4.8).
  return { models: entries.map((e) => ({ name: e.name, version: e.version ?? '', state: e.state ?? '', reason: e.reason ?? '' })) };
}

export async function repositoryModelLoad(server: Server, request: pb.RepositoryModelLoadRequest): Promise<pb.RepositoryModelLoadResponse> {
  checkRepositoryName(request.repository_name);
  const options = loadOptionsFromParameters(request.model_name, parametersOf(request.parameters), 'raw');
  await server.loadModel(request.model_name, options);
  return {};
}

export async function repositoryModelUnload(server: Server, request: pb.RepositoryModelUnloadRequest): Promise<pb.RepositoryModelUnloadResponse> {
  checkRepositoryName(request.repository_name);
  await server.unloadModel(request.model_name, unloadOptionsFromParameters(parametersOf(request.parameters)));
  return {};
}
