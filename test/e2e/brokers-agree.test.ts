import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  EventHandler,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  UnrecoverableError,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  uuidv7,
  type DeadLetterStore,
  type MessageBroker,
  type MessageBus,
} from '../../src/index.js';
import { PostgresDeadLetterStore, migratePostgres } from '../../src/postgres/index.js';
import { RabbitMqBroker } from '../../src/rabbitmq/index.js';
import { BullMqBroker, RedisDeadLetterStore, RedisDeliveryLedger } from '../../src/redis/index.js';
import { createTestBus } from '../../src/testing/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { freshBrokerPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';
import {
  RIGHT_SHOP_MODEL,
  SHOP_DELIVERIES,
  orderLifecycleApp,
  shopApp,
  type ShopModel,
} from '../helpers/shop-app.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const redisUrl = inject('redisUrl');

/**
 * The README's Redis code uses the default key prefix, so its run gets a database of its own on the
 * test Redis; its `{harrier}` keys there are deleted before and after.
 */
const README_DB = 11;
const readmeRedisUrl = ((): string => {
  const url = new URL(redisUrl);
  url.pathname = `/${README_DB}`;
  return url.toString();
})();

interface Run {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs an example under tsx as a user would. With `until`, the example is a service that runs until
 * stopped: once its output matches, it gets SIGTERM (as a process manager stops it). Without, it
 * must exit on its own. Either way it is killed after `timeoutMs`.
 */
function runExample(
  file: string,
  options: { env?: Record<string, string>; until?: RegExp; timeoutMs: number },
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let stopped = false;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      if (!stopped && options.until?.test(stdout) === true) {
        stopped = true;
        child.kill('SIGTERM');
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** What the orders example ends with, whichever broker ran it. */
interface OrdersOutcome {
  /** Rows of the order-summary read model; generated ids are reduced to their shape. */
  readonly summaries: string[];
  /** How the order-fulfilment saga ended each order, as printed from its store. */
  readonly fulfilment: string[];
  /** Handler / type / key / reason / attempts / fingerprint of each dead letter, sorted. */
  readonly deadLetters: string[];
  readonly lastErrors: string[];
  readonly replayed: number | undefined;
  readonly deadLettersLeft: number | undefined;
  readonly handled: number | undefined;
  readonly retries: number | undefined;
  readonly deadLettered: number | undefined;
}

/** Reads the outcome from the printed output of `npm start` or `npm run example:redis`. */
function ordersOutcome(stdout: string): OrdersOutcome {
  const lines = stdout.split('\n');
  const number = (pattern: RegExp): number | undefined => {
    const found = pattern.exec(stdout)?.[1];
    return found === undefined ? undefined : Number(found);
  };
  return {
    summaries: lines
      .filter((line) => /^\s+o-\d+\s/.test(line))
      .map((line) =>
        line
          .trim()
          .replace(/res-\d{4}/, 'res-####')
          .replace(/pay-\d{4}/, 'pay-####')
          .split(/\s+/)
          .join(' '),
      ),
    fulfilment: lines.filter((line) => /^\s+order o-\d+: /.test(line)).map((line) => line.trim()),
    deadLetters: lines
      .filter((line) => /^\s+\S+ \/ \S+ \/ \S+: reason /.test(line))
      .map((line) => line.trim())
      .sort(),
    lastErrors: lines
      .filter((line) => line.trim().startsWith('last error:'))
      .map((line) => line.trim())
      .sort(),
    replayed: number(/(\d+) replayed/),
    deadLettersLeft: number(/dead letters left(?: in Redis)?: (\d+)/),
    handled: number(/Done: (\d+) handled/),
    retries: number(/Done: \d+ handled, (\d+) retries/),
    deadLettered: number(/Done: \d+ handled, \d+ retries, (\d+) dead-lettered/),
  };
}

/** The fenced code blocks of the README that start with `// examples/...`, by the path they name. */
function readmeBlocks(): Map<string, string> {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const blocks = new Map<string, string>();
  for (const match of readme.matchAll(/```ts\n(\/\/ (examples\/\S+)\n[\s\S]*?)```\n/g)) {
    const [, code, path] = match;
    if (code !== undefined && path !== undefined) blocks.set(path, code);
  }
  return blocks;
}

describe('the same app on both brokers', () => {
  describe('README example', () => {
    describe('its code blocks', () => {
      it('are the files of examples/readme, character for character', () => {
        const blocks = readmeBlocks();
        expect([...blocks.keys()].sort()).toEqual([
          'examples/readme/main.ts',
          'examples/readme/orders.ts',
          'examples/readme/redis-main.ts',
        ]);
        for (const [path, code] of blocks) {
          expect(code, path).toBe(readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8'));
        }
      });
    });

    describe('when run on the in-memory broker and on Redis', () => {
      let admin: Redis;
      let inMemory: Run;
      let onRedis: Run;
      const confirmation = /Order o-1 placed, total 42\n/;

      beforeAll(async () => {
        admin = new Redis(readmeRedisUrl);
        await deleteKeys(admin, '{harrier}');
        [inMemory, onRedis] = await Promise.all([
          runExample('examples/readme/main.ts', { timeoutMs: 30_000 }),
          runExample('examples/readme/redis-main.ts', {
            env: { REDIS_URL: readmeRedisUrl },
            until: confirmation,
            timeoutMs: 30_000,
          }),
        ]);
      }, 60_000);

      afterAll(async () => {
        await deleteKeys(admin, '{harrier}');
        await admin.quit();
      });

      it('prints the same confirmation on both, and nothing on stderr', () => {
        expect(inMemory.stdout, inMemory.stderr).toBe('Order o-1 placed, total 42\n');
        expect(onRedis.stdout, onRedis.stderr).toBe(inMemory.stdout);
        expect(inMemory.stderr + onRedis.stderr).toBe('');
      });

      it('exits with code 0: in memory on its own, on Redis after SIGTERM once bus.stop() has closed every connection', () => {
        expect(inMemory.code).toBe(0);
        expect(onRedis.code).toBe(0);
      });
    });
  });

  describe('orders example', () => {
    describe('when run with npm start (in memory) and npm run example:redis (two workers on Redis)', () => {
      let inMemory: Run;
      let onRedis: Run;
      let memory: OrdersOutcome;
      let redis: OrdersOutcome;

      beforeAll(async () => {
        [inMemory, onRedis] = await Promise.all([
          runExample('examples/orders/main.ts', { timeoutMs: 30_000 }),
          runExample('examples/orders/redis-main.ts', { env: { REDIS_URL: redisUrl }, timeoutMs: 60_000 }),
        ]);
        memory = ordersOutcome(inMemory.stdout);
        redis = ordersOutcome(onRedis.stdout);
      }, 90_000);

      it('exits with code 0 on both', () => {
        expect(inMemory.code, inMemory.stdout + inMemory.stderr).toBe(0);
        expect(onRedis.code, onRedis.stdout + onRedis.stderr).toBe(0);
      });

      it('builds the same order-summary read model', () => {
        expect(memory.summaries).toHaveLength(3);
        expect(redis.summaries).toEqual(memory.summaries);
      });

      it('ends each order the same way through the fulfilment saga: o-1001 paid before its stock was reserved and o-1002 after, both shipped; o-1003 cancelled by its timeout', () => {
        expect(memory.fulfilment).toEqual([
          'order o-1001: paid, stock reserved -> ready to ship',
          'order o-1002: stock reserved, paid -> ready to ship',
          'order o-1003: stock reserved, not paid in 2 s -> cancelled, stock released',
        ]);
        expect(redis.fulfilment).toEqual(memory.fulfilment);
      });

      it('dead-letters the same messages for the same reason, and replays them all', () => {
        expect(memory.deadLetters).toHaveLength(3);
        expect(redis.deadLetters).toEqual(memory.deadLetters);
        expect(redis.lastErrors).toEqual(memory.lastErrors);
        expect([memory.replayed, memory.deadLettersLeft]).toEqual([3, 0]);
        expect([redis.replayed, redis.deadLettersLeft]).toEqual([3, 0]);
      });

      it('counts the same handled, retried and dead-lettered deliveries', () => {
        expect(memory.handled).toBeGreaterThan(0);
        expect([redis.handled, redis.retries, redis.deadLettered]).toEqual([
          memory.handled,
          memory.retries,
          memory.deadLettered,
        ]);
      });
    });
  });

  describe('an app whose definitions ask for per-key order', () => {
    describe('when run on the shuffled test bus and on Redis', () => {
      let admin: Redis;
      const prefix = freshPrefix();
      let redisBus: MessageBus | undefined;

      beforeAll(() => {
        admin = new Redis(redisUrl);
      });

      afterAll(async () => {
        await redisBus?.stop();
        await deleteKeys(admin, prefix);
        await admin.quit();
      });

      it('gives the same, right read model on both', async () => {
        const inMemory = shopApp(true);
        const testBus = await createTestBus({ handlers: inMemory.handlers });
        await inMemory.play(testBus);
        await testBus.whenIdle();
        await testBus.stop();

        const onRedis = shopApp(true);
        let handled = 0;
        redisBus = createBus({
          endpoint: 'shop',
          handlers: onRedis.handlers,
          broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
          deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
          logger: silentLogger,
          hooks: {
            onHandled: () => {
              handled++;
            },
          },
        });
        await redisBus.start();
        await onRedis.play(redisBus);
        await waitFor('every shop message to be handled on Redis', () => handled >= SHOP_DELIVERIES, {
          timeoutMs: 20_000,
          explain: () => `${handled} of ${SHOP_DELIVERIES} handled`,
        });

        const models: ShopModel[] = [inMemory.model(), onRedis.model()];
        expect(models[0], `test bus seed ${testBus.seed}`).toEqual(RIGHT_SHOP_MODEL);
        expect(models[1]).toEqual(models[0]);
      });
    });
  });

  describe('an app that sends CancelOrder right after a slow PlaceOrder of the same order', () => {
    describe('when both commands are ordered', () => {
      let admin: Redis;
      const prefixes: string[] = [];

      beforeAll(() => {
        admin = new Redis(redisUrl);
      });

      afterAll(async () => {
        for (const prefix of prefixes) await deleteKeys(admin, prefix);
        await admin.quit();
      });

      /** One run on a fresh bus of `broker`: PlaceOrder (300 ms) then CancelOrder for two orders. */
      async function run(broker: MessageBroker): Promise<Record<string, string>> {
        const app = orderLifecycleApp({ ordered: true, placeMs: 300 });
        const orders = ['r-1', 'r-2'];
        let handled = 0;
        const bus = createBus({
          endpoint: 'shop',
          handlers: app.handlers,
          broker,
          logger: silentLogger,
          hooks: {
            onHandled: () => {
              handled++;
            },
          },
        });
        try {
          await bus.start();
          await app.play(bus, orders);
          const expected = orders.length * app.deliveriesPerOrder;
          await waitFor('every message of the run to be handled', () => handled >= expected, {
            timeoutMs: 20_000,
            explain: () => `${handled} of ${expected} handled`,
          });
          return app.statuses();
        } finally {
          await bus.stop();
        }
      }

      const CANCELLED = { 'r-1': 'cancelled', 'r-2': 'cancelled' };

      it('ends every order cancelled on Redis, run after run', async () => {
        for (let i = 0; i < 3; i++) {
          const prefix = freshPrefix();
          prefixes.push(prefix);
          const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
          expect(await run(broker), `run ${i + 1}`).toEqual(CANCELLED);
        }
      }, 90_000);

      it('ends every order cancelled in memory, in publish order and shuffled, run after run', async () => {
        for (let seed = 1; seed <= 3; seed++) {
          for (const deliveryOrder of ['fifo', 'shuffled'] as const) {
            const broker = new InMemoryBroker({ deliveryOrder, seed });
            expect(await run(broker), `${deliveryOrder}, seed ${seed}`).toEqual(CANCELLED);
          }
        }
      }, 60_000);
    });
  });

  describe('a message dead-lettered on any broker', () => {
    let admin: Redis;
    const prefix = freshPrefix();

    beforeAll(() => {
      admin = new Redis(redisUrl);
    });

    afterAll(async () => {
      await deleteKeys(admin, prefix);
      await admin.quit();
    });

    it('gets the same dead-letter id in memory, on Redis and on RabbitMQ (its dead letters in PostgreSQL): a command, an ordered command and an event subscription', async () => {
      const schema = z.object({ orderId: z.string() });
      const Charge = defineCommand('agree.Charge', { schema });
      const Refund = defineCommand('agree.Refund', { schema, partitionKey: 'orderId', ordered: true });
      const Paid = defineEvent('agree.Paid', { schema, partitionKey: 'orderId', ordered: true });

      @CommandHandler(Charge)
      class ChargeHandler {
        handle(): void {
          throw new UnrecoverableError('card declined');
        }
      }
      @CommandHandler(Refund)
      class RefundHandler {
        handle(): void {
          throw new UnrecoverableError('nothing to refund');
        }
      }
      @EventHandler(Paid)
      class Receipts {
        handle(): void {
          throw new UnrecoverableError('no printer');
        }
      }

      const ids = { charge: uuidv7(), refund: uuidv7(), paid: uuidv7() };
      /** The ids of the dead letters the three messages leave on a bus of `broker` and `store`. */
      async function deadLetterIds(broker: MessageBroker, store: DeadLetterStore): Promise<string[]> {
        const bus = createBus({
          endpoint: 'billing',
          handlers: [ChargeHandler, RefundHandler, Receipts],
          broker,
          deadLetters: store,
          logger: silentLogger,
        });
        try {
          await bus.start();
          await bus.send(Charge, { orderId: 'o-1' }, { id: ids.charge });
          await bus.send(Refund, { orderId: 'o-1' }, { id: ids.refund });
          await bus.publish(Paid, { orderId: 'o-1' }, { id: ids.paid });
          await waitFor('the three dead letters', async () => (await store.count()) === 3, {
            timeoutMs: 20_000,
          });
          const { records } = await store.list();
          return records.map((record) => record.id).sort();
        } finally {
          await bus.stop();
        }
      }

      const inMemory = await deadLetterIds(new InMemoryBroker(), new InMemoryDeadLetterStore());
      const redisStore = new RedisDeadLetterStore({ connection: redisUrl, prefix });
      try {
        const onRedis = await deadLetterIds(
          new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
          redisStore,
        );
        expect(inMemory).toHaveLength(3);
        expect(onRedis).toEqual(inMemory);
      } finally {
        await redisStore.close();
      }
      const pgSchema = `agree_${prefix
        .replace(/[^a-z0-9]/gi, '')
        .toLowerCase()
        .slice(-24)}`;
      const databaseUrl = inject('databaseUrl');
      await migratePostgres(databaseUrl, { schema: pgSchema });
      const postgresStore = new PostgresDeadLetterStore({ connection: databaseUrl, schema: pgSchema });
      const ledger = new RedisDeliveryLedger({ connection: redisUrl, prefix });
      try {
        const rabbitPrefix = freshBrokerPrefix();
        const onRabbit = await deadLetterIds(
          new RabbitMqBroker({
            connection: await rabbitmqUrl(),
            prefix: rabbitPrefix,
            ledger,
            logger: silentLogger,
          }),
          postgresStore,
        );
        expect(onRabbit).toEqual(inMemory);
      } finally {
        await postgresStore.close();
        await ledger.close();
      }
    }, 90_000);
  });
});
