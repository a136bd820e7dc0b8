/**
 * Settles that fail on PostgresBroker: when an ack or a release cannot reach PostgreSQL, the
 * dispatcher tries it a few times and then leaves the delivery to the broker. Seen first in
 * test/e2e/postgres-broker-outage.test.ts, where messages whose settle met a restart stayed held,
 * their leases renewed, for as long as the process lived; then, with the leases left to run out,
 * each such message came back with an attempt and an unsettled end spent on the outage.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { HarrierError, silentLogger } from '../../src/index.js';
import { PostgresBroker, migratePostgres } from '../../src/postgres/index.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool: admin } = useSharedPostgres(databaseUrl);
const TYPE = 'settle.Work';
const ENDPOINT = 'settle';
/** Long enough that a message coming back before it ran out was given back, not lapsed. */
const LEASE_MS = 4_000;
/** How long the broker's pool waits for a connection: a settle fails after it while the test holds it. */
const CONNECT_TIMEOUT_MS = 200;

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

interface Scene {
  readonly schema: string;
  readonly broker: PostgresBroker;
  /** The receiver of the endpoint, `prefetch` deliveries at a time (default 1). */
  readonly iterator: AsyncIterator<Delivery>;
  publish(): Promise<string>;
  /** Runs `settle` with PostgreSQL out of the broker's reach; returns what it threw. */
  unreachable(settle: () => Promise<void>): Promise<unknown>;
  /** How many queue rows the message still has. */
  rowsOf(messageId: string): Promise<number>;
}

async function setUp(prefetch = 1): Promise<Scene> {
  const schema = freshSchema();
  await migratePostgres(admin, { schema });
  // Two connections: the LISTEN session's and one for everything else, which the test takes away so
  // a settle fails as with the server gone (the pool's connect time-out).
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: 2,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
  });
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
  await broker.register(ENDPOINT, [{ handler: 'Work', kind: 'command', types: [TYPE] }]);
  const deliveries = broker.receiver({ endpoint: ENDPOINT, prefetch, signal: stop.signal });
  const queue = postgresTables(schema).queue;
  return {
    schema,
    broker,
    iterator: deliveries[Symbol.asyncIterator](),
    publish: async () => {
      const id = randomUUID();
      await broker.publish({ id, kind: 'command', type: TYPE, body: '{}' });
      return id;
    },
    unreachable: async (settle) => {
      const blocker = await pool.connect();
      try {
        await settle();
        return undefined;
      } catch (error) {
        return error;
      } finally {
        blocker.release();
      }
    },
    rowsOf: async (messageId) => {
      const rows = await admin.query(`SELECT 1 FROM ${queue} WHERE message_id = $1`, [messageId]);
      return rows.rowCount ?? 0;
    },
  };
}

describe('PostgresBroker', () => {
  describe('when an ack cannot reach PostgreSQL', () => {
    it('acks it itself once PostgreSQL answers, and frees the slot: the message is not delivered again', async () => {
      const scene = await setUp();
      const id = await scene.publish();
      const first = await nextWithin(scene.iterator, 5_000);
      expect(first?.facts.messageId).toBe(id);

      const failure = await scene.unreachable(() => scene.broker.ack(first?.id ?? ''));
      expect(HarrierError.is(failure) && failure.code).toBe('postgres-unavailable');

      // Nobody acks it again (the dispatcher gave up): the broker must, rather than renew its lease
      // for ever or let it run out and deliver a handled message again.
      await waitFor('the acked message to leave the queue', async () => (await scene.rowsOf(id)) === 0, {
        timeoutMs: LEASE_MS,
      });
      const nextId = await scene.publish();
      const next = await nextWithin(scene.iterator, 5_000);
      expect(next?.facts.messageId, 'the one slot is free: the next message comes').toBe(nextId);
    });
  });

  describe('when several acks cannot reach PostgreSQL', () => {
    it('makes every one of them once PostgreSQL answers, and takes messages again', async () => {
      // Left-over acks are made one after another: the second is asked for in the very turn the
      // first's batched delete ends, which once found the ack loop ending and waited for ever
      // (and every take and lease renewal behind it: the worker took nothing after an outage).
      const scene = await setUp(2);
      const ids = [await scene.publish(), await scene.publish()];
      const taken = [await nextWithin(scene.iterator, 5_000), await nextWithin(scene.iterator, 5_000)];
      expect(taken.map((d) => d?.facts.messageId).sort()).toEqual([...ids].sort());

      const failures: unknown[] = [];
      await scene.unreachable(async () => {
        const acks = await Promise.allSettled(taken.map((d) => scene.broker.ack(d?.id ?? '')));
        for (const ack of acks) failures.push(ack.status === 'rejected' ? ack.reason : undefined);
        // The outage goes on a little: the broker's own tries of the first ack, made meanwhile by
        // the receiver's takes, fail too, so both acks are left over together when it ends.
        await new Promise((resolve) => setTimeout(resolve, 2 * CONNECT_TIMEOUT_MS));
      });
      expect(failures.map((f) => HarrierError.is(f) && f.code)).toEqual([
        'postgres-unavailable',
        'postgres-unavailable',
      ]);

      await waitFor(
        'both acked messages to leave the queue',
        async () => (await scene.rowsOf(ids[0]!)) + (await scene.rowsOf(ids[1]!)) === 0,
        { timeoutMs: LEASE_MS },
      );
      const nextId = await scene.publish();
      const next = await nextWithin(scene.iterator, 5_000);
      expect(next?.facts.messageId, 'the receiver takes again').toBe(nextId);
    });
  });

  describe('when a release cannot reach PostgreSQL for less than the lease', () => {
    it('gives the message back itself once PostgreSQL answers: delivered again with its attempt unchanged and no unsettled end', async () => {
      const scene = await setUp();
      const id = await scene.publish();
      const first = await nextWithin(scene.iterator, 5_000);
      expect(first?.facts.messageId).toBe(id);

      const failure = await scene.unreachable(() => scene.broker.nack(first?.id ?? '', { release: true }));
      expect(HarrierError.is(failure) && failure.code).toBe('postgres-unavailable');

      const again = await nextWithin(scene.iterator, LEASE_MS - 500);
      expect(again?.facts.messageId, 'delivered again before the lease ran out').toBe(id);
      expect(again?.facts.attempt).toBe(1);
      expect(again?.facts.unsettledEnds ?? 0).toBe(0);
    });
  });
});
