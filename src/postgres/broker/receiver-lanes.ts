import type { SubscriptionSpec } from '../../broker/message-broker.js';
import { commandQueue, QUEUE_SEPARATOR, subscriptionQueue } from '../../broker/queue-names.js';
import { HarrierError } from '../../errors/harrier-error.js';

/**
 * @throws HarrierError `invalid-option` for an endpoint or handler name that is empty or holds the
 * queue separator `~`: two subscriptions would then share a queue name (`evt~a~b~c`).
 */
export function assertQueueNamePart(name: string, what: string): void {
  if (name.length === 0 || name.includes(QUEUE_SEPARATOR)) {
    throw new HarrierError(
      'invalid-option',
      `The ${what} "${name}" cannot name a queue: it must be non-empty and without '${QUEUE_SEPARATOR}', e.g. "${name.replaceAll(QUEUE_SEPARATOR, '-') || 'orders'}"`,
    );
  }
}

/**
 * The lane of an endpoint's ordered commands, `ord~cmd~<endpoint>`: every ordered command type the
 * endpoint handles shares it, so one partition key keeps its order across those types (as the
 * Redis and in-memory brokers do). Not a queue name: `DeliveryFacts.queue` stays `cmd~<type>`.
 */
export function orderedCommandLane(endpoint: string): string {
  return `ord${QUEUE_SEPARATOR}cmd${QUEUE_SEPARATOR}${endpoint}`;
}

/** Where a receiver takes rows from: lanes, and what each lane's rows are to the endpoint. */
export interface ReceiverLanes {
  /** Lanes taken whatever the row's type: command types' queues and event subscriptions' queues. */
  readonly lanes: readonly string[];
  /** The endpoint's ordered-command lane, taken only for {@link ReceiverLanes.commandTypes}. */
  readonly orderedLane: string;
  /** The command types the endpoint handles now. */
  readonly commandTypes: readonly string[];
  /** Each event subscription queue's handler name. */
  readonly handlers: ReadonlyMap<string, string>;
  /** The queues `queueDepths` reports: command types' and event subscriptions'. */
  readonly queues: readonly string[];
}

/**
 * The lanes an endpoint's receiver takes from, for the subscriptions it registered.
 *
 * @remarks
 * A command type's own queue is taken also when the type is ordered: a command published without
 * `ordered`, or before the endpoint registered the type as ordered, waits there. An event
 * subscription's queue is its lane for ordered and unordered events alike (its rows' `order_key`
 * keeps the order). The ordered-command lane is taken for the command types the endpoint handles
 * now only, so a type it stopped handling waits there for the endpoint that takes it again.
 */
export function receiverLanes(endpoint: string, specs: readonly SubscriptionSpec[]): ReceiverLanes {
  const lanes = new Set<string>();
  const commandTypes = new Set<string>();
  const handlers = new Map<string, string>();
  for (const spec of specs) {
    if (spec.kind === 'command') {
      for (const type of spec.types) {
        commandTypes.add(type);
        lanes.add(commandQueue(type));
      }
    } else {
      const queue = subscriptionQueue(endpoint, spec.handler);
      lanes.add(queue);
      handlers.set(queue, spec.handler);
    }
  }
  return {
    lanes: [...lanes],
    orderedLane: orderedCommandLane(endpoint),
    commandTypes: [...commandTypes],
    handlers,
    queues: [...lanes],
  };
}
