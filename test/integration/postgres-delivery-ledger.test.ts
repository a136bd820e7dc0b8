import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { createPublishToken } from '../../src/broker/delivery-ledger.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresDeliveryLedger } from '../../src/postgres/postgres-delivery-ledger.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import { freePort } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const schema = freshSchema();

beforeAll(async () => {
  await migratePostgres(pool, { schema });
});

afterAll(async () => {
  await dropSchema(pool, schema);
});

async function rowsOf(messageId: string): Promise<number> {
  const result = await pool.query<{ rows: number }>(
    `SELECT ((SELECT count(*) FROM "${schema}".ledger_claims WHERE message_id = $1)
           + (SELECT count(*) FROM "${schema}".ledger_copies WHERE message_id = $1))::int AS rows`,
    [messageId],
  );
  return result.rows[0]?.rows ?? 0;
}

describe('PostgresDeliveryLedger', () => {
  describe('expired rows', () => {
    it('are deleted by a prune that a call starts once pruneEveryMs has passed, live rows kept', async () => {
      const clock = new ManualClock();
      const ledger = new PostgresDeliveryLedger({
        connection: pool,
        schema,
        clock,
        pruneEveryMs: 60_000,
        scheduledRetentionMs: 10_000,
      });
      try {
        const expiring = randomUUID();
        const token = createPublishToken();
        await ledger.admit({ queue: 'evt~reporting~countOrders', messageId: expiring, token }, 1000);
        await ledger.scheduled(expiring, token, ['evt~reporting~sumRevenue'], clock.now() + 1000);
        expect(await rowsOf(expiring)).toBe(2);

        clock.advance(60_000);
        const live = randomUUID();
        await ledger.admit({ queue: 'cmd~orders.PlaceOrder', messageId: live, token }, 3_600_000);

        await vi.waitFor(async () => {
          expect(await rowsOf(expiring)).toBe(0);
        });
        expect(await rowsOf(live)).toBe(1);
      } finally {
        await ledger.close();
      }
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('rejects with HarrierError postgres-unavailable', async () => {
      const port = await freePort();
      const ledger = new PostgresDeliveryLedger({
        connection: `postgres://harrier@127.0.0.1:${port}/harrier`,
        schema,
      });
      try {
        const copy = { queue: 'cmd~orders.PlaceOrder', messageId: randomUUID(), token: createPublishToken() };
        expectCode(await failureOf(() => ledger.admit(copy, 1000)), 'postgres-unavailable');
      } finally {
        await ledger.close();
      }
    });
  });
});
