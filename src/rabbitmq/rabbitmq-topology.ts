import type { Channel } from 'amqplib';
import type { SubscriptionSpec } from '../broker/message-broker.js';
import { BUCKET_HEADER } from './message-headers.js';
import { nameSegment, type RabbitMqNames } from './rabbitmq-names.js';

/** The kind of queue a broker declares for messages: quorum (replicated, counts redeliveries) or classic. */
export type RabbitMqQueueType = 'quorum' | 'classic';

/** A queue an endpoint's registration declares, and what its messages are to the endpoint. */
export interface QueueRole {
  /** The physical RabbitMQ queue. */
  readonly queue: string;
  readonly kind: 'command' | 'event';
  /** The event subscription's handler; undefined for command queues. */
  readonly handler: string | undefined;
  /** The command type of a command type's queue. */
  readonly type: string | undefined;
  /** A partition queue of ordered messages: single active consumer, one lane per key. */
  readonly ordered: boolean;
}

/** One binding a registration makes: `source` exchange to a queue (or exchange) under `key`. */
export interface Binding {
  readonly source: string;
  readonly destination: string;
  readonly toExchange: boolean;
  readonly key: string;
  readonly args: Record<string, string>;
}

/** What an endpoint's registration declares: its queues, its command type exchanges, its bindings. */
export interface EndpointTopology {
  readonly queues: readonly QueueRole[];
  readonly commandTypes: readonly string[];
  readonly bindings: readonly Binding[];
}

/**
 * The queues and bindings of `endpoint`'s subscriptions (see {@link RabbitMqNames} for the layout).
 *
 * @remarks
 * Bindings into a command type's exchange carry the endpoint as an argument, so an endpoint that
 * stops handling the type removes only its own (a type that moved keeps the new endpoint's).
 */
export function endpointTopology(
  names: RabbitMqNames,
  endpoint: string,
  specs: readonly SubscriptionSpec[],
  partitions: number,
): EndpointTopology {
  const queues = new Map<string, QueueRole>();
  const bindings: Binding[] = [];
  const commandTypes = new Set<string>();
  const args = { 'x-harrier-endpoint': endpoint };
  const bind = (source: string, destination: string, key: string, withArgs = {}): void => {
    bindings.push({ source, destination, toExchange: false, key, args: withArgs });
  };
  let orderedCommands = false;
  for (const spec of specs) {
    const ordered = new Set(spec.orderedTypes ?? []);
    if (spec.kind === 'command') {
      for (const type of spec.types) {
        commandTypes.add(type);
        const exchange = names.commandType(type);
        queues.set(exchange, { queue: exchange, kind: 'command', handler: undefined, type, ordered: false });
        bindings.push({
          source: names.commands,
          destination: exchange,
          toExchange: true,
          key: `c.${nameSegment(type)}.*`,
          args: {},
        });
        if (ordered.has(type)) {
          orderedCommands = true;
          bind(exchange, exchange, 'c.*.all', args);
          for (let p = 0; p < partitions; p++)
            bind(exchange, names.orderedCommands(endpoint, p), `c.*.p${p}`, args);
        } else {
          bind(exchange, exchange, '#', args);
        }
      }
    } else {
      const main = names.subscription(endpoint, spec.handler);
      queues.set(main, {
        queue: main,
        kind: 'event',
        handler: spec.handler,
        type: undefined,
        ordered: false,
      });
      if (ordered.size > 0) {
        for (let p = 0; p < partitions; p++) {
          const queue = names.subscription(endpoint, spec.handler, p);
          queues.set(queue, { queue, kind: 'event', handler: spec.handler, type: undefined, ordered: true });
        }
      }
      for (const type of spec.types) {
        const word = nameSegment(type);
        if (ordered.has(type)) {
          bind(names.events, main, `e.${word}.all`);
          for (let p = 0; p < partitions; p++)
            bind(names.events, names.subscription(endpoint, spec.handler, p), `e.${word}.p${p}`);
        } else {
          bind(names.events, main, `e.${word}.*`);
        }
      }
    }
  }
  if (orderedCommands) {
    for (let p = 0; p < partitions; p++) {
      const queue = names.orderedCommands(endpoint, p);
      queues.set(queue, { queue, kind: 'command', handler: undefined, type: undefined, ordered: true });
    }
  }
  // Every queue takes retries and the next leg of a delay by name.
  for (const role of queues.values()) bind(names.route, role.queue, names.queueKey(role.queue));
  return { queues: [...queues.values()], commandTypes: [...commandTypes], bindings };
}

/** The arguments of a message queue (`single`: single active consumer, for partition queues). */
export function queueArguments(queueType: RabbitMqQueueType, single: boolean): Record<string, unknown> {
  return {
    'x-queue-type': queueType,
    ...(single ? { 'x-single-active-consumer': true } : {}),
  };
}

/** Declares a message queue, durable, bound to `<prefix>.route` under its name. */
export async function declareQueue(
  channel: Channel,
  names: RabbitMqNames,
  queue: string,
  queueType: RabbitMqQueueType,
  single: boolean,
): Promise<void> {
  await channel.assertQueue(queue, { durable: true, arguments: queueArguments(queueType, single) });
  await channel.bindQueue(queue, names.route, names.queueKey(queue));
}

/** Declares the exchanges every broker of a prefix uses (idempotent; run on each connect). */
export async function declareBase(channel: Channel, names: RabbitMqNames): Promise<void> {
  await channel.assertExchange(names.route, 'topic', { durable: true });
  await channel.assertExchange(names.commands, 'topic', { durable: true });
  await channel.assertExchange(names.events, 'topic', { durable: true });
  await channel.assertExchange(names.delay, 'headers', { durable: true });
  await channel.bindExchange(names.commands, names.route, 'c.#');
  await channel.bindExchange(names.events, names.route, 'e.#');
}

/** How long a delay queue with nothing declared on it lives on after its messages' time, in ms. */
const DELAY_QUEUE_SLACK_MS = 20 * 60_000;

/** The longest delay queue any broker declares, in ms (`maxDelayBucketMs` at most). */
const LONGEST_DELAY_MS = 2 ** 31;

/**
 * The bucket of the delay queue of `ms` for a broker of `queueType`: the last part of the queue's
 * name and the value of its binding's `harrier-bucket` header. `q<ms>` for quorum delay queues,
 * `<ms>` for classic ones (the names of the classic delay queues of earlier versions, which any
 * broker still running such a version keeps using: a queue cannot be declared again with another
 * type).
 */
export function delayBucket(ms: number, queueType: RabbitMqQueueType): string {
  return queueType === 'quorum' ? `q${ms}` : String(ms);
}

/** The arguments of the delay queue of `ms` (see {@link declareDelayQueue}). */
export function delayQueueArguments(
  names: RabbitMqNames,
  ms: number,
  queueType: RabbitMqQueueType,
): Record<string, unknown> {
  const common = {
    'x-message-ttl': ms,
    'x-dead-letter-exchange': names.route,
    'x-expires': ms + DELAY_QUEUE_SLACK_MS,
  };
  if (queueType === 'classic') return { 'x-queue-type': 'classic', ...common };
  return {
    'x-queue-type': 'quorum',
    ...common,
    // What expires is moved with publisher confirms, and stays until its queue confirmed it.
    'x-dead-letter-strategy': 'at-least-once',
    // RabbitMQ falls back to at-most-once under the default drop-head (no length limit is set).
    'x-overflow': 'reject-publish',
  };
}

/**
 * Declares the delay queue of `ms`, durable, every message expiring after `ms` into
 * `<prefix>.route` under the routing key it was published with; deleted by RabbitMQ once unused
 * for `ms` plus 20 minutes (a broker declares it again at least every 10 minutes it uses it).
 *
 * @remarks
 * A quorum delay queue (`queueType` quorum) dead-letters at least once: an expired message stays in
 * it until the queue it goes to confirmed it, so a node that dies at that moment loses nothing.
 * With it comes `<prefix>.unrouted` (see {@link RabbitMqNames.unrouted}), so that a message that
 * expires into no queue is dropped, as a classic delay queue drops it, instead of holding back
 * the bucket. A classic delay queue dead-letters at most once.
 */
export async function declareDelayQueue(
  channel: Channel,
  names: RabbitMqNames,
  ms: number,
  queueType: RabbitMqQueueType,
): Promise<void> {
  const bucket = delayBucket(ms, queueType);
  const queue = names.delayQueue(bucket);
  if (queueType === 'quorum') {
    await channel.assertQueue(names.unrouted, {
      durable: true,
      // Dropped as soon as it arrives: the queue is there to confirm what nothing else takes.
      arguments: {
        'x-queue-type': 'classic',
        'x-message-ttl': 0,
        'x-expires': LONGEST_DELAY_MS + DELAY_QUEUE_SLACK_MS,
      },
    });
    await channel.bindQueue(names.unrouted, names.route, '#');
  }
  await channel.assertQueue(queue, { durable: true, arguments: delayQueueArguments(names, ms, queueType) });
  await channel.bindQueue(queue, names.delay, '', { 'x-match': 'all', [BUCKET_HEADER]: bucket });
}
