#!/usr/bin/env node
import { dropOutputWhenReaderGone } from './cli-io.js';
import { run } from './index.js';

dropOutputWhenReaderGone(process.stdout);
dropOutputWhenReaderGone(process.stderr);
process.exitCode = await run(process.argv.slice(2));
// A Redis client whose connection was refused can leave a timer of a few seconds behind; the
// command is done and its output written, so do not wait for it. Unref'd: exits sooner when idle.
setTimeout(() => process.exit(), 100).unref();
