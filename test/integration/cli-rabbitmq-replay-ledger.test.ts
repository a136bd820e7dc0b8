import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { DeliveryLedger } from '../../src/broker/delivery-ledger.js';
import type { Delivery } from '../../src/broker/message-broker.js';
import type { DeadLetterRecord, DeadLetterStore } from '../../src/dead-letters/dead-letter-store.js';
import { silentLogger } from '../../src/logging/logger.js';
import { PostgresDeadLetterStore } from '../../src/postgres/dead-letters/postgres-dead-letter-store.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { PostgresDeliveryLedger } from '../../src/postgres/postgres-delivery-ledger.js';
import { RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
import { registryQueue } from '../../src/rabbitmq/rabbitmq-registry.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { RedisDeliveryLedger } from '../../src/redis/redis-delivery-ledger.js';
import { runCli } from '../helpers/cli-in-process.js';
import { countDeadLetter } from '../helpers/harrier-cli.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { deleteRabbitMq, freshBrokerPrefix } from '../helpers/rabbitmq-queues.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);
const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);
const schema = freshSchema();

/** How long a retry of the app waits: long enough for a replay through the CLI to come first. */
const RETRY_DELAY_MS = 3000;
/** How long nothing more arriving counts as nothing more delivered. */
const QUIET_MS = 800;

let amqpUrl: string;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  amqpUrl = await rabbitmqUrl();
  await migratePostgres(pool, { schema });
}, 60_000);
afterAll(async () => {
  await dropSchema(pool, schema);
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Where the stores of a system are, as the CLI takes them, and its dead-letter store and ledger. */
interface Stores {
  readonly args: readonly string[];
  readonly deadLetters: DeadLetterStore;
  readonly ledger: DeliveryLedger;
}

function redisStores(): Stores {
  const prefix = freshPrefix();
  cleanups.push(() => deleteKeys(redis.client, prefix));
  return {
    args: ['--url', redisUrl, '--prefix', prefix],
    deadLetters: new RedisDeadLetterStore({ connection: redis.client, prefix }),
    ledger: new RedisDeliveryLedger({ connection: redis.client, prefix }),
  };
}

function postgresStores(connection: pg.Pool): Stores {
  return {
    args: ['--url', databaseUrl, '--schema', schema],
    deadLetters: new PostgresDeadLetterStore({ connection, schema }),
    ledger: new PostgresDeliveryLedger({ connection, schema }),
  };
}

/**
 * An app of the `counter` endpoint on RabbitMQ with the stores' ledger, receiving `cli.Count`
 * commands into `deliveries`; the CLI arguments that reach its system.
 */
async function runningApp(stores: Stores) {
  const rabbitPrefix = freshBrokerPrefix();
  const broker = new RabbitMqBroker({
    connection: amqpUrl,
    prefix: rabbitPrefix,
    ledger: stores.ledger,
    logger: silentLogger,
  });
  await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: ['cli.Count'] }]);
  const deliveries: Delivery[] = [];
  const stop = new AbortController();
  const receiving = (async () => {
    for await (const delivery of broker.receiver({ endpoint: 'counter', signal: stop.signal })) {
      deliveries.push(delivery);
    }
  })();
  cleanups.push(async () => {
    stop.abort();
    await broker.close();
    await receiving.catch(() => undefined);
    await stores.ledger.close();
    await stores.deadLetters.close();
    await deleteRabbitMq([registryQueue(rabbitPrefix), `${rabbitPrefix}.cmd.cli.Count`]);
  });
  const cli = (...args: string[]) =>
    runCli([
      'dlq',
      'replay',
      ...args,
      '--json',
      ...stores.args,
      '--rabbitmq-url',
      amqpUrl,
      '--rabbitmq-prefix',
      rabbitPrefix,
    ]);
  return { broker, deliveries, cli };
}

/** Publishes the message of `record` and waits for its first delivery. */
async function deliverFirst(app: Awaited<ReturnType<typeof runningApp>>, record: DeadLetterRecord) {
  await app.broker.publish({
    id: record.messageId ?? '',
    kind: 'command',
    type: 'cli.Count',
    body: record.envelope,
  });
  await expect.poll(() => app.deliveries.length, { timeout: 10_000 }).toBe(1);
  return app.deliveries[0] as Delivery;
}

/** Waits `QUIET_MS`, then gives the deliveries so far (to see that no other copy came). */
async function afterQuiet(deliveries: readonly Delivery[]): Promise<readonly Delivery[]> {
  await new Promise((resolve) => setTimeout(resolve, QUIET_MS));
  return deliveries;
}

describe.each([
  ['Redis', redisStores],
  ['PostgreSQL', () => postgresStores(pool)],
])('harrier dlq replay --rabbitmq-url with the stores in %s', (_backend, storesOf) => {
  describe('when the app’s broker has the stores’ ledger and dead-lettered a message', () => {
    it('delivers the replay once to the running receiver', async () => {
      const stores = storesOf();
      const app = await runningApp(stores);
      const record = countDeadLetter({ n: 1 });
      const first = await deliverFirst(app, record);
      await app.broker.nack(first.id, { deadLetter: 'handler-failed' });
      await stores.deadLetters.add(record);

      const result = await app.cli(record.id);

      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      await expect.poll(() => app.deliveries.length, { timeout: 10_000 }).toBe(2);
      const replay = app.deliveries[1] as Delivery;
      expect(replay.facts).toMatchObject({ messageId: record.messageId, attempt: 1, replayOf: record.id });
      await app.broker.ack(replay.id);
      expect(await afterQuiet(app.deliveries)).toHaveLength(2);
    });
  });

  describe('when the subscription still holds the message, waiting for a retry', () => {
    it('adds no copy: the retry alone is delivered (the ledger finds the message held)', async () => {
      const stores = storesOf();
      const app = await runningApp(stores);
      const record = countDeadLetter({ n: 2 });
      const first = await deliverFirst(app, record);
      await app.broker.nack(first.id, { retryAt: Date.now() + RETRY_DELAY_MS });
      await stores.deadLetters.add(record);

      const result = await app.cli(record.id);

      expect(result.code).toBe(0);
      await expect.poll(() => app.deliveries.length, { timeout: RETRY_DELAY_MS + 10_000 }).toBe(2);
      const retry = app.deliveries[1] as Delivery;
      expect(retry.facts).toMatchObject({ messageId: record.messageId, attempt: 2 });
      expect(retry.facts.replayOf).toBeUndefined();
      await app.broker.ack(retry.id);
      expect(await afterQuiet(app.deliveries)).toHaveLength(2);
    });
  });
});

describe('harrier dlq replay --rabbitmq-ledger none', () => {
  it('publishes the replay as a broker without a ledger does: a message waiting for a retry is then delivered twice', async () => {
    const stores = redisStores();
    const app = await runningApp(stores);
    const record = countDeadLetter({ n: 3 });
    const first = await deliverFirst(app, record);
    await app.broker.nack(first.id, { retryAt: Date.now() + RETRY_DELAY_MS });
    await stores.deadLetters.add(record);

    const result = await app.cli(record.id, '--rabbitmq-ledger', 'none');

    expect(result.code).toBe(0);
    await expect.poll(() => app.deliveries.length, { timeout: RETRY_DELAY_MS + 10_000 }).toBe(3);
    expect(app.deliveries.map((d) => d.facts.attempt)).toEqual([1, 1, 2]);
    expect(app.deliveries[1]?.facts.replayOf).toBe(record.id);
    for (const delivery of app.deliveries.slice(1)) await app.broker.ack(delivery.id);
  });
});
