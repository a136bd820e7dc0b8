import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { MeterProvider, MetricReader, type DataPoint } from '@opentelemetry/sdk-metrics';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import type { Delivery, QueueDepth } from '../../src/broker/message-broker.js';
import { CommandHandler, createBus, defineCommand, silentLogger, type MessageBus } from '../../src/index.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { harrierMetrics } from '../../src/telemetry/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A broker on a fresh prefix whose keys are deleted after the test. */
function broker(): BullMqBroker {
  const prefix = freshPrefix();
  const opened = new BullMqBroker({ connection: redisUrl, prefix, partitions: 2, logger: silentLogger });
  cleanups.push(async () => {
    await opened.close();
    const admin = new Redis(redisUrl);
    await deleteKeys(admin, prefix);
    admin.disconnect();
  });
  return opened;
}

const command = (
  type: string,
  extra: { deliverAt?: number; partitionKey?: string; ordered?: boolean } = {},
) => ({
  id: randomUUID(),
  kind: 'command' as const,
  type,
  body: '{}',
  ...extra,
});

const byQueue = (depths: readonly QueueDepth[]) => Object.fromEntries(depths.map((d) => [d.queue, d]));

describe('BullMqBroker', () => {
  describe('.queueDepths', () => {
    describe('when messages wait and are delayed, then are consumed', () => {
      it('counts them per queue by state (a subscription’s partition queues added in, the endpoint’s ordered commands in a row of their own), and zero once acked', async () => {
        const b = broker();
        await b.register('shop', [
          { handler: 'place', kind: 'command', types: ['qd.Place'] },
          { handler: 'post', kind: 'command', types: ['qd.Post'], orderedTypes: ['qd.Post'] },
          { handler: 'audit', kind: 'event', types: ['qd.Placed'] },
        ]);
        await b.publishBatch([
          command('qd.Place'),
          command('qd.Place'),
          command('qd.Place', { deliverAt: Date.now() + 60_000 }),
          command('qd.Post', { partitionKey: 'a', ordered: true }),
          command('qd.Post', { partitionKey: 'b', ordered: true }),
          { id: randomUUID(), kind: 'event', type: 'qd.Placed', body: '{}' },
        ]);
        expect(byQueue(await b.queueDepths('shop'))).toEqual({
          'cmd~qd.Place': { queue: 'cmd~qd.Place', waiting: 2, active: 0, delayed: 1 },
          'cmd~qd.Post': { queue: 'cmd~qd.Post', waiting: 0, active: 0, delayed: 0 },
          'cmd~shop~ordered': { queue: 'cmd~shop~ordered', waiting: 2, active: 0, delayed: 0 },
          'evt~shop~audit': { queue: 'evt~shop~audit', waiting: 1, active: 0, delayed: 0 },
        });

        const stop = new AbortController();
        const iterator = b.receiver({ endpoint: 'shop', signal: stop.signal })[Symbol.asyncIterator]();
        cleanups.push(async () => {
          stop.abort();
          await iterator.return?.();
        });
        const held: Delivery[] = [];
        for (let i = 0; i < 5; i++) {
          const next = await iterator.next();
          if (next.done === true) throw new Error('the receiver ended');
          held.push(next.value);
        }
        const active = (depths: readonly QueueDepth[]) => depths.reduce((sum, d) => sum + d.active, 0);
        expect(active(await b.queueDepths('shop'))).toBe(5);

        for (const delivery of held) await b.ack(delivery.id);
        await waitFor('the acks to reach Redis', async () => active(await b.queueDepths('shop')) === 0, {
          timeoutMs: 10_000,
        });
        expect(byQueue(await b.queueDepths('shop'))).toEqual({
          'cmd~qd.Place': { queue: 'cmd~qd.Place', waiting: 0, active: 0, delayed: 1 },
          'cmd~qd.Post': { queue: 'cmd~qd.Post', waiting: 0, active: 0, delayed: 0 },
          'cmd~shop~ordered': { queue: 'cmd~shop~ordered', waiting: 0, active: 0, delayed: 0 },
          'evt~shop~audit': { queue: 'evt~shop~audit', waiting: 0, active: 0, delayed: 0 },
        });
      });
    });

    describe('for an endpoint this broker did not register', () => {
      it('lists no queue', async () => {
        expect(await broker().queueDepths('elsewhere')).toEqual([]);
      });
    });
  });
});

/** A reader that exports nothing: the test collects when it wants to look. */
class OnDemandReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

const Bill = defineCommand('qd.Bill', { schema: z.object({ n: z.number() }) });

describe('harrierMetrics on BullMqBroker', () => {
  describe('harrier.queue.depth', () => {
    it('shows the commands waiting for a stopped endpoint, and zero once it consumed them', async () => {
      const reader = new OnDemandReader();
      const meterProvider = new MeterProvider({ readers: [reader] });
      cleanups.push(() => meterProvider.shutdown());
      const waiting = async (): Promise<number[]> => {
        const { resourceMetrics, errors } = await reader.collect();
        expect(errors).toEqual([]);
        const gauge = resourceMetrics.scopeMetrics
          .flatMap((scope) => scope.metrics)
          .find((m) => m.descriptor.name === 'harrier.queue.depth');
        return ((gauge?.dataPoints ?? []) as DataPoint<number>[])
          .filter(
            (p) =>
              p.attributes['harrier.queue'] === 'cmd~qd.Bill' &&
              p.attributes['harrier.queue.state'] === 'waiting' &&
              p.attributes['messaging.consumer.group.name'] === 'billing',
          )
          .map((p) => p.value);
      };
      let release: () => void = () => undefined;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const handled: number[] = [];
      @CommandHandler(Bill)
      class BillHandler {
        async handle(payload: { n: number }): Promise<void> {
          await gate;
          handled.push(payload.n);
        }
      }
      const b = broker();
      const bus: MessageBus = createBus({
        endpoint: 'billing',
        broker: b,
        handlers: [BillHandler],
        logger: silentLogger,
        concurrency: 1,
        telemetry: harrierMetrics({ meterProvider }),
      });
      cleanups.push(() => bus.stop({ gracePeriodMs: 200 }));
      await bus.start();
      for (let n = 0; n < 4; n++) await bus.send(Bill, { n });
      // One is taken by the worker and held at the gate; the other three wait in Redis.
      await waitFor('three commands waiting', async () => (await waiting())[0] === 3, { timeoutMs: 10_000 });
      release();
      await waitFor('every command handled', () => handled.length === 4, { timeoutMs: 10_000 });
      await waitFor('the queue to drain', async () => (await waiting())[0] === 0, { timeoutMs: 10_000 });
      expect(await waiting()).toEqual([0]);
    });
  });
});
