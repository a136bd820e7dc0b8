/**
 * `npm run example:postgres` (examples/orders/postgres-main.ts) run as a user would, on the tests'
 * PostgreSQL in a fresh schema: its read model, read from PostgreSQL here, matches the in-memory
 * example's summary, its saga lines are the in-memory ones, and a second run on the same schema
 * (which the example drops and migrates again) gives the same rows, not twice as many.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { OrderSummary } from '../../examples/orders/messages.js';
import { readOrderSummaries } from '../../examples/orders/postgres-read-model.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { runExample, type Outcome } from '../helpers/run-example.js';
import { postgresExampleRun, printedSummaries, sagaLines, withoutNumbers } from './fixtures/orders-output.js';
import { itTellsTheInMemoryStory } from './fixtures/orders-like-in-memory.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const pgEnv = (schema: string) => postgresExampleRun(databaseUrl, schema);

describe('examples/orders/postgres-main.ts', () => {
  const schema = freshSchema();
  let inMemory: Outcome;
  let first: Outcome;
  let firstRows: OrderSummary[];
  let second: Outcome;

  beforeAll(async () => {
    // Independent runs (the in-memory one touches no database), and each mostly waits on its timers.
    [inMemory, first] = await Promise.all([
      runExample('examples/orders/main.ts'),
      runExample('examples/orders/postgres-main.ts', pgEnv(schema)),
    ]);
    firstRows = await readOrderSummaries(pool, schema);
    second = await runExample('examples/orders/postgres-main.ts', pgEnv(schema));
  }, 90_000);

  afterAll(async () => {
    await dropSchema(pool, schema);
  });

  describe('when run with DATABASE_URL and a fresh schema', () => {
    itTellsTheInMemoryStory(() => ({ inMemory, first }));

    it('leaves a read model in PostgreSQL equal to the in-memory run’s summary', () => {
      const expected = printedSummaries(inMemory.stdout);
      expect(expected.map((s) => s.orderId)).toEqual(['o-1001', 'o-1002', 'o-1003']);
      expect(withoutNumbers(firstRows)).toEqual(withoutNumbers(expected));
    });

    it('prints the rows of its PostgreSQL table', () => {
      expect(printedSummaries(first.stdout)).toEqual(firstRows);
    });

    it('placed the orders through the outbox with their orders rows, and refused the bad one', async () => {
      const { rows } = await pool.query<{ order_id: string }>(
        `SELECT order_id FROM "${schema}".orders ORDER BY order_id`,
      );
      // Read after the second run, which started from scratch: still exactly the three.
      expect(rows.map((row) => row.order_id)).toEqual(['o-1001', 'o-1002', 'o-1003']);
      expect(first.stdout).toMatch(/refused\s+outbox\.send\s+orders\.PlaceOrder\s+o-1004/);
    });
  });

  describe('when run a second time on the same schema', () => {
    it('starts from scratch: same exit, same read model size, same saga lines', async () => {
      expect(second.code, second.stdout + second.stderr).toBe(0);
      const rows = await readOrderSummaries(pool, schema);
      expect(withoutNumbers(rows)).toEqual(withoutNumbers(firstRows));
      expect(sagaLines(second.stdout)).toEqual(sagaLines(first.stdout));
      const { rows: checkpoints } = await pool.query<{ projection: string }>(
        `SELECT projection FROM "${schema}".checkpoints`,
      );
      expect(checkpoints.every((row) => row.projection === 'OrderSummary')).toBe(true);
    });
  });

  describe("when the schema exists and is not the example's", () => {
    it('exits with code 2, names ORDERS_EXAMPLE_SCHEMA and leaves the schema as it was', async () => {
      const other = freshSchema();
      await pool.query(`CREATE SCHEMA "${other}"; CREATE TABLE "${other}".precious (id int)`);
      try {
        const outcome = await runExample('examples/orders/postgres-main.ts', pgEnv(other));
        expect(outcome.code, outcome.stdout + outcome.stderr).toBe(2);
        expect(outcome.stderr).toContain('Set ORDERS_EXAMPLE_SCHEMA to another name');
        const { rows } = await pool.query<{ found: string | null }>(
          `SELECT to_regclass('"${other}".precious')::text AS found`,
        );
        expect(rows[0]?.found).not.toBeNull();
      } finally {
        await dropSchema(pool, other);
      }
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('exits with code 2 and names DATABASE_URL', async () => {
      const outcome = await runExample('examples/orders/postgres-main.ts', {
        env: { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/postgres' },
      });
      expect(outcome.code).toBe(2);
      expect(outcome.stderr).toContain(
        'Cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:1/postgres',
      );
      expect(outcome.stderr).toContain('Set DATABASE_URL');
    });
  });
});
