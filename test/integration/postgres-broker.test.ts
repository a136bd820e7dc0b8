import { randomUUID } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { StaleDeliveryError } from '../../src/errors/stale-delivery-error.js';
import { PostgresBroker, type PostgresBrokerOptions } from '../../src/postgres/broker/postgres-broker.js';
import { brokerChannel } from '../../src/postgres/broker/broker-channel.js';
import { insertMessages } from '../../src/postgres/broker/insert-messages.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { expectingLogger } from '../helpers/expected-warnings.js';
import { freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { command, ENDPOINT, TYPE, usePostgresBrokerKit, within } from './fixtures/postgres-broker-kit.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const { migrated, brokerOn, receive } = usePostgresBrokerKit(databaseUrl, pool);

describe(PostgresBroker, () => {
  describe('.receiver', () => {
    describe('when a message is published through another broker while the receiver is idle', () => {
      it('wakes on NOTIFY and delivers it well before the fallback poll', async () => {
        const schema = await migrated();
        const broker = brokerOn(schema, { pollIntervalMs: 30_000 });
        const publisher = brokerOn(schema, { pollIntervalMs: 30_000 });
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const deliveries = receive(broker);
        // One message through first: once it is acked the receiver has taken and is idle.
        await publisher.publish(command('first'));
        const first = await within(deliveries, 5_000);
        if (first === 'timeout') return expect.fail('no first delivery');
        await broker.ack(first.id);

        const startedAt = Date.now();
        await publisher.publish(command('second'));
        const second = await within(deliveries, 5_000);

        expect(second).not.toBe('timeout');
        expect((second as Delivery).body).toBe('second');
        expect(Date.now() - startedAt).toBeLessThan(1_000);
      });
    });

    describe('when publishes through another broker commit many at once while the receiver is idle', () => {
      it('delivers every one well before the fallback poll', async () => {
        const schema = await migrated();
        const broker = brokerOn(schema, { pollIntervalMs: 30_000 });
        const publisher = brokerOn(schema, { pollIntervalMs: 30_000 });
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const deliveries = receive(broker);
        expect(await within(deliveries, 200)).toBe('timeout');

        const startedAt = Date.now();
        await Promise.all(Array.from({ length: 40 }, (_, i) => publisher.publish(command(`m${i}`))));
        const bodies: string[] = [];
        for (let i = 0; i < 40; i++) {
          const delivery = await within(deliveries, 5_000);
          if (delivery === 'timeout') return expect.fail(`only ${i} of 40 delivered`);
          bodies.push(delivery.body);
          await broker.ack(delivery.id);
        }

        expect(bodies.sort()).toEqual(Array.from({ length: 40 }, (_, i) => `m${i}`).sort());
        expect(Date.now() - startedAt).toBeLessThan(3_000);
      });
    });

    describe("when a unit of work's transaction inserts a message (the hand-off)", () => {
      it('wakes an idle receiver of another broker once the transaction commits, not before', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const broker = brokerOn(schema, { pollIntervalMs: 30_000 });
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const deliveries = receive(broker);
        expect(await within(deliveries, 200)).toBe('timeout');

        const unit = await pool.connect();
        try {
          await unit.query('BEGIN');
          await insertMessages(unit, tables, [command('handed off')], Date.now(), 86_400_000);
          expect(await within(deliveries, 300)).toBe('timeout');
          await unit.query('COMMIT');
        } finally {
          unit.release();
        }
        const startedAt = Date.now();
        const delivered = await within(deliveries, 5_000);

        expect(delivered).not.toBe('timeout');
        expect((delivered as Delivery).body).toBe('handed off');
        expect(Date.now() - startedAt).toBeLessThan(1_000);
      });
    });

    describe('when a row arrives without a NOTIFY', () => {
      it('delivers it at the next fallback poll, and not before', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const slow = brokerOn(schema, { pollIntervalMs: 60_000 });
        const polling = brokerOn(schema, { pollIntervalMs: 200 });
        for (const broker of [slow, polling])
          await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        const slowDeliveries = receive(slow);
        expect(await within(slowDeliveries, 300)).toBe('timeout');

        await pool.query(
          `INSERT INTO ${tables.queue} (queue, lane, message_id, kind, type, body, run_at, created_at)
           VALUES ($1, $1, $2, 'command', $3, $4, 0, 0)`,
          [`cmd~${TYPE}`, randomUUID(), TYPE, Buffer.from('no notify\u0000', 'utf8')],
        );

        expect(await within(slowDeliveries, 500)).toBe('timeout');
        const delivered = await within(receive(polling), 5_000);
        expect(delivered).not.toBe('timeout');
        expect((delivered as Delivery).body).toBe('no notify\u0000');
      });
    });

    describe('when the LISTEN connection is terminated', () => {
      it('listens again, and a later NOTIFY still wakes the receiver', async () => {
        const schema = await migrated();
        const broker = brokerOn(schema, {
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

        await pool.query('SELECT pg_terminate_backend($1)', [before]);
        for (let until = Date.now() + 5_000; Date.now() < until;) {
          const now = await listening();
          if (now.length > 0 && !now.includes(before)) break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await brokerOn(schema).publish(command('after'));

        const delivered = await within(deliveries, 3_000);
        expect(delivered).not.toBe('timeout');
        expect((delivered as Delivery).body).toBe('after');
      });
    });
  });

  describe('when PostgreSQL ends every session of the broker, as a restart does', () => {
    it('keeps the receiver running, and it delivers what is published once sessions open again', async () => {
      const schema = await migrated();
      const applicationName = `hrt-${randomUUID().slice(0, 8)}`;
      const logger = expectingLogger((message) =>
        /lost|could not take messages|could not renew/.test(message),
      );
      const broker = brokerOn(schema, {
        connection: { connectionString: databaseUrl, application_name: applicationName },
        pollIntervalMs: 200,
        logger,
      });
      await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
      const deliveries = receive(broker);
      const publisher = brokerOn(schema);
      await publisher.publish(command('before'));
      const before = await within(deliveries, 5_000);
      if (before === 'timeout') return expect.fail('no delivery before the restart');
      await broker.ack(before.id);

      const ended = await pool.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
        [applicationName],
      );
      expect(ended.rowCount).toBeGreaterThan(0);
      await publisher.publish(command('after'));

      const after = await within(deliveries, 5_000);
      expect(after).not.toBe('timeout');
      expect((after as Delivery).body).toBe('after');
      await broker.ack((after as Delivery).id);
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    it('rejects register with HarrierError postgres-unavailable', async () => {
      const broker = brokerOn('harrier', {
        connection: {
          connectionString: 'postgres://postgres@127.0.0.1:1/postgres',
          connectionTimeoutMillis: 2_000,
        },
      });
      const error = await broker.register(ENDPOINT, []).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'postgres-unavailable')).toBe(true);
    });
  });

  describe('ordered commands taken by two brokers at once', () => {
    it('hands each key to one receiver at a time, in publish order', async () => {
      const schema = await migrated();
      const brokersOf = [brokerOn(schema, { pollIntervalMs: 50 }), brokerOn(schema, { pollIntervalMs: 50 })];
      for (const broker of brokersOf)
        await broker.register(ENDPOINT, [
          { handler: 'commands', kind: 'command', types: [TYPE], orderedTypes: [TYPE] },
        ]);
      const keys = ['a', 'b', 'c'];
      const perKey = 8;
      const messages = Array.from({ length: perKey }, (_, n) =>
        keys.map((key) => ({ ...command(`${key}${n}`), partitionKey: key, ordered: true })),
      ).flat();
      await brokersOf[0]?.publishBatch(messages);
      const handled = new Map<string, string[]>(keys.map((key) => [key, []]));
      const busy = new Set<string>();
      let overlaps = 0;
      let done = 0;

      await Promise.all(
        brokersOf.map(async (broker) => {
          const deliveries = receive(broker);
          while (done < messages.length) {
            const delivery = await within(deliveries, 200);
            if (delivery === 'timeout') continue;
            const key = delivery.facts.partitionKey ?? '';
            if (busy.has(key)) overlaps++;
            busy.add(key);
            await new Promise((resolve) => setTimeout(resolve, 5));
            handled.get(key)?.push(delivery.body);
            busy.delete(key);
            await broker.ack(delivery.id);
            done++;
          }
        }),
      );

      expect(overlaps).toBe(0);
      for (const key of keys)
        expect(handled.get(key)).toEqual(Array.from({ length: perKey }, (_, n) => `${key}${n}`));
    });
  });

  describe('.queueDepths', () => {
    describe('when the endpoint registered through another broker', () => {
      it('counts its queues as the routes table lists them', async () => {
        const schema = await migrated();
        const worker = brokerOn(schema);
        await worker.register(ENDPOINT, [
          { handler: 'commands', kind: 'command', types: [TYPE] },
          { handler: 'audit', kind: 'event', types: ['orders.OrderPlaced'] },
        ]);
        await worker.publish(command());
        await worker.publish({ ...command(), deliverAt: Date.now() + 60_000 });
        await worker.publish({ id: randomUUID(), kind: 'event', type: 'orders.OrderPlaced', body: 'placed' });

        const depths = await brokerOn(schema).queueDepths(ENDPOINT);

        expect([...depths].sort((a, b) => a.queue.localeCompare(b.queue))).toEqual([
          { queue: `cmd~${TYPE}`, waiting: 1, active: 0, delayed: 1 },
          { queue: `evt~${ENDPOINT}~audit`, waiting: 1, active: 0, delayed: 0 },
        ]);
      });
    });
  });

  describe('.cancel', () => {
    it('deletes the waiting rows of the id in every queue, with their dedupe rows, through any broker on the schema', async () => {
      const schema = await migrated();
      const worker = brokerOn(schema);
      await worker.register(ENDPOINT, [
        { handler: 'commands', kind: 'command', types: [TYPE] },
        { handler: 'audit', kind: 'event', types: ['orders.OrderPlaced'] },
        { handler: 'mail', kind: 'event', types: ['orders.OrderPlaced'] },
      ]);
      const event = { id: randomUUID(), kind: 'event' as const, type: 'orders.OrderPlaced', body: 'placed' };
      await worker.publish({ ...event, deliverAt: Date.now() + 60_000 });
      await worker.publish({ ...command(), deliverAt: Date.now() + 60_000 });

      expect(await brokerOn(schema).cancel(event.id)).toBe(2);

      const tables = postgresTables(schema);
      const rows = await pool.query<{ message_id: string }>(`SELECT message_id FROM ${tables.queue}`);
      expect(rows.rows.map((row) => row.message_id)).not.toContain(event.id);
      expect(rows.rows).toHaveLength(1);
      const dedupe = await pool.query(`SELECT 1 FROM ${tables.dedupe} WHERE message_id = $1`, [event.id]);
      expect(dedupe.rows).toHaveLength(0);
    });

    it('leaves a row that is due already, though no receiver has taken it', async () => {
      const schema = await migrated();
      const clock = new ManualClock();
      const broker = brokerOn(schema, { clock });
      await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
      const message = { ...command(), deliverAt: clock.now() + 1_000 };
      await broker.publish(message);
      clock.advance(1_000);

      expect(await broker.cancel(message.id)).toBe(0);

      const depths = await broker.queueDepths(ENDPOINT);
      expect(depths).toEqual([{ queue: `cmd~${TYPE}`, waiting: 1, active: 0, delayed: 0 }]);
    });
  });

  describe('leases', () => {
    describe('when the holder stops renewing its lease', () => {
      it('gives the message to another receiver with the next attempt and one unsettled end, and refuses the old holder', async () => {
        const schema = await migrated();
        // Its clock never moves: the holder's renewals never run, as in a process that froze.
        // A second ahead of real time, so it takes the message published now; its lease ends then.
        const frozen = brokerOn(schema, { leaseMs: 300, clock: new ManualClock(Date.now() + 1_000) });
        const other = brokerOn(schema, { pollIntervalMs: 50 });
        for (const broker of [frozen, other])
          await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        await other.publish(command('leased'));
        const held = await within(receive(frozen), 5_000);
        if (held === 'timeout') return expect.fail('no delivery');
        expect(held.facts).toMatchObject({ attempt: 1, unsettledEnds: 0 });

        const again = await within(receive(other), 5_000);

        expect(again).not.toBe('timeout');
        expect((again as Delivery).facts).toMatchObject({ attempt: 2, unsettledEnds: 1 });
        const stale = await frozen.ack(held.id).catch((error: unknown) => error);
        expect(HarrierError.is(stale, 'stale-delivery')).toBe(true);
        await other.ack((again as Delivery).id);
      });
    });
  });

  describe('.ack', () => {
    describe('when acks made at once include one of a delivery already acked', () => {
      it('deletes the others and refuses that one alone with StaleDeliveryError', async () => {
        const schema = await migrated();
        const tables = postgresTables(schema);
        const broker = brokerOn(schema, { pollIntervalMs: 50 });
        await broker.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        for (let i = 0; i < 12; i++) await broker.publish(command(`m${i}`));
        const deliveries = receive(broker, 12);
        const taken: Delivery[] = [];
        for (let i = 0; i < 12; i++) {
          const delivery = await within(deliveries, 5_000);
          if (delivery === 'timeout') return expect.fail(`only ${i} of 12 delivered`);
          taken.push(delivery);
        }
        const [acked, ...rest] = taken as [Delivery, ...Delivery[]];
        await broker.ack(acked.id);

        // The first ack runs alone; the others wait for it and go in one delete together.
        const outcomes = await Promise.allSettled([
          broker.ack(rest[0]!.id),
          broker.ack(acked.id),
          ...rest.slice(1).map((d) => broker.ack(d.id)),
        ]);

        expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(1);
        const refused = outcomes[1];
        expect(refused.status === 'rejected' && refused.reason).toBeInstanceOf(StaleDeliveryError);
        const left = await pool.query(`SELECT count(*)::int AS n FROM ${tables.queue}`);
        expect(left.rows[0]).toEqual({ n: 0 });
      });
    });
  });

  describe('.register', () => {
    describe('when another broker registers the endpoint again without a command type this one sent', () => {
      it('refuses that type with no-route within about a second, having sent it before', async () => {
        const schema = await migrated();
        const publisher = brokerOn(schema);
        const other = brokerOn(schema);
        await other.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: [TYPE] }]);
        await publisher.publish(command('routed'));
        await publisher.publish(command('routed again'));

        await other.register(ENDPOINT, [{ handler: 'commands', kind: 'command', types: ['orders.Other'] }]);
        const changedAt = Date.now();
        let refused: unknown;
        while (refused === undefined && Date.now() - changedAt < 5_000) {
          await publisher.publish(command('after')).catch((error: unknown) => {
            refused = error;
          });
          await new Promise((resolve) => setTimeout(resolve, 50));
        }

        expect(HarrierError.is(refused) && refused.code).toBe('no-route');
        expect(Date.now() - changedAt).toBeLessThan(2_000);
      });
    });

    describe('when a handler name holds the queue separator', () => {
      it('refuses it with HarrierError invalid-option naming a fix', async () => {
        const broker = brokerOn(await migrated());
        const error = await broker
          .register(ENDPOINT, [{ handler: 'a~b', kind: 'event', types: ['orders.OrderPlaced'] }])
          .catch((e: unknown) => e);
        expect(HarrierError.is(error, 'invalid-option')).toBe(true);
        expect((error as Error).message).toContain('e.g. "a-b"');
      });
    });

    describe('when the schema was never migrated', () => {
      it('rejects with HarrierError schema-outdated naming the migrate command', async () => {
        const schema = freshSchema();
        const broker = brokerOn(schema);
        const error = await broker.register(ENDPOINT, []).catch((e: unknown) => e);
        expect(HarrierError.is(error, 'schema-outdated')).toBe(true);
        expect((error as Error).message).toContain(`harrier postgres migrate --schema ${schema}`);
      });
    });
  });

  describe('.close', () => {
    describe('when called while the broker is still starting', () => {
      it('resolves, and leaves no LISTEN session behind', async () => {
        const schema = await migrated();
        const applicationName = `hrt-${randomUUID().slice(0, 8)}`;
        const broker = new PostgresBroker({
          connection: { connectionString: databaseUrl, application_name: applicationName },
          schema,
        });
        const registering = broker.register(ENDPOINT, []).catch((error: unknown) => error);

        await broker.close();
        await registering;

        const sessions = await pool.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1`, [
          applicationName,
        ]);
        expect(sessions.rows).toEqual([]);
      });
    });
  });

  describe('constructor', () => {
    it.each([
      [{ leaseMs: 100 }, /leaseMs is 100: it must be a whole number of at least 300/],
      [{ pollIntervalMs: 0 }, /pollIntervalMs is 0: it must be a whole number of at least 10/],
      [{ dedupeWindowMs: -1 }, /dedupeWindowMs is -1: it must be a whole number of at least 0/],
      [{ leaseMs: 1.5 }, /leaseMs is 1.5/],
      [{ schema: 'Bad-Name' }, /not a plain identifier/],
    ])('refuses %j with HarrierError invalid-option naming the fix', (options, message) => {
      let error: unknown;
      try {
        brokerOn('harrier', options);
      } catch (e) {
        error = e;
      }
      expect(HarrierError.is(error, 'invalid-option')).toBe(true);
      expect((error as Error).message).toMatch(message);
    });

    it('refuses a missing connection, naming DATABASE_URL', () => {
      expect(() => new PostgresBroker({} as PostgresBrokerOptions)).toThrow(
        /connection: process.env.DATABASE_URL/,
      );
    });
  });
});
