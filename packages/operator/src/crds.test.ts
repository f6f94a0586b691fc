/**
 * The CRD manifests of deploy/helm/nereid/crds: structural schemas (every field typed, described
 * where users set it), the contract's names, printer columns, the status subresource, and
 * validation rules with messages. That the API server accepts them and enforces the rules is the
 * Kubernetes tier's test (test/kubernetes/operator/crd-validation.test.ts).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';

type Schema = {
  type?: string;
  description?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  additionalProperties?: Schema;
  anyOf?: Schema[];
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-validations'?: { rule: string; message?: string }[];
};

const crd = (file: string): Record<string, any> =>
  parse(readFileSync(new URL(`../../../deploy/helm/nereid/crds/${file}`, import.meta.url), 'utf8')) as Record<string, any>;

/** Every node typed (or int-or-string / preserve-unknown-fields); spec fields described. */
function checkStructural(schema: Schema, path: string, describe: boolean, problems: string[]): void {
  if (!schema.type && !schema['x-kubernetes-int-or-string'] && !schema['x-kubernetes-preserve-unknown-fields']) problems.push(`${path}: no type`);
  for (const v of schema['x-kubernetes-validations'] ?? []) if (!v.message) problems.push(`${path}: rule ${v.rule} has no message`);
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    if (describe && !child.description && !['apiVersion', 'kind', 'metadata'].includes(name) && !path.includes('.podTemplate.metadata')) {
      problems.push(`${path}.${name}: no description`);
    }
    checkStructural(child, `${path}.${name}`, describe && !path.endsWith('.ports.http'), problems);
  }
  if (schema.items) checkStructural(schema.items, `${path}[]`, false, problems);
  if (schema.additionalProperties) checkStructural(schema.additionalProperties, `${path}{}`, false, problems);
}

for (const [file, kind, plural, short] of [
  ['nereid.dev_nereidservers.yaml', 'NereidServer', 'nereidservers', 'nsv'],
  ['nereid.dev_nereidmodels.yaml', 'NereidModel', 'nereidmodels', 'nmd'],
] as const) {
  describe(file, () => {
    const doc = crd(file);
    const version = doc.spec.versions[0];
    const schema = version.schema.openAPIV3Schema as Schema;

    it('names the contract kind, plural, short name, group and version', () => {
      assert.equal(doc.apiVersion, 'apiextensions.k8s.io/v1');
      assert.equal(doc.metadata.name, `${plural}.nereid.dev`);
      assert.equal(doc.spec.group, 'nereid.dev');
      assert.equal(doc.spec.scope, 'Namespaced');
      assert.equal(doc.spec.names.kind, kind);
      assert.equal(doc.spec.names.plural, plural);
      assert.deepEqual(doc.spec.names.shortNames, [short]);
      assert.equal(doc.spec.versions.length, 1);
      assert.equal(version.name, 'v1alpha1');
      assert.ok(version.served && version.storage);
      assert.deepEqual(version.subresources.status, {});
    });

    it('has a structural schema with descriptions and rule messages', () => {
      const problems: string[] = [];
      checkStructural(schema.properties!.spec, 'spec', true, problems);
      checkStructural(schema.properties!.status, 'status', false, problems);
      assert.deepEqual(problems, []);
    });

    it('keeps conditions as a map keyed by type with observedGeneration', () => {
      const status = schema.properties!.status.properties!;
      assert.equal(status.observedGeneration.type, 'integer');
      const conditions = status.conditions as Schema & Record<string, unknown>;
      assert.equal(conditions['x-kubernetes-list-type'], 'map');
      assert.deepEqual(conditions['x-kubernetes-list-map-keys'], ['type']);
      assert.deepEqual(Object.keys(conditions.items!.properties!).sort(), [
        'lastTransitionTime',
        'message',
        'observedGeneration',
        'reason',
        'status',
        'type',
      ]);
    });

    it('prints Ready and Age columns', () => {
      const names = version.additionalPrinterColumns.map((c: { name: string }) => c.name);
      assert.ok(names.includes('Ready') && names.includes('Age'), names.join(', '));
    });
  });
}

describe('validation rules', () => {
  const rules = (doc: Record<string, any>): string[] => {
    const out: string[] = [];
    const walk = (s: Schema): void => {
      for (const v of s['x-kubernetes-validations'] ?? []) out.push(v.message ?? '');
      for (const c of Object.values(s.properties ?? {})) walk(c);
      if (s.items) walk(s.items);
    };
    walk(doc.spec.versions[0].schema.openAPIV3Schema);
    return out;
  };

  it('covers replica bounds, ports, the repository and the model source', () => {
    const server = rules(crd('nereid.dev_nereidservers.yaml')).join('\n');
    assert.match(server, /minReplicas must not exceed maxReplicas/);
    assert.match(server, /three different ports/);
    assert.match(server, /modelRepository needs a uri/);
    const model = rules(crd('nereid.dev_nereidmodels.yaml')).join('\n');
    assert.match(model, /exactly one of repository, configMap or uri/);
    assert.match(model, /modelName must be a valid model name/);
    assert.match(model, /server is immutable/);
  });
});
