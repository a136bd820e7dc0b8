#!/usr/bin/env node
import { dropOutputWhenReaderGone } from './cli-io.js';
import { run } from './index.js';

dropOutputWhenReaderGone(process.stdout);
dropOutputWhenReaderGone(process.stderr);
// A promise, not a top-level await, so that the bin also loads under require() (run never rejects).
void run(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
  // A client whose connection was refused can leave a timer of a few seconds behind; the command
  // is done and its output written, so do not wait for it. Unref'd: exits sooner when idle.
  setTimeout(() => process.exit(), 100).unref();
});
