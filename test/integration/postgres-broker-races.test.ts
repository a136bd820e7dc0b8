/**
 * The PostgreSQL broker where sessions, transactions and receivers race: a LISTEN session lost,
 * publishers committing out of seq order, concurrent replays, a close during an outage.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { PostgresBroker } from '../../src/postgres/broker/postgres-broker.js';
import { brokerChannel } from '../../src/postgres/broker/broker-channel.js';
import { insertMessages } from '../../src/postgres/broker/insert-messages.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { expectingLogger } from '../helpers/expected-warnings.js';
import { useSharedPostgres } from '../helpers/postgres.js';
import { command, ENDPOINT, TYPE, usePostgresBrokerKit, within } from './fixtures/postgres-broker-kit.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const EVENT = 'orders.OrderPlaced';

/** Resolves once `condition` holds, checking every 20 ms; fails after `ms`. */
async function until(what: string, condition: () => Promise<boolean> | boolean, ms = 5_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end;) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const { cleanups, migrated, brokerOn, receive } = usePostgresBrokerKit(databaseUrl, pool);

describe(PostgresBroker, () => {
  describe('when its LISTEN session is terminated', () => {
    it('opens one new session, not a stream of them, and a later NOTIFY still wakes the receiver', async () => {
      const schema = await migrated();
      const own = new pg.Pool({ connectionString: databaseUrl, max: 10 });
      own.on('error', () => {});
      cleanups.push(() => own.end());
      let connects = 0;
      own.on('connect', () => {
        connects++;
      });
      const broker = brokerOn(schema, {
        connection: own,
        pollIntervalMs: 30_000,
        logger: expectingLogger((message) => /lost its LISTEN connection/.test(message)),
      });
      await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
      const deliveries = receive(broker);
      expect(await within(deliveries, 300)).toBe('timeout');
      const channel = brokerChannel(postgresTables(schema));
      const listening = async (): Promise<number[]> =>
        (
          await pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE query = $1`, [
            `LISTEN "${channel}"`,
          ])
        ).rows.map((row) => row.pid);
      const [before] = await listening();
      if (before === undefined) return expect.fail('no LISTEN session');
      const connectsBefore = connects;

      await pool.query('SELECT pg_terminate_backend($1)', [before]);
      await until('a new LISTEN session', async () => {
        const now = await listening();
        return now.length > 0 && !now.includes(before);
      });
      // A reconnect loop opens hundreds of connections a second; a healthy listener opens one.
      await new Promise((resolve) => setTimeout(resolve, 2_000));

      expect(connects - connectsBefore).toBeLessThanOrEqual(3);
      expect(await listening()).toHaveLength(1);
      await brokerOn(schema).publish(command('after'));
      const delivered = await within(deliveries, 3_000);
      expect(delivered).not.toBe('timeout');
      expect((delivered as Delivery).body).toBe('after');
    });
  });

  describe('when a transaction holds an ordered message of a key uncommitted while another is published', () => {
    it('delivers the committed-later earlier one first, and the next only once it settled', async () => {
      const schema = await migrated();
      const tables = postgresTables(schema);
      const broker = brokerOn(schema, { pollIntervalMs: 50 });
      await broker.register(ENDPOINT, [
        { handler: 'audit', kind: 'event', types: [EVENT], orderedTypes: [EVENT] },
      ]);
      const event = (body: string) => ({
        id: randomUUID(),
        kind: 'event' as const,
        type: EVENT,
        body,
        partitionKey: 'K',
        ordered: true,
      });
      const deliveries = receive(broker, 4);
      const uow = await pool.connect();
      let publishing: Promise<void> | undefined;
      try {
        await uow.query('BEGIN');
        await insertMessages(uow, tables, [event('E1')], Date.now(), 86_400_000);
        let published = false;
        publishing = broker.publish(event('E2')).then(() => {
          published = true;
        });
        // The second publisher waits for the transaction's lock on the key (or, unlocked, is done).
        await until('the second publish to wait or finish', async () => {
          if (published) return true;
          const waiting = await pool.query(
            `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          );
          return (waiting.rowCount ?? 0) > 0;
        });
        const early = await within(deliveries, 300);
        expect(early === 'timeout' ? 'nothing' : early.body).toBe('nothing');
        await uow.query('COMMIT');
      } finally {
        uow.release();
      }
      await publishing;

      const first = await within(deliveries, 5_000);
      expect(first === 'timeout' ? 'nothing' : first.body).toBe('E1');
      expect(await within(deliveries, 300)).toBe('timeout');
      await broker.ack((first as Delivery).id);
      const second = await within(deliveries, 5_000);
      expect(second === 'timeout' ? 'nothing' : second.body).toBe('E2');
      await broker.ack((second as Delivery).id);
    });
  });

  describe('.redeliver', () => {
    describe('when one message is replayed three times at once', () => {
      it('queues one copy', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const broker = brokerOn(schema);
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        // Three sessions open first, so the replays run side by side rather than one per new connection.
        await Promise.all([1, 2, 3, 4].map(() => broker.queueDepths(ENDPOINT)));
        const message = command('replayed');

        await Promise.all(
          [1, 2, 3].map(() =>
            broker.redeliver({ endpoint: ENDPOINT, handler: TYPE, message, deadLetterId: 'dl-1' }),
          ),
        );

        const copies = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${tables.queue} WHERE message_id = $1`,
          [message.id],
        );
        expect(copies.rows[0]?.n).toBe(1);
      });
    });
  });

  describe('.publish', () => {
    describe("when a 'while-queued' message is published again after the dedupe window, its first copy still queued", () => {
      it('drops the second publish', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const clock = new ManualClock(Date.now());
        const broker = brokerOn(schema, { clock, dedupeWindowMs: 60_000 });
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const message = {
          ...command('later'),
          dedupe: 'while-queued' as const,
          deliverAt: clock.now() + 7_200_000,
        };
        await broker.publish(message);
        clock.advance(3_600_000);

        await broker.publish(message);

        const copies = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${tables.queue} WHERE message_id = $1`,
          [message.id],
        );
        expect(copies.rows[0]?.n).toBe(1);
      });
    });
  });

  describe('insertMessages', () => {
    describe('when two batches with the same ids in opposite orders run at once', () => {
      it('inserts both without a deadlock', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        await pool.query(`INSERT INTO ${tables.routes} VALUES ('orders', 'event', 'audit', $1, false, 0)`, [
          EVENT,
        ]);
        const event = (id: string) => ({ id, kind: 'event' as const, type: EVENT, body: id });
        const [a, b, g] = [
          event(`a-${randomUUID()}`),
          event(`b-${randomUUID()}`),
          event(`g-${randomUUID()}`),
        ];
        const applicationName = `hrt-${randomUUID().slice(0, 8)}`;
        const batches = new pg.Pool({ connectionString: databaseUrl, application_name: applicationName });
        batches.on('error', () => {});
        cleanups.push(() => batches.end());
        const holder = await pool.connect();
        let results: PromiseSettledResult<number>[];
        try {
          await holder.query('BEGIN');
          // In batch order, each batch would record its first id, then wait here for g, and then one
          // for the other's first id: a deadlock, whichever gets g.
          await insertMessages(holder, tables, [g], Date.now(), 60_000);
          const both = Promise.allSettled([
            insertMessages(batches, tables, [a, g, b], Date.now(), 60_000),
            insertMessages(batches, tables, [b, g, a], Date.now(), 60_000),
          ]);
          await until('both batches to wait', async () => {
            const waiting = await pool.query(
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [applicationName],
            );
            return waiting.rowCount === 2;
          });
          await holder.query('ROLLBACK');
          results = await both;
        } finally {
          holder.release();
        }

        expect(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'inserted'))).toEqual([
          'inserted',
          'inserted',
        ]);
      });
    });
  });

  describe('.close', () => {
    describe('when a take is out and then fails', () => {
      it('resolves without waiting for the retry pause', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const applicationName = `hrt-${randomUUID().slice(0, 8)}`;
        // The clock never moves: a retry pause on it would never end.
        const broker = new PostgresBroker({
          connection: { connectionString: databaseUrl, application_name: applicationName },
          schema,
          clock: new ManualClock(Date.now()),
          logger: expectingLogger((message) => /could not/.test(message)),
        });
        cleanups.push(() => broker.close());
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const holder = await pool.connect();
        let closed = false;
        try {
          await holder.query('BEGIN');
          await holder.query(`LOCK TABLE ${tables.queue} IN ACCESS EXCLUSIVE MODE`);
          void receive(broker).next();
          await until('the take to wait for the lock', async () => {
            const waiting = await pool.query(
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [applicationName],
            );
            return (waiting.rowCount ?? 0) > 0;
          });
          void broker.close().then(() => {
            closed = true;
          });
          // The table goes away under the take (with the take function, which depends on it): it
          // fails once the lock is let go.
          await holder.query(`DROP TABLE ${tables.queue} CASCADE`);
          await holder.query('COMMIT');
        } finally {
          holder.release();
        }

        await until('close() to resolve', () => closed, 3_000);
      });
    });
  });
});
