/**
 * Example custom backend for Nereid: a word-level tokenizer (docs/backends.md).
 *
 * TEXT (BYTES [batch, 1]) → INPUT_IDS and ATTENTION_MASK (INT64 [batch, n]): lower-cased words,
 * numbers and punctuation marks are looked up in the model directory's vocab.txt (line i has id
 * i; unknown words get [UNK]), wrapped in [CLS] … [SEP], cut to the model parameter
 * `max_length` and padded with [PAD] (mask 0) to the longest text of the request.
 *
 * The module needs nothing but Node: a backend is a plain object that implements the SPI.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The texts of a BYTES tensor: 4-byte little-endian length, then the bytes, per element. */
function decodeTexts(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const decoder = new TextDecoder('utf-8', { fatal: true });
  const texts = [];
  for (let at = 0; at < data.byteLength; ) {
    const length = view.getUint32(at, true);
    texts.push(decoder.decode(data.subarray(at + 4, at + 4 + length)));
    at += 4 + length;
  }
  return texts;
}

const WORDS = /\p{L}+|\p{N}+|[^\s\p{L}\p{N}]/gu;

/** @type {import('@nereid/server').Backend} */
export default {
  name: 'tokenizer',
  spiVersion: 1,

  async createModel(ctx) {
    const maxLength = Number(ctx.config.parameters.max_length?.string_value ?? 128);
    if (!Number.isInteger(maxLength) || maxLength < 2) {
      throw new Error(`parameter max_length must be an integer of at least 2, got '${ctx.config.parameters.max_length?.string_value}'`);
    }
    const lines = (await readFile(join(ctx.modelDirectory, 'vocab.txt'), 'utf8')).replace(/\n$/, '').split('\n').map((l) => l.trim());
    const vocab = new Map(lines.map((word, id) => [word, id]));
    for (const special of ['[PAD]', '[UNK]', '[CLS]', '[SEP]']) {
      if (!vocab.has(special)) throw new Error(`vocab.txt has no ${special} entry`);
    }
    const [pad, unk, cls, sep] = ['[PAD]', '[UNK]', '[CLS]', '[SEP]'].map((w) => BigInt(vocab.get(w)));
    ctx.logger.info(`tokenizer '${ctx.name}': ${vocab.size} entries, max_length ${maxLength}`);

    const tokenize = (text) => {
      const words = text.normalize('NFKC').toLowerCase().match(WORDS) ?? [];
      const ids = [cls, ...words.slice(0, maxLength - 2).map((w) => (vocab.has(w) ? BigInt(vocab.get(w)) : unk)), sep];
      return ids;
    };

    return {
      async createInstance() {
        return {
          async execute(requests, timing) {
            // Inputs: each request's texts, or an error for that request alone.
            const batch = [];
            for (const request of requests) {
              try {
                batch.push({ request, texts: decodeTexts(request.inputs.get('TEXT').data) });
              } catch {
                request.respond(new Error(`model '${ctx.name}': TEXT must be valid UTF-8 text`));
              }
            }
            timing.markInputsReady();
            const results = batch.map(({ request, texts }) => {
              const rows = texts.map(tokenize);
              const width = Math.max(...rows.map((r) => r.length));
              const ids = new BigInt64Array(rows.length * width).fill(pad);
              const mask = new BigInt64Array(rows.length * width);
              rows.forEach((row, i) => {
                ids.set(row, i * width);
                mask.fill(1n, i * width, i * width + row.length);
              });
              return { request, shape: [rows.length, width], ids, mask };
            });
            timing.markOutputsStart();
            for (const { request, shape, ids, mask } of results) {
              request.respond({
                outputs: [
                  { name: 'INPUT_IDS', datatype: 'INT64', shape, data: new Uint8Array(ids.buffer) },
                  { name: 'ATTENTION_MASK', datatype: 'INT64', shape, data: new Uint8Array(mask.buffer) },
                ],
              });
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};
