/**
 * A settle that fails on PostgresBroker: when an ack cannot reach PostgreSQL, the dispatcher tries
 * it a few times and then leaves the delivery to the broker, which must give the message out again
 * once its lease runs out. Seen first in test/e2e/postgres-broker-outage.test.ts, where messages
 * whose ack met a restart stayed held, their leases renewed, for as long as the process lived.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { HarrierError, silentLogger } from '../../src/index.js';
import { PostgresBroker, migratePostgres } from '../../src/postgres/index.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool: admin } = useSharedPostgres(databaseUrl);
const TYPE = 'settle.Work';
const LEASE_MS = 600;

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The next delivery of `iterator`, or undefined when none comes within `ms`. */
async function nextWithin(iterator: AsyncIterator<Delivery>, ms: number): Promise<Delivery | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      resolve(undefined);
    }, ms);
  });
  try {
    const next = await Promise.race([iterator.next(), timeout]);
    return next === undefined || next.done === true ? undefined : next.value;
  } finally {
    clearTimeout(timer);
  }
}

describe('PostgresBroker', () => {
  describe('when an ack cannot reach PostgreSQL', () => {
    it('stops holding the delivery: its lease runs out and the message is delivered again', async () => {
      const schema = freshSchema();
      await migratePostgres(admin, { schema });
      // Two connections: the LISTEN session's and one for everything else, which the test can take
      // away so the ack fails as with the server gone (the pool's connect time-out).
      const pool = new pg.Pool({ connectionString: databaseUrl, max: 2, connectionTimeoutMillis: 200 });
      pool.on('error', () => {});
      const broker = new PostgresBroker({
        connection: pool,
        schema,
        leaseMs: LEASE_MS,
        pollIntervalMs: 50,
        logger: silentLogger,
      });
      const stop = new AbortController();
      cleanups.push(async () => {
        stop.abort();
        await broker.close();
        await pool.end();
        await dropSchema(admin, schema);
      });
      await broker.register('settle', [{ handler: 'Work', kind: 'command', types: [TYPE] }]);
      const id = randomUUID();
      await broker.publish({ id, kind: 'command', type: TYPE, body: '{}' });
      const deliveries = broker.receiver({ endpoint: 'settle', prefetch: 1, signal: stop.signal });
      const iterator = deliveries[Symbol.asyncIterator]();
      const first = await nextWithin(iterator, 5_000);
      expect(first?.facts.messageId).toBe(id);

      const blocker = await pool.connect();
      let failure: unknown;
      try {
        await broker.ack(first?.id ?? '');
      } catch (error) {
        failure = error;
      } finally {
        blocker.release();
      }
      expect(HarrierError.is(failure) && failure.code).toBe('postgres-unavailable');

      // Nobody settles it now (the dispatcher gave up): the lease must lapse, not be renewed for ever.
      const again = await nextWithin(iterator, LEASE_MS + 3_000);
      expect(again?.facts.messageId, 'delivered again once the lease ran out').toBe(id);
      expect(again?.facts.attempt).toBe(2);
    });
  });
});
