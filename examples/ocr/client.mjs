#!/usr/bin/env node
/**
 * Sends a PNG file to the `ocr` ensemble and prints the text it recognizes, one line per text line
 * found (top to bottom), with its confidence and box.
 *
 *   node examples/ocr/client.mjs [--url http://127.0.0.1:8000] [--model ocr] page.png
 *
 * Over HTTP: the PNG goes as the one element of the BYTES input IMAGE, in the binary part of the
 * request; TEXT, CONFIDENCE and BOXES come back.
 */
import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { HttpClient } from '@nereid/client';

/** The ensemble's answer for one PNG: `[{ text, confidence, box: [x0, y0, x1, y1] }]`. */
export async function recognize(client, model, png) {
  const result = await client.infer({ model, inputs: [{ name: 'IMAGE', datatype: 'BYTES', shape: [1], data: [png] }] });
  const confidence = result.typed('CONFIDENCE');
  const boxes = result.typed('BOXES');
  return result.strings('TEXT').map((text, i) => ({ text, confidence: confidence[i], box: [...boxes.subarray(i * 4, i * 4 + 4)] }));
}

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { url: { type: 'string', default: 'http://127.0.0.1:8000' }, model: { type: 'string', default: 'ocr' } },
  });
  if (positionals.length !== 1) {
    console.error('usage: node examples/ocr/client.mjs [--url http://host:port] [--model ocr] image.png');
    process.exit(2);
  }
  const client = new HttpClient(values.url);
  const lines = await recognize(client, values.model, await readFile(positionals[0]));
  for (const { text, confidence, box } of lines) console.log(`${text}\t(confidence ${confidence.toFixed(3)}, box ${box.join(',')})`);
  if (lines.length === 0) console.log('(no text found)');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`error: ${err.message}`);
    process.exit(1);
  });
}
