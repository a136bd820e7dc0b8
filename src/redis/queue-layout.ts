import type { OutgoingMessage, SubscriptionSpec } from '../broker/message-broker.js';
import { commandQueue, QUEUE_SEPARATOR, subscriptionQueue } from '../broker/queue-names.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { MessageKind } from '../messages/definition.js';
import { partitionOf } from '../messages/partition.js';

/** One BullMQ queue an endpoint works. */
export interface QueueSpec {
  readonly name: string;
  /** Jobs one worker of this queue runs at once: 1 for a partition queue. */
  readonly concurrency: number;
  /** The kind of message it carries. */
  readonly kind: MessageKind;
  /** The event handler the queue belongs to; undefined for a command queue. */
  readonly handler: string | undefined;
  /** True for a partition queue (worked one job at a time across every process). */
  readonly ordered: boolean;
  /**
   * The queue its deliveries report (`DeliveryFacts.queue`, part of a dead letter's id): the
   * subscription's own queue; undefined for a queue shared by command types, whose deliveries
   * report their type's queue ({@link commandQueue} of the job's name).
   */
  readonly reportedAs: string | undefined;
  /**
   * The queue set it belongs to, one row of `queueDepths`: the queue of its command type or event
   * subscription, or {@link QueueLayout.orderedCommands} of its endpoint.
   */
  readonly group: string;
  /**
   * For a queue shared by command types: the types the endpoint takes from it, its ordered command
   * types. A job of another type (one the endpoint stopped ordering or handling) is moved to its
   * type's queue instead, where it waits for a handler as any command of its type does.
   * @defaultValue undefined (every job of the queue is the endpoint's)
   */
  readonly types?: ReadonlySet<string>;
}

/**
 * How the broker names its queues and keys: a queue per command type (`cmd~<type>`), one per event
 * subscription (`evt~<endpoint>~<handler>`), `partitions` partition queues beside each subscription
 * with ordered types (`evt~<endpoint>~<handler>~p<n>`), and one set of `partitions` partition
 * queues per endpoint shared by all its ordered command types (`cmd~<endpoint>~ordered~p<n>`).
 *
 * @remarks
 * A partition queue is worked one job at a time across every process, so the messages of one key
 * are handled in the order they were added, whatever their type: sharing one set among an
 * endpoint's command types is what orders a `CancelOrder` after the `PlaceOrder` of the same key.
 * It also keeps the count of queues (a Worker and a blocking connection each, in every process) at
 * `types + partitions` rather than `types * (partitions + 1)`. The names of the type and
 * subscription queues are every broker's ({@link commandQueue}, {@link subscriptionQueue}), and
 * deliveries from a partition queue report them too, so a dead letter's id does not depend on the
 * broker or on the path a message took. Names cannot clash: a type has no `~`, and an endpoint or
 * handler name is refused with one ({@link assertQueueNamePart}).
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
    return commandQueue(type);
  }

  /** The queue of an event subscription. */
  subscriptionQueue(endpoint: string, handler: string): string {
    return subscriptionQueue(endpoint, handler);
  }

  /**
   * The name of the partition set an endpoint's ordered command types share (`cmd~<endpoint>~ordered`;
   * its queues add `~p<n>`): a row of `queueDepths`, not a queue.
   */
  orderedCommands(endpoint: string): string {
    return `cmd${QUEUE_SEPARATOR}${endpoint}${QUEUE_SEPARATOR}ordered`;
  }

  /**
   * The queue a command goes to: the partition queue of its key in `orderedBy`'s set when it is
   * ordered and `orderedBy` (the endpoint that registered its type as ordered) is known, else its
   * type's queue.
   */
  commandPlacement(message: OutgoingMessage, orderedBy: string | undefined): string {
    return message.ordered === true && orderedBy !== undefined
      ? this.#partition(this.orderedCommands(orderedBy), message)
      : this.commandQueue(message.type);
  }

  /** The queue an event goes to within a subscription: the partition queue of its key when ordered. */
  eventPlacement(endpoint: string, handler: string, message: OutgoingMessage): string {
    const base = this.subscriptionQueue(endpoint, handler);
    return message.ordered === true ? this.#partition(base, message) : base;
  }

  /**
   * Every queue `endpoint` works for `specs` (its registered subscriptions), each once: a queue per
   * command type, the endpoint's ordered command partitions when a type is ordered, and each event
   * subscription's queue with its partitions when it has ordered types.
   */
  queuesOf(endpoint: string, specs: readonly SubscriptionSpec[], prefetch = 16): QueueSpec[] {
    const byName = new Map<string, QueueSpec>();
    for (const spec of specs)
      for (const queue of this.queuesFor(endpoint, spec, prefetch)) byName.set(queue.name, queue);
    const ordered = orderedCommandTypes(specs);
    if (ordered.size > 0)
      for (const queue of this.orderedCommandQueues(endpoint, ordered)) byName.set(queue.name, queue);
    return [...byName.values()];
  }

  /**
   * The queues of one subscription of `endpoint`, its own first: a command subscription's type
   * queues (its ordered types go to {@link QueueLayout.orderedCommandQueues}, shared by the endpoint),
   * or an event subscription's queue and its partitions when it has ordered types.
   */
  queuesFor(endpoint: string, spec: SubscriptionSpec, prefetch = 16): QueueSpec[] {
    if (spec.kind === 'command') {
      return spec.types.map((type) => {
        const name = this.commandQueue(type);
        return {
          name,
          concurrency: prefetch,
          kind: 'command',
          handler: undefined,
          ordered: false,
          reportedAs: name,
          group: name,
        };
      });
    }
    const base = this.subscriptionQueue(endpoint, spec.handler);
    const own = { kind: 'event', handler: spec.handler, reportedAs: base, group: base } as const;
    const result: QueueSpec[] = [{ name: base, concurrency: prefetch, ordered: false, ...own }];
    if ((spec.orderedTypes ?? []).length > 0)
      for (let p = 0; p < this.#partitions; p++)
        result.push({ name: `${base}${QUEUE_SEPARATOR}p${p}`, concurrency: 1, ordered: true, ...own });
    return result;
  }

  /** The partition queues `endpoint`'s ordered command types (`types`) share. */
  orderedCommandQueues(endpoint: string, types: ReadonlySet<string> = new Set()): QueueSpec[] {
    const group = this.orderedCommands(endpoint);
    return Array.from({ length: this.#partitions }, (_, p) => ({
      name: `${group}${QUEUE_SEPARATOR}p${p}`,
      concurrency: 1,
      kind: 'command',
      handler: undefined,
      ordered: true,
      reportedAs: undefined,
      group,
      types,
    }));
  }

  /**
   * The partition queues of one ordered command type in the layout of earlier builds
   * (`cmd~<type>~p<n>`), which a receiver still works while they hold jobs.
   */
  typePartitionQueues(type: string): QueueSpec[] {
    const base = this.commandQueue(type);
    return Array.from({ length: this.#partitions }, (_, p) => ({
      name: `${base}${QUEUE_SEPARATOR}p${p}`,
      concurrency: 1,
      kind: 'command',
      handler: undefined,
      ordered: true,
      reportedAs: base,
      group: base,
    }));
  }

  /** A key of Harrier's own (not BullMQ's): `<prefix>:harrier:<parts…>`. */
  key(...parts: string[]): string {
    return [this.#prefix, 'harrier', ...parts].join(':');
  }

  #partition(base: string, message: OutgoingMessage): string {
    return `${base}${QUEUE_SEPARATOR}p${partitionOf(message.partitionKey ?? '', this.#partitions)}`;
  }
}

/** The command types `specs` take as ordered. */
export function orderedCommandTypes(specs: readonly SubscriptionSpec[]): Set<string> {
  return new Set(specs.flatMap((spec) => (spec.kind === 'command' ? (spec.orderedTypes ?? []) : [])));
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
