#!/usr/bin/env node
/**
 * Streams a WAV file to the `silero_vad` sequence model over one gRPC stream and prints the speech
 * segments it finds.
 *
 *   node examples/vad/client.mjs [--url 127.0.0.1:8001] [--model silero_vad] speech.wav
 *
 * The audio (PCM 8/16/24/32-bit or float WAV, any channel count and rate) is mixed to mono,
 * resampled to 16 kHz and cut into 512-sample windows; each window is one request of a sequence
 * (`sequence_id`, `sequence_start` on the first, `sequence_end` on the last), so the model's state
 * stays on the server between windows. The per-window speech probabilities become segments as
 * Silero's own `get_speech_timestamps` does: speech starts at probability ≥ 0.5, ends after 100 ms
 * below 0.35, segments under 250 ms are dropped, and each is padded by 30 ms.
 *
 * Output: one line per segment, `speech <start> s – <end> s` (seconds, three decimals).
 */
import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { GrpcClient } from '@nereid/client';

const RATE = 16000;
const WINDOW = 512;

/** Mono samples in [-1, 1] and the sample rate of a RIFF/WAVE file. Throws on anything else. */
export function readWav(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  if (bytes.length < 12 || tag(0) !== 'RIFF' || tag(8) !== 'WAVE') throw new Error('not a RIFF/WAVE file');
  let format;
  for (let at = 12; at + 8 <= bytes.length; ) {
    const id = tag(at);
    // Streamed WAV writers (espeak-ng to a pipe) leave the data size at 0xffffffff.
    const size = Math.min(view.getUint32(at + 4, true), bytes.length - at - 8);
    if (id === 'fmt ') {
      format = { code: view.getUint16(at + 8, true), channels: view.getUint16(at + 10, true), rate: view.getUint32(at + 12, true), bits: view.getUint16(at + 22, true) };
      if (format.code === 0xfffe && size >= 40) format.code = view.getUint16(at + 32, true);
    } else if (id === 'data') {
      if (!format) throw new Error('WAV data chunk before its fmt chunk');
      const { code, channels, bits } = format;
      const width = bits / 8;
      const frames = Math.floor(size / (width * channels));
      const read =
        code === 3 && bits === 32 ? (o) => view.getFloat32(o, true)
        : code === 3 && bits === 64 ? (o) => view.getFloat64(o, true)
        : code === 1 && bits === 8 ? (o) => (view.getUint8(o) - 128) / 128
        : code === 1 && bits === 16 ? (o) => view.getInt16(o, true) / 32768
        : code === 1 && bits === 24 ? (o) => ((view.getUint8(o) | (view.getUint8(o + 1) << 8) | (view.getInt8(o + 2) << 16)) / 8388608)
        : code === 1 && bits === 32 ? (o) => view.getInt32(o, true) / 2147483648
        : undefined;
      if (!read) throw new Error(`unsupported WAV encoding (format ${code}, ${bits} bits)`);
      const samples = new Float32Array(frames);
      for (let f = 0; f < frames; f++) {
        let sum = 0;
        for (let c = 0; c < channels; c++) sum += read(at + 8 + (f * channels + c) * width);
        samples[f] = sum / channels;
      }
      return { samples, rate: format.rate };
    }
    at += 8 + size + (size & 1);
  }
  throw new Error('WAV file without a data chunk');
}

/** Linear-interpolation resampling; enough for voice-activity detection, not for listening. */
export function resample(samples, from, to) {
  if (from === to) return samples;
  const out = new Float32Array(Math.floor((samples.length * to) / from));
  for (let i = 0; i < out.length; i++) {
    const x = (i * from) / to;
    const j = Math.floor(x);
    const next = samples[Math.min(j + 1, samples.length - 1)];
    out[i] = samples[j] + (next - samples[j]) * (x - j);
  }
  return out;
}

/** Speech probability of every 512-sample window, from one sequence on one gRPC stream. */
export async function speechProbabilities(client, model, samples) {
  const windows = Math.max(1, Math.ceil(samples.length / WINDOW));
  const sequenceId = BigInt(1 + Math.floor(Math.random() * 2 ** 48));
  const stream = client.stream();
  for (let w = 0; w < windows; w++) {
    const audio = new Float32Array(WINDOW);
    audio.set(samples.subarray(w * WINDOW, (w + 1) * WINDOW));
    stream.send({
      model,
      id: String(w),
      inputs: [{ name: 'AUDIO', datatype: 'FP32', shape: [1, WINDOW], data: audio }],
      parameters: { sequence_id: sequenceId, sequence_start: w === 0, sequence_end: w === windows - 1 },
    });
  }
  stream.end();
  const probabilities = new Float32Array(windows);
  for await (const { id, result, error } of stream) {
    if (error) throw error;
    probabilities[Number(id)] = result.typed('SPEECH_PROBABILITY')[0];
  }
  return probabilities;
}

/** Segments `{ start, end }` (seconds) from window probabilities (Silero's get_speech_timestamps). */
export function speechSegments(probabilities, totalSamples, { threshold = 0.5, minSpeechMs = 250, minSilenceMs = 100, padMs = 30 } = {}) {
  const negative = Math.max(threshold - 0.15, 0.01);
  const minSpeech = (RATE * minSpeechMs) / 1000;
  const minSilence = (RATE * minSilenceMs) / 1000;
  const pad = (RATE * padMs) / 1000;
  const found = [];
  let start = -1;
  let silenceFrom = 0;
  probabilities.forEach((p, w) => {
    const at = w * WINDOW;
    if (p >= threshold) {
      silenceFrom = 0;
      if (start < 0) start = at;
    } else if (start >= 0 && p < negative) {
      if (!silenceFrom) silenceFrom = at;
      if (at - silenceFrom >= minSilence) {
        if (silenceFrom - start > minSpeech) found.push({ start, end: silenceFrom });
        start = -1;
        silenceFrom = 0;
      }
    }
  });
  if (start >= 0 && totalSamples - start > minSpeech) found.push({ start, end: totalSamples });
  return found.map(({ start, end }, i) => ({
    start: Math.max(0, start - Math.min(pad, i > 0 ? (start - found[i - 1].end) / 2 : pad)) / RATE,
    end: Math.min(totalSamples, end + Math.min(pad, i < found.length - 1 ? (found[i + 1].start - end) / 2 : pad)) / RATE,
  }));
}

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { url: { type: 'string', default: '127.0.0.1:8001' }, model: { type: 'string', default: 'silero_vad' } },
  });
  if (positionals.length !== 1) {
    console.error('usage: node examples/vad/client.mjs [--url host:port] [--model silero_vad] speech.wav');
    process.exit(2);
  }
  const wav = readWav(await readFile(positionals[0]));
  const samples = resample(wav.samples, wav.rate, RATE);
  const client = new GrpcClient(values.url);
  try {
    const probabilities = await speechProbabilities(client, values.model, samples);
    const segments = speechSegments(probabilities, samples.length);
    console.log(`${positionals[0]}: ${(samples.length / RATE).toFixed(3)} s, ${probabilities.length} windows, ${segments.length} speech segment(s)`);
    for (const { start, end } of segments) console.log(`speech ${start.toFixed(3)} s – ${end.toFixed(3)} s`);
  } finally {
    client.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`error: ${err.message}`);
    process.exit(1);
  });
}
