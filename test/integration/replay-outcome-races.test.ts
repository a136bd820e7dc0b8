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
  type MessageBus,
  type PayloadOf,
  type RetryOptions,
} from '../../src/index.js';
import { BullMqBroker, RedisDeadLetterStore } from '../../src/redis/index.js';
import { InMemoryBroker } from '../../src/broker/in-memory-broker.js';
import { dispatcherOf } from '../../src/bus/index.js';
import { createTestBus } from '../../src/testing/test-bus.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const Charge = defineCommand('races.Charge', { schema: z.object({ orderId: z.string() }) });
const retry: RetryOptions = { attempts: 1, backoff: { baseMs: 20, jitter: 0 } };

const buses: MessageBus[] = [];
const prefixes: string[] = [];
afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 200 })));
  const client = new Redis(redisUrl);
  for (const prefix of prefixes.splice(0)) await deleteKeys(client, prefix);
  client.disconnect();
});

function gate(): { readonly opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
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

const backends = [
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

describe.each(backends)('replay outcome races $name', (backend) => {
  describe('when a dead letter is replayed while the dispatcher has stored it but not yet nacked its job', () => {
    it('never marks it replayed with nothing sent: the replay goes back (in memory) or is refused until the job settles (Redis), and then it is handled', async () => {
      let healthy = false;
      const handled: string[] = [];
      @CommandHandler(Charge)
      class Charger {
        handle(payload: PayloadOf<typeof Charge>): void {
          if (!healthy) throw new Error('card declined');
          handled.push(payload.orderId);
        }
      }
      let held!: ReturnType<typeof holdingAdds>;
      const bus = backend.make((s) => (held = holdingAdds(s)).store, [Charger]);
      buses.push(bus);
      await bus.start();
      await bus.send(Charge, { orderId: 'o-race' });
      await held.added; // the record is stored `dead`; the job is still active
      const [record] = (await bus.deadLetters.list()).records;
      if (record === undefined) throw new Error('expected a dead letter');
      healthy = true;
      const replayAt = Date.now();

      const [first] = await bus.replayDeadLetters([record.id]);
      held.release();
      if (backend.name === 'on Redis') {
        // Refused while the job is active, so the record stays dead and can be replayed again.
        expect(first).toMatchObject({ ok: false, error: 'redeliver-failed' });
        expect(first?.ok === false && first.message).toMatch(/still being handled/);
        expect((await bus.deadLetters.get(record.id))?.status).toBe('dead');
        await waitFor(
          'the replay to go through once the job has failed',
          async () => (await bus.replayDeadLetters([record.id]))[0]?.ok === true,
          { timeoutMs: 5_000 },
        );
      } else {
        expect(first?.ok).toBe(true);
      }
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

/** An in-memory store that counts the calls of `markReplayHandled`. */
class CountingStore extends InMemoryDeadLetterStore {
  handledCalls = 0;
  override markReplayHandled(id: string, at: number): Promise<boolean> {
    this.handledCalls++;
    return super.markReplayHandled(id, at);
  }
}

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
      let healthy = false;
      const handled: string[] = [];
      @CommandHandler(Charge)
      class Charger {
        handle(payload: PayloadOf<typeof Charge>): void {
          if (!healthy) throw new Error('card declined');
          handled.push(payload.orderId);
        }
      }
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
      healthy = true;
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
