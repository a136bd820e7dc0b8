import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  HarrierError,
  createBus,
  defineCommand,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const Charge = defineCommand('routes.Charge', { schema: z.object({ orderId: z.string() }) });

const buses: MessageBus[] = [];
const clients: Redis[] = [];
const prefixes: string[] = [];

function prefix(): string {
  const p = `{hrt-routes-${randomUUID().slice(0, 8)}}`;
  prefixes.push(p);
  return p;
}

function client(): Redis {
  const c = new Redis(redisUrl);
  clients.push(c);
  return c;
}

/** One process's bus: its own BullMqBroker, as another process would have. */
function processBus(p: string, options: Parameters<typeof createBus>[0] = {}): MessageBus {
  const bus = createBus({
    broker: new BullMqBroker({ connection: redisUrl, prefix: p, logger: silentLogger }),
    logger: silentLogger,
    ...options,
  });
  buses.push(bus);
  return bus;
}

/** The billing endpoint: handles Charge and reports each order id it handles. */
function billing(p: string, seen: string[]): MessageBus {
  @CommandHandler(Charge)
  class ChargeHandler {
    handle(payload: PayloadOf<typeof Charge>): void {
      seen.push(payload.orderId);
    }
  }
  return processBus(p, { endpoint: 'billing', handlers: [ChargeHandler] });
}

/** A sender that hosts no handler of Charge. */
const web = (p: string): MessageBus => processBus(p, { endpoint: 'web', definitions: [Charge] });

const failure = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => undefined,
    (error: unknown) => error,
  );

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 200 })));
  const admin = new Redis(redisUrl);
  for (const p of prefixes.splice(0)) await deleteKeys(admin, p);
  admin.disconnect();
  for (const c of clients.splice(0)) c.disconnect();
});

describe('BullMqBroker', () => {
  describe('.publish', () => {
    describe("when the command's endpoint registered from another process", () => {
      it('accepts the command from a sender that hosts no handler, and the handler gets it', async () => {
        const p = prefix();
        const seen: string[] = [];
        await billing(p, seen).start();

        await web(p).send(Charge, { orderId: 'o-1' });

        await waitFor('the command to be handled', () => seen.length > 0, { timeoutMs: 10_000 });
        expect(seen).toEqual(['o-1']);
      });
    });

    describe("when the command's endpoint registered in an earlier run and is stopped now", () => {
      it('accepts the command, which waits in its queue until the handler starts again', async () => {
        const p = prefix();
        const earlier: string[] = [];
        const first = billing(p, earlier);
        await first.start();
        await first.stop();

        await web(p).send(Charge, { orderId: 'o-1' });

        const seen: string[] = [];
        await billing(p, seen).start();
        await waitFor('the command to be handled', () => seen.length > 0, { timeoutMs: 10_000 });
        expect(seen).toEqual(['o-1']);
        expect(earlier).toEqual([]);
      });
    });

    describe('when no endpoint ever registered the command type', () => {
      it('refuses it with no-route, and the same sender is accepted once the endpoint registers', async () => {
        const p = prefix();
        const sender = web(p);

        const error = await failure(sender.send(Charge, { orderId: 'o-1' }));

        expect(HarrierError.is(error) && error.code).toBe('no-route');
        expect((error as Error).message).toContain('@CommandHandler(Charge)');
        const seen: string[] = [];
        await billing(p, seen).start();
        await sender.send(Charge, { orderId: 'o-2' });
        await waitFor('the command to be handled', () => seen.length > 0, { timeoutMs: 10_000 });
        expect(seen).toEqual(['o-2']);
      });
    });

    describe('when the endpoint was registered by an earlier build', () => {
      it('finds the route in the endpoints hash and accepts the command', async () => {
        const p = prefix();
        // What register() writes, without the event routes or the running endpoint.
        await client().hset(
          `${p}:harrier:endpoints`,
          'billing',
          JSON.stringify({
            subscriptions: [{ handler: 'ChargeHandler', kind: 'command', types: [Charge.type] }],
            registeredAt: Date.now(),
          }),
        );

        await web(p).send(Charge, { orderId: 'o-1' });

        const seen: string[] = [];
        await billing(p, seen).start();
        await waitFor('the command to be handled', () => seen.length > 0, { timeoutMs: 10_000 });
        expect(seen).toEqual(['o-1']);
      });
    });

    describe('when the sender has seen the route once', () => {
      it('keeps accepting the command without asking Redis again', async () => {
        const p = prefix();
        await billing(p, []).start();
        const sender = web(p);
        await sender.send(Charge, { orderId: 'o-0' });
        // Take the route out of Redis: only the sender's cache can still accept the commands.
        await client().del(`${p}:harrier:endpoints`);

        for (let i = 1; i <= 20; i++) await sender.send(Charge, { orderId: `o-${i}` });

        const error = await failure(web(p).send(Charge, { orderId: 'o-new' }));
        expect(HarrierError.is(error) && error.code).toBe('no-route');
      });
    });
  });
});
