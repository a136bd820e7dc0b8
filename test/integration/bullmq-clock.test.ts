import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { systemClock, type Clock } from '../../src/clock/clock.js';
import { silentLogger } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

/** A clock that runs at wall speed but `offsetMs` away from the wall clock. */
function offsetClock(offsetMs: number): Clock {
  return { now: () => Date.now() + offsetMs, setTimer: (ms, callback) => systemClock.setTimer(ms, callback) };
}

const opened: { broker: BullMqBroker; prefix: string; stop: AbortController }[] = [];

afterEach(async () => {
  const admin = new Redis(redisUrl);
  for (const { broker, prefix, stop } of opened.splice(0)) {
    stop.abort();
    await broker.close();
    await deleteKeys(admin, prefix);
  }
  admin.disconnect();
});

/** A broker on `clock` with one event subscription, and a pull of its next delivery. */
async function subscribed(clock: Clock): Promise<{
  broker: BullMqBroker;
  next: () => Promise<Delivery>;
}> {
  const prefix = freshPrefix();
  const broker = new BullMqBroker({ connection: redisUrl, prefix, clock, logger: silentLogger });
  const stop = new AbortController();
  opened.push({ broker, prefix, stop });
  await broker.register('shop', [{ kind: 'event', handler: 'audit', types: ['clock.Ticked'] }]);
  const iterator = broker.receiver({ endpoint: 'shop', signal: stop.signal })[Symbol.asyncIterator]();
  return {
    broker,
    next: async () => {
      const result = await iterator.next();
      if (result.done === true) throw new Error('the receiver ended');
      return result.value;
    },
  };
}

const RETRY_IN_MS = 600;

describe('BullMqBroker', () => {
  describe('.nack with retryAt', () => {
    for (const [label, offsetMs] of [
      ['ahead of', 3_600_000],
      ['behind', -3_600_000],
    ] as const) {
      describe(`when the injected clock is an hour ${label} the wall clock`, () => {
        it('redelivers once retryAt has passed on the injected clock, not before and not an hour off', async () => {
          const clock = offsetClock(offsetMs);
          const { broker, next } = await subscribed(clock);
          await broker.publish({ id: randomUUID(), kind: 'event', type: 'clock.Ticked', body: 'tick' });
          const first = await next();
          const retryAt = clock.now() + RETRY_IN_MS;
          await broker.nack(first.id, { retryAt });
          let timer: NodeJS.Timeout | undefined;
          const again = await Promise.race([
            next(),
            new Promise<undefined>((resolve) => (timer = setTimeout(resolve, 10_000, undefined))),
          ]);
          clearTimeout(timer);
          expect(again?.facts.attempt).toBe(2);
          expect(clock.now()).toBeGreaterThanOrEqual(retryAt);
          if (again !== undefined) await broker.ack(again.id);
        });
      });
    }
  });
});
