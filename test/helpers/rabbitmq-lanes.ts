/**
 * What the tests of RabbitMqBroker's per-key lanes share: the ordered command they send and a
 * bounded wait for a receiver's next delivery.
 */
import type { Delivery, OutgoingMessage } from '../../src/broker/message-broker.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';

/** The ordered command type of the lane tests (endpoint `accounts`). */
export const POST = 'accounts.PostEntry';

/** An ordered POST of partition key `key`. */
export function entry(key: string, body: string): OutgoingMessage {
  return { id: uuidv7(), kind: 'command', type: POST, body, partitionKey: key, ordered: true };
}

/** The next delivery of `deliveries`, failing the test if none comes within `ms`. */
export async function nextOf(deliveries: AsyncIterator<Delivery>, ms = 5_000): Promise<Delivery> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`no delivery within ${ms} ms`));
    }, ms);
  });
  try {
    const result = await Promise.race([deliveries.next(), timeout]);
    if (result.done === true) throw new Error('the receiver ended');
    return result.value;
  } finally {
    clearTimeout(timer);
  }
}
