import { afterEach, describe, expect, it } from 'vitest';
import {
  InMemoryBroker,
  PUBLISH_YIELD_BACKLOG,
  type InMemoryBrokerOptions,
} from '../../../src/broker/in-memory-broker.js';
import {
  MAX_ATTEMPT_HISTORY,
  type Delivery,
  type ErrorInfo,
  type OutgoingMessage,
} from '../../../src/broker/message-broker.js';
import { ManualClock } from '../../../src/clock/manual-clock.js';
import { HarrierError } from '../../../src/errors/harrier-error.js';

const ENDPOINT = 'orders';
const TYPE = 'orders.PlaceOrder';
const boom: ErrorInfo = { name: 'Error', message: 'boom' };

let counter = 0;
const command = (extra: Partial<OutgoingMessage> = {}): OutgoingMessage => {
  counter++;
  return { id: `id-${counter}`, kind: 'command', type: TYPE, body: `body-${counter}`, ...extra };
};

/** Lets every pending promise continuation run; the in-memory broker never needs more than that. */
const flush = (): Promise<void> =>
  new Promise((resolve) => {
    setImmediate(resolve);
  });

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A broker on a manual clock with the `orders` endpoint taking `orders.PlaceOrder`. */
async function setup(options: Omit<InMemoryBrokerOptions, 'clock'> = {}) {
  const clock = new ManualClock();
  const broker = new InMemoryBroker({ clock, ...options });
  await broker.register(ENDPOINT, [{ handler: 'placeOrder', kind: 'command', types: [TYPE] }]);
  const controller = new AbortController();
  const iterator = broker.receiver({ endpoint: ENDPOINT, signal: controller.signal })[Symbol.asyncIterator]();
  cleanups.push(async () => {
    controller.abort();
    await broker.close();
  });
  let pending: Promise<IteratorResult<Delivery>> | undefined;
  /** Starts (or keeps) a pull and reports whether it has produced a delivery yet. */
  const poll = async (): Promise<Delivery | undefined> => {
    let result: IteratorResult<Delivery> | undefined;
    pending ??= iterator.next();
    void pending.then((r) => {
      result = r;
    });
    await flush();
    if (result === undefined) return undefined;
    pending = undefined;
    if (result.done === true) throw new Error('receiver ended');
    return result.value;
  };
  /** The delivery that is ready now; fails if there is none. */
  const take = async (): Promise<Delivery> => {
    const delivery = await poll();
    if (delivery === undefined) throw new Error('no delivery is ready');
    return delivery;
  };
  return { clock, broker, poll, take };
}

/**
 * Publishes `messages` one `publish` after another (as sequential `bus.send` calls do), then takes
 * and acks every delivery of `endpoint`; returns the bodies in delivery order.
 */
async function deliveryOrderOf(
  broker: InMemoryBroker,
  messages: readonly OutgoingMessage[],
  endpoint = ENDPOINT,
): Promise<string[]> {
  const controller = new AbortController();
  const iterator = broker.receiver({ endpoint, signal: controller.signal })[Symbol.asyncIterator]();
  for (const message of messages) await broker.publish(message);
  const bodies: string[] = [];
  try {
    while (bodies.length < messages.length) {
      const next = await iterator.next();
      if (next.done === true) throw new Error('receiver ended');
      bodies.push(next.value.body);
      await broker.ack(next.value.id);
    }
  } finally {
    controller.abort();
    await iterator.return?.();
  }
  return bodies;
}

/** A broker of `options` with the `orders` endpoint taking `orders.PlaceOrder` and `orders.CancelOrder`. */
async function brokerWith(options: InMemoryBrokerOptions): Promise<InMemoryBroker> {
  const broker = new InMemoryBroker(options);
  await broker.register(ENDPOINT, [
    { handler: 'placeOrder', kind: 'command', types: [TYPE], orderedTypes: [TYPE] },
    { handler: 'cancelOrder', kind: 'command', types: ['orders.CancelOrder'] },
  ]);
  cleanups.push(() => broker.close());
  return broker;
}

const numbered = (count: number, extra: (i: number) => Partial<OutgoingMessage> = () => ({})) =>
  Array.from({ length: count }, (_, i) => command({ body: `m${i}`, ...extra(i) }));

describe('InMemoryBroker', () => {
  describe('constructor', () => {
    describe('when deliveryOrder or seed is not an allowed value', () => {
      it('throws HarrierError "invalid-option" naming the allowed values', () => {
        const attempt = (options: InMemoryBrokerOptions): unknown => {
          try {
            return new InMemoryBroker(options);
          } catch (error) {
            return error;
          }
        };
        for (const options of [
          { deliveryOrder: 'random' as never },
          { seed: -1 },
          { seed: 1.5 },
          { seed: Number.NaN },
        ]) {
          const error = attempt(options);
          expect(HarrierError.is(error) && error.code).toBe('invalid-option');
          expect((error as Error).message).toMatch(/'fifo' or 'shuffled'|non-negative integer/);
        }
      });
    });
  });

  describe('.seed', () => {
    describe('when no seed is given', () => {
      it('is a random whole number, which replays the same order when passed back', async () => {
        const first = await brokerWith({ deliveryOrder: 'shuffled' });
        const other = await brokerWith({ deliveryOrder: 'shuffled' });
        expect(Number.isSafeInteger(first.seed)).toBe(true);
        expect(first.seed).not.toBe(other.seed);
        const replay = await brokerWith({ deliveryOrder: 'shuffled', seed: first.seed });
        expect(replay.seed).toBe(first.seed);
        expect(await deliveryOrderOf(replay, numbered(12))).toEqual(
          await deliveryOrderOf(first, numbered(12)),
        );
      });
    });
  });

  describe('.receiver', () => {
    describe('when deliveryOrder is fifo (the default)', () => {
      it('delivers messages in publish order', async () => {
        const broker = await brokerWith({});
        expect(broker.deliveryOrder).toBe('fifo');
        expect(await deliveryOrderOf(broker, numbered(12))).toEqual(numbered(12).map((m) => m.body));
      });
    });

    describe('when deliveryOrder is shuffled', () => {
      it('delivers messages that are not ordered out of publish order, the same order for the same seed', async () => {
        const inOrder = numbered(12).map((m) => m.body);
        const orders: string[][] = [];
        for (const seed of [1, 1, 2]) {
          const broker = await brokerWith({ deliveryOrder: 'shuffled', seed });
          orders.push(await deliveryOrderOf(broker, numbered(12)));
        }
        const [first, again, otherSeed] = orders;
        expect([...(first ?? [])].sort()).toEqual([...inOrder].sort());
        expect(first).not.toEqual(inOrder);
        expect(again).toEqual(first);
        expect(otherSeed).not.toEqual(first);
      });

      it('may deliver a later message of another queue first, even when the first is ordered', async () => {
        // The cancel is not ordered: an ordered message before it holds up nothing but its own key.
        const firsts = new Set<string>();
        for (let seed = 1; seed <= 20; seed++) {
          const broker = await brokerWith({ deliveryOrder: 'shuffled', seed });
          const [first] = await deliveryOrderOf(broker, [
            command({ body: 'place', partitionKey: 'o-1', ordered: true }),
            command({ body: 'cancel', type: 'orders.CancelOrder', partitionKey: 'o-1' }),
          ]);
          firsts.add(first ?? '');
        }
        expect(firsts).toEqual(new Set(['place', 'cancel']));
      });

      it('keeps publish order within each key of ordered messages and interleaves the keys at random', async () => {
        const keys = ['a', 'b', 'c'];
        const messages = numbered(15, (i) => ({
          body: `${keys[i % 3] ?? ''}${Math.floor(i / 3)}`,
          partitionKey: keys[i % 3],
          ordered: true,
        }));
        const interleavings = new Set<string>();
        for (let seed = 1; seed <= 5; seed++) {
          const broker = await brokerWith({ deliveryOrder: 'shuffled', seed });
          const delivered = await deliveryOrderOf(broker, messages);
          for (const key of keys) {
            expect(delivered.filter((body) => body.startsWith(key))).toEqual(
              [0, 1, 2, 3, 4].map((n) => `${key}${n}`),
            );
          }
          interleavings.add(delivered.join(' '));
        }
        expect(interleavings.size).toBeGreaterThan(1);
      });

      it('keeps publish order within a key across the ordered command types of one endpoint', async () => {
        const cancel = 'orders.CancelOrder';
        const messages = ['o-1', 'o-2', 'o-3'].flatMap((key) => [
          command({ body: `place ${key}`, partitionKey: key, ordered: true }),
          command({ body: `cancel ${key}`, type: cancel, partitionKey: key, ordered: true }),
        ]);
        const interleavings = new Set<string>();
        for (let seed = 1; seed <= 10; seed++) {
          const broker = await brokerWith({ deliveryOrder: 'shuffled', seed });
          const delivered = await deliveryOrderOf(broker, messages);
          for (const key of ['o-1', 'o-2', 'o-3']) {
            expect(delivered.filter((body) => body.endsWith(key))).toEqual([`place ${key}`, `cancel ${key}`]);
          }
          interleavings.add(delivered.join(', '));
        }
        expect(interleavings.size).toBeGreaterThan(1);
      });
    });

    describe('when ordered commands are published before an endpoint registered their type', () => {
      it('queues them unordered, and orders those published once the type is registered', async () => {
        const broker = new InMemoryBroker({ deliveryOrder: 'shuffled', seed: 3 });
        cleanups.push(() => broker.close());
        const early = numbered(6, () => ({ partitionKey: 'k', ordered: true, requireRoute: false }));
        for (const message of early) await broker.publish(message);
        await broker.register(ENDPOINT, [
          { handler: 'placeOrder', kind: 'command', types: [TYPE], orderedTypes: [TYPE] },
        ]);
        expect(broker.stats()).toMatchObject({ ready: 6, waiting: 0 });

        for (const message of numbered(6, () => ({ partitionKey: 'k', ordered: true })))
          await broker.publish(message);
        expect(broker.stats()).toMatchObject({ ready: 7, waiting: 5 });
      });
    });

    describe('when the endpoint that ordered a command type registers again without it', () => {
      it('keeps that type’s ordered messages out of its lane, and gives them in order to the next endpoint registering it', async () => {
        const broker = new InMemoryBroker();
        cleanups.push(() => broker.close());
        const cancel = 'orders.CancelOrder';
        const spec = (...types: string[]) =>
          types.map((type) => ({
            handler: type,
            kind: 'command' as const,
            types: [type],
            orderedTypes: [type],
          }));
        await broker.register(ENDPOINT, spec(TYPE, cancel));
        for (const body of ['place 1', 'place 2'])
          await broker.publish(command({ body, partitionKey: 'k', ordered: true }));
        await broker.publish(command({ body: 'cancel 1', type: cancel, partitionKey: 'k', ordered: true }));

        await broker.register(ENDPOINT, spec(cancel));
        const first = await broker.receiver({ endpoint: ENDPOINT })[Symbol.asyncIterator]().next();
        expect(first.done === true ? undefined : first.value.body).toBe('cancel 1');
        if (first.done !== true) await broker.ack(first.value.id);
        expect(broker.stats()).toMatchObject({ ready: 0, inFlight: 0, unconsumed: 2 });

        await broker.register('billing', spec(TYPE));
        const bodies: string[] = [];
        const iterator = broker.receiver({ endpoint: 'billing' })[Symbol.asyncIterator]();
        for (let i = 0; i < 2; i++) {
          const next = await iterator.next();
          if (next.done === true) throw new Error('receiver ended');
          bodies.push(next.value.body);
          expect(broker.stats().ready).toBe(0);
          await broker.ack(next.value.id);
        }
        expect(bodies).toEqual(['place 1', 'place 2']);
      });
    });

    describe('when a second endpoint registers a command type another endpoint registered first', () => {
      it('gives the second its unordered messages only: the ordered ones wait in the first endpoint’s lane', async () => {
        const broker = new InMemoryBroker();
        cleanups.push(() => broker.close());
        const spec = [
          { handler: 'placeOrder', kind: 'command' as const, types: [TYPE], orderedTypes: [TYPE] },
        ];
        await broker.register(ENDPOINT, spec);
        await broker.register('other', spec);
        await broker.publish(command({ body: 'ordered', partitionKey: 'k', ordered: true }));
        await broker.publish(command({ body: 'unordered' }));

        const other = await broker.receiver({ endpoint: 'other' })[Symbol.asyncIterator]().next();
        expect(other.done === true ? undefined : other.value.body).toBe('unordered');
        const first = await broker.receiver({ endpoint: ENDPOINT })[Symbol.asyncIterator]().next();
        expect(first.done === true ? undefined : first.value.body).toBe('ordered');
      });
    });
  });

  describe('.nack', () => {
    describe('when given retryAt on a manual clock', () => {
      it('redelivers exactly at retryAt and not a millisecond before, for each backoff step', async () => {
        const { clock, broker, poll, take } = await setup();
        await broker.publish(command());
        let delivery = await take();

        for (const [index, delayMs] of [200, 400, 800].entries()) {
          const retryAt = clock.now() + delayMs;
          await broker.nack(delivery.id, { retryAt, error: boom });

          clock.advanceTo(retryAt - 1);
          expect(await poll()).toBeUndefined();
          expect(broker.stats()).toEqual({ ready: 0, waiting: 1, inFlight: 0, unconsumed: 0 });

          clock.advance(1);
          delivery = await take();
          expect(clock.now()).toBe(retryAt);
          expect(delivery.facts.attempt).toBe(index + 2);
          expect(delivery.facts.history.at(-1)).toEqual({
            attempt: index + 1,
            at: retryAt - delayMs,
            error: boom,
          });
        }
      });

      it(`keeps only the newest ${MAX_ATTEMPT_HISTORY} attempts in the history`, async () => {
        const { broker, take } = await setup();
        await broker.publish(command());
        let delivery = await take();
        const failures = MAX_ATTEMPT_HISTORY + 2;

        for (let i = 0; i < failures; i++) {
          await broker.nack(delivery.id, {
            retryAt: 0,
            error: { name: 'Error', message: `failure ${i + 1}` },
          });
          delivery = await take();
        }

        expect(delivery.facts.attempt).toBe(failures + 1);
        expect(delivery.facts.history).toHaveLength(MAX_ATTEMPT_HISTORY);
        expect(delivery.facts.history[0]?.attempt).toBe(failures - MAX_ATTEMPT_HISTORY + 1);
        expect(delivery.facts.history.at(-1)?.error.message).toBe(`failure ${failures}`);
      });
    });
  });

  describe('.publish', () => {
    describe('when deliverAt is in the future on a manual clock', () => {
      it('delivers exactly at deliverAt', async () => {
        const { clock, broker, poll, take } = await setup();
        const deliverAt = clock.now() + 5_000;
        await broker.publish(command({ deliverAt }));

        clock.advanceTo(deliverAt - 1);
        expect(await poll()).toBeUndefined();
        clock.advance(1);

        expect((await take()).facts.attempt).toBe(1);
      });
    });

    describe('when the same id is published again', () => {
      it('drops it within the dedupe window and delivers it again once the window has passed', async () => {
        const { clock, broker, poll, take } = await setup({ dedupeWindowMs: 1_000 });
        const message = command();
        await broker.publish(message);
        await broker.ack((await take()).id);

        clock.advance(999);
        await broker.publish(message);
        expect(broker.stats()).toEqual({ ready: 0, waiting: 0, inFlight: 0, unconsumed: 0 });
        expect(await poll()).toBeUndefined();

        clock.advance(1);
        await broker.publish(message);
        const again = await take();
        expect(again.facts).toMatchObject({ messageId: message.id, attempt: 1 });
      });

      it('forgets the oldest ids first once dedupeMaxEntries is reached', async () => {
        const { broker, poll, take } = await setup({ dedupeMaxEntries: 2 });
        const [a, b, c] = [command(), command(), command()];
        for (const message of [a, b, c]) {
          await broker.publish(message);
          await broker.ack((await take()).id);
        }

        await broker.publish(c);
        expect(await poll()).toBeUndefined();
        await broker.publish(a);

        expect((await take()).facts.messageId).toBe(a.id);
      });
      it('never forgets an id early when the clock goes backwards', async () => {
        let now = 10_000;
        const clock = { now: () => now, setTimer: () => () => undefined };
        const broker = new InMemoryBroker({ clock, dedupeWindowMs: 1_000 });
        await broker.register(ENDPOINT, [{ handler: 'orders', kind: 'command', types: [TYPE] }]);
        cleanups.push(() => broker.close());
        const [a, b] = [command(), command()];
        await broker.publish(a);
        now = 5_000;
        await broker.publish(b);

        now = 5_999;
        await broker.publish(a);
        await broker.publish(b);
        expect(broker.stats().ready).toBe(2);
        now = 10_999;
        await broker.publish(a);
        await broker.publish(b);
        expect(broker.stats().ready).toBe(2);

        now = 11_000;
        await broker.publish(a);
        expect(broker.stats().ready).toBe(3);
      });

      it('delivers an id once per command type: the same id under another type is another message', async () => {
        const broker = new InMemoryBroker({ clock: new ManualClock() });
        const other = 'orders.CancelOrder';
        await broker.register(ENDPOINT, [{ handler: 'orders', kind: 'command', types: [TYPE, other] }]);
        cleanups.push(() => broker.close());
        const message = command();

        await broker.publish(message);
        await broker.publish({ ...message, type: other });
        await broker.publish(message);
        await broker.publish({ ...message, type: other });

        expect(broker.stats().ready).toBe(2);
      });

      describe('under another command type', () => {
        const other = 'orders.CancelOrder';
        /** A broker whose `orders` endpoint takes TYPE and `other`, cleaned up after the test. */
        const twoTypes = async (options: InMemoryBrokerOptions): Promise<InMemoryBroker> => {
          const broker = new InMemoryBroker(options);
          await broker.register(ENDPOINT, [{ handler: 'orders', kind: 'command', types: [TYPE, other] }]);
          cleanups.push(() => broker.close());
          return broker;
        };

        it("drops it while its window lasts, though the first type's entry has expired", async () => {
          const clock = new ManualClock();
          const broker = await twoTypes({ clock, dedupeWindowMs: 1_000 });
          const message = command();
          await broker.publish(message);
          clock.advance(500);
          await broker.publish({ ...message, type: other });
          clock.advance(600);
          // Any publish forgets the expired entries.
          await broker.publish(command());

          await broker.publish({ ...message, type: other });

          expect(broker.stats().ready).toBe(3);
        });

        it("drops it while it is among the dedupeMaxEntries newest, though the first type's entry is not", async () => {
          const broker = await twoTypes({ clock: new ManualClock(), dedupeMaxEntries: 2 });
          const message = command();
          await broker.publish(message);
          await broker.publish({ ...message, type: other });
          await broker.publish(command());

          await broker.publish({ ...message, type: other });

          expect(broker.stats().ready).toBe(3);
        });

        it('drops it with a window of years, or Infinity', async () => {
          for (const dedupeWindowMs of [10 * 365 * 86_400_000, Infinity]) {
            const broker = await twoTypes({ clock: new ManualClock(), dedupeWindowMs });
            for (const type of [TYPE, other]) {
              const message = command({ type });
              await broker.publish(message);
              await broker.publish(message);
            }

            expect(broker.stats().ready, `dedupeWindowMs ${dedupeWindowMs}`).toBe(2);
          }
        });
      });

      it('drops it on a clock with fractions of a millisecond', async () => {
        const { clock, broker } = await setup({ dedupeWindowMs: 1_000 });
        clock.advance(0.5);
        const message = command();

        await broker.publish(message);
        await broker.publish(message);

        expect(broker.stats().ready).toBe(1);
      });

      it('drops it in every subscription it reached, and reaches a subscription added since', async () => {
        const broker = new InMemoryBroker({ clock: new ManualClock() });
        const event: OutgoingMessage = { id: 'evt-1', kind: 'event', type: 'orders.OrderPlaced', body: 'e' };
        const sub = (handler: string) => [{ handler, kind: 'event' as const, types: [event.type] }];
        await broker.register('billing', sub('bill'));
        await broker.register('shipping', sub('ship'));
        cleanups.push(() => broker.close());

        await broker.publish(event);
        await broker.publish(event);
        expect(broker.stats().ready).toBe(2);

        await broker.register('audit', sub('audit'));
        await broker.publish(event);
        expect(broker.stats().ready).toBe(3);
      });
    });

    describe('when two subscriptions would have the same queue name because of a `~`', () => {
      it('keeps them apart: each gets its own copy of an event, naming its own handler', async () => {
        const broker = new InMemoryBroker({ clock: new ManualClock() });
        const event: OutgoingMessage = { id: 'evt-1', kind: 'event', type: 'orders.OrderPlaced', body: 'e' };
        // Both are named `evt~a~b~c`.
        await broker.register('a~b', [{ handler: 'c', kind: 'event', types: [event.type] }]);
        await broker.register('a', [{ handler: 'b~c', kind: 'event', types: [event.type] }]);
        cleanups.push(() => broker.close());

        await broker.publish(event);
        expect(broker.stats().ready).toBe(2);
        const first = async (endpoint: string): Promise<Delivery> => {
          const next = await broker.receiver({ endpoint })[Symbol.asyncIterator]().next();
          if (next.done === true) throw new Error('receiver ended');
          return next.value;
        };
        expect((await first('a~b')).facts).toMatchObject({ endpoint: 'a~b', handler: 'c' });
        expect((await first('a')).facts).toMatchObject({ endpoint: 'a', handler: 'b~c' });
      });
    });

    describe('when a producer awaits each publish while a receiver takes them', () => {
      it('keeps the ready backlog near PUBLISH_YIELD_BACKLOG instead of queueing the whole run', async () => {
        const broker = new InMemoryBroker();
        await broker.register(ENDPOINT, [{ handler: 'placeOrder', kind: 'command', types: [TYPE] }]);
        const controller = new AbortController();
        cleanups.push(async () => {
          controller.abort();
          await broker.close();
        });
        const consumed = (async () => {
          for await (const delivery of broker.receiver({ endpoint: ENDPOINT, signal: controller.signal })) {
            await broker.ack(delivery.id);
          }
        })();
        const total = PUBLISH_YIELD_BACKLOG * 4;
        let most = 0;

        for (let i = 0; i < total; i++) {
          await broker.publish(command());
          most = Math.max(most, broker.stats().ready);
        }

        expect(most).toBeLessThanOrEqual(PUBLISH_YIELD_BACKLOG + 1);
        controller.abort();
        await consumed;
      });
    });

    describe('when the broker is closed', () => {
      it('rejects with HarrierError "broker-closed", as do publishBatch, register and redeliver', async () => {
        const { broker } = await setup();
        await broker.close();
        const code = (promise: Promise<void>): Promise<string | undefined> =>
          promise.then(
            () => undefined,
            (error: unknown) => (HarrierError.is(error) ? error.code : 'not a HarrierError'),
          );

        expect(await code(broker.publish(command()))).toBe('broker-closed');
        expect(await code(broker.publishBatch([command()]))).toBe('broker-closed');
        expect(await code(broker.register('billing', []))).toBe('broker-closed');
        expect(
          await code(broker.redeliver({ endpoint: ENDPOINT, handler: 'placeOrder', message: command() })),
        ).toBe('broker-closed');
      });
    });
  });

  describe('.stats', () => {
    describe('when messages are ready, delayed, queued behind their key and in flight', () => {
      it('counts each of them', async () => {
        const { clock, broker, take } = await setup();
        await broker.publish(command({ partitionKey: 'k', ordered: true }));
        await broker.publish(command({ partitionKey: 'k', ordered: true }));
        await broker.publish(command({ deliverAt: clock.now() + 100 }));
        expect(broker.stats()).toEqual({ ready: 1, waiting: 2, inFlight: 0, unconsumed: 0 });

        const first = await take();
        expect(broker.stats()).toEqual({ ready: 0, waiting: 2, inFlight: 1, unconsumed: 0 });

        await broker.ack(first.id);
        expect(broker.stats()).toEqual({ ready: 1, waiting: 1, inFlight: 0, unconsumed: 0 });

        clock.advance(100);
        expect(broker.stats()).toEqual({ ready: 2, waiting: 0, inFlight: 0, unconsumed: 0 });

        const second = await take();
        await broker.nack(second.id, { retryAt: clock.now() + 50 });
        expect(broker.stats()).toEqual({ ready: 1, waiting: 1, inFlight: 0, unconsumed: 0 });

        await broker.nack((await take()).id, { deadLetter: 'handler-failed' });
        expect(broker.stats()).toEqual({ ready: 0, waiting: 1, inFlight: 0, unconsumed: 0 });
      });
    });
  });

  describe('.queueDepths', () => {
    describe('when messages wait, are delayed, are in flight, then are consumed', () => {
      it('counts them per queue of the endpoint by state, and zero once they are acked', async () => {
        const { clock, broker, take } = await setup();
        const depth = async () => broker.queueDepths(ENDPOINT);
        await broker.publish(command({ partitionKey: 'k', ordered: true }));
        await broker.publish(command({ partitionKey: 'k', ordered: true }));
        await broker.publish(command({ deliverAt: clock.now() + 100 }));
        expect(await depth()).toEqual([{ queue: `cmd~${TYPE}`, waiting: 2, active: 0, delayed: 1 }]);

        const first = await take();
        expect(await depth()).toEqual([{ queue: `cmd~${TYPE}`, waiting: 1, active: 1, delayed: 1 }]);

        await broker.nack(first.id, { retryAt: clock.now() + 50 });
        expect(await depth()).toEqual([{ queue: `cmd~${TYPE}`, waiting: 1, active: 0, delayed: 2 }]);

        clock.advance(100);
        for (let i = 0; i < 3; i++) await broker.ack((await take()).id);
        expect(await depth()).toEqual([{ queue: `cmd~${TYPE}`, waiting: 0, active: 0, delayed: 0 }]);
      });
    });

    describe('for an endpoint with event subscriptions, or none registered', () => {
      it('lists each subscription queue, and nothing for an unknown endpoint', async () => {
        const broker = new InMemoryBroker();
        cleanups.push(() => broker.close());
        await broker.register('billing', [
          { handler: 'invoice', kind: 'event', types: ['orders.OrderPlaced'] },
          { handler: 'audit', kind: 'event', types: ['orders.OrderPlaced'] },
        ]);
        await broker.publish({ id: 'e-1', kind: 'event', type: 'orders.OrderPlaced', body: '{}' });
        expect(await broker.queueDepths('billing')).toEqual([
          { queue: 'evt~billing~invoice', waiting: 1, active: 0, delayed: 0 },
          { queue: 'evt~billing~audit', waiting: 1, active: 0, delayed: 0 },
        ]);
        expect(await broker.queueDepths('nobody')).toEqual([]);
      });
    });
  });

  describe('.onChange', () => {
    describe('when what the broker holds changes', () => {
      it('calls the listener on publish, delivery, settlement and due timers until unsubscribed', async () => {
        const { clock, broker, take } = await setup();
        let calls = 0;
        const unsubscribe = broker.onChange(() => {
          calls++;
        });

        await broker.publish(command());
        expect(calls).toBe(1);
        const delivery = await take();
        expect(calls).toBe(2);
        await broker.nack(delivery.id, { retryAt: clock.now() + 10 });
        expect(calls).toBe(3);
        clock.advance(10);
        expect(calls).toBe(4);
        await broker.ack((await take()).id);
        expect(calls).toBe(6);

        unsubscribe();
        await broker.publish(command());
        expect(calls).toBe(6);
      });
    });
  });
});
