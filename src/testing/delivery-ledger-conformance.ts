import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createPublishToken,
  type DeliveryLedger,
  type LedgerCopy,
  type LostCopy,
} from '../broker/delivery-ledger.js';
import { ManualClock } from '../clock/manual-clock.js';
import { expectCode, failureOf } from './expect-code.js';

/** A ledger made fresh for one conformance test, and how to tidy up after it. */
export interface DeliveryLedgerFixture {
  /** The ledger to test; the suite closes it after each test. */
  readonly ledger: DeliveryLedger;
  /** Runs after the ledger is closed, e.g. to delete the test's Redis keys or PostgreSQL schema. */
  readonly cleanup?: () => Promise<void>;
}

/** What the suite gives the factory. */
export interface DeliveryLedgerFactoryOptions {
  /** The clock the ledger must measure windows and `deliverAt` by; the suite advances it. */
  readonly clock: ManualClock;
  /** The ledger's `scheduledRetentionMs`. */
  readonly scheduledRetentionMs: number;
}

/** Makes a fresh fixture for one test. */
export type DeliveryLedgerFactory = (options: DeliveryLedgerFactoryOptions) => Promise<DeliveryLedgerFixture>;

const T0 = Date.UTC(2026, 0, 1);
const WINDOW_MS = 60_000;
const RETENTION_MS = 3_600_000;
/** Races of an admit against a cancel of the same copy. */
const RACES = 50;

/**
 * Registers the vitest suite that every {@link DeliveryLedger} must pass.
 *
 * @remarks
 * Each test gets a fresh ledger from `factory`, on a {@link ManualClock} the suite advances, and
 * message ids and queues of its own. After each test the suite closes the ledger, then awaits
 * `cleanup`.
 *
 * @example
 * ```ts
 * describeDeliveryLedgerConformance('MyLedger', ({ clock, scheduledRetentionMs }) =>
 *   Promise.resolve({ ledger: new MyLedger({ clock, scheduledRetentionMs }) }),
 * );
 * ```
 */
export function describeDeliveryLedgerConformance(name: string, factory: DeliveryLedgerFactory): void {
  describe(`DeliveryLedger conformance: ${name}`, () => {
    let ledger: DeliveryLedger;
    let cleanup: (() => Promise<void>) | undefined;
    let clock: ManualClock;
    let closed = false;

    beforeEach(async () => {
      clock = new ManualClock(T0);
      closed = false;
      const fixture = await factory({ clock, scheduledRetentionMs: RETENTION_MS });
      ledger = fixture.ledger;
      cleanup = fixture.cleanup;
    });

    afterEach(async () => {
      if (!closed) await ledger.close();
      await cleanup?.();
    });

    /** A queue name of this test's own. */
    const queue = (handler = 'countOrders'): string => `evt~reporting-${randomUUID()}~${handler}`;
    /** A copy of a fresh message id in `q`, with a fresh token. */
    const copyIn = (q: string, messageId: string = randomUUID()): LedgerCopy => ({
      queue: q,
      messageId,
      token: createPublishToken(),
    });
    /** `copy` lost in an outage, held with `deliveryCount` returns of which `excusedEnds` were excused. */
    const lostCopy = (copy: LedgerCopy, deliveryCount: number, excusedEnds = 0): LostCopy => ({
      ...copy,
      deliveryCount,
      excusedEnds,
    });
    /** Another publish of the same message id into the same queue: a new token. */
    const republished = (copy: LedgerCopy): LedgerCopy => ({ ...copy, token: createPublishToken() });

    describe('.admit', () => {
      describe('when a copy of a message id is first taken from its queue', () => {
        it('delivers it', async () => {
          expect(await ledger.admit(copyIn(queue()), WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when a copy with the same token is taken again (a retry, a release, a crash)', () => {
        it('delivers it again', async () => {
          const copy = copyIn(queue());
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.settle(copy, 'waiting', WINDOW_MS)).toBe(true);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when a copy of another publish of the id is taken within the window', () => {
        it('calls it a duplicate in that queue, and delivers the id in every other queue once', async () => {
          const first = copyIn(queue('countOrders'));
          const second = republished(first);
          const otherQueue = { ...second, queue: queue('sumRevenue') };
          expect(await ledger.admit(first, WINDOW_MS)).toBe('deliver');

          expect(await ledger.admit(second, WINDOW_MS)).toBe('duplicate');
          clock.advance(WINDOW_MS - 1);
          expect(await ledger.admit(republished(first), WINDOW_MS)).toBe('duplicate');
          expect(await ledger.admit(otherQueue, WINDOW_MS)).toBe('deliver');
          expect(await ledger.admit({ ...first, queue: otherQueue.queue }, WINDOW_MS)).toBe('duplicate');
        });
      });

      describe('when the window has passed since the id was last seen in the queue', () => {
        it('delivers another publish of it', async () => {
          const first = copyIn(queue());
          expect(await ledger.admit(first, WINDOW_MS)).toBe('deliver');
          expect(await ledger.settle(first, 'done', WINDOW_MS)).toBe(true);

          clock.advance(WINDOW_MS);

          expect(await ledger.admit(republished(first), WINDOW_MS)).toBe('deliver');
        });

        it('measures the window from the last settle', async () => {
          const first = copyIn(queue());
          expect(await ledger.admit(first, WINDOW_MS)).toBe('deliver');
          clock.advance(WINDOW_MS - 1);
          expect(await ledger.settle(first, 'done', WINDOW_MS)).toBe(true);
          clock.advance(WINDOW_MS - 1);

          expect(await ledger.admit(republished(first), WINDOW_MS)).toBe('duplicate');
        });
      });

      describe('when the copy was settled done and comes back (its ack was lost)', () => {
        it('calls it a duplicate', async () => {
          const copy = copyIn(queue());
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.settle(copy, 'done', WINDOW_MS)).toBe(true);

          expect(await ledger.admit(copy, WINDOW_MS)).toBe('duplicate');
        });
      });

      describe('when many publishes of one id are taken at once', () => {
        it('delivers exactly one of them', async () => {
          const first = copyIn(queue());
          const copies = [first, ...Array.from({ length: 19 }, () => republished(first))];

          const verdicts = await Promise.all(copies.map((copy) => ledger.admit(copy, WINDOW_MS)));

          expect(verdicts.filter((v) => v === 'deliver')).toHaveLength(1);
          expect(verdicts.filter((v) => v === 'duplicate')).toHaveLength(copies.length - 1);
        });
      });

      describe('when given a token createPublishToken could not have made', () => {
        it('rejects with HarrierError invalid-argument', async () => {
          const copy = { ...copyIn(queue()), token: 'has|a bar' };
          expectCode(await failureOf(() => ledger.admit(copy, WINDOW_MS)), 'invalid-argument');
          expectCode(await failureOf(() => ledger.admit(copyIn(queue()), -1)), 'invalid-argument');
          expectCode(await failureOf(() => ledger.admit(copyIn(''), WINDOW_MS)), 'invalid-argument');
        });
      });
    });

    describe('.settle', () => {
      describe('when the copy is the one the queue delivered', () => {
        it('records the settle, and refuses a settle after done', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);

          expect(await ledger.settle(copy, 'waiting', WINDOW_MS)).toBe(true);
          expect(await ledger.settle(copy, 'done', WINDOW_MS)).toBe(true);
          expect(await ledger.settle(copy, 'waiting', WINDOW_MS)).toBe(false);
        });
      });

      describe("when settled done with a window of 0 (a message with dedupe 'while-queued')", () => {
        it('forgets the id: another publish of it is delivered', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          expect(await ledger.admit(republished(copy), WINDOW_MS)).toBe('duplicate');

          expect(await ledger.settle(copy, 'done', 0)).toBe(true);

          expect(await ledger.admit(republished(copy), WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when the queue delivered another token, or nothing', () => {
        it('changes nothing', async () => {
          const copy = copyIn(queue());
          expect(await ledger.settle(copy, 'done', WINDOW_MS)).toBe(false);
          await ledger.admit(copy, WINDOW_MS);

          expect(await ledger.settle(republished(copy), 'done', WINDOW_MS)).toBe(false);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
        });
      });
    });

    describe('.lost and .takeLoss', () => {
      describe('when a delivered copy is lost in an outage', () => {
        it('gives its loss to the next taker once, with how long ago it was recorded', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);

          expect(await ledger.lost([lostCopy(copy, 2, 1)], WINDOW_MS)).toBe(1);
          clock.advance(1_500);

          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 2, excusedEnds: 1, msAgo: 1_500 });
          expect(await ledger.takeLoss(copy)).toBeUndefined();
        });

        it('keeps the latest of two losses', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          await ledger.lost([lostCopy(copy, 0)], WINDOW_MS);
          clock.advance(1_000);

          await ledger.lost([lostCopy(copy, 1, 1)], WINDOW_MS);

          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 1, excusedEnds: 1, msAgo: 0 });
        });

        it('keeps the ends an earlier loss of the token excused when no process took it', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          await ledger.lost([lostCopy(copy, 2, 2)], WINDOW_MS);
          // The copy came back to a receiver that lost it again before asking for the loss.
          await ledger.lost([lostCopy(copy, 3, 0)], WINDOW_MS);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 3, excusedEnds: 3, msAgo: 0 });

          // Taken in between: the later loss stands alone.
          await ledger.lost([lostCopy(copy, 4, 4)], WINDOW_MS);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 4, excusedEnds: 4, msAgo: 0 });
          await ledger.lost([lostCopy(copy, 5, 1)], WINDOW_MS);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 5, excusedEnds: 1, msAgo: 0 });

          // An expired earlier loss, or one of another token, carries nothing on.
          await ledger.lost([lostCopy(copy, 5, 5)], 1_000);
          clock.advance(1_000);
          await ledger.lost([lostCopy(copy, 6, 0)], WINDOW_MS);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 6, excusedEnds: 0, msAgo: 0 });
        });

        it('records the loss as of its droppedAt', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          clock.advance(1_000);

          expect(await ledger.lost([{ ...lostCopy(copy, 1), droppedAt: T0 + 700 }], WINDOW_MS)).toBe(1);

          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 1, excusedEnds: 0, msAgo: 300 });
        });

        it('records nothing for a copy admitted after its droppedAt (taken back already), and the same loss twice as once', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          clock.advance(1_000);
          const loss = { ...lostCopy(copy, 1, 1), droppedAt: T0 + 500 };
          expect(await ledger.lost([loss], WINDOW_MS)).toBe(1);
          // Written again (a retry after a failure it did not see through): nothing changes.
          expect(await ledger.lost([loss], WINDOW_MS)).toBe(1);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 1, excusedEnds: 1, msAgo: 500 });

          // A late write of the same loss, once another process took the copy back and its loss.
          expect(await ledger.lost([loss], WINDOW_MS)).toBe(0);
          expect(await ledger.takeLoss(copy)).toBeUndefined();
          // A drop after that admission is recorded.
          expect(await ledger.lost([{ ...lostCopy(copy, 2, 1), droppedAt: T0 + 1_000 }], WINDOW_MS)).toBe(1);
        });

        it('records each copy of a batch on its own entry, also one not admitted yet', async () => {
          const first = copyIn(queue());
          const second = copyIn(queue('sumRevenue'));
          const notAdmitted = copyIn(queue());
          await ledger.admit(first, WINDOW_MS);
          await ledger.admit(second, WINDOW_MS);

          expect(
            await ledger.lost(
              [lostCopy(first, 0), lostCopy(second, 3, 2), lostCopy(notAdmitted, 1)],
              WINDOW_MS,
            ),
          ).toBe(3);

          expect(await ledger.takeLoss(second)).toEqual({ deliveryCount: 3, excusedEnds: 2, msAgo: 0 });
          expect(await ledger.takeLoss(first)).toEqual({ deliveryCount: 0, excusedEnds: 0, msAgo: 0 });
          expect(await ledger.admit(notAdmitted, WINDOW_MS)).toBe('deliver');
          expect(await ledger.takeLoss(notAdmitted)).toEqual({ deliveryCount: 1, excusedEnds: 0, msAgo: 0 });
        });

        it('records a copy settled waiting (a retry held by its receiver)', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          await ledger.settle(copy, 'waiting', WINDOW_MS);

          expect(await ledger.lost([lostCopy(copy, 0)], WINDOW_MS)).toBe(1);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: 0, excusedEnds: 0, msAgo: 0 });
        });
      });

      describe('when the copy is settled after its loss was recorded', () => {
        it('forgets the loss', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          await ledger.lost([lostCopy(copy, 0)], WINDOW_MS);

          await ledger.settle(copy, 'waiting', WINDOW_MS);

          expect(await ledger.takeLoss(copy)).toBeUndefined();
        });
      });

      describe('when the queue delivers another token of the message id, or settled the copy done', () => {
        it('records nothing, and gives no loss for another token', async () => {
          const done = copyIn(queue());
          await ledger.admit(done, WINDOW_MS);
          await ledger.settle(done, 'done', WINDOW_MS);
          const other = copyIn(queue());
          await ledger.admit(other, WINDOW_MS);

          expect(await ledger.lost([lostCopy(done, 0), lostCopy(republished(other), 0)], WINDOW_MS)).toBe(0);
          expect(await ledger.takeLoss(done)).toBeUndefined();
          await ledger.lost([lostCopy(other, 0)], WINDOW_MS);
          expect(await ledger.takeLoss(republished(other))).toBeUndefined();
          expect(await ledger.takeLoss(other)).toEqual({ deliveryCount: 0, excusedEnds: 0, msAgo: 0 });
        });
      });

      describe('when the window passes', () => {
        it('forgets the loss', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          await ledger.lost([lostCopy(copy, 0)], 1_000);
          clock.advance(999);
          const kept = copyIn(queue());
          await ledger.lost([lostCopy(kept, 0)], 1_000);
          clock.advance(1);

          expect(await ledger.takeLoss(copy)).toBeUndefined();
          expect(await ledger.takeLoss(kept)).toEqual({ deliveryCount: 0, excusedEnds: 0, msAgo: 1 });
        });
      });

      describe('when a replay takes the place of a lost copy', () => {
        it('gives the replay no loss', async () => {
          const original = copyIn(queue());
          await ledger.admit(original, WINDOW_MS);
          await ledger.lost([lostCopy(original, 0)], WINDOW_MS);
          await ledger.settle(original, 'done', WINDOW_MS);
          const replay = republished(original);

          expect(await ledger.replace(replay, WINDOW_MS)).toBe('replaced');
          expect(await ledger.admit(replay, WINDOW_MS)).toBe('deliver');

          expect(await ledger.takeLoss(replay)).toBeUndefined();
        });
      });

      describe('when an argument is malformed', () => {
        it('rejects with HarrierError invalid-argument', async () => {
          const copy = copyIn(queue());
          await ledger.admit(copy, WINDOW_MS);
          expectCode(await failureOf(() => ledger.lost([lostCopy(copy, -1)], WINDOW_MS)), 'invalid-argument');
          expectCode(
            await failureOf(() => ledger.lost([lostCopy(copy, 0, 1.5)], WINDOW_MS)),
            'invalid-argument',
          );
          expectCode(
            await failureOf(() => ledger.lost([lostCopy(copyIn(''), 0)], WINDOW_MS)),
            'invalid-argument',
          );
          expectCode(
            await failureOf(() => ledger.lost([lostCopy(copy, 2 ** 31)], WINDOW_MS)),
            'invalid-argument',
          );
          expectCode(
            await failureOf(() => ledger.lost([lostCopy(copy, 0, 2 ** 31)], WINDOW_MS)),
            'invalid-argument',
          );
          expectCode(await failureOf(() => ledger.lost([lostCopy(copy, 0)], -1)), 'invalid-argument');
          expectCode(
            await failureOf(() => ledger.lost([{ ...lostCopy(copy, 0), droppedAt: 1.5 }], WINDOW_MS)),
            'invalid-argument',
          );
          expectCode(await failureOf(() => ledger.takeLoss({ ...copy, token: 'a b' })), 'invalid-argument');
          expect(await ledger.takeLoss(copy)).toBeUndefined();
        });

        it('records the largest counts it accepts (2^31 - 1)', async () => {
          const copy = copyIn(queue());
          const most = 2 ** 31 - 1;
          expect(await ledger.lost([lostCopy(copy, most, most)], WINDOW_MS)).toBe(1);
          expect(await ledger.lost([lostCopy(copy, most, 0)], WINDOW_MS)).toBe(1);
          expect(await ledger.takeLoss(copy)).toEqual({ deliveryCount: most, excusedEnds: most, msAgo: 0 });
        });
      });
    });

    describe('.replace', () => {
      describe('when the queue settled the id done (a dead letter replayed)', () => {
        it('lets the replay through once, and calls every other token a duplicate', async () => {
          const original = copyIn(queue());
          await ledger.admit(original, WINDOW_MS);
          await ledger.settle(original, 'done', WINDOW_MS);
          const replay = republished(original);

          expect(await ledger.replace(replay, WINDOW_MS)).toBe('replaced');

          expect(await ledger.admit(original, WINDOW_MS)).toBe('duplicate');
          expect(await ledger.admit(replay, WINDOW_MS)).toBe('deliver');
          expect(await ledger.admit(republished(original), WINDOW_MS)).toBe('duplicate');
        });
      });

      describe('when the replayed copy is not delivered yet', () => {
        it('says the queue holds it, so a dead letter replayed twice is delivered once', async () => {
          const original = copyIn(queue());
          await ledger.admit(original, WINDOW_MS);
          await ledger.settle(original, 'done', WINDOW_MS);
          const replay = republished(original);
          expect(await ledger.replace(replay, WINDOW_MS)).toBe('replaced');

          expect(await ledger.replace(republished(original), WINDOW_MS)).toBe('held');
          expect(await ledger.admit(replay, WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when a copy waits for a retry', () => {
        it('says the queue holds it, and the retry is delivered', async () => {
          const original = copyIn(queue());
          await ledger.admit(original, WINDOW_MS);
          await ledger.settle(original, 'waiting', WINDOW_MS);

          expect(await ledger.replace(republished(original), WINDOW_MS)).toBe('held');
          expect(await ledger.admit(original, WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when a copy is delivered and not settled', () => {
        it('says it is in flight', async () => {
          const original = copyIn(queue());
          await ledger.admit(original, WINDOW_MS);

          expect(await ledger.replace(republished(original), WINDOW_MS)).toBe('in-flight');
          expect(await ledger.settle(original, 'done', WINDOW_MS)).toBe(true);
        });
      });

      describe('when the queue never delivered the id (its copy still queued, or long gone)', () => {
        it('lets the replay through, and the older copy is a duplicate: delivered once', async () => {
          const original = copyIn(queue());
          const replay = republished(original);

          expect(await ledger.replace(replay, WINDOW_MS)).toBe('replaced');

          expect(await ledger.admit(original, WINDOW_MS)).toBe('duplicate');
          expect(await ledger.admit(replay, WINDOW_MS)).toBe('deliver');
        });
      });
    });

    describe('.cancel', () => {
      describe('when the copies of a scheduled message are not taken yet', () => {
        it('cancels every one, counting them, and each is cancelled when taken', async () => {
          const copy = copyIn(queue('mailInvoice'));
          const other = { ...copy, queue: queue('bookRevenue') };
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue, other.queue], T0 + 1000);

          expect(await ledger.cancel(copy.messageId)).toBe(2);

          clock.advance(1000);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('cancelled');
          expect(await ledger.admit(other, WINDOW_MS)).toBe('cancelled');
          expect(await ledger.cancel(copy.messageId)).toBe(0);
        });
      });

      describe('when one copy was taken already', () => {
        it('cancels and counts only the other', async () => {
          const copy = copyIn(queue('mailInvoice'));
          const other = { ...copy, queue: queue('bookRevenue') };
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue, other.queue], T0 + 1000);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');

          expect(await ledger.cancel(copy.messageId)).toBe(1);

          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
          expect(await ledger.admit(other, WINDOW_MS)).toBe('cancelled');
        });
      });

      describe('when the copies are due already', () => {
        it('leaves them to be delivered and returns 0', async () => {
          const copy = copyIn(queue());
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0 + 1000);
          clock.advance(1000);

          expect(await ledger.cancel(copy.messageId)).toBe(0);
          expect(await ledger.admit(copy, WINDOW_MS)).toBe('deliver');
        });
      });

      describe('when the id is unknown', () => {
        it('returns 0', async () => {
          expect(await ledger.cancel(randomUUID())).toBe(0);
        });
      });

      describe('when the same copies are recorded twice', () => {
        it('counts each once', async () => {
          const copy = copyIn(queue());
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0 + 1000);
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0 + 1000);

          expect(await ledger.cancel(copy.messageId)).toBe(1);
        });
      });

      describe('when the queue delivered the id from another publish', () => {
        it('does not count that queue: its copy was a duplicate already', async () => {
          const delivered = copyIn(queue());
          const scheduled = republished(delivered);
          expect(await ledger.admit(delivered, WINDOW_MS)).toBe('deliver');
          await ledger.scheduled(scheduled.messageId, scheduled.token, [scheduled.queue], T0 + 1000);

          expect(await ledger.cancel(delivered.messageId)).toBe(0);
          clock.advance(1000);
          expect(await ledger.admit(scheduled, WINDOW_MS)).not.toBe('deliver');
        });
      });

      describe('when the cancelled id is published again', () => {
        it('delivers the new publish, and the cancelled copy stays cancelled', async () => {
          const cancelled = copyIn(queue());
          await ledger.scheduled(cancelled.messageId, cancelled.token, [cancelled.queue], T0 + 60_000);
          expect(await ledger.cancel(cancelled.messageId)).toBe(1);
          const again = republished(cancelled);

          expect(await ledger.admit(again, WINDOW_MS)).toBe('deliver');

          clock.advance(60_000);
          expect(await ledger.admit(cancelled, WINDOW_MS)).toBe('cancelled');
        });

        it('counts a schedule of it again, so a cancel and a schedule move the message', async () => {
          const cancelled = copyIn(queue());
          await ledger.scheduled(cancelled.messageId, cancelled.token, [cancelled.queue], T0 + 60_000);
          expect(await ledger.cancel(cancelled.messageId)).toBe(1);
          const moved = republished(cancelled);
          await ledger.scheduled(moved.messageId, moved.token, [moved.queue], T0 + 120_000);

          clock.advance(60_000);
          expect(await ledger.admit(cancelled, WINDOW_MS)).toBe('cancelled');
          expect(await ledger.cancel(moved.messageId)).toBe(1);
          clock.advance(60_000);
          expect(await ledger.admit(moved, WINDOW_MS)).toBe('cancelled');
        });
      });

      describe('when a cancelled copy is taken long after its time, within the retention', () => {
        it('is still cancelled', async () => {
          const copy = copyIn(queue());
          await ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0 + 1000);
          expect(await ledger.cancel(copy.messageId)).toBe(1);

          clock.advance(1000 + RETENTION_MS - 1);

          expect(await ledger.admit(copy, WINDOW_MS)).toBe('cancelled');
        });
      });

      describe(`when an admit and a cancel of one copy race (${RACES} races)`, () => {
        it('lets exactly one of them win each time', async () => {
          const outcomes = await Promise.all(
            Array.from({ length: RACES }, async (_, n) => {
              const copy = copyIn(queue());
              await ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0 + 1000);
              const admit = () => ledger.admit(copy, WINDOW_MS);
              const cancel = () => ledger.cancel(copy.messageId);
              // Alternate which starts first, so neither always wins by going first.
              const [verdict, count] =
                n % 2 === 0
                  ? await Promise.all([admit(), cancel()])
                  : await Promise.all([cancel(), admit()]).then(([c, v]) => [v, c] as const);
              return { verdict, count };
            }),
          );
          for (const { verdict, count } of outcomes) {
            expect([verdict, count]).toSatisfy(
              ([v, c]: readonly [string, number]) =>
                (v === 'deliver' && c === 0) || (v === 'cancelled' && c === 1),
            );
          }
        });
      });
    });

    describe('.close', () => {
      it('makes every later call reject with HarrierError store-closed', async () => {
        const copy = copyIn(queue());
        await ledger.close();
        closed = true;

        expectCode(await failureOf(() => ledger.admit(copy, WINDOW_MS)), 'store-closed');
        expectCode(await failureOf(() => ledger.settle(copy, 'done', WINDOW_MS)), 'store-closed');
        expectCode(await failureOf(() => ledger.replace(copy, WINDOW_MS)), 'store-closed');
        expectCode(
          await failureOf(() => ledger.scheduled(copy.messageId, copy.token, [copy.queue], T0)),
          'store-closed',
        );
        expectCode(await failureOf(() => ledger.cancel(copy.messageId)), 'store-closed');
        expectCode(await failureOf(() => ledger.lost([lostCopy(copy, 0)], WINDOW_MS)), 'store-closed');
        expectCode(await failureOf(() => ledger.takeLoss(copy)), 'store-closed');
        await ledger.close();
      });
    });
  });
}
