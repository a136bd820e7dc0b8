import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  InMemoryDeadLetterStore,
  createBus,
  defineCommand,
  replayOutcome,
  silentLogger,
  type BusOptions,
  type DeadLetterRecord,
  type DeadLetterStore,
  type HandlerClass,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
  type ReplayOutcome,
  type ReplayRecord,
  type RetryOptions,
} from '../../src/index.js';
import { InMemoryBroker } from '../../src/broker/in-memory-broker.js';
import { dispatcherOf } from '../../src/bus/index.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { createTestBus, type TestBus, type TestBusOptions } from '../../src/testing/test-bus.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import { withoutMarkReplayHandled } from '../helpers/without-mark-replay-handled.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('outcome.Charge', { schema: z.object({ orderId: z.string() }) });

/** Two attempts a message, 20 ms apart: dead letters come quickly, and a retry is still tested. */
const retry: RetryOptions = { attempts: 2, backoff: { baseMs: 20, jitter: 0 } };
const WAIT = { timeoutMs: 15_000 };

const buses: MessageBus[] = [];
const prefixes: string[] = [];

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 200 })));
  if (prefixes.length === 0) return;
  const client = new Redis(redisUrl);
  for (const prefix of prefixes.splice(0)) await deleteKeys(client, prefix);
  client.disconnect();
});

interface Backend {
  readonly name: string;
  bus(handlers: NonNullable<BusOptions['handlers']>): MessageBus;
}

const backends: readonly Backend[] = [
  {
    name: 'in memory',
    bus: (handlers) => {
      const bus = createBus({ endpoint: 'billing', handlers, logger: silentLogger, retry });
      buses.push(bus);
      return bus;
    },
  },
  {
    name: 'on Redis',
    bus: (handlers) => {
      const prefix = freshPrefix();
      prefixes.push(prefix);
      const bus = createBus({
        endpoint: 'billing',
        handlers,
        broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
        deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
        logger: silentLogger,
        retry,
      });
      buses.push(bus);
      return bus;
    },
  },
];

/** A promise and the function that resolves it. */
function gate(): { readonly opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** The dead letters of `bus` by the order id of their payload, once there are `count`. */
async function deadLettersByOrder(bus: MessageBus, count: number): Promise<Map<string, DeadLetterRecord>> {
  await waitFor(`${count} dead letters`, async () => (await bus.deadLetters.count()) === count, {
    ...WAIT,
    explain: async () => `${await bus.deadLetters.count()} so far`,
  });
  const { records } = await bus.deadLetters.list();
  return new Map(
    records.map((r) => [(JSON.parse(r.envelope) as { payload: { orderId: string } }).payload.orderId, r]),
  );
}

function must<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`expected ${what}`);
  return value;
}

/** The outcome of the replay made at or after `replayAt` of the dead letter `id`, as stored now. */
async function outcomeOf(bus: MessageBus, id: string, replayAt: number): Promise<ReplayOutcome | undefined> {
  const record = await bus.deadLetters.get(id);
  return record === undefined ? undefined : replayOutcome(record, replayAt);
}

/** Waits until the replay's outcome of `id` is `outcome`, naming the one it has meanwhile. */
async function waitForOutcome(
  bus: MessageBus,
  id: string,
  replayAt: number,
  outcome: ReplayOutcome,
): Promise<void> {
  await waitFor(`replay outcome ${outcome}`, async () => (await outcomeOf(bus, id, replayAt)) === outcome, {
    ...WAIT,
    explain: async () => `it is ${String(await outcomeOf(bus, id, replayAt))}`,
  });
}

describe.each(backends)('replay outcomes $name', (backend) => {
  describe('when dead letters are replayed after their handler is fixed for some', () => {
    it('reports pending until the message runs, handled when fixed, failed-again when it still fails', async () => {
      const failing = new Set(['o-1', 'o-2', 'o-3']);
      const held = gate();
      const running = new Set<string>();
      @CommandHandler(Charge)
      class Charger {
        async handle(payload: PayloadOf<typeof Charge>): Promise<void> {
          if (failing.has(payload.orderId)) throw new Error(`card declined for ${payload.orderId}`);
          running.add(payload.orderId);
          if (payload.orderId === 'o-3') await held.opened;
        }
      }
      const bus = backend.bus([Charger]);
      await bus.start();
      for (const orderId of failing) await bus.send(Charge, { orderId });
      const records = await deadLettersByOrder(bus, 3);
      const [fixed, broken, slow] = ['o-1', 'o-2', 'o-3'].map(
        (o) => must(records.get(o), `a dead letter of ${o}`).id,
      ) as [string, string, string];
      failing.delete('o-1');
      failing.delete('o-3');

      const replayAt = Date.now();
      const results = await bus.replayDeadLetters([fixed, broken, slow]);

      expect(results.map((r) => r.ok)).toEqual([true, true, true]);
      await waitFor('o-3 to run', () => running.has('o-3'), WAIT);
      expect(await outcomeOf(bus, slow, replayAt)).toBe('pending');
      await waitForOutcome(bus, fixed, replayAt, 'handled');
      await waitForOutcome(bus, broken, replayAt, 'failed-again');
      expect(await outcomeOf(bus, slow, replayAt)).toBe('pending');

      held.open();

      await waitForOutcome(bus, slow, replayAt, 'handled');
      const replay = must((await bus.deadLetters.get(slow))?.replays.at(-1), 'a replay');
      expect(replay.handledAt).toBeGreaterThanOrEqual(replay.at);
      expect((await bus.deadLetters.get(broken))?.replays.at(-1)?.handledAt).toBeUndefined();
    });
  });

  describe('when the replayed message fails once more and then succeeds on its retry', () => {
    it('reports handled, recorded by the retry', async () => {
      let failuresLeft = 2;
      const attempts: number[] = [];
      @CommandHandler(Charge)
      class Charger {
        handle(_: unknown, ctx: MessageContext): void {
          attempts.push(ctx.attempt);
          if (failuresLeft-- > 0) throw new Error('gateway timeout');
        }
      }
      const bus = backend.bus([Charger]);
      await bus.start();
      await bus.send(Charge, { orderId: 'o-4' });
      const record = must((await deadLettersByOrder(bus, 1)).get('o-4'), 'a dead letter of o-4');
      failuresLeft = 1;

      const replayAt = Date.now();
      await bus.replayDeadLetters([record.id]);

      await waitForOutcome(bus, record.id, replayAt, 'handled');
      expect(attempts).toEqual([1, 2, 1, 2]);
    });
  });
});

/** A test bus whose Charge handler fails until healed, and one dead letter it made. */
interface HealableBus {
  readonly bus: TestBus;
  readonly record: DeadLetterRecord;
  /** Order ids the handler handled. */
  readonly handled: readonly string[];
  /** Makes the handler succeed from now on. */
  readonly heal: () => void;
}

/** A Charge handler that fails until healed, and the order ids it handled. */
function healableCharger(): Omit<HealableBus, 'bus' | 'record'> & { readonly Charger: HandlerClass } {
  let healthy = false;
  const handled: string[] = [];
  @CommandHandler(Charge)
  class Charger {
    handle(payload: PayloadOf<typeof Charge>): void {
      if (!healthy) throw new Error('card declined');
      handled.push(payload.orderId);
    }
  }
  return { Charger, handled, heal: () => (healthy = true) };
}

/** Starts a test bus on `options`, dead-letters one Charge in it, and returns it unhealed. */
async function healableBus(options: Omit<TestBusOptions, 'handlers' | 'retry'>): Promise<HealableBus> {
  const { Charger, handled, heal } = healableCharger();
  const bus = await createTestBus({ ...options, handlers: [Charger], retry });
  buses.push(bus);
  await bus.send(Charge, { orderId: 'o-5' });
  await bus.whenIdle();
  const record = must((await bus.deadLetters.list()).records[0], 'a dead letter');
  return { bus, record, handled, heal };
}

/** An in-memory store that counts the calls of `markReplayHandled`. */
class CountingStore extends InMemoryDeadLetterStore {
  handledCalls = 0;

  override markReplayHandled(id: string, at: number): Promise<boolean> {
    this.handledCalls++;
    return super.markReplayHandled(id, at);
  }
}

/** An in-memory broker that refuses every ack as stale once `staleAcks` is set. */
class StaleAckBroker extends InMemoryBroker {
  staleAcks = false;

  override ack(deliveryId: string): Promise<void> {
    if (!this.staleAcks) return super.ack(deliveryId);
    return Promise.reject(new HarrierError('stale-delivery', `delivery ${deliveryId} is stale`));
  }
}

describe('replay outcomes in memory', () => {
  describe('when the store has no markReplayHandled', () => {
    it('reports pending after the message was handled', async () => {
      const { bus, record, handled, heal } = await healableBus({
        deadLetters: withoutMarkReplayHandled(new InMemoryDeadLetterStore()),
      });
      heal();
      const replayAt = bus.clock.now();

      await bus.replayDeadLetters([record.id]);
      await bus.whenIdle();

      expect(handled).toEqual(['o-5']);
      expect(await outcomeOf(bus, record.id, replayAt)).toBe('pending');
    });
  });

  describe('when a message that is not a replay is handled', () => {
    it('never calls markReplayHandled; the replayed one calls it once', async () => {
      const store = new CountingStore();
      const { bus, record, heal } = await healableBus({ deadLetters: store });
      heal();

      await bus.send(Charge, { orderId: 'o-8' });
      await bus.whenIdle();
      expect(store.handledCalls).toBe(0);
      await bus.replayDeadLetters([record.id]);
      await bus.whenIdle();

      expect(store.handledCalls).toBe(1);
    });
  });

  describe('when the ack of the replayed delivery is refused as stale', () => {
    it('reports it handled: the handler ran it to success, and a stale ack may be one that applied late', async () => {
      const { Charger, handled, heal } = healableCharger();
      const broker = new StaleAckBroker();
      const store = new CountingStore();
      const bus = createBus({ handlers: [Charger], broker, deadLetters: store, logger: silentLogger, retry });
      buses.push(bus);
      await bus.start();
      await bus.send(Charge, { orderId: 'o-9' });
      const [record] = [...(await deadLettersByOrder(bus, 1)).values()];
      heal();
      broker.staleAcks = true;
      const replayAt = Date.now();

      await bus.replayDeadLetters([must(record, 'a dead letter').id]);
      await waitFor(
        'the replay to be handled and settled',
        () => handled.length === 1 && dispatcherOf(bus)?.activeCount === 0,
        WAIT,
      );

      expect(store.handledCalls).toBe(1);
      expect(await outcomeOf(bus, must(record, 'a dead letter').id, replayAt)).toBe('handled');
    });
  });

  describe('when the message is handled before the replay marks its record replayed', () => {
    it('still reports handled', async () => {
      const store = new RacingStore();
      const { bus, record, handled, heal } = await healableBus({ deadLetters: store });
      heal();
      const replayAt = bus.clock.now();
      store.holdMarks = true;

      const replaying = bus.replayDeadLetters([record.id]);
      await bus.whenIdle();
      await replaying;
      await bus.whenIdle();

      expect(handled).toEqual(['o-5']);
      expect(store.handledMarks).toEqual([false, true]);
      expect(await outcomeOf(bus, record.id, replayAt)).toBe('handled');
    });
  });
});

describe.each([
  { when: 'rejects', mark: () => Promise.reject(new Error('store down')) },
  { when: 'never settles', mark: () => new Promise<boolean>(() => undefined) },
])('replay outcomes in memory when the store $when on markReplayHandled', ({ mark }) => {
  it('acks the message anyway, logs a warning, and the replay shows as pending', async () => {
    const warnings: string[] = [];
    const { bus, record, handled, heal } = await healableBus({
      deadLetters: Object.assign(new InMemoryDeadLetterStore(), { markReplayHandled: mark }),
      settleTimeoutMs: 100,
      logger: { ...silentLogger, warn: (message: string) => void warnings.push(message) },
    });
    heal();
    const replayAt = bus.clock.now();

    await bus.replayDeadLetters([record.id]);
    await bus.whenIdle();

    expect(handled).toEqual(['o-5']);
    expect(bus.broker.stats()).toMatchObject({ ready: 0, inFlight: 0, waiting: 0 });
    expect(warnings).toContain(
      'Could not record that a replayed message was handled; its replay shows as pending',
    );
    expect(await outcomeOf(bus, record.id, replayAt)).toBe('pending');
  });
});

/**
 * A store whose `markReplayed` waits, once `holdMarks` is set, until the dispatcher tried to mark the
 * replay handled: the race of a consumer faster than the replay, made certain.
 */
class RacingStore extends InMemoryDeadLetterStore implements DeadLetterStore {
  holdMarks = false;
  readonly handledMarks: boolean[] = [];
  readonly #tried = gate();

  override async markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    if (this.holdMarks) await this.#tried.opened;
    return super.markReplayed(id, replay);
  }

  override async markReplayHandled(id: string, at: number): Promise<boolean> {
    const marked = await super.markReplayHandled(id, at);
    this.handledMarks.push(marked);
    this.#tried.open();
    return marked;
  }
}

/**
 * Wraps a store so that, once `hold` is set, `add` stores the record (it is `dead` and visible) and
 * then waits for `release` before the dispatcher can nack the delivery: the window between the
 * dead-letter write and the broker's dead-lettering of the job, made certain.
 */
function holdingAdds(store: DeadLetterStore) {
  const added = gate();
  const release = gate();
  const wrapped: DeadLetterStore = Object.assign(Object.create(store) as DeadLetterStore, {
    add: async (record: DeadLetterRecord) => {
      const stored = await store.add(record);
      added.open();
      await release.opened;
      return stored;
    },
    markReplayed: store.markReplayed.bind(store),
    markReplayHandled: store.markReplayHandled?.bind(store),
    get: store.get.bind(store),
    list: store.list.bind(store),
    count: store.count.bind(store),
    remove: store.remove.bind(store),
    purge: store.purge.bind(store),
    close: store.close.bind(store),
  });
  return { store: wrapped, added: added.opened, release: release.open };
}

const raceBackends = [
  {
    name: 'in memory',
    make: (store: (s: DeadLetterStore) => DeadLetterStore, handlers: NonNullable<BusOptions['handlers']>) =>
      createBus({
        endpoint: 'billing',
        handlers,
        logger: silentLogger,
        retry,
        deadLetters: store(new InMemoryDeadLetterStore()),
      }),
  },
  {
    name: 'on Redis',
    make: (store: (s: DeadLetterStore) => DeadLetterStore, handlers: NonNullable<BusOptions['handlers']>) => {
      const prefix = freshPrefix();
      prefixes.push(prefix);
      return createBus({
        endpoint: 'billing',
        handlers,
        broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
        deadLetters: store(new RedisDeadLetterStore({ connection: redisUrl, prefix })),
        logger: silentLogger,
        retry,
      });
    },
  },
] as const;

describe.each(raceBackends)('replay outcome races $name', (backend) => {
  describe('when a dead letter is replayed while the dispatcher has stored it but not yet nacked its job', () => {
    it('never marks it replayed with nothing sent: the replay is refused until the delivery settles, and then it is handled', async () => {
      const { Charger, handled, heal } = healableCharger();
      let held!: ReturnType<typeof holdingAdds>;
      const bus = backend.make((s) => (held = holdingAdds(s)).store, [Charger]);
      buses.push(bus);
      await bus.start();
      await bus.send(Charge, { orderId: 'o-race' });
      await held.added; // the record is stored `dead`; the job is still active
      const [record] = (await bus.deadLetters.list()).records;
      if (record === undefined) throw new Error('expected a dead letter');
      heal();
      const replayAt = Date.now();

      const [first] = await bus.replayDeadLetters([record.id]);
      held.release();
      // Refused while the delivery is unsettled, so the record stays dead and can be replayed again.
      expect(first).toMatchObject({ ok: false, error: 'redeliver-failed' });
      expect(first?.ok === false && first.message).toMatch(/still being handled/);
      expect((await bus.deadLetters.get(record.id))?.status).toBe('dead');
      await waitFor(
        'the replay to go through once the delivery has settled',
        async () => (await bus.replayDeadLetters([record.id]))[0]?.ok === true,
        { timeoutMs: 5_000 },
      );
      await waitFor('the replayed message to be handled', () => handled.length === 1, {
        timeoutMs: 5_000,
        explain: async () => {
          const now = await bus.deadLetters.get(record.id);
          return `handled ${handled.length}; record ${now?.status}, outcome ${String(now && replayOutcome(now, replayAt))}`;
        },
      });
      await waitFor(
        'outcome handled',
        async () => {
          const now = await bus.deadLetters.get(record.id);
          return now !== undefined && replayOutcome(now, replayAt) === 'handled';
        },
        { timeoutMs: 5_000 },
      );
    });
  });
});

describe('replay outcome races: record removed', () => {
  describe('when the replayed record is removed before its message is handled', () => {
    it('tries markReplayHandled once: a missing record will not appear by waiting', async () => {
      let healthy = false;
      const release = gate();
      @CommandHandler(Charge)
      class Charger {
        async handle(): Promise<void> {
          if (!healthy) throw new Error('card declined');
          await release.opened;
        }
      }
      const store = new CountingStore();
      const bus = await createTestBus({ handlers: [Charger], retry, deadLetters: store });
      buses.push(bus);
      await bus.send(Charge, { orderId: 'o-gone' });
      await bus.whenIdle();
      const [record] = (await bus.deadLetters.list()).records;
      if (record === undefined) throw new Error('expected a dead letter');
      healthy = true;

      await bus.replayDeadLetters([record.id]);
      await bus.deadLetters.remove([record.id]);
      release.open();
      await bus.whenIdle();

      expect(store.handledCalls).toBe(1);
    });
  });
});

/** An in-memory broker whose acks, once `slow` is set, apply at once but answer only after 300 ms. */
class SlowAckBroker extends InMemoryBroker {
  slow = false;
  override async ack(deliveryId: string): Promise<void> {
    await super.ack(deliveryId);
    if (this.slow) await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

describe('replay outcome races: an ack that applied but answered late', () => {
  describe('when the ack of the replayed delivery times out although it went through', () => {
    it('still reports the replay handled (the message is acked and will never come back)', async () => {
      const { Charger, handled, heal } = healableCharger();
      const broker = new SlowAckBroker();
      const bus = createBus({
        handlers: [Charger],
        broker,
        logger: silentLogger,
        retry,
        settleTimeoutMs: 100,
      });
      buses.push(bus);
      await bus.start();
      await bus.send(Charge, { orderId: 'o-slow' });
      await waitFor('a dead letter', async () => (await bus.deadLetters.count()) === 1, { timeoutMs: 5_000 });
      const [record] = (await bus.deadLetters.list()).records;
      if (record === undefined) throw new Error('expected a dead letter');
      heal();
      broker.slow = true;
      const replayAt = Date.now();

      await bus.replayDeadLetters([record.id]);
      await waitFor(
        'the replay to be handled and settled',
        () => handled.length === 1 && dispatcherOf(bus)?.activeCount === 0,
        { timeoutMs: 5_000 },
      );

      expect(broker.stats()).toMatchObject({ ready: 0, inFlight: 0, waiting: 0 });
      const now = await bus.deadLetters.get(record.id);
      expect(now && replayOutcome(now, replayAt)).toBe('handled');
    });
  });
});
