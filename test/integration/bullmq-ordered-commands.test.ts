/**
 * Where BullMqBroker puts ordered commands on real Redis: the partition queues of the endpoint that
 * registered the type as ordered, and nowhere a worker would not look.
 */
import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { Delivery, OutgoingMessage, QueueDepth } from '../../src/broker/message-broker.js';
import { ManualClock, silentLogger } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { toJobData } from '../../src/redis/job-data.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const TYPE = 'ordered.Post';

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A prefix whose keys are deleted after the test. */
function prefix(): string {
  const p = freshPrefix();
  cleanups.push(async () => {
    const admin = new Redis(redisUrl);
    await deleteKeys(admin, p);
    admin.disconnect();
  });
  return p;
}

/** A broker (one process's) on `p`, closed after the test. */
function broker(p: string, clock?: ManualClock): BullMqBroker {
  const opened = new BullMqBroker({
    connection: redisUrl,
    prefix: p,
    partitions: 2,
    logger: silentLogger,
    ...(clock === undefined ? {} : { clock }),
  });
  cleanups.push(() => opened.close());
  return opened;
}

const ordered = (extra: Partial<OutgoingMessage> = {}): OutgoingMessage => ({
  id: randomUUID(),
  kind: 'command',
  type: TYPE,
  body: '{}',
  partitionKey: 'order-1',
  ordered: true,
  ...extra,
});

/** Jobs waiting per queue row of `endpoint`, rows with none left out. */
async function waiting(b: BullMqBroker, endpoint: string): Promise<Record<string, number>> {
  const rows = await b.queueDepths(endpoint);
  return Object.fromEntries(rows.filter((d: QueueDepth) => d.waiting > 0).map((d) => [d.queue, d.waiting]));
}

/** The first delivery of `endpoint` on `b`, acked. */
async function firstDelivery(b: BullMqBroker, endpoint: string): Promise<Delivery> {
  const stop = new AbortController();
  const iterator = b.receiver({ endpoint, signal: stop.signal })[Symbol.asyncIterator]();
  try {
    const next = await iterator.next();
    if (next.done === true) throw new Error('the receiver ended');
    await b.ack(next.value.id);
    return next.value;
  } finally {
    stop.abort();
    await iterator.return?.();
  }
}

const orderedSpec = { handler: 'post', kind: 'command', types: [TYPE], orderedTypes: [TYPE] } as const;
const OTHER = 'ordered.Close';

/** Jobs waiting in the queue of command `type` under `p`, read with BullMQ. */
async function waitingInTypeQueue(p: string, type: string): Promise<number> {
  const admin = new Redis(redisUrl);
  const queue = new Queue(`cmd~${type}`, { connection: admin, prefix: p });
  try {
    return (await queue.getJobCounts('wait')).wait ?? 0;
  } finally {
    await queue.close();
    admin.disconnect();
  }
}

describe('BullMqBroker', () => {
  describe('.publish', () => {
    describe('when an ordered command type moves to another endpoint', () => {
      it('puts the commands of a publisher that had read the first endpoint in the partition queues of the new one, a second of its clock later at most', async () => {
        const p = prefix();
        const clock = new ManualClock(Date.now());
        const publisher = broker(p, clock);
        const ledger = broker(p);
        await ledger.register('ledger', [orderedSpec]);
        await publisher.publish(ordered());
        expect(await waiting(ledger, 'ledger')).toEqual({ 'cmd~ledger~ordered': 1 });

        const accounts = broker(p);
        await accounts.register('accounts', [orderedSpec]);
        clock.advance(1_000);
        await publisher.publish(ordered());
        expect(await waiting(accounts, 'accounts')).toEqual({ 'cmd~accounts~ordered': 1 });
        expect(await waiting(ledger, 'ledger')).toEqual({ 'cmd~ledger~ordered': 1 });
      });
    });

    describe('when the endpoint registered the type without ordering it', () => {
      it('puts an ordered command in the type’s queue, which the endpoint works', async () => {
        const p = prefix();
        const consumer = broker(p);
        await consumer.register('ledger', [{ handler: 'post', kind: 'command', types: [TYPE] }]);
        await broker(p).publish(ordered());

        expect(await waiting(consumer, 'ledger')).toEqual({ [`cmd~${TYPE}`]: 1 });
        expect(consumer.queuesOf('ledger')).toEqual([`cmd~${TYPE}`]);
        expect((await firstDelivery(consumer, 'ledger')).facts.queue).toBe(`cmd~${TYPE}`);
      });
    });

    describe('when no endpoint registered the type yet (requireRoute false)', () => {
      it('puts an ordered command in the type’s queue, which the endpoint works once it registers', async () => {
        const p = prefix();
        await broker(p).publish(ordered({ requireRoute: false }));
        const consumer = broker(p);
        await consumer.register('ledger', [orderedSpec]);

        expect(await waiting(consumer, 'ledger')).toEqual({ [`cmd~${TYPE}`]: 1 });
        expect((await firstDelivery(consumer, 'ledger')).facts.queue).toBe(`cmd~${TYPE}`);
      });
    });
  });

  describe('.receiver', () => {
    describe('when jobs wait in a per-type partition queue (`cmd~<type>~p<n>`, the layout of earlier builds)', () => {
      it('works that queue too, reporting the type’s queue, and leaves it out once it is empty at registration', async () => {
        const p = prefix();
        const admin = new Redis(redisUrl);
        const old = new Queue(`cmd~${TYPE}~p1`, { connection: admin, prefix: p });
        cleanups.push(async () => {
          await old.close();
          admin.disconnect();
        });
        const message = ordered();
        await old.add(TYPE, toJobData(message), { jobId: message.id });

        const consumer = broker(p);
        await consumer.register('ledger', [orderedSpec]);
        expect(consumer.queuesOf('ledger')).toContain(`cmd~${TYPE}~p1`);
        const delivery = await firstDelivery(consumer, 'ledger');
        expect(delivery.facts).toMatchObject({ messageId: message.id, type: TYPE, queue: `cmd~${TYPE}` });

        const restarted = broker(p);
        await restarted.register('ledger', [orderedSpec]);
        expect(restarted.queuesOf('ledger')).toEqual([
          `cmd~${TYPE}`,
          'cmd~ledger~ordered~p0',
          'cmd~ledger~ordered~p1',
        ]);
      });
    });
  });

  describe('.register', () => {
    describe.each([
      [
        'still orders another command type',
        [{ handler: 'close', kind: 'command', types: [OTHER], orderedTypes: [OTHER] }],
      ],
      ['orders no command type any more', [{ handler: 'close', kind: 'command', types: [OTHER] }]],
    ] as const)('when an endpoint registers again without an ordered type, and %s', (_what, specs) => {
      it('moves the type’s queued commands from its partition queues to the type’s queue, where they wait for a handler', async () => {
        const p = prefix();
        const consumer = broker(p);
        await consumer.register('ledger', [orderedSpec]);
        const message = ordered();
        await broker(p).publish(message);
        expect(await waiting(consumer, 'ledger')).toEqual({ 'cmd~ledger~ordered': 1 });

        const restarted = broker(p);
        await restarted.register('ledger', specs);
        const stop = new AbortController();
        const deliveries = restarted.receiver({ endpoint: 'ledger', signal: stop.signal });
        const iterator = deliveries[Symbol.asyncIterator]();
        const taken = iterator.next();
        cleanups.push(async () => {
          stop.abort();
          await taken;
          await iterator.return?.();
        });
        await waitFor(
          'the command in its type’s queue',
          async () => (await waitingInTypeQueue(p, TYPE)) === 1,
          {
            timeoutMs: 10_000,
          },
        );
        expect(await waiting(restarted, 'ledger')).toEqual({});

        const accounts = broker(p);
        await accounts.register('accounts', [orderedSpec]);
        expect((await firstDelivery(accounts, 'accounts')).facts).toMatchObject({
          messageId: message.id,
          queue: `cmd~${TYPE}`,
          attempt: 1,
        });
      });
    });
  });

  describe('.redeliver', () => {
    describe('when replaying an ordered command', () => {
      it('puts it in the partition queues of the endpoint given', async () => {
        const p = prefix();
        const consumer = broker(p);
        await consumer.register('ledger', [orderedSpec]);
        await consumer.redeliver({
          endpoint: 'ledger',
          handler: 'post',
          message: ordered(),
          deadLetterId: 'dl-1',
        });

        expect(await waiting(consumer, 'ledger')).toEqual({ 'cmd~ledger~ordered': 1 });
        expect((await firstDelivery(consumer, 'ledger')).facts).toMatchObject({
          queue: `cmd~${TYPE}`,
          replayOf: 'dl-1',
        });
      });
    });
  });
});
