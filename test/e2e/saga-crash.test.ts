/**
 * A saga worker killed with SIGKILL mid-step (DESIGN.md guarantee 9), in both windows of the step
 * (correlate, load, run, compare-and-set save, publish): inside the step before its state is saved,
 * after the save before either of its two events is published, and after the save with only the
 * first published. The step completes its instance, so a redelivery after the save meets a
 * completed instance. A second worker takes the
 * message over once BullMQ sees the first one's lock expire; the state must change once and each
 * event reach the test's subscription once.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import {
  EventHandler,
  createBus,
  sagaStateOf,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PayloadOf,
} from '../../src/index.js';
import { BullMqBroker, RedisSagaStore, openRedisAdmin, type RedisAdmin } from '../../src/redis/index.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys } from '../helpers/redis.js';
import { jobsLeft, readSagaLines, startSagaWorker, stopSagaWorkers } from './fixtures/saga-harness.js';
import {
  PaymentBooked,
  PaymentOpened,
  PaymentReceived,
  ReceiptIssued,
  type PaymentState,
} from './fixtures/saga-messages.js';

const redisUrl = inject('redisUrl');

/** How many times the test's subscriptions received each message id, and what. */
const received = new Map<string, { type: string; payload: unknown; times: number }>();

function record(payload: unknown, context: MessageContext): void {
  const seen = received.get(context.messageId);
  received.set(context.messageId, { type: context.envelope.type, payload, times: (seen?.times ?? 0) + 1 });
}

@EventHandler(PaymentBooked, { name: 'AuditPaymentBooked' })
class AuditPaymentBooked {
  handle(payload: PayloadOf<typeof PaymentBooked>, context: MessageContext): void {
    record(payload, context);
  }
}

@EventHandler(ReceiptIssued, { name: 'AuditReceiptIssued' })
class AuditReceiptIssued {
  handle(payload: PayloadOf<typeof ReceiptIssued>, context: MessageContext): void {
    record(payload, context);
  }
}

function ofType(type: string): { type: string; payload: unknown; times: number }[] {
  return [...received.values()].filter((r) => r.type === type);
}

describe('Saga step killed with SIGKILL', () => {
  let dir: string;
  let prefix: string;
  let audit: MessageBus;
  let store: RedisSagaStore;
  let admin: RedisAdmin;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'harrier-saga-crash-'));
    prefix = `{saga-crash-${randomUUID().slice(0, 8)}}`;
    received.clear();
    // The test's own subscriptions to what the saga publishes; it also publishes the saga's input.
    audit = createBus({
      endpoint: 'sf-audit',
      broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
      handlers: [AuditPaymentBooked, AuditReceiptIssued],
      definitions: [PaymentOpened, PaymentReceived],
      logger: silentLogger,
    });
    await audit.start();
    store = new RedisSagaStore({ connection: redisUrl, prefix });
    admin = await openRedisAdmin(redisUrl, { prefix });
  });

  afterEach(async () => {
    await stopSagaWorkers();
    await audit.stop({ gracePeriodMs: 500 });
    await store.close();
    await admin.close();
    const client = new Redis(redisUrl);
    await deleteKeys(client, prefix);
    client.disconnect();
    rmSync(dir, { recursive: true, force: true });
  });

  async function paymentOf(
    id: string,
  ): Promise<{ state: PaymentState; version: number; status: string } | undefined> {
    const instance = await store.get('sf.Payment', id);
    return (
      instance && {
        state: sagaStateOf<PaymentState>(instance),
        version: instance.version,
        status: instance.status,
      }
    );
  }
  const paid = { state: { paid: 250, receipts: 1 }, version: 2, status: 'completed' };

  describe.each([
    { window: 'step', when: 'inside the step, before its state is saved' },
    { window: 'saved', when: 'after the state is saved, before it publishes' },
    { window: 'publish', when: 'after the state is saved, between its two publishes' },
  ] as const)('when killed $when', ({ window }) => {
    it('applies the step once and delivers each of its events once', async () => {
      const outA = join(dir, 'worker-a.jsonl');
      const outB = join(dir, 'worker-b.jsonl');
      const settings = { redisUrl, prefix, saga: 'payment' } as const;
      const workerA = await startSagaWorker({ ...settings, outFile: outA, block: window });
      await audit.publish(PaymentOpened, { paymentId: 'p-1' });
      await waitFor('the payment saga to start', async () => (await paymentOf('p-1')) !== undefined, {
        timeoutMs: 10_000,
        explain: () => workerA.output(),
      });
      await audit.publish(PaymentReceived, { paymentId: 'p-1', amount: 250 });
      await waitFor('worker A to block', () => readSagaLines(outA).some((l) => l.kind === 'blocked'), {
        timeoutMs: 10_000,
        explain: () => workerA.output(),
      });

      if (window === 'step') {
        expect(await paymentOf('p-1'), 'nothing saved before the kill').toEqual({
          state: { paid: 0, receipts: 0 },
          version: 1,
          status: 'active',
        });
      } else {
        // The step completed the instance: its redelivery must republish, not meet onCompleted.
        expect(await paymentOf('p-1'), 'the step was saved before the kill').toEqual(paid);
        if (window === 'publish') {
          await waitFor('the event published before the kill', () => ofType(PaymentBooked.type).length > 0, {
            timeoutMs: 10_000,
          });
        }
        expect(ofType(ReceiptIssued.type), 'the second event was not published before the kill').toEqual([]);
      }
      await workerA.kill('SIGKILL');

      const workerB = await startSagaWorker({ ...settings, outFile: outB });
      await waitFor(
        'both events downstream and every queue drained',
        async () =>
          ofType(PaymentBooked.type).length > 0 &&
          ofType(ReceiptIssued.type).length > 0 &&
          (await jobsLeft(admin)) === 0,
        {
          timeoutMs: 20_000,
          explain: async () =>
            `received ${JSON.stringify([...received.values()])}, ${await jobsLeft(admin)} jobs left; B says:\n${workerB.output()}`,
        },
      );

      const stepsOf = (file: string): number =>
        readSagaLines(file).filter((l) => l.kind === 'step' && l.type === PaymentReceived.type).length;
      expect(stepsOf(outA), 'worker A began the step').toBe(1);
      // Killed before the save: the step runs again. Killed after it: its saved messages are republished instead.
      expect(stepsOf(outB), 'worker B ran the step again').toBe(window === 'step' ? 1 : 0);
      expect(await paymentOf('p-1')).toEqual(paid);
      expect(
        [...received.values()].sort((a, b) => a.type.localeCompare(b.type)),
        'each event delivered once',
      ).toEqual([
        { type: PaymentBooked.type, payload: { paymentId: 'p-1', amount: 250 }, times: 1 },
        { type: ReceiptIssued.type, payload: { paymentId: 'p-1', paid: 250 }, times: 1 },
      ]);
      expect(await admin.deadLetterStore().count()).toBe(0);
    }, 45_000);
  });
});
