/**
 * `npm run example:postgres-only` (examples/orders/postgres-only-main.ts) run as a user would, on
 * the tests' PostgreSQL in a fresh schema: PostgresBroker carries the messages, postgresUnitOfWork
 * hands what handlers send to its queue, no outbox, no relay, the dead letters in
 * PostgresDeadLetterStore. The read model, saga lines and counts
 * match the in-memory example's, and a second run on the same schema gives the same rows.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { OrderSummary } from '../../examples/orders/messages.js';
import { readOrderSummaries } from '../../examples/orders/postgres-read-model.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { runExample, type Outcome } from '../helpers/run-example.js';
import { postgresExampleRun, printedSummaries, sagaLines, withoutNumbers } from './fixtures/orders-output.js';
import { itTellsTheInMemoryStory } from './fixtures/orders-like-in-memory.js';

const EXAMPLE = 'examples/orders/postgres-only-main.ts';
const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const pgEnv = (schema: string) => postgresExampleRun(databaseUrl, schema);

async function countOf(schema: string, table: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".${table}`);
  return rows[0]?.n ?? -1;
}

describe('examples/orders/postgres-only-main.ts', () => {
  const schema = freshSchema();
  let inMemory: Outcome;
  let first: Outcome;
  let firstRows: OrderSummary[];
  let firstCounts: { inbox: number; outbox: number; queue: number };
  let firstDeadLetters: string[];
  let second: Outcome;

  beforeAll(async () => {
    [inMemory, first] = await Promise.all([
      runExample('examples/orders/main.ts'),
      runExample(EXAMPLE, pgEnv(schema)),
    ]);
    firstRows = await readOrderSummaries(pool, schema);
    firstCounts = {
      inbox: await countOf(schema, 'inbox'),
      outbox: await countOf(schema, 'outbox'),
      queue: await countOf(schema, 'queue'),
    };
    const { rows: deadLetters } = await pool.query<{ status: string }>(
      `SELECT status FROM "${schema}".dead_letters ORDER BY seq`,
    );
    firstDeadLetters = deadLetters.map((row) => row.status);
    second = await runExample(EXAMPLE, pgEnv(schema));
  }, 90_000);

  afterAll(async () => {
    await dropSchema(pool, schema);
  });

  describe('when run with DATABASE_URL and a fresh schema', () => {
    itTellsTheInMemoryStory(() => ({ inMemory, first }));

    it('leaves a read model in PostgreSQL equal to the in-memory run’s summary, and prints it', () => {
      const expected = printedSummaries(inMemory.stdout);
      expect(expected.map((s) => s.orderId)).toEqual(['o-1001', 'o-1002', 'o-1003']);
      expect(withoutNumbers(firstRows)).toEqual(withoutNumbers(expected));
      expect(printedSummaries(first.stdout)).toEqual(firstRows);
    });

    it('keeps the dead letters in PostgreSQL, marked replayed', () => {
      expect(firstDeadLetters).toEqual(['replayed', 'replayed', 'replayed']);
    });

    it('hands messages to the queue with inbox rows, never writes the outbox, and leaves the queue empty', () => {
      expect(firstCounts.inbox).toBeGreaterThan(0);
      expect(firstCounts.outbox).toBe(0);
      expect(firstCounts.queue).toBe(0);
      expect(first.stdout).toContain('0 outbox rows (no relay runs)');
    });
  });

  describe('when run a second time on the same schema', () => {
    it('starts from scratch: same exit, same read model, same saga lines', async () => {
      expect(second.code, second.stdout + second.stderr).toBe(0);
      const rows = await readOrderSummaries(pool, schema);
      expect(withoutNumbers(rows)).toEqual(withoutNumbers(firstRows));
      expect(sagaLines(second.stdout)).toEqual(sagaLines(first.stdout));
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('exits with code 2 and names DATABASE_URL', async () => {
      const outcome = await runExample(EXAMPLE, {
        env: { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/postgres' },
      });
      expect(outcome.code).toBe(2);
      expect(outcome.stderr).toContain(
        'Cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:1/postgres',
      );
      expect(outcome.stderr).toContain('npm run example:postgres-only');
    });
  });
});
