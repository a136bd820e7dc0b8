import { afterEach, describe, expect, it } from 'vitest';
import { InMemoryBroker, type InMemoryBrokerOptions } from '../../../src/broker/in-memory-broker.js';
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

describe('InMemoryBroker', () => {
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
