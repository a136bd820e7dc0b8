import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  EventHandler,
  Handles,
  Saga,
  StartedBy,
  createBus,
  defineCommand,
  defineEvent,
  sagaStateOf,
  silentLogger,
  type MessageBus,
  type PayloadOf,
  type SagaContext,
} from '../../src/index.js';
import { BullMqBroker, RedisDeadLetterStore, RedisSagaStore } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const OpenCart = defineCommand('sit.OpenCart', { schema: z.object({ cartId: z.string() }) });
const ItemAdded = defineEvent('sit.ItemAdded', { schema: z.object({ cartId: z.string() }) });
const CloseCart = defineCommand('sit.CloseCart', { schema: z.object({ cartId: z.string() }) });
const ExpireCart = defineCommand('sit.ExpireCart', { schema: z.object({ cartId: z.string() }) });
const CartExpired = defineEvent('sit.CartExpired', {
  schema: z.object({ cartId: z.string(), items: z.number() }),
});

const CartState = z.object({ items: z.number().default(0) });
type CartState = z.output<typeof CartState>;

@Saga('sit.Cart', { state: CartState })
class CartSaga {
  @StartedBy(OpenCart, { correlate: 'cartId' })
  open(_payload: PayloadOf<typeof OpenCart>, ctx: SagaContext<CartState>): void {
    ctx.state.items = 0;
  }

  @Handles(CloseCart, { correlate: 'cartId' })
  close(payload: PayloadOf<typeof CloseCart>, ctx: SagaContext<CartState>): void {
    ctx.requestTimeout(ExpireCart, 300, { cartId: payload.cartId });
  }

  @Handles(ItemAdded, { correlate: 'cartId' })
  async add(_payload: PayloadOf<typeof ItemAdded>, ctx: SagaContext<CartState>): Promise<void> {
    const seen = ctx.state.items;
    await new Promise((resolve) => setImmediate(resolve));
    ctx.setState({ items: seen + 1 });
  }

  @Handles(ExpireCart)
  expire(payload: PayloadOf<typeof ExpireCart>, ctx: SagaContext<CartState>): void {
    ctx.publish(CartExpired, { cartId: payload.cartId, items: ctx.state.items });
    ctx.complete();
  }
}

const expired: PayloadOf<typeof CartExpired>[] = [];

@EventHandler(CartExpired)
class ExpiredLog {
  handle(payload: PayloadOf<typeof CartExpired>): void {
    expired.push(payload);
  }
}

const buses: MessageBus[] = [];
let prefix = '';

afterEach(async () => {
  await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 200 })));
  const client = new Redis(redisUrl);
  await deleteKeys(client, prefix);
  client.disconnect();
});

/** One "process" of the endpoint: its own broker connection, lock and store client. */
function process(): { bus: MessageBus; store: RedisSagaStore } {
  const store = new RedisSagaStore({ connection: redisUrl, prefix });
  const bus = createBus({
    endpoint: 'carts',
    broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
    deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
    handlers: [ExpiredLog],
    sagas: [CartSaga],
    sagaStore: store,
    logger: silentLogger,
  });
  buses.push(bus);
  return { bus, store };
}

describe('Saga on BullMqBroker and RedisSagaStore', () => {
  it('takes 100 concurrent events across two processes without losing one, then its command timeout completes it once', async () => {
    prefix = `{sit-${randomUUID().slice(0, 8)}}`;
    expired.length = 0;
    const first = process();
    const second = process();
    await first.bus.start();
    await second.bus.start();
    await first.bus.send(OpenCart, { cartId: 'c-1' });
    await waitFor(
      'the cart saga to start',
      async () => (await first.store.get('sit.Cart', 'c-1')) !== undefined,
      {
        timeoutMs: 10_000,
      },
    );
    await Promise.all(Array.from({ length: 100 }, () => second.bus.publish(ItemAdded, { cartId: 'c-1' })));
    const items = async (): Promise<number | undefined> => {
      const instance = await first.store.get('sit.Cart', 'c-1');
      return instance === undefined ? undefined : sagaStateOf<CartState>(instance).items;
    };
    await waitFor('100 items', async () => (await items()) === 100, {
      timeoutMs: 20_000,
      explain: async () => `items ${await items()}`,
    });
    await second.bus.send(CloseCart, { cartId: 'c-1' });
    await waitFor('the cart to expire', () => expired.length > 0, { timeoutMs: 10_000 });
    expect((await first.store.get('sit.Cart', 'c-1'))?.status).toBe('completed');
    expect(expired).toEqual([{ cartId: 'c-1', items: 100 }]);
    expect(await first.bus.deadLetters.count()).toBe(0);
  });
});
