import { defineConfig } from 'vitest/config';

/**
 * `npm run test:unit`: the tests that need no Redis (test/unit and the contract suites of the
 * in-memory and file-backed implementations), so no global setup and no redis-server. The suites on
 * Redis and PostgreSQL (test/contract/redis-*, bullmq-*, postgres-*) run with `npm test` (vitest.config.ts).
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/contract/**/*.test.ts'],
    exclude: [
      'test/contract/redis-*.test.ts',
      'test/contract/bullmq-*.test.ts',
      'test/contract/postgres-*.test.ts',
    ],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
