/**
 * TensorFlow models for the tensorflow backend's tests, made at test time by the runtimes
 * environment's TensorFlow (`.venv-runtimes`, `node scripts/setup.mjs runtimes`) the way Triton's
 * QA generators and example repository make them: Triton's `simple` add/sub model (INPUT0, INPUT1
 * INT32 [16] → OUTPUT0 = sum, OUTPUT1 = difference) and its string variant as a frozen GraphDef
 * and as a TensorFlow 1 SavedModel (placeholders and named identities, `simple_save`), plus
 * TensorFlow 2 SavedModels (`tf.Module` signatures). No binary is committed.
 *
 * `tensorflowReference` runs a model with TensorFlow directly, for element-by-element comparisons
 * with what the server answers.
 */
import { existsSync } from 'node:fs';
import { RUNTIMES_PYTHON, runProcess } from './python.js';

const run = (args: readonly string[], stdin?: string) => runProcess(RUNTIMES_PYTHON, args, stdin);

/**
 * Throws, naming the command that makes it, unless the runtimes environment's interpreter can
 * import TensorFlow. Called from a suite's `before` hook.
 */
export async function requireTensorFlow(): Promise<void> {
  if (!existsSync(RUNTIMES_PYTHON)) {
    throw new Error(`${RUNTIMES_PYTHON} does not exist: make the runtimes environment with node scripts/setup.mjs runtimes`);
  }
  const r = await run(['-c', 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("tensorflow") else 3)']);
  if (r.code !== 0) throw new Error(`${RUNTIMES_PYTHON} cannot import tensorflow (${r.stderr.trim() || r.code}): run node scripts/setup.mjs runtimes`);
}

/** The model generators, run by the runtimes interpreter with a JSON list of jobs. */
const GENERATOR = String.raw`
import json, os, sys
import tensorflow as tf


def v1_graph(model):
    """A TensorFlow 1 graph of placeholders and named identities, as Triton's QA generators build
    them: (graph, {input key: tensor}, {output key: tensor})."""
    graph = tf.Graph()
    with graph.as_default():
        if model == "simple":
            a = tf.compat.v1.placeholder(tf.int32, [None, 16], "INPUT0")
            b = tf.compat.v1.placeholder(tf.int32, [None, 16], "INPUT1")
            out0 = tf.identity(tf.add(a, b), name="OUTPUT0")
            out1 = tf.identity(tf.subtract(a, b), name="OUTPUT1")
        elif model == "simple_string":
            # Strings holding integers: converted, added and subtracted, converted back.
            a = tf.compat.v1.placeholder(tf.string, [None, 16], "INPUT0")
            b = tf.compat.v1.placeholder(tf.string, [None, 16], "INPUT1")
            x = tf.strings.to_number(a, tf.int32)
            y = tf.strings.to_number(b, tf.int32)
            out0 = tf.strings.as_string(tf.add(x, y), name="OUTPUT0")
            out1 = tf.strings.as_string(tf.subtract(x, y), name="OUTPUT1")
        elif model == "lookup":
            # A string -> INT64 table (a: 1, b: 2, c: 3, else -1), usable only once its
            # initializer, the NoOp "init_tables", ran (TF_INIT_OPS_FILE).
            x = tf.compat.v1.placeholder(tf.string, [None, 1], "INPUT0")
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(["a", "b", "c"]), tf.constant([1, 2, 3], tf.int64)), -1)
            out0 = tf.identity(table.lookup(x), name="OUTPUT0")
            tf.compat.v1.tables_initializer(name="init_tables")
            return graph, {"INPUT0": x}, {"OUTPUT0": out0}
        else:
            raise SystemExit("unknown model " + model)
    return graph, {"INPUT0": a, "INPUT1": b}, {"OUTPUT0": out0, "OUTPUT1": out1}


class Signatures(tf.Module):
    """serving_default: the simple add/sub; scale: Y = X * 2.5 + 1 over FP32 [-1, 3]."""

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.int32, name="INPUT0"),
                                  tf.TensorSpec([None, 16], tf.int32, name="INPUT1")])
    def add_sub(self, INPUT0, INPUT1):
        return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="X")])
    def scale(self, X):
        return {"Y": X * 2.5 + 1.0}


class Types(tf.Module):
    """No batch dimension; FP16, FP64, INT64 and BOOL tensors of shape [4]."""

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float16, name="H"), tf.TensorSpec([4], tf.float64, name="D"),
                                  tf.TensorSpec([4], tf.int64, name="L"), tf.TensorSpec([4], tf.bool, name="B")])
    def run(self, H, D, L, B):
        return {"H_OUT": H * tf.constant(1.5, tf.float16), "D_OUT": tf.sqrt(D), "L_OUT": L * 3 - 1,
                "B_OUT": tf.logical_not(B)}


def save(job):
    kind, model, path = job["kind"], job["model"], job["path"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "graphdef":
        graph, _, _ = v1_graph(model)
        tf.io.write_graph(graph.as_graph_def(), os.path.dirname(path), os.path.basename(path), as_text=False)
    elif kind == "savedmodel_v1":
        graph, inputs, outputs = v1_graph(model)
        with tf.compat.v1.Session(graph=graph) as sess:
            tf.compat.v1.saved_model.simple_save(sess, path, inputs=inputs, outputs=outputs)
    elif kind == "savedmodel" and model == "signatures":
        m = Signatures()
        tf.saved_model.save(m, path, signatures={"serving_default": m.add_sub, "scale": m.scale})
    elif kind == "savedmodel" and model == "types":
        m = Types()
        tf.saved_model.save(m, path, signatures={"serving_default": m.run})
    else:
        raise SystemExit("unknown model %s %s" % (kind, model))


for job in json.loads(sys.argv[1]):
    save(job)
`;

/**
 * The models: `simple` / `simple_string` as `graphdef` or `savedmodel_v1`; `lookup` (a string
 * table that needs its init op run, TF_INIT_OPS_FILE) as `graphdef`; `signatures`
 * (serving_default = simple, `scale`) and `types` as TensorFlow 2 `savedmodel`.
 */
export interface TensorFlowModelJob {
  kind: 'graphdef' | 'savedmodel_v1' | 'savedmodel';
  model: 'simple' | 'simple_string' | 'lookup' | 'signatures' | 'types';
  /** The model.graphdef file or model.savedmodel directory to write. */
  path: string;
}

/** Writes every model of `jobs` with one TensorFlow process. */
export async function makeTensorFlowModels(jobs: readonly TensorFlowModelJob[]): Promise<void> {
  const r = await run(['-c', GENERATOR, JSON.stringify(jobs)]);
  if (r.code !== 0) throw new Error(`making TensorFlow models failed (${r.code}): ${r.stderr}`);
}

/** Runs a model with TensorFlow directly: `{name: {dtype, shape, data}}` in, the same out (BYTES as strings). */
const REFERENCE = String.raw`
import json, sys
import numpy as np
import tensorflow as tf

job = json.load(sys.stdin)
feeds = {}
for name, t in job["inputs"].items():
    if t["dtype"] == "string":
        feeds[name] = np.array([s.encode() for s in t["data"]], dtype=object).reshape(t["shape"])
    else:
        feeds[name] = np.array(t["data"], dtype=t["dtype"]).reshape(t["shape"])
if job["kind"] == "graphdef":
    graph_def = tf.compat.v1.GraphDef()
    with open(job["path"], "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        values = sess.run([n + ":0" for n in job["outputs"]], feed_dict={n + ":0": v for n, v in feeds.items()})
    result = dict(zip(job["outputs"], values))
else:
    fn = tf.saved_model.load(job["path"]).signatures[job.get("signature") or "serving_default"]
    out = fn(**{k: tf.constant(v) for k, v in feeds.items()})
    result = {n: out[n].numpy() for n in job["outputs"]}
answer = {}
for name, v in result.items():
    if v.dtype == object:
        data = [x.decode() for x in v.reshape(-1)]
    else:
        data = v.reshape(-1).tolist()
    answer[name] = {"shape": list(v.shape), "data": data}
print(json.dumps(answer))
`;

export interface ReferenceTensor {
  /** A numpy dtype name (int32, float16, bool, …) or `string`. */
  dtype: string;
  shape: number[];
  data: (number | boolean | string)[];
}

/** What TensorFlow itself computes for `inputs` (by config name; GraphDef names without `:0`). */
export async function tensorflowReference(
  kind: 'graphdef' | 'savedmodel',
  path: string,
  inputs: Record<string, ReferenceTensor>,
  outputs: readonly string[],
  signature?: string,
): Promise<Record<string, { shape: number[]; data: (number | boolean | string)[] }>> {
  const r = await run(['-c', REFERENCE], JSON.stringify({ kind, path, inputs, outputs, signature }));
  if (r.code !== 0) throw new Error(`running the model with TensorFlow directly failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, { shape: number[]; data: (number | boolean | string)[] }>;
}

/** Triton's `simple` model configuration (docs/examples/model_repository/simple) for `platform`. */
export function simpleConfig(name: string, platform: 'tensorflow_graphdef' | 'tensorflow_savedmodel', datatype = 'TYPE_INT32', extra = ''): string {
  return `
name: "${name}"
platform: "${platform}"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: ${datatype} dims: [ 16 ] },
  { name: "INPUT1" data_type: ${datatype} dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: ${datatype} dims: [ 16 ] },
  { name: "OUTPUT1" data_type: ${datatype} dims: [ 16 ] }
]
${extra}
`;
}
