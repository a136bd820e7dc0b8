/**
 * A saga worker killed with SIGKILL mid-step (DESIGN.md guarantee 9), in both windows of the step
 * (correlate, load, run, compare-and-set save, publish): inside the step before its state is saved,
 * after the save before either of its two events is published, and after the save with only the
 * first published. The step completes its instance, so a redelivery after the save meets a
 * completed instance. A second worker takes the
 * message over once BullMQ sees the first one's lock expire; the state must change once and each
 * event reach the test's subscription once.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { sagaStateOf } from '../../src/index.js';
import { waitFor } from '../helpers/local-redis.js';
import {
  jobsLeft,
  openSagaSystem,
  readSagaLines,
  startSagaWorker,
  type SagaSystem,
} from './fixtures/saga-harness.js';
import {
  PaymentBooked,
  PaymentOpened,
  PaymentReceived,
  ReceiptIssued,
  type PaymentState,
} from './fixtures/saga-messages.js';

const redisUrl = inject('redisUrl');

describe('Saga step killed with SIGKILL', () => {
  let system: SagaSystem;

  beforeEach(async () => {
    system = await openSagaSystem(redisUrl, [PaymentBooked, ReceiptIssued], [PaymentOpened, PaymentReceived]);
  });

  afterEach(async () => {
    await system.close();
  });

  async function paymentOf(
    id: string,
  ): Promise<{ state: PaymentState; version: number; status: string } | undefined> {
    const instance = await system.store.get('sf.Payment', id);
    return (
      instance && {
        state: sagaStateOf<PaymentState>(instance),
        version: instance.version,
        status: instance.status,
      }
    );
  }
  const paid = { state: { paid: 250, receipts: 1 }, version: 2, status: 'completed' };

  const windows = [
    { window: 'step', when: 'inside the step, before its state is saved' },
    { window: 'saved', when: 'after the state is saved, before it publishes' },
    { window: 'publish', when: 'after the state is saved, between its two publishes' },
  ] as const;
  for (const { window, when } of windows) {
    describe(`when killed ${when}`, () => {
      it('applies the step once and delivers each of its events once', async () => {
        const { audit, admin, dir, prefix } = system;
        const ofType = (type: string) => system.received(type);
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
            await waitFor(
              'the event published before the kill',
              () => ofType(PaymentBooked.type).length > 0,
              {
                timeoutMs: 10_000,
              },
            );
          } else {
            expect(ofType(PaymentBooked.type), 'the first event was not published before the kill').toEqual(
              [],
            );
          }
          expect(ofType(ReceiptIssued.type), 'the second event was not published before the kill').toEqual(
            [],
          );
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
              `received ${JSON.stringify(system.received())}, ${await jobsLeft(admin)} jobs left; B says:\n${workerB.output()}`,
          },
        );

        const stepsOf = (file: string): number =>
          readSagaLines(file).filter((l) => l.kind === 'step' && l.type === PaymentReceived.type).length;
        expect(stepsOf(outA), 'worker A began the step').toBe(1);
        // Killed before the save: the step runs again. Killed after it: its saved messages are republished instead.
        expect(stepsOf(outB), 'worker B ran the step again').toBe(window === 'step' ? 1 : 0);
        expect(await paymentOf('p-1')).toEqual(paid);
        expect(
          system
            .received()
            .map(({ type, payload, times }) => ({ type, payload, times }))
            .sort((a, b) => a.type.localeCompare(b.type)),
          'each event delivered once',
        ).toEqual([
          { type: PaymentBooked.type, payload: { paymentId: 'p-1', amount: 250 }, times: 1 },
          { type: ReceiptIssued.type, payload: { paymentId: 'p-1', paid: 250 }, times: 1 },
        ]);
        expect(await admin.deadLetterStore().count()).toBe(0);
      }, 45_000);
    });
  }
});
