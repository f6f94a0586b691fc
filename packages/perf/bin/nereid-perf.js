#!/usr/bin/env node
import { runPerf } from '../dist/index.js';

process.exitCode = await runPerf(process.argv.slice(2));
