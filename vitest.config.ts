import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Most files wait on servers and child processes (the fault tests stop a database for a minute),
    // not on the CPU: three at once keep the suite near half its serial time on a 2-core runner.
    maxWorkers: 3,
  },
});
