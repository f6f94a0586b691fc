#!/usr/bin/env node
import { runOperator } from '../dist/index.js';

process.exitCode = await runOperator(process.argv.slice(2));
