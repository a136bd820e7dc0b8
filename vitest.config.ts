import { defineConfig } from 'vitest/config';
import { SlowestFirst } from './test/slowest-first.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Most files wait on servers and child processes (the fault tests stop a database for a minute),
    // not on the CPU: two at once take the suite well under its serial time on a 2-core runner,
    // without the load of three stretching the tests that time Redis.
    maxWorkers: 2,
    sequence: { sequencer: SlowestFirst },
  },
});
