import type { OutgoingMessage, SubscriptionSpec } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageKind } from '../messages/definition.js';
import { partitionOf } from '../messages/partition.js';

/** Separates the parts of a queue name: `cmd~<type>`, `evt~<endpoint>~<handler>`, `…~p<n>`. */
export const QUEUE_SEPARATOR = '~';

/** One BullMQ queue a subscription is worked from. */
export interface QueueSpec {
  readonly name: string;
  /** Jobs one worker of this queue runs at once: 1 for a partition queue. */
  readonly concurrency: number;
  /** The event handler the queue belongs to; undefined for a command queue. */
  readonly handler: string | undefined;
  /** True for a partition queue of an ordered type. */
  readonly ordered: boolean;
}

/**
 * How the broker names its queues and keys: a queue per command type, one per event subscription
 * (endpoint, handler), and `partitions` partition queues beside each for ordered types.
 */
export class QueueLayout {
  readonly #prefix: string;
  readonly #partitions: number;

  constructor(prefix: string, partitions: number) {
    this.#prefix = prefix;
    this.#partitions = partitions;
  }

  /** The queue of a command type. */
  commandQueue(type: string): string {
    return `cmd${QUEUE_SEPARATOR}${type}`;
  }

  /** The queue of an event subscription. */
  subscriptionQueue(endpoint: string, handler: string): string {
    return `evt${QUEUE_SEPARATOR}${endpoint}${QUEUE_SEPARATOR}${handler}`;
  }

  /** The queue a message goes to within its subscription: the partition queue of its key when ordered. */
  placement(base: string, message: OutgoingMessage): string {
    return message.ordered === true
      ? `${base}${QUEUE_SEPARATOR}p${partitionOf(message.partitionKey ?? '', this.#partitions)}`
      : base;
  }

  /** Every queue of one subscription of `endpoint`, the unordered one first. */
  queuesFor(endpoint: string, spec: SubscriptionSpec, prefetch = 16): QueueSpec[] {
    const result: QueueSpec[] = [];
    const ordered = new Set(spec.orderedTypes ?? []);
    if (spec.kind === 'command') {
      for (const type of spec.types) {
        const base = this.commandQueue(type);
        result.push({ name: base, concurrency: prefetch, handler: undefined, ordered: false });
        if (ordered.has(type))
          for (let p = 0; p < this.#partitions; p++)
            result.push({
              name: `${base}${QUEUE_SEPARATOR}p${p}`,
              concurrency: 1,
              handler: undefined,
              ordered: true,
            });
      }
      return result;
    }
    const base = this.subscriptionQueue(endpoint, spec.handler);
    result.push({ name: base, concurrency: prefetch, handler: spec.handler, ordered: false });
    if (ordered.size > 0)
      for (let p = 0; p < this.#partitions; p++)
        result.push({
          name: `${base}${QUEUE_SEPARATOR}p${p}`,
          concurrency: 1,
          handler: spec.handler,
          ordered: true,
        });
    return result;
  }

  /** A key of Harrier's own (not BullMQ's): `<prefix>:harrier:<parts…>`. */
  key(...parts: string[]): string {
    return [this.#prefix, 'harrier', ...parts].join(':');
  }
}

/** @throws HarrierError `invalid-option` when `name` cannot be part of a queue name. */
export function assertQueueNamePart(name: string, what: string): void {
  if (name.length === 0 || name.includes(QUEUE_SEPARATOR) || name.includes(':')) {
    throw new HarrierError(
      'invalid-option',
      `The ${what} "${name}" cannot be used on Redis: it must be non-empty and contain neither '${QUEUE_SEPARATOR}' nor ':'`,
    );
  }
}

const PARTITION_SUFFIX = new RegExp(`${QUEUE_SEPARATOR}p\\d+$`);

/** A queue's name without the partition suffix of an ordered queue: the subscription's own queue. */
export function baseQueueName(queueName: string): string {
  return queueName.replace(PARTITION_SUFFIX, '');
}

/** The kind of message a queue carries, from its name. */
export function kindOfQueue(queueName: string): MessageKind {
  return queueName.startsWith(`cmd${QUEUE_SEPARATOR}`) ? 'command' : 'event';
}
