/**
 * Separates the parts of a queue name: `cmd~<type>`, `evt~<endpoint>~<handler>`. A broker that
 * splits a queue further (the Redis broker's partition queues) appends parts after another one.
 */
export const QUEUE_SEPARATOR = '~';

/**
 * The queue name of a command type, `cmd~<type>`: what a delivery of the command reports as
 * `DeliveryFacts.queue`, whichever broker carried it and however the broker stores it.
 *
 * @remarks
 * Every broker names queues this way so that a dead letter's id, which includes the queue name,
 * is the same whichever broker carried the message. They are also the Redis broker's BullMQ queue
 * names.
 */
export function commandQueue(type: string): string {
  return `cmd${QUEUE_SEPARATOR}${type}`;
}

/**
 * The queue name of an event subscription, `evt~<endpoint>~<handler>`: what a delivery of an event
 * to that subscription reports as `DeliveryFacts.queue`, whichever broker carried it.
 */
export function subscriptionQueue(endpoint: string, handler: string): string {
  return `evt${QUEUE_SEPARATOR}${endpoint}${QUEUE_SEPARATOR}${handler}`;
}
