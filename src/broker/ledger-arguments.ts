import { HarrierError } from '../errors/harrier-error.js';
import type { LedgerCopy, LostCopy } from './delivery-ledger.js';

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

function invalid(what: string, value: unknown, fix: string): HarrierError {
  return new HarrierError('invalid-argument', `DeliveryLedger ${what} ${JSON.stringify(value)} ${fix}`);
}

/**
 * Checks a copy handed to a ledger, so every implementation refuses the same arguments.
 * @throws HarrierError `invalid-argument` for an empty queue or message id, or a token that is not 1 to
 *   64 letters, digits, `-` or `_` (as `createPublishToken` makes them).
 */
export function checkCopy(copy: LedgerCopy): void {
  checkMessageId(copy.messageId);
  checkQueue(copy.queue);
  checkToken(copy.token);
}

/** @throws HarrierError `invalid-argument` for an empty message id. */
export function checkMessageId(messageId: string): void {
  if (messageId === '') throw invalid('message id', messageId, 'is empty: pass the envelope id');
}

/** @throws HarrierError `invalid-argument` for an empty queue name. */
export function checkQueue(queue: string): void {
  if (queue === '')
    throw invalid('queue', queue, 'is empty: pass the queue name DeliveryFacts.queue reports');
}

/** @throws HarrierError `invalid-argument` for a token that `createPublishToken` could not have made. */
export function checkToken(token: string): void {
  if (!TOKEN.test(token)) {
    throw invalid(
      'token',
      token,
      'is not 1 to 64 letters, digits, - or _: make tokens with createPublishToken()',
    );
  }
}

/** @throws HarrierError `invalid-argument` unless `ms` is a whole number >= 0. */
export function checkMs(name: string, ms: number): void {
  if (!Number.isSafeInteger(ms) || ms < 0) throw invalid(name, ms, 'is not a whole number of ms >= 0');
}

/** The largest count a ledger stores (a 32-bit signed integer, as PostgreSQL's `integer`). */
export const MAX_LEDGER_COUNT = 2 ** 31 - 1;

/**
 * Checks a lost copy handed to `DeliveryLedger.lost`.
 * @throws HarrierError `invalid-argument` as {@link checkCopy}, or for a `deliveryCount` or
 *   `excusedEnds` that is not a whole number from 0 to {@link MAX_LEDGER_COUNT}, or a `droppedAt`
 *   that is not a whole number >= 0.
 */
export function checkLostCopy(copy: LostCopy): void {
  checkCopy(copy);
  for (const [name, value, fix] of [
    ['deliveryCount', copy.deliveryCount, 'pass the x-delivery-count the copy was held with'],
    ['excusedEnds', copy.excusedEnds, 'pass the returns of the copy already excused as outage returns'],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 0 || value > MAX_LEDGER_COUNT)
      throw invalid(name, value, `is not a whole number from 0 to ${String(MAX_LEDGER_COUNT)}: ${fix}`);
  }
  if (copy.droppedAt !== undefined) checkMs('droppedAt', copy.droppedAt);
}

/**
 * The `excusedEnds` of a copy's loss recorded over an earlier loss of the same token that no
 * process took (the copy went back to its queue again before any receiver asked for it): the ends
 * the earlier loss excused carry on, with every return since it, as outage returns.
 */
export function mergedExcusedEnds(
  before: { readonly deliveryCount: number; readonly excusedEnds: number },
  copy: { readonly deliveryCount: number; readonly excusedEnds: number },
): number {
  return Math.max(copy.excusedEnds, before.excusedEnds + (copy.deliveryCount - before.deliveryCount));
}
