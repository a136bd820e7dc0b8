import 'reflect-metadata';
import { Container, inject, injectable } from 'inversify';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  InMemoryBroker,
  On,
  Projection,
  createBus,
  defineCommand,
  defineEvent,
  replayOutcome,
  silentLogger,
  type MessageBus,
  type BusOptions,
  type DeadLetterRecord,
  type MessageContext,
  type Middleware,
  type PayloadOf,
} from '../../../src/index.js';
import { prepareMessage, replayDeadLetters, type OutgoingMessage } from '../../../src/extend.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../../../src/log/index.js';

const Deposited = defineEvent('bank.Deposited', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
});
const Withdrawn = defineEvent('bank.Withdrawn', {
  schema: z.object({ account: z.string(), amount: z.number() }),
  partitionKey: 'account',
});
const Deposit = defineCommand('bank.Deposit', {
  schema: z.object({ account: z.string(), amount: z.number() }),
});

@injectable()
class Balances {
  readonly byAccount = new Map<string, number>();
  readonly seen: string[] = [];
  /** Once true, the poison amount no longer fails (the bug was fixed). */
  healed = false;
  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.byAccount].sort(([a], [b]) => a.localeCompare(b)));
  }
}

function balanceProjection(poisonAmount?: number) {
  @injectable()
  @Projection('balances', { retry: { attempts: 2, backoff: { baseMs: 1, jitter: 0 } } })
  class BalanceProjection {
    constructor(@inject(Balances) private readonly balances: Balances) {}
    @On(Deposited)
    onDeposited(e: PayloadOf<typeof Deposited>, ctx: MessageContext) {
      if (e.amount === poisonAmount && !this.balances.healed) throw new Error('poison');
      this.balances.seen.push(ctx.messageId);
      this.balances.byAccount.set(e.account, (this.balances.byAccount.get(e.account) ?? 0) + e.amount);
    }
    @On(Withdrawn)
    onWithdrawn(e: PayloadOf<typeof Withdrawn>) {
      this.balances.byAccount.set(e.account, (this.balances.byAccount.get(e.account) ?? 0) - e.amount);
    }
    reset() {
      this.balances.byAccount.clear();
      this.balances.seen.length = 0;
    }
  }
  return BalanceProjection;
}

const buses: MessageBus[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((b) => b.stop()));
});

function setup(
  options: {
    poison?: number;
    onPoison?: 'skip' | 'halt';
    log?: InMemoryEventLog;
    checkpoints?: InMemoryCheckpointStore;
  } & Pick<BusOptions, 'middleware' | 'hooks' | 'signing' | 'handlers'> = {},
) {
  const log = options.log ?? new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 4 }] });
  const checkpoints = options.checkpoints ?? new InMemoryCheckpointStore();
  const container = new Container();
  container.bind(Balances).toSelf().inSingletonScope();
  const bus = createBus({
    endpoint: 'reports',
    container,
    handlers: [balanceProjection(options.poison), ...(options.handlers ?? [])],
    definitions: [Deposited, Withdrawn],
    eventLog: log,
    checkpoints,
    logger: silentLogger,
    projections: { commitEvery: 3, ...(options.onPoison ? { onPoison: options.onPoison } : {}) },
    ...(options.middleware ? { middleware: options.middleware } : {}),
    ...(options.hooks ? { hooks: options.hooks } : {}),
    ...(options.signing ? { signing: options.signing } : {}),
  });
  buses.push(bus);
  return { bus, log, checkpoints, balances: container.get(Balances) };
}

describe('ProjectionRunner', () => {
  describe('when events are published on a bus with an event log', () => {
    it('appends them to the log and feeds the projection from it in partition order', async () => {
      const { bus, log, balances } = setup();
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 10 });
      await bus.publish(Withdrawn, { account: 'a', amount: 3 });
      await bus.publish(Deposited, { account: 'b', amount: 5 });
      await bus.projections.whenCaughtUp();
      expect(balances.snapshot()).toEqual({ a: 7, b: 5 });
      const counts = await Promise.all([0, 1, 2, 3].map((p) => log.endOffset('bank', p)));
      expect(counts.reduce((x, y) => x + y, 0)).toBe(3);
      const status = await bus.projections.status();
      expect(status[0]?.partitions.every((p) => p.lag === 0 && p.state === 'running')).toBe(true);
    });
  });

  describe('.rebuild', () => {
    it('resets the read model and replays from offset 0 to the same state as built live', async () => {
      const { bus, balances, checkpoints } = setup();
      await bus.start();
      for (let i = 1; i <= 20; i++) {
        await bus.publish(i % 3 === 0 ? Withdrawn : Deposited, { account: `acc-${i % 5}`, amount: i });
      }
      await bus.projections.whenCaughtUp();
      const live = balances.snapshot();
      balances.byAccount.set('garbage', 999);
      await bus.projections.rebuild('balances');
      await bus.projections.whenCaughtUp('balances');
      expect(balances.snapshot()).toEqual(live);
      expect((await checkpoints.list('balances')).length).toBeGreaterThan(0);
    });

    it('names the projections there are when the name is unknown', async () => {
      const { bus } = setup();
      await bus.start();
      await expect(bus.projections.rebuild('nope')).rejects.toThrow(/the projections are balances/);
    });
  });

  describe('when a projection is restarted', () => {
    it('resumes after its checkpoint without replaying committed events', async () => {
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const checkpoints = new InMemoryCheckpointStore();
      const first = setup({ log, checkpoints });
      await first.bus.start();
      for (let i = 1; i <= 6; i++) await first.bus.publish(Deposited, { account: 'a', amount: i });
      await first.bus.projections.whenCaughtUp();
      await first.bus.stop({ closeBroker: false });
      buses.splice(buses.indexOf(first.bus), 1);
      expect(await checkpoints.get('balances', 'bank', 0)).toBe(5);

      const second = setup({ log, checkpoints });
      await second.bus.start();
      await second.bus.publish(Deposited, { account: 'a', amount: 100 });
      await second.bus.projections.whenCaughtUp();
      expect(second.balances.snapshot()).toEqual({ a: 100 });
    });
  });

  describe('when the bus stops', () => {
    it('stops the projection and commits what it completed', async () => {
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const { bus, checkpoints } = setup({ log });
      await bus.start();
      // Two events: fewer than commitEvery (3), so only the stop commits them.
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      await bus.publish(Deposited, { account: 'a', amount: 2 });
      await bus.projections.whenCaughtUp();
      expect(await checkpoints.get('balances', 'bank', 0)).toBeUndefined();

      await bus.stop({ closeBroker: false });

      expect(await checkpoints.get('balances', 'bank', 0)).toBe(1);
    });

    it('leaves an event that is failing between retries uncommitted, and does not call it again', async () => {
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const checkpoints = new InMemoryCheckpointStore();
      let failingCalls = 0;
      @Projection('flaky', { retry: { attempts: 5, immediate: 0, backoff: { baseMs: 60_000, jitter: 0 } } })
      class Flaky {
        @On(Deposited)
        onDeposited(e: PayloadOf<typeof Deposited>) {
          if (e.amount === 99) {
            failingCalls++;
            throw new Error('down');
          }
        }
      }
      const bus = createBus({
        endpoint: 'reports',
        handlers: [Flaky],
        definitions: [Deposited],
        eventLog: log,
        checkpoints,
        logger: silentLogger,
      });
      buses.push(bus);
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      await bus.publish(Deposited, { account: 'a', amount: 99 });
      await expect.poll(() => failingCalls).toBe(1);

      await bus.stop({ closeBroker: false });

      // Offset 0 is done and committed; offset 1 failed once and waits for the next start.
      expect(await checkpoints.get('flaky', 'bank', 0)).toBe(0);
      expect(failingCalls).toBe(1);
    });
  });

  describe('when its checkpoints are reset from outside (harrier projections rebuild)', () => {
    it('rebuilds the projection in the running process', async () => {
      const { bus, balances, checkpoints } = setup();
      await bus.start();
      for (let i = 1; i <= 5; i++) await bus.publish(Deposited, { account: 'a', amount: i });
      await bus.projections.whenCaughtUp();
      await bus.projections.stop();
      await bus.projections.start();
      const live = balances.snapshot();
      balances.byAccount.set('stale', 1);
      await checkpoints.reset('balances');
      expect(await bus.projections.checkExternalRebuilds()).toEqual(['balances']);
      await bus.projections.whenCaughtUp('balances');
      expect(balances.snapshot()).toEqual(live);
    });
  });

  describe('.maintain', () => {
    it('removes expired records a projection has passed and keeps the ones it has not', async () => {
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1, retentionMs: 1000 }] });
      const checkpoints = new InMemoryCheckpointStore();
      const { bus } = setup({ log, checkpoints });
      await bus.start();
      for (let i = 1; i <= 4; i++) await bus.publish(Deposited, { account: 'a', amount: i });
      await bus.projections.whenCaughtUp();
      await bus.stop({ closeBroker: false });
      buses.splice(0);
      await checkpoints.reset('balances');
      await checkpoints.commit('balances', 'bank', 0, 1, Date.now());
      const removed = await bus.projections.maintain(Date.now() + 60_000);
      expect(removed).toBe(2);
      expect((await log.read('bank', 0, 0, 10)).map((r) => r.offset)).toEqual([2, 3]);
    });
  });

  describe('when an event keeps failing (poison)', () => {
    it('retries it, dead-letters it as projection-failed and skips to the next', async () => {
      const { bus, balances } = setup({ poison: 13 });
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      const poisonId = await bus.publish(Deposited, { account: 'a', amount: 13 });
      await bus.publish(Deposited, { account: 'a', amount: 2 });
      await bus.projections.whenCaughtUp();
      expect(balances.snapshot()).toEqual({ a: 3 });
      const [record] = (await bus.deadLetters.list()).records;
      expect(record).toMatchObject({
        reason: 'projection-failed',
        messageId: poisonId,
        handler: 'balances',
        attemptCount: 2,
      });
    });

    describe('and its dead letter is replayed through the bus', () => {
      async function poisoned(onPoison: 'skip' | 'halt' = 'skip') {
        const fixture = setup({ poison: 13, onPoison });
        await fixture.bus.start();
        await fixture.bus.publish(Deposited, { account: 'a', amount: 1 });
        await fixture.bus.publish(Deposited, { account: 'a', amount: 13 });
        await expect.poll(async () => fixture.bus.deadLetters.count()).toBe(1);
        const [record] = (await fixture.bus.deadLetters.list()).records;
        return { ...fixture, record: record! };
      }

      it('records where in the log the projection met the event', async () => {
        const { record, log } = await poisoned();
        const [entry] = (await Promise.all([0, 1, 2, 3].map((p) => log.read('bank', p, 0, 10))))
          .flat()
          .filter((r) => r.id === record.messageId);
        expect(record.logPosition).toEqual({
          topic: 'bank',
          partition: expect.any(Number) as number,
          offset: 1,
        });
        expect(entry?.offset).toBe(record.logPosition?.offset);
      });

      it('runs the projection on it again and reports ok once it is handled', async () => {
        const { bus, balances, record } = await poisoned();
        balances.healed = true;
        expect(await bus.replayDeadLetters([record.id], { by: 'ops' })).toEqual([
          { id: record.id, ok: true },
        ]);
        expect(balances.snapshot()).toEqual({ a: 14 });
        expect(await bus.deadLetters.get(record.id)).toMatchObject({
          status: 'replayed',
          replays: [{ by: 'ops' }],
        });
      });

      it('records the replay as handled, since no dispatcher sees the event', async () => {
        const { bus, balances, record } = await poisoned();
        balances.healed = true;
        const replayAt = Date.now();
        await bus.replayDeadLetters([record.id]);
        const stored = await bus.deadLetters.get(record.id);
        expect(stored?.replays[0]?.handledAt).toBeGreaterThanOrEqual(replayAt);
        expect(stored && replayOutcome(stored, replayAt)).toBe('handled');
      });

      it('reports the replay failed again when the projection fails again', async () => {
        const { bus, record } = await poisoned();
        const replayAt = Date.now();
        await bus.replayDeadLetters([record.id]);
        const stored = await bus.deadLetters.get(record.id);
        expect(stored?.replays[0]?.handledAt).toBeUndefined();
        expect(stored && replayOutcome(stored, replayAt)).toBe('failed-again');
      });

      it('reports projection-failed and keeps the record dead when the projection fails again', async () => {
        const { bus, balances, record } = await poisoned();
        const [result] = await bus.replayDeadLetters([record.id]);
        expect(result).toMatchObject({ id: record.id, ok: false, error: 'projection-failed' });
        expect(balances.snapshot()).toEqual({ a: 1 });
        expect(await bus.deadLetters.count()).toBe(1);
        expect(await bus.deadLetters.get(record.id)).toMatchObject({
          status: 'dead',
          reason: 'projection-failed',
          replays: [expect.any(Object)],
          logPosition: record.logPosition,
        });
      });

      it('is refused with projection-halted when the partition halted there (it runs again on restart)', async () => {
        const { bus, balances, record } = await poisoned('halt');
        balances.healed = true;
        const [result] = await bus.replayDeadLetters([record.id]);
        expect(result).toMatchObject({ ok: false, error: 'projection-halted' });
        expect(balances.snapshot()).toEqual({ a: 1 });
        expect((await bus.deadLetters.get(record.id))?.status).toBe('dead');
      });

      it('is refused with projection-replay-needs-app where no projection runs (the CLI)', async () => {
        const { bus, record } = await poisoned();
        const [result] = await replayDeadLetters({
          store: bus.deadLetters,
          broker: bus.broker,
          ids: [record.id],
        });
        expect(result).toMatchObject({
          ok: false,
          error: 'projection-replay-needs-app',
          message: expect.stringContaining('bus.replayDeadLetters') as unknown,
        });
        expect(await bus.deadLetters.get(record.id)).toMatchObject({ status: 'dead', replays: [] });
      });
    });

    it('halts the partition there when onPoison is halt', async () => {
      const { bus, balances } = setup({ poison: 13, onPoison: 'halt' });
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      await bus.publish(Deposited, { account: 'a', amount: 13 });
      await bus.publish(Deposited, { account: 'a', amount: 2 });
      await expect
        .poll(async () => (await bus.projections.status())[0]?.partitions.find((p) => p.state === 'halted'))
        .toBeDefined();
      expect(balances.snapshot()).toEqual({ a: 1 });
      const halted = (await bus.projections.status())[0]!.partitions.find((p) => p.state === 'halted')!;
      expect(halted.lag).toBe(2);
    });
  });
});

describe('ProjectionRunner on the handler pipeline', () => {
  describe('when the bus has middleware and lifecycle hooks', () => {
    it('runs them around projection handlers too', async () => {
      const seen: string[] = [];
      const middleware: Middleware = {
        name: 'audit',
        before: (c) => void seen.push(`before ${c.handlerKind} ${c.handler} ${c.definition.type}`),
        after: (c, outcome) => void seen.push(`after ${c.handler} ${outcome.ok ? 'ok' : 'failed'}`),
      };
      const handled: string[] = [];
      const { bus, balances } = setup({
        middleware: [middleware],
        hooks: { onHandled: (e) => void handled.push(`${e.handler} ${e.envelope.type}`) },
      });
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 10 });
      await bus.projections.whenCaughtUp();

      expect(balances.snapshot()).toEqual({ a: 10 });
      expect(seen).toEqual(['before projection balances bank.Deposited', 'after balances ok']);
      expect(handled).toEqual(['balances bank.Deposited']);
    });
  });

  describe('when an event in the log does not verify (signing)', () => {
    it('refuses it as signature-invalid, as the dispatcher refuses the same bytes from the broker', async () => {
      const KEY = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';
      const audited: string[] = [];
      @EventHandler(Deposited)
      class Audit {
        handle(_: unknown, ctx: MessageContext) {
          audited.push(ctx.messageId);
        }
      }
      const { bus, log, balances } = setup({ handlers: [Audit], signing: { keys: [KEY] } });
      await bus.start();
      // Unsigned bytes, as a writer without the key would produce them.
      const forged = prepareMessage(Deposited, { account: 'a', amount: 1_000 }, {}, { now: Date.now() });
      await log.append('bank', {
        id: forged.outgoing.id,
        key: 'a',
        type: Deposited.type,
        body: forged.outgoing.body,
      });
      await bus.broker.publish(forged.outgoing);
      await expect.poll(() => bus.deadLetters.count()).toBe(2);
      await bus.projections.whenCaughtUp();

      const records = (await bus.deadLetters.list()).records;
      const byHandler = (handler: string): DeadLetterRecord | undefined =>
        records.find((r) => r.handler === handler);
      expect(byHandler('Audit')).toMatchObject({
        reason: 'signature-invalid',
        messageId: forged.envelope.id,
      });
      expect(byHandler('balances')).toMatchObject({
        reason: 'signature-invalid',
        messageId: forged.envelope.id,
      });
      expect(balances.snapshot()).toEqual({});
      expect(audited).toEqual([]);
    });
  });

  describe('when a projection handler calls ctx.publish', () => {
    it('refuses it with an error that names the fix, instead of dropping the message', async () => {
      let calls = 0;
      @Projection('publishing', { retry: { attempts: 5, backoff: { baseMs: 1 } } })
      class Publishing {
        @On(Deposited)
        onDeposited(e: PayloadOf<typeof Deposited>, ctx: MessageContext) {
          calls += 1;
          ctx.publish(Withdrawn, e);
        }
      }
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const bus = createBus({
        endpoint: 'reports',
        handlers: [Publishing],
        definitions: [Deposited, Withdrawn],
        eventLog: log,
        logger: silentLogger,
      });
      buses.push(bus);
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      await bus.projections.whenCaughtUp();

      const [record] = (await bus.deadLetters.list()).records;
      expect(record).toMatchObject({
        reason: 'projection-failed',
        handler: 'publishing',
        error: { code: 'projection-publish' },
      });
      // A programming error fails alike every time: dead-lettered on the first attempt.
      expect(calls).toBe(1);
      expect(record?.error.message).toMatch(/rebuilt from offset 0/);
      expect(record?.error.message).toMatch(/from an @EventHandler\(Deposited\) instead/);
      expect((await log.read('bank', 0, 0, 10)).map((r) => r.type)).toEqual([Deposited.type]);
    });
  });
});

describe('MessageBus with an event log', () => {
  describe('.stop, when a projection handler ignores its abort signal and never returns', () => {
    it('resolves after the grace period instead of waiting for it', async () => {
      let entered = false;
      @Projection('stuck')
      class Stuck {
        @On(Deposited)
        onDeposited(): Promise<void> {
          entered = true;
          return new Promise(() => undefined);
        }
      }
      const bus = createBus({
        endpoint: 'reports',
        handlers: [Stuck],
        definitions: [Deposited],
        eventLog: new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] }),
        logger: silentLogger,
      });
      await bus.start();
      await bus.publish(Deposited, { account: 'a', amount: 1 });
      await expect.poll(() => entered).toBe(true);
      const started = Date.now();
      await bus.stop({ gracePeriodMs: 200 });
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });

  describe('.stop, when a projection handler completes its write after the stop aborted it', () => {
    it('counts the event as handled, so the next start does not apply it again', async () => {
      let applied = 0;
      let entered = false;
      @Projection('once')
      class Once {
        @On(Deposited)
        async onDeposited(_: PayloadOf<typeof Deposited>, ctx: MessageContext): Promise<void> {
          entered = true;
          if (applied === 0) {
            await new Promise<void>((resolve) => {
              ctx.signal.addEventListener('abort', () => {
                resolve();
              });
            });
          }
          applied += 1; // a write that was already under way when the stop came
        }
      }
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      const checkpoints = new InMemoryCheckpointStore();
      const make = () =>
        createBus({
          endpoint: 'reports',
          handlers: [Once],
          definitions: [Deposited],
          eventLog: log,
          checkpoints,
          logger: silentLogger,
        });
      const first = make();
      await first.start();
      await first.publish(Deposited, { account: 'a', amount: 1 });
      await expect.poll(() => entered).toBe(true);
      await first.stop();
      expect(applied).toBe(1);

      const second = make();
      buses.push(second);
      await second.start();
      await second.projections.whenCaughtUp();
      expect(applied).toBe(1);
    });
  });

  describe('when the process fails between the log append and the fan-out', () => {
    it('recovers on redelivery without a duplicate in the log or in any subscription', async () => {
      class FailingOnce extends InMemoryBroker {
        failures = 1;
        override publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
          if (messages.some((m) => m.kind === 'event') && this.failures-- > 0)
            return Promise.reject(new Error('connection reset'));
          return super.publishBatch(messages);
        }
      }
      const received: string[] = [];
      @CommandHandler(Deposit, { retry: { backoff: { baseMs: 1, jitter: 0 } } })
      class DepositHandler {
        handle(p: PayloadOf<typeof Deposit>, ctx: MessageContext) {
          ctx.publish(Deposited, p);
          ctx.publish(Deposited, { ...p, amount: p.amount + 1 });
        }
      }
      @EventHandler(Deposited)
      class Audit {
        handle(_: unknown, ctx: MessageContext) {
          received.push(ctx.messageId);
        }
      }
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 2 }] });
      const bus = createBus({
        broker: new FailingOnce(),
        handlers: [DepositHandler, Audit],
        eventLog: log,
        logger: silentLogger,
      });
      buses.push(bus);
      await bus.start();
      await bus.send(Deposit, { account: 'a', amount: 1 });
      await expect.poll(() => received.length).toBe(2);
      const records = (await Promise.all([0, 1].map((p) => log.read('bank', p, 0, 100)))).flat();
      expect(records).toHaveLength(2);
      expect(new Set(received)).toEqual(new Set(records.map((r) => r.id)));
      expect(await log.findByUid(records[0]!.id)).toBeDefined();
    });
  });
});
