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
  UnrecoverableError,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  upcasters,
  type DeadLetteredEvent,
  type Logger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { ManualClock } from '../../../src/clock/index.js';
import { prepareMessage } from '../../../src/extend.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../../../src/log/index.js';
import { createTestBus, type TestBus } from '../../../src/testing/index.js';

/** Version 1: cents. Version 2: amount in units. Version 3: amount with its currency. */
const v1Schema = z.object({ account: z.string(), cents: z.number().int() });
const v2Schema = z.object({ account: z.string(), amount: z.number() });
const v3Schema = z.object({
  account: z.string(),
  amount: z.object({ value: z.number(), currency: z.string() }),
});
type V1 = z.output<typeof v1Schema>;
type V2 = z.output<typeof v2Schema>;

const toV2 = (v1: V1): V2 => ({ account: v1.account, amount: v1.cents / 100 });
const toV3 = (v2: V2) => ({ account: v2.account, amount: { value: v2.amount, currency: 'EUR' } });

const DepositedV1 = defineEvent('bank.Deposited', { schema: v1Schema, partitionKey: 'account' });
const DepositedV2 = defineEvent('bank.Deposited', {
  version: 2,
  schema: v2Schema,
  partitionKey: 'account',
  upcast: upcasters<V1>().step(toV2),
});
/** The name version 1 was published under before it was renamed. */
const CreditedV1 = defineEvent('bank.Credited', { schema: v1Schema, partitionKey: 'account' });
const Deposited = defineEvent('bank.Deposited', {
  version: 3,
  aliases: ['bank.Credited'],
  schema: v3Schema,
  partitionKey: 'account',
  upcast: upcasters<V1>().step(toV2).step(toV3),
});

const buses: { stop(options?: { closeBroker?: boolean }): Promise<void> }[] = [];
afterEach(async () => {
  for (const bus of buses.splice(0).reverse()) await bus.stop({ closeBroker: false });
});

function track<B extends { stop(options?: { closeBroker?: boolean }): Promise<void> }>(bus: B): B {
  buses.push(bus);
  return bus;
}

@injectable()
class Balances {
  readonly byAccount = new Map<string, number>();
  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.byAccount].sort(([a], [b]) => a.localeCompare(b)));
  }
}

@injectable()
@Projection('balances')
class BalanceProjection {
  constructor(@inject(Balances) private readonly balances: Balances) {}
  @On(Deposited)
  onDeposited(e: PayloadOf<typeof Deposited>) {
    const cents = Math.round(e.amount.value * 100);
    this.balances.byAccount.set(e.account, (this.balances.byAccount.get(e.account) ?? 0) + cents);
  }
  reset() {
    this.balances.byAccount.clear();
  }
}

async function projectLog(log: InMemoryEventLog): Promise<{ bus: MessageBus; balances: Balances }> {
  const container = new Container();
  container.bind(Balances).toSelf().inSingletonScope();
  const bus = track(
    createBus({
      endpoint: 'reports',
      container,
      handlers: [BalanceProjection],
      eventLog: log,
      checkpoints: new InMemoryCheckpointStore(),
      logger: silentLogger,
    }),
  );
  await bus.start();
  await bus.projections.whenCaughtUp();
  return { bus, balances: container.get(Balances) };
}

let now = Date.parse('2026-01-01T00:00:00.000Z');
async function append(
  log: InMemoryEventLog,
  definition: typeof DepositedV1 | typeof CreditedV1 | typeof DepositedV2 | typeof Deposited,
  payload: unknown,
) {
  const { envelope, outgoing } = prepareMessage(definition, payload, {}, { now: now++ });
  await log.append('bank', {
    id: envelope.id,
    key: envelope.meta.partitionKey ?? '',
    type: envelope.type,
    body: outgoing.body,
  });
}

describe('versioned messages', () => {
  describe('a projection over an event log holding versions 1 (some under an old name), 2 and 3', () => {
    it('builds, and rebuilds, the read model that version-3 events alone give', async () => {
      const mixed = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 2 }] });
      const current = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 2 }] });
      for (let i = 1; i <= 30; i++) {
        const account = `acc-${i % 4}`;
        const cents = i * 125;
        if (i % 3 === 0) await append(mixed, i % 2 === 0 ? DepositedV1 : CreditedV1, { account, cents });
        else if (i % 3 === 1) await append(mixed, DepositedV2, { account, amount: cents / 100 });
        else await append(mixed, Deposited, { account, amount: { value: cents / 100, currency: 'EUR' } });
        await append(current, Deposited, { account, amount: { value: cents / 100, currency: 'EUR' } });
      }
      const expected = (await projectLog(current)).balances.snapshot();
      expect(Object.keys(expected)).toHaveLength(4);
      const { bus, balances } = await projectLog(mixed);
      expect(balances.snapshot()).toEqual(expected);
      balances.byAccount.set('garbage', 1);
      await bus.projections?.rebuild('balances');
      await bus.projections?.whenCaughtUp('balances');
      expect(balances.snapshot()).toEqual(expected);
    });
  });

  describe('a projection lane meeting an event newer than its code', () => {
    it('waits on it in place, holding the later events of its partition, and treats it as poison after 24 hours', async () => {
      const DepositedV4 = defineEvent('bank.Deposited', {
        version: 4,
        schema: v3Schema.extend({ note: z.string() }),
        partitionKey: 'account',
        upcast: upcasters<V1>()
          .step(toV2)
          .step(toV3)
          .step((v3) => ({ ...v3, note: '' })),
      });
      const log = new InMemoryEventLog({ topics: [{ name: 'bank', partitions: 1 }] });
      await append(log, DepositedV4, { account: 'a', amount: { value: 1, currency: 'EUR' }, note: 'new' });
      await append(log, Deposited, { account: 'a', amount: { value: 2, currency: 'EUR' } });
      const clock = new ManualClock();
      const warnings: Record<string, unknown>[] = [];
      const deadLettered: string[] = [];
      const container = new Container();
      container.bind(Balances).toSelf().inSingletonScope();
      const bus = track(
        createBus({
          endpoint: 'reports',
          container,
          clock,
          handlers: [BalanceProjection],
          eventLog: log,
          checkpoints: new InMemoryCheckpointStore(),
          logger: {
            ...silentLogger,
            warn: (message, fields) => {
              if (message.startsWith('Message is newer than this code')) warnings.push(fields ?? {});
            },
          },
          hooks: {
            onDeadLettered: (event: DeadLetteredEvent) => {
              deadLettered.push(event.record.reason);
            },
          },
        }),
      );
      const balances = container.get(Balances);
      await bus.start();
      await expect.poll(() => warnings.length).toBe(1);
      clock.advance(1000);
      await expect.poll(() => warnings.length).toBe(2);
      expect(warnings[1]).toMatchObject({ type: 'bank.Deposited', version: 4, knownVersion: 3 });
      expect(balances.snapshot()).toEqual({});
      clock.advance(24 * 60 * 60 * 1000);
      await expect.poll(() => deadLettered).toEqual(['version-unsupported']);
      await bus.projections.whenCaughtUp();
      expect(balances.snapshot()).toEqual({ a: 200 });
    });
  });

  describe('a version-1 dead letter replayed into version-3 handlers', () => {
    it('is raised to version 3 and handled', async () => {
      const DepositV1 = defineCommand('bank.Deposit', { schema: v1Schema });
      const Deposit = defineCommand('bank.Deposit', {
        version: 3,
        schema: v3Schema,
        upcast: upcasters<V1>().step(toV2).step(toV3),
      });
      const old = await (async () => {
        @CommandHandler(DepositV1)
        class DepositHandler {
          handle(): void {
            throw new UnrecoverableError('ledger is read-only');
          }
        }
        return track(await createTestBus({ handlers: [DepositHandler] }));
      })();
      await old.send(DepositV1, { account: 'a', cents: 250 });
      await old.whenIdle();
      const [record] = (await old.deadLetters.list()).records;
      if (record === undefined) throw new Error('nothing was dead-lettered');
      expect(record.envelope).not.toContain('"ver"');

      const seen: unknown[] = [];
      @CommandHandler(Deposit)
      class DepositHandler {
        handle(payload: PayloadOf<typeof Deposit>): void {
          seen.push(payload);
        }
      }
      const bus: TestBus = track(await createTestBus({ handlers: [DepositHandler] }));
      await bus.deadLetters.add(record);
      expect(await bus.replayDeadLetters([record.id])).toEqual([{ id: record.id, ok: true }]);
      await bus.whenIdle();
      expect(seen).toEqual([{ account: 'a', amount: { value: 2.5, currency: 'EUR' } }]);
      expect((await bus.deadLetters.get(record.id))?.status).toBe('replayed');
    });
  });

  describe('a version-4 message met by a version-3 worker', () => {
    const Ship = defineCommand('shop.Ship', {
      version: 3,
      schema: z.object({ orderId: z.string(), v: z.literal(3) }),
      upcast: upcasters<{ orderId: string }>()
        .step((v1) => ({ ...v1, v: 2 as const }))
        .step((v2) => ({ orderId: v2.orderId, v: 3 as const })),
    });
    const ShipV4 = defineCommand('shop.Ship', {
      version: 4,
      schema: z.object({ orderId: z.string(), v: z.literal(4) }),
      upcast: upcasters<{ orderId: string }>()
        .step((v1) => ({ ...v1, v: 2 as const }))
        .step((v2) => ({ orderId: v2.orderId, v: 3 as const }))
        .step((v3) => ({ orderId: v3.orderId, v: 4 as const })),
    });

    function setup() {
      const clock = new ManualClock();
      const broker = new InMemoryBroker({ clock });
      const warnings: Record<string, unknown>[] = [];
      const logger: Logger = {
        ...silentLogger,
        warn: (message, fields) => {
          if (message.startsWith('Message is newer than this code')) warnings.push(fields ?? {});
        },
      };
      const handledBy: string[] = [];
      const deadLettered: string[] = [];
      const hooks = {
        onDeadLettered: (event: DeadLetteredEvent) => {
          deadLettered.push(event.record.reason);
        },
      };
      @CommandHandler(Ship)
      class ShipV3Handler {
        handle(): void {
          handledBy.push('v3');
        }
      }
      @CommandHandler(ShipV4)
      class ShipV4Handler {
        handle(payload: PayloadOf<typeof ShipV4>, ctx: MessageContext): void {
          handledBy.push(`v4 ${payload.v} attempt ${ctx.attempt}`);
        }
      }
      const worker3 = track(
        createBus({ endpoint: 'shipping', broker, clock, handlers: [ShipV3Handler], logger, hooks }),
      );
      const sender = track(createBus({ endpoint: 'web', broker, clock, definitions: [ShipV4], logger }));
      const worker4 = () =>
        track(createBus({ endpoint: 'shipping', broker, clock, handlers: [ShipV4Handler], logger, hooks }));
      return { clock, broker, warnings, handledBy, deadLettered, worker3, sender, worker4 };
    }

    it('waits, with a warning naming its type and versions, spending no attempt, and is handled once a version-4 worker starts', async () => {
      const { clock, warnings, handledBy, deadLettered, worker3, sender, worker4 } = setup();
      await worker3.start();
      await sender.send(ShipV4, { orderId: 'o-1', v: 4 });
      await expect.poll(() => warnings.length).toBe(1);
      expect(warnings[0]).toMatchObject({ type: 'shop.Ship', version: 4, knownVersion: 3, attempt: 1 });
      // Twelve deliveries, beyond the default 8 attempts: none spends an attempt, none dead-letters.
      for (let delivery = 2; delivery <= 12; delivery++) {
        clock.advanceTo(warnings.at(-1)?.retryAt as number);
        await expect.poll(() => warnings.length).toBe(delivery);
      }
      // The delay grows with the message's age (a tenth of it), up to 5 minutes.
      expect((warnings[1]?.retryAt as number) - (warnings[0]?.retryAt as number)).toBe(1000);
      clock.advance(60 * 60 * 1000);
      await expect.poll(() => warnings.length).toBe(13);
      expect((warnings[12]?.retryAt as number) - clock.now()).toBe(5 * 60 * 1000);
      expect(warnings.map((w) => w.attempt)).toEqual(Array.from({ length: 13 }, () => 1));
      expect(handledBy).toEqual([]);
      expect(deadLettered).toEqual([]);

      await worker3.stop({ closeBroker: false });
      await worker4().start();
      clock.advance(5 * 60 * 1000);
      await expect.poll(() => handledBy).toEqual(['v4 4 attempt 1']);
      expect(deadLettered).toEqual([]);
    });

    it('is dead-lettered as version-unsupported once it is 24 hours old', async () => {
      const { clock, warnings, handledBy, deadLettered, worker3, sender } = setup();
      await worker3.start();
      await sender.send(ShipV4, { orderId: 'o-1', v: 4 });
      await expect.poll(() => warnings.length).toBe(1);
      clock.advance(24 * 60 * 60 * 1000);
      await expect.poll(() => deadLettered).toEqual(['version-unsupported']);
      const [record] = (await worker3.deadLetters.list()).records;
      expect(record?.error.message).toMatch(
        /written with version 4, and this process knows versions up to 3.*replay it once one runs/,
      );
      expect(handledBy).toEqual([]);
    });
  });

  describe('aliases', () => {
    const OrderCreated = defineEvent('orders.OrderCreated', { schema: z.object({ orderId: z.string() }) });
    const OrderPlaced = defineEvent('orders.OrderPlaced', {
      version: 2,
      schema: z.object({ orderId: z.string(), source: z.string() }),
      aliases: ['orders.OrderCreated'],
      upcast: upcasters<{ orderId: string }>().step((v1) => ({ ...v1, source: 'legacy' })),
    });

    it('subscribes to the old name and handles messages published under it with the new definition', async () => {
      const broker = new InMemoryBroker();
      const seen: { payload: unknown; type: string }[] = [];
      @EventHandler(OrderPlaced)
      class Mailer {
        handle(payload: PayloadOf<typeof OrderPlaced>, ctx: MessageContext): void {
          seen.push({ payload, type: ctx.envelope.type });
        }
      }
      const receiver = track(
        createBus({ endpoint: 'mail', broker, handlers: [Mailer], logger: silentLogger }),
      );
      const oldSender = track(
        createBus({ endpoint: 'old', broker, definitions: [OrderCreated], logger: silentLogger }),
      );
      const newSender = track(
        createBus({ endpoint: 'new', broker, definitions: [OrderPlaced], logger: silentLogger }),
      );
      await receiver.start();
      await oldSender.publish(OrderCreated, { orderId: 'o-1' });
      await newSender.publish(OrderPlaced, { orderId: 'o-2', source: 'web' });
      await expect.poll(() => seen.length).toBe(2);
      expect(seen).toEqual(
        expect.arrayContaining([
          { payload: { orderId: 'o-1', source: 'legacy' }, type: 'orders.OrderPlaced' },
          { payload: { orderId: 'o-2', source: 'web' }, type: 'orders.OrderPlaced' },
        ]),
      );
    });

    it('refuses an alias that is another definition’s type in one endpoint', () => {
      @EventHandler(OrderPlaced)
      class A {
        handle(): void {}
      }
      @EventHandler(OrderCreated)
      class B {
        handle(): void {}
      }
      expect(() => createBus({ handlers: [B, A], logger: silentLogger })).toThrow(
        /"orders.OrderPlaced" has the alias "orders.OrderCreated", which is the type of another definition/,
      );
    });
  });
});
