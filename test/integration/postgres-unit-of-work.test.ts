/**
 * postgresUnitOfWork on a real PostgreSQL (DESIGN.md guarantee 10, issue 13 items 2 and 3): the
 * inbox runs a message's effects once however often it is delivered, a failed handler leaves neither
 * its rows nor its outbox rows, recorded messages land in the outbox in the handler's transaction, a
 * projection's read-model writes and checkpoint commit together.
 */
import 'reflect-metadata';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  On,
  Projection,
  createBus,
  defineCommand,
  defineEvent,
  consoleLogger,
  silentLogger,
  uuidv7,
  type BusOptions,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { ManualClock } from '../../src/clock/manual-clock.js';
import { HandlerContext } from '../../src/dispatch/handler-context.js';
import type { UnitOfWorkCall } from '../../src/dispatch/transactional-unit-of-work.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../../src/log/index.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresCheckpointStore } from '../../src/postgres/postgres-checkpoint-store.js';
import { postgresSession } from '../../src/postgres/postgres-session.js';
import {
  DEFAULT_INBOX_RETENTION_MS,
  postgresUnitOfWork,
  type PostgresUnitOfWork,
  type PostgresUnitOfWorkOptions,
} from '../../src/postgres/postgres-unit-of-work.js';
import { createTestBus, type TestBus } from '../../src/testing/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

const Deposit = defineCommand('uowpg.Deposit', {
  schema: z.object({ account: z.string(), amount: z.number() }),
});
const Deposited = defineEvent('uowpg.Deposited', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
  topic: 'bank',
});

/** The schema of the test running now: Harrier's tables and the app's `balances` and `entries`. */
let schema = '';
/** Attempts of DepositHandler, in order. */
let attempts: number[] = [];
/** When set, DepositHandler throws after its writes on these attempts. */
let failOnAttempts = new Set<number>();
/** Awaited by DepositHandler after its writes, before it returns. */
let beforeReturn: (() => Promise<void>) | undefined;

@CommandHandler(Deposit, { retry: { attempts: 3, backoff: { baseMs: 10, jitter: 0 } } })
class DepositHandler {
  async handle(payload: PayloadOf<typeof Deposit>, ctx: MessageContext): Promise<void> {
    attempts.push(ctx.attempt);
    const db = postgresSession(ctx);
    await db.query(
      `INSERT INTO "${schema}".balances (account, total) VALUES ($1, $2)
       ON CONFLICT (account) DO UPDATE SET total = balances.total + EXCLUDED.total`,
      [payload.account, payload.amount],
    );
    await db.query(`INSERT INTO "${schema}".entries (message_id, attempt) VALUES ($1, $2)`, [
      ctx.messageId,
      ctx.attempt,
    ]);
    ctx.publish(Deposited, payload);
    await beforeReturn?.();
    if (failOnAttempts.has(ctx.attempt)) throw new Error(`attempt ${ctx.attempt} fails on purpose`);
  }
}

const Swallow = defineCommand('uowpg.Swallow', { schema: z.object({ account: z.string() }) });

/** Writes, then catches the error of a failing statement and returns as if nothing happened. */
@CommandHandler(Swallow)
class SwallowingHandler {
  async handle(payload: PayloadOf<typeof Swallow>, ctx: MessageContext): Promise<void> {
    const db = postgresSession(ctx);
    await db.query(`INSERT INTO "${schema}".balances (account, total) VALUES ($1, 1)`, [payload.account]);
    await db.query('SELECT * FROM no_such_table').catch(() => undefined);
  }
}

/** Projection events applied, by message id (to count doubles). */
let applied: string[] = [];
/** When set, the projection throws after its write for this amount. */
let projectionFailsOn: number | undefined;

@Projection('balances-view', { retry: { attempts: 1 } })
class BalancesView {
  @On(Deposited)
  async onDeposited(payload: PayloadOf<typeof Deposited>, ctx: MessageContext): Promise<void> {
    await postgresSession(ctx).query(
      `INSERT INTO "${schema}".balances (account, total) VALUES ($1, $2)
       ON CONFLICT (account) DO UPDATE SET total = balances.total + EXCLUDED.total`,
      [payload.account, payload.amount],
    );
    if (payload.amount === projectionFailsOn) throw new Error('projection fails on purpose');
    applied.push(ctx.messageId);
  }
}

let handledEvents = 0;
@EventHandler(Deposited)
class DepositedCounter {
  handle(): void {
    handledEvents++;
  }
}

const units: PostgresUnitOfWork[] = [];
const buses: MessageBus[] = [];

function unit(options: Partial<PostgresUnitOfWorkOptions> = {}): PostgresUnitOfWork {
  const made = postgresUnitOfWork({ connection: pool, schema, logger: silentLogger, ...options });
  units.push(made);
  return made;
}

/** The virtual clock of each bus made by bankBus. */
const clocks = new WeakMap<TestBus, ManualClock>();

async function bankBus(
  unitOfWork: PostgresUnitOfWork | undefined,
  options: Pick<BusOptions, 'handlerTimeoutMs' | 'hooks'> = {},
): Promise<TestBus> {
  const clock = new ManualClock();
  const bus = await createTestBus({
    clock,
    endpoint: 'bank',
    handlers: [DepositHandler, DepositedCounter, SwallowingHandler],
    ...(unitOfWork !== undefined ? { unitOfWork } : {}),
    ...options,
  });
  clocks.set(bus, clock);
  buses.push(bus);
  await bus.start();
  return bus;
}

/** Moves the test bus's virtual clock past its broker's dedupe window (1 h), so a resent id is delivered again. */
function pastDedupeWindow(bus: TestBus): void {
  const clock = clocks.get(bus);
  if (clock === undefined) throw new Error('not a bus made by bankBus');
  clock.advance(2 * 3_600_000);
}

async function rows<T extends Record<string, unknown>>(sql: string, values: unknown[] = []): Promise<T[]> {
  return (await pool.query<T>(sql, values)).rows;
}

async function balance(account: string): Promise<number | undefined> {
  const found = await rows<{ total: string }>(`SELECT total FROM "${schema}".balances WHERE account = $1`, [
    account,
  ]);
  return found[0] === undefined ? undefined : Number(found[0].total);
}

beforeEach(async () => {
  schema = freshSchema();
  attempts = [];
  failOnAttempts = new Set();
  beforeReturn = undefined;
  applied = [];
  projectionFailsOn = undefined;
  handledEvents = 0;
  await migratePostgres(pool, { schema });
  await pool.query(`CREATE TABLE "${schema}".balances (account text PRIMARY KEY, total bigint NOT NULL)`);
  await pool.query(`CREATE TABLE "${schema}".entries (message_id text NOT NULL, attempt integer NOT NULL)`);
});

afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop({ gracePeriodMs: 1_000 })));
  await Promise.all(units.splice(0).map((u) => u.close()));
  await dropSchema(pool, schema);
});

describe('postgresUnitOfWork', () => {
  describe('inbox', () => {
    describe('when the same message is delivered again after its transaction committed', () => {
      it('acks the redelivery without running the handler: effects once', async () => {
        const bus = await bankBus(unit());
        const id = '0190a000-0000-7000-8000-00000000a001';
        await bus.send(Deposit, { account: 'a', amount: 5 }, { id });
        await bus.whenIdle();
        // Past the broker's dedupe window: the broker delivers the same message id again.
        pastDedupeWindow(bus);
        await bus.send(Deposit, { account: 'a', amount: 5 }, { id });
        await bus.whenIdle();
        expect(attempts).toEqual([1]);
        expect(await balance('a')).toBe(5);
        expect(await bus.deadLetters.count()).toBe(0);
        expect(await rows(`SELECT subscription, message_id FROM "${schema}".inbox`)).toEqual([
          { subscription: 'bank/DepositHandler', message_id: id },
        ]);
      });
    });

    describe('when two processes receive the same message at the same time', () => {
      it('runs it in one; the other waits on the inbox row and skips it', async () => {
        const first = await bankBus(unit());
        const second = await bankBus(unit());
        const id = uuidv7();
        let inside!: () => void;
        const firstInside = new Promise<void>((resolve) => (inside = resolve));
        beforeReturn = async () => {
          beforeReturn = undefined;
          inside();
          // Hold the transaction open until the other delivery waits on the inbox row's lock.
          await waitFor(
            'the second delivery to wait on the inbox row',
            async () =>
              (
                await rows(
                  `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
                  [`INSERT INTO "${schema}".inbox%`],
                )
              ).length > 0,
            { timeoutMs: 10_000 },
          );
        };
        await first.send(Deposit, { account: 'b', amount: 7 }, { id });
        await firstInside;
        await second.send(Deposit, { account: 'b', amount: 7 }, { id });
        await Promise.all([first.whenIdle(), second.whenIdle()]);
        expect(attempts).toEqual([1]);
        expect(await balance('b')).toBe(7);
        expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 1 }]);
      });
    });

    describe('when inbox rows are older than inboxRetentionMs', () => {
      it('prune() removes them, and a redelivery after that runs again', async () => {
        const clock = new ManualClock(Date.UTC(2026, 0, 1));
        const u = unit({ clock, inboxPruneIntervalMs: 0 });
        const bus = await bankBus(u);
        const id = uuidv7();
        await bus.send(Deposit, { account: 'c', amount: 1 }, { id });
        await bus.whenIdle();
        expect(await u.prune()).toBe(0);
        clock.advance(DEFAULT_INBOX_RETENTION_MS + 1);
        expect(await u.prune()).toBe(1);
        pastDedupeWindow(bus);
        await bus.send(Deposit, { account: 'c', amount: 1 }, { id });
        await bus.whenIdle();
        expect(attempts).toEqual([1, 1]);
        expect(await balance('c')).toBe(2);
      });
    });
  });

  describe('when the handler throws', () => {
    it('rolls back its rows, its outbox rows and its inbox row, and the retry runs it again', async () => {
      failOnAttempts = new Set([1, 2]);
      const bus = await bankBus(unit());
      const id = uuidv7();
      await bus.send(Deposit, { account: 'd', amount: 3 }, { id });
      await bus.whenIdle();
      expect(attempts).toEqual([1, 2, 3]);
      expect(await balance('d')).toBe(3);
      expect(await rows(`SELECT attempt FROM "${schema}".entries`)).toEqual([{ attempt: 3 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 1 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toEqual([{ n: 1 }]);
    });

    it('leaves nothing when it fails for good, and dead-letters the message', async () => {
      failOnAttempts = new Set([1, 2, 3]);
      const bus = await bankBus(unit());
      await bus.send(Deposit, { account: 'e', amount: 3 });
      await bus.whenIdle();
      expect(attempts).toEqual([1, 2, 3]);
      expect(await balance('e')).toBeUndefined();
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 0 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toEqual([{ n: 0 }]);
      expect(await bus.deadLetters.count()).toBe(1);
    });
  });

  describe('when PostgreSQL ends the session of a handler idle in its transaction', () => {
    it('fails that attempt as an outage (not counted), destroys the client, keeps the process up, and the next try commits', async () => {
      const warnings: string[] = [];
      const logger = { ...silentLogger, warn: (message: string) => void warnings.push(message) };
      const releasedWithError: unknown[] = [];
      const onRelease = (error: unknown): void => {
        if (error) releasedWithError.push(error);
      };
      pool.on('release', onRelease);
      const bus = await bankBus(unit({ logger }));
      beforeReturn = async () => {
        if (attempts.length > 1) return;
        // The handler's own backend, idle in its transaction: ended as a restart or an operator would.
        const [backend] = await rows<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE $1`,
          [`%"${schema}"%`],
        );
        if (backend === undefined) throw new Error('the handler has no transaction open');
        await pool.query('SELECT pg_terminate_backend($1)', [backend.pid]);
        await waitFor('the client to hear that its session ended', () => warnings.length > 0, {
          timeoutMs: 10_000,
        });
      };
      try {
        await bus.send(Deposit, { account: 't', amount: 3 });
        await bus.whenIdle();
      } finally {
        pool.off('release', onRelease);
      }
      // The lost session is an outage: the endpoint paused, and the next try is attempt 1 again.
      expect(attempts).toEqual([1, 1]);
      expect(warnings[0]).toMatch(/ended the session of handler "DepositHandler"/);
      expect(releasedWithError).toHaveLength(1);
      expect(await balance('t')).toBe(3);
      expect(await rows(`SELECT attempt FROM "${schema}".entries`)).toEqual([{ attempt: 1 }]);
    });
  });

  describe('when a stop releases the delivery while the handler runs', () => {
    it('rolls back what the handler wrote instead of committing it', async () => {
      const bus = await bankBus(unit());
      let finish!: () => void;
      const finished = new Promise<void>((resolve) => (finish = resolve));
      let inside!: () => void;
      const handlerInside = new Promise<void>((resolve) => (inside = resolve));
      beforeReturn = async () => {
        inside();
        await finished;
      };
      await bus.send(Deposit, { account: 'k', amount: 9 });
      await handlerInside;
      // The grace period runs out while the handler still works: the delivery is released.
      await bus.stop({ gracePeriodMs: 20 });
      finish();
      await waitFor(
        'the released call to end',
        async () => {
          const open = await rows(
            `SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE $1`,
            [`%"${schema}"%`],
          );
          return open.length === 0 && attempts.length === 1;
        },
        { timeoutMs: 10_000 },
      );
      expect(attempts).toEqual([1]);
      expect(await balance('k')).toBeUndefined();
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toEqual([{ n: 0 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 0 }]);
    });
  });

  describe('when the handler runs past its time-out', () => {
    /** Sessions of this test's schema still in a transaction (a call's transaction not ended). */
    async function openTransactions(): Promise<number> {
      const open = await rows(
        `SELECT 1 FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND query LIKE $1`,
        [`%"${schema}"%`],
      );
      return open.length;
    }

    it('rolls back what it wrote, even when it returns later, and the retry commits once', async () => {
      const bus = await bankBus(unit(), { handlerTimeoutMs: 60_000 });
      const clock = clocks.get(bus) as ManualClock;
      let finish!: () => void;
      const finished = new Promise<void>((resolve) => (finish = resolve));
      let inside!: () => void;
      const handlerInside = new Promise<void>((resolve) => (inside = resolve));
      beforeReturn = async () => {
        beforeReturn = undefined;
        inside();
        await finished;
      };
      await bus.send(Deposit, { account: 't', amount: 4 });
      await handlerInside;

      clock.advance(60_000);
      // The retry waits 10 ms of the virtual clock, and the inbox row's lock until attempt 1 ended.
      await waitFor(
        'the retry to run',
        () => {
          clock.advance(10);
          return attempts.length === 2;
        },
        { timeoutMs: 10_000 },
      );
      await bus.whenIdle();
      // Attempt 1 returns now, long after its time-out: nothing of it may commit.
      finish();
      await waitFor('no transaction left open', async () => (await openTransactions()) === 0, {
        timeoutMs: 10_000,
      });

      expect(attempts).toEqual([1, 2]);
      expect(await balance('t')).toBe(4);
      expect(await rows(`SELECT attempt FROM "${schema}".entries`)).toEqual([{ attempt: 2 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toEqual([{ n: 1 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 1 }]);
      expect(await bus.deadLetters.count()).toBe(0);
    });

    it('frees its slot at once while its statement still waits in the server, and never commits it', async () => {
      // Another transaction holds the row the handler's first statement must wait for.
      const blocker = await pool.connect();
      try {
        await blocker.query('BEGIN');
        await blocker.query(`INSERT INTO "${schema}".balances (account, total) VALUES ('w', 100)`);
        let retrying = 0;
        const bus = await bankBus(unit(), {
          handlerTimeoutMs: 60_000,
          hooks: {
            onRetrying: () => {
              retrying++;
            },
          },
        });
        const clock = clocks.get(bus) as ManualClock;
        await bus.send(Deposit, { account: 'w', amount: 5 });
        await waitFor(
          "the handler's statement to wait on the lock",
          async () =>
            (
              await rows(`SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, [
                `INSERT INTO "${schema}".balances%`,
              ])
            ).length > 0,
          { timeoutMs: 10_000 },
        );

        clock.advance(60_000);
        // A ROLLBACK sent on the timed-out call's connection would wait behind its statement: the
        // attempt would end (and the retry start) only once the blocker ends.
        await waitFor('the attempt to fail while the blocker still holds the row', () => retrying === 1, {
          timeoutMs: 10_000,
        });
        // The retry's inbox row waited for attempt 1's only until its server process was ended.
        await waitFor(
          'the retry to run while the blocker still holds the row',
          async () => {
            clock.advance(10);
            return (
              (
                await rows(
                  `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
                  [`INSERT INTO "${schema}".balances%`],
                )
              ).length === 1 && attempts.length === 2
            );
          },
          { timeoutMs: 10_000 },
        );
        await blocker.query('ROLLBACK');
        await bus.whenIdle();

        expect(attempts).toEqual([1, 2]);
        expect(await balance('w')).toBe(5);
        expect(await rows(`SELECT attempt FROM "${schema}".entries`)).toEqual([{ attempt: 2 }]);
        const [record] = (await bus.deadLetters.list()).records;
        expect(record).toBeUndefined();
      } finally {
        await blocker.query('ROLLBACK').catch(() => undefined);
        blocker.release();
      }
    });
  });

  describe('outbox', () => {
    it("writes what the handler recorded into the outbox in the handler's transaction, and publishes nothing itself", async () => {
      const bus = await bankBus(unit());
      const id = uuidv7();
      await bus.send(Deposit, { account: 'f', amount: 2 }, { id });
      await bus.whenIdle();
      expect(bus.messagesOf(Deposited)).toEqual([]);
      expect(handledEvents).toBe(0);
      const outbox = await rows<{ type: string; kind: string; xid: string; body: string }>(
        `SELECT type, kind, xmin::text AS xid, body FROM "${schema}".outbox`,
      );
      expect(outbox.map((r) => [r.type, r.kind])).toEqual([['uowpg.Deposited', 'event']]);
      expect(JSON.parse(outbox[0]!.body)).toMatchObject({ payload: { account: 'f', amount: 2 } });
      // One transaction id for the handler's row, the inbox row and the outbox row.
      const [entry] = await rows<{ xid: string }>(`SELECT xmin::text AS xid FROM "${schema}".entries`);
      const [inbox] = await rows<{ xid: string }>(`SELECT xmin::text AS xid FROM "${schema}".inbox`);
      expect(new Set([entry?.xid, inbox?.xid, outbox[0]?.xid])).toEqual(new Set([entry!.xid]));
    });

    it('with outbox: false, commits and lets the pipeline publish what was recorded', async () => {
      const bus = await bankBus(unit({ outbox: false }));
      await bus.send(Deposit, { account: 'g', amount: 2 });
      await bus.whenIdle();
      expect(bus.messagesOf(Deposited)).toHaveLength(1);
      expect(handledEvents).toBe(1);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 0 }]);
    });

    it('runs execute in a transaction with the outbox and without an inbox row', async () => {
      const bus = await bankBus(unit());
      await bus.execute(Deposit, { account: 'h', amount: 4 });
      expect(await balance('h')).toBe(4);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".outbox`)).toEqual([{ n: 1 }]);
      expect(await rows(`SELECT count(*)::int AS n FROM "${schema}".inbox`)).toEqual([{ n: 0 }]);
      expect(bus.messagesOf(Deposited)).toEqual([]);
    });
  });

  describe('when the handler swallows the error of a failed statement', () => {
    it('fails the call with transaction-aborted instead of acking a transaction that rolled back', async () => {
      const bus = await bankBus(unit());
      const error = await bus.execute(Swallow, { account: 'l' }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'transaction-aborted')).toBe(true);
      expect(await balance('l')).toBeUndefined();
    });
  });

  describe('postgresSession', () => {
    it('throws HarrierError no-transaction naming the fix when the call runs in no postgres unit', async () => {
      const bus = await bankBus(undefined);
      const error = await bus.execute(Deposit, { account: 'i', amount: 1 }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'no-transaction')).toBe(true);
      expect((error as Error).message).toMatch(/unitOfWork: postgresUnitOfWork\(\{ connection \}\)/);
    });

    it("throws for a kind the unit's kinds option leaves out", async () => {
      const bus = await bankBus(unit({ kinds: ['event'] }));
      const error = await bus.execute(Deposit, { account: 'j', amount: 1 }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'no-transaction')).toBe(true);
    });
  });

  describe('projections', () => {
    async function projectionBus(checkpoints: InMemoryCheckpointStore | PostgresCheckpointStore, u = unit()) {
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const bus = createBus({
        endpoint: 'reports',
        handlers: [BalancesView],
        definitions: [Deposited],
        eventLog: log,
        checkpoints,
        unitOfWork: u,
        logger: process.env.DEBUG_UOW ? consoleLogger : silentLogger,
        projections: { commitEvery: 1_000, commitIntervalMs: 60_000 },
      });
      buses.push(bus);
      return bus;
    }

    it("commits the projection's writes and its checkpoint in one transaction", async () => {
      const store = new PostgresCheckpointStore({ connection: pool, schema });
      const bus = await projectionBus(store);
      await bus.start();
      for (const amount of [1, 2, 3]) await bus.publish(Deposited, { account: 'p', amount });
      await bus.projections.whenCaughtUp();
      // The runner's own commit waits for 1000 events or 60 s: the checkpoint came with each event.
      expect(await store.get('balances-view', 'bank', 0)).toBe(2);
      expect(await balance('p')).toBe(6);
      await store.close();
    });

    it('skips events at or below a checkpoint that is ahead of the runner, and applies the rest once', async () => {
      const store = new PostgresCheckpointStore({ connection: pool, schema });
      // The unit committed up to offset 2 with the read model; the runner's own store lags behind.
      await store.commit('balances-view', 'bank', 0, 2, Date.now());
      const bus = await projectionBus(new InMemoryCheckpointStore());
      await bus.start();
      for (const amount of [1, 2, 4, 8, 16]) await bus.publish(Deposited, { account: 'q', amount });
      await bus.projections.whenCaughtUp();
      expect(applied).toHaveLength(2);
      expect(await balance('q')).toBe(24);
      expect(await store.get('balances-view', 'bank', 0)).toBe(4);
      await store.close();
    });

    it('rolls back the write and keeps the checkpoint when the projection throws', async () => {
      projectionFailsOn = 2;
      const store = new PostgresCheckpointStore({ connection: pool, schema });
      const bus = await projectionBus(store);
      await bus.start();
      for (const amount of [1, 2, 4]) await bus.publish(Deposited, { account: 'r', amount });
      await bus.projections.whenCaughtUp();
      expect(await balance('r')).toBe(5);
      expect(await bus.deadLetters.count()).toBe(1);
      // The poison event is skipped by the runner: the next one's commit carries the checkpoint past it.
      expect(await store.get('balances-view', 'bank', 0)).toBe(2);
      await store.close();
    });
  });

  describe('projections after a rebuild (the generation)', () => {
    /** A call of projection `balances-view` at offset 0 of bank/0, in the lane's `generation`. */
    function projectionCall(
      generation: number,
      run: (context: HandlerContext) => Promise<void>,
    ): UnitOfWorkCall {
      const context = Object.create(HandlerContext.prototype) as HandlerContext;
      return {
        context,
        handler: 'balances-view',
        handlerKind: 'projection',
        endpoint: 'reports',
        position: { topic: 'bank', partition: 0, offset: 0, generation },
        inProcess: false,
        run: () => run(context),
        abandoned: () => false,
      };
    }

    const deposit = async (context: HandlerContext): Promise<void> => {
      await postgresSession(context).query(
        `INSERT INTO "${schema}".balances (account, total) VALUES ('g', 5)
         ON CONFLICT (account) DO UPDATE SET total = balances.total + EXCLUDED.total`,
      );
    };

    it('refuses a call of a stale generation with projection-rebuilt: no write, no checkpoint', async () => {
      const store = new PostgresCheckpointStore({ connection: pool, schema });
      await store.beginRebuild('balances-view', 'r-1', Date.now());
      await store.endRebuild('balances-view', 'r-1');
      const u = unit();
      let ran = false;
      const error = await u
        .run(
          projectionCall(0, async (context) => {
            ran = true;
            await deposit(context);
          }),
        )
        .catch((e: unknown) => e);
      expect(HarrierError.is(error, 'projection-rebuilt')).toBe(true);
      expect(ran).toBe(false);
      expect(await balance('g')).toBeUndefined();
      expect(await store.get('balances-view', 'bank', 0)).toBeUndefined();
      // The lane of the new generation commits.
      expect(await u.run(projectionCall(1, deposit))).toBe('ran');
      expect(await balance('g')).toBe(5);
      expect(await store.get('balances-view', 'bank', 0)).toBe(0);
      await store.close();
    });

    it('makes a rebuild wait for an open call of the old generation, then removes its checkpoint', async () => {
      const store = new PostgresCheckpointStore({ connection: pool, schema });
      const u = unit();
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let inside = false;
      const call = u.run(
        projectionCall(0, async (context) => {
          await deposit(context);
          inside = true;
          await gate;
        }),
      );
      await waitFor('the call to hold the generation row', () => inside, { timeoutMs: 10_000 });
      let begun = false;
      const rebuild = store.beginRebuild('balances-view', 'r-1', Date.now()).then((result) => {
        begun = true;
        return result;
      });
      await waitFor(
        'the rebuild to wait on the row lock',
        async () =>
          (
            await rows<{ n: string }>(
              `SELECT count(*) AS n FROM pg_stat_activity
                WHERE wait_event_type = 'Lock' AND position($1 IN query) > 0`,
              [`"${schema}".projection_generations`],
            )
          )[0]?.n !== '0',
        { timeoutMs: 10_000 },
      );
      expect(begun).toBe(false);
      release();
      expect(await call).toBe('ran');
      expect((await rebuild)?.generation).toBe(1);
      // The old generation's call committed before the rebuild, whose removal then took its checkpoint.
      expect(await store.get('balances-view', 'bank', 0)).toBeUndefined();
      expect(await store.generation('balances-view')).toMatchObject({
        generation: 1,
        rebuild: { id: 'r-1' },
      });
      await store.close();
    });
  });

  describe('schema', () => {
    it('refuses an unmigrated schema with schema-outdated naming the migrate command', async () => {
      const u = postgresUnitOfWork({ connection: pool, schema: freshSchema() });
      units.push(u);
      const error = await u.ready().catch((e: unknown) => e);
      expect(HarrierError.is(error, 'schema-outdated')).toBe(true);
      expect((error as Error).message).toMatch(/harrier postgres migrate --schema t_/);
    });

    it('fails the call, running no handler, until the schema is migrated', async () => {
      const bare = freshSchema();
      const bus = await bankBus(unit({ schema: bare }));
      const error = await bus.execute(Deposit, { account: 's', amount: 1 }).catch((e: unknown) => e);
      expect(HarrierError.is(error, 'schema-outdated')).toBe(true);
      expect(attempts).toEqual([]);
      await migratePostgres(pool, { schema: bare });
      await pool.query(`CREATE TABLE "${bare}".balances (account text PRIMARY KEY, total bigint NOT NULL)`);
      await pool.query(`CREATE TABLE "${bare}".entries (message_id text NOT NULL, attempt integer NOT NULL)`);
      const previous = schema;
      schema = bare;
      try {
        await bus.execute(Deposit, { account: 's', amount: 1 });
        expect(await balance('s')).toBe(1);
      } finally {
        schema = previous;
        await dropSchema(pool, bare);
      }
    });
  });

  describe('options', () => {
    it('refuses a retention that is not above 0, naming the default', () => {
      const make = () => postgresUnitOfWork({ connection: pool, inboxRetentionMs: 0 });
      expect(make).toThrow(/default 7 days/);
      expect(make).toThrow(expect.objectContaining({ code: 'invalid-option' }));
    });

    it('refuses a kind that is not a handler kind, naming the kinds it takes', () => {
      const make = () => postgresUnitOfWork({ connection: pool, kinds: ['sagas' as 'saga'] });
      expect(make).toThrow(expect.objectContaining({ code: 'invalid-option' }));
      expect(make).toThrow(/command, event, projection, saga, query/);
    });
  });
});
