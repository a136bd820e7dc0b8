import type { SubscriptionSpec } from '../broker/message-broker.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';

/**
 * How many dead letters (status `dead`) a subscription holds: counted in the dead-letter store,
 * which keeps a record of every dead letter, by the record's endpoint and handler.
 *
 * @remarks
 * Never from the broker: a broker may keep some dead-lettered messages for a while (BullMQ's failed
 * set, bounded by age and count), but only the store has them all, on every broker.
 */
export function subscriptionDeadLetters(
  store: DeadLetterStore,
  endpoint: string,
  subscription: Pick<SubscriptionSpec, 'handler'>,
): Promise<number> {
  return store.count({ endpoint, handler: subscription.handler, status: 'dead' });
}
