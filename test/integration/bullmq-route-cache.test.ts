import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { Delivery } from '../../src/broker/message-broker.js';
import { ManualClock, silentLogger } from '../../src/index.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const TYPE = 'routes.Happened';

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A broker of its own, as another process would have; closed after the test. */
function processBroker(prefix: string): BullMqBroker {
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  cleanups.push(() => broker.close());
  return broker;
}

/** Registers `endpoint` as a subscriber of TYPE on its own broker and returns a pull of its deliveries. */
async function subscriber(prefix: string, endpoint: string): Promise<() => Promise<Delivery>> {
  const broker = processBroker(prefix);
  await broker.register(endpoint, [{ kind: 'event', handler: 'audit', types: [TYPE] }]);
  const stop = new AbortController();
  cleanups.push(() => {
    stop.abort();
    return Promise.resolve();
  });
  const deliveries = broker.receiver({ endpoint, signal: stop.signal })[Symbol.asyncIterator]();
  return async () => {
    const result = await deliveries.next();
    if (result.done === true) throw new Error(`the receiver of ${endpoint} ended`);
    await broker.ack(result.value.id);
    return result.value;
  };
}

const event = (body: string) => ({ id: randomUUID(), kind: 'event' as const, type: TYPE, body });

/** Every command Redis runs for `prefix` (from MONITOR; commands run inside scripts left out). */
async function monitorCommands(prefix: string): Promise<string[][]> {
  const admin = new Redis(redisUrl);
  const monitor = await admin.monitor();
  const seen: string[][] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args.some((arg) => arg.startsWith(prefix))) seen.push(args);
  });
  cleanups.push(async () => {
    monitor.disconnect();
    await deleteKeys(admin, prefix);
    admin.disconnect();
  });
  return seen;
}

/** `promise`, or a rejection naming `what` once `ms` passed without it settling. */
async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`No ${what} within ${String(ms)} ms`));
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe('BullMqBroker', () => {
  describe('.publish', () => {
    describe('when another process subscribes after the publisher has cached the routes', () => {
      it('delivers the next event to the new subscriber too', async () => {
        const prefix = freshPrefix();
        const admin = new Redis(redisUrl);
        cleanups.push(async () => {
          await deleteKeys(admin, prefix);
          admin.disconnect();
        });
        const billing = await subscriber(prefix, 'billing');
        const publisher = processBroker(prefix);
        await publisher.publish(event('first'));
        expect((await billing()).body).toBe('first');

        const shipping = await subscriber(prefix, 'shipping');
        await publisher.publish(event('second'));
        expect((await billing()).body).toBe('second');
        expect((await shipping()).body).toBe('second');
      });
    });

    describe('when Redis lost its data after the publisher cached the routes', () => {
      it('delivers to a subscriber registered after the loss, though registrations counted from 1 again', async () => {
        const prefix = freshPrefix();
        const admin = new Redis(redisUrl);
        cleanups.push(async () => {
          await deleteKeys(admin, prefix);
          admin.disconnect();
        });
        // Registered once before the loss, as once after it: the registration counter reads 1 both times.
        await processBroker(prefix).register('billing', [{ kind: 'event', handler: 'audit', types: [TYPE] }]);
        const publisher = processBroker(prefix);
        await publisher.publish(event('before'));

        // The loss: a restart without persistence, FLUSHALL, a failover to a replica behind.
        await deleteKeys(admin, prefix);
        const shipping = await subscriber(prefix, 'shipping');
        await publisher.publish(event('after'));
        expect(
          (await within(5_000, shipping(), 'event at the subscriber registered after the loss')).body,
        ).toBe('after');
      });
    });

    describe('when another process registers an endpoint again without a subscription the publisher cached', () => {
      it('gives the removed subscription no copy of the next event', async () => {
        const prefix = freshPrefix();
        const admin = new Redis(redisUrl);
        cleanups.push(async () => {
          await deleteKeys(admin, prefix);
          admin.disconnect();
        });
        const both = [
          { kind: 'event', handler: 'audit', types: [TYPE] },
          { kind: 'event', handler: 'mail', types: [TYPE] },
        ] as const;
        await processBroker(prefix).register('billing', both);
        const publisher = processBroker(prefix);
        await publisher.publish(event('first'));
        const waiting = (handler: string): Promise<number> =>
          admin.llen(`${prefix}:evt~billing~${handler}:wait`);
        expect([await waiting('audit'), await waiting('mail')]).toEqual([1, 1]);

        await processBroker(prefix).register('billing', [both[0]]);
        await publisher.publish(event('second'));

        expect([await waiting('audit'), await waiting('mail')]).toEqual([2, 1]);
      });
    });

    describe('when another process registers an endpoint again without a command type the publisher knew', () => {
      it('still accepts the type for up to a second of its clock, then refuses it with no-route', async () => {
        const prefix = freshPrefix();
        const admin = new Redis(redisUrl);
        cleanups.push(async () => {
          await deleteKeys(admin, prefix);
          admin.disconnect();
        });
        const COMMAND = 'routes.Charge';
        const command = () => ({ id: randomUUID(), kind: 'command' as const, type: COMMAND, body: '{}' });
        await processBroker(prefix).register('billing', [
          { kind: 'command', handler: 'charge', types: [COMMAND] },
        ]);
        const clock = new ManualClock(Date.now());
        const publisher = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger, clock });
        cleanups.push(() => publisher.close());
        await publisher.publish(command());

        await processBroker(prefix).register('billing', []);
        clock.advance(999);
        await publisher.publish(command());
        clock.advance(1);

        expectCode(await failureOf(() => publisher.publish(command())), 'no-route');
        expect(await admin.llen(`${prefix}:cmd~${COMMAND}:wait`)).toBe(2);
      });
    });

    describe('when the routes have not changed since the last publish', () => {
      it('reads only the routes version, not the routes hash', async () => {
        const prefix = freshPrefix();
        const seen = await monitorCommands(prefix);
        const billing = await subscriber(prefix, 'billing');
        const publisher = processBroker(prefix);
        await publisher.publish(event('warm-up'));
        await billing();
        const routesKey = `${prefix}:harrier:routes:${TYPE}`;
        const versionKey = `${prefix}:harrier:routes-version`;
        const count = (command: string, key: string): number =>
          seen.filter((args) => args[0]?.toLowerCase() === command && args[1] === key).length;
        await waitFor('the warm-up publish in MONITOR', () => count('hgetall', routesKey) === 1, {
          timeoutMs: 5_000,
        });
        const before = count('get', versionKey);

        for (let i = 0; i < 10; i++) await publisher.publish(event(`steady ${i}`));
        for (let i = 0; i < 10; i++) expect((await billing()).body).toBe(`steady ${i}`);
        await waitFor('one routes-version read per publish', () => count('get', versionKey) >= before + 10, {
          timeoutMs: 5_000,
          explain: () => `saw ${count('get', versionKey) - before} reads of ${versionKey}`,
        });
        expect(count('hgetall', routesKey)).toBe(1);
      });
    });
  });
});
