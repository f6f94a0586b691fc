#!/usr/bin/env node
import { runAnalyze } from '../dist/index.js';

process.exitCode = await runAnalyze(process.argv.slice(2));
