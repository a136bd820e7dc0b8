import type { Channel, Options } from 'amqplib';
import type {
  AttemptRecord,
  BrokerCapabilities,
  Delivery,
  MessageBroker,
  NackOptions,
  OutgoingMessage,
  QueueDepth,
  ReceiverOptions,
  RedeliveryTarget,
  SubscriptionSpec,
} from '../broker/message-broker.js';
import { MAX_ATTEMPT_HISTORY } from '../broker/message-broker.js';
import {
  createPublishToken,
  type DeliveryLedger,
  type LedgerCopy,
  type LedgerSettlement,
  type LostCopy,
  type OutageLoss,
} from '../broker/delivery-ledger.js';
import { noRouteError } from '../broker/no-route-error.js';
import { commandQueue, subscriptionQueue } from '../broker/queue-names.js';
import { SETTLED } from '../broker/settled.js';
import { assertWholeOption } from '../broker/whole-option.js';
import { HarrierError } from '../errors/harrier-error.js';
import { StaleDeliveryError } from '../errors/stale-delivery-error.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { partitionOf } from '../messages/partition.js';
import { bucketFor, MIN_DELAY_BUCKET_MS, notBeforeOf } from './delay-buckets.js';
import { publishOptionsOf, type CarriedFacts } from './message-headers.js';
import {
  RabbitMqConnection,
  rabbitMqUnavailable,
  type RabbitMqConnectionOptions,
} from './rabbitmq-connection.js';
import { OutageReturns } from './outage-returns.js';
import { assertNameLength, RabbitMqNames } from './rabbitmq-names.js';
import { logicalQueue, RabbitMqReceiver, type LostTaken, type Taken } from './rabbitmq-receiver.js';
import { recordRegistration } from './rabbitmq-registry.js';
import { registrationOf } from './registration-record.js';
import {
  declareBase,
  declareDelayQueue,
  declareQueue,
  delayBucket,
  endpointTopology,
  type Binding,
  type EndpointTopology,
  type RabbitMqQueueType,
} from './rabbitmq-topology.js';

export type { RabbitMqConnectionOptions } from './rabbitmq-connection.js';
export type { RabbitMqQueueType } from './rabbitmq-topology.js';

/** The history of a message published now (shared: never changed). */
const NO_HISTORY: readonly AttemptRecord[] = [];

/** How long a publish trusts a command route it checked without checking it again (as the other brokers). */
const ROUTE_MAX_AGE_MS = 1_000;
/** How long a delay queue declared is trusted to exist without declaring it again. */
const DELAY_QUEUE_REDECLARE_MS = 10 * 60_000;
/** How long `redeliver` waits for a delivery of the message held here to settle before refusing. */
const REDELIVER_ACTIVE_WAIT_MS = 2_000;
/**
 * How long, at least, the ledger keeps a copy's loss in an outage for the process that takes it
 * back (the dedupe window when longer): a day.
 */
const LOSS_MS = 24 * 60 * 60 * 1000;

/** How often `redeliver` asks the ledger again while a delivery of the message is not settled. */
const REDELIVER_POLL_MS = 100;
/** The default `dedupeWindowMs`: 24 hours, as the other brokers. */
const DEFAULT_DEDUPE_WINDOW_MS = 86_400_000;

/** Options of {@link RabbitMqBroker}. */
export interface RabbitMqBrokerOptions {
  /**
   * Where RabbitMQ is: an `amqp://` or `amqps://` URL, or amqplib's connect options.
   * @defaultValue none; required
   */
  readonly connection: RabbitMqConnectionOptions;
  /**
   * The first part of the name of every exchange and queue the broker declares (`<prefix>.cmd.<type>`,
   * ...): brokers with the same prefix on one virtual host share their queues. Letters, digits, `_`
   * and `-`.
   * @defaultValue 'harrier'
   */
  readonly prefix?: string;
  /**
   * The type of the message queues: `quorum` (replicated; a message returned unsettled counts as an
   * unsettled end, see `capabilities().crashCounting`) or `classic`. Every broker sharing a prefix
   * uses the same. The delay queues are of the same type: quorum ones dead-letter what expires at
   * least once, classic ones at most once (see docs/rabbitmq.md).
   * @defaultValue 'quorum'
   */
  readonly queueType?: RabbitMqQueueType;
  /**
   * How many partition queues an endpoint's ordered commands, and each event subscription with
   * ordered types, are spread over (by FNV-1a-64 of the partition key); one consumer at a time takes
   * each. Every broker sharing a prefix uses the same number. From 1 to 1024.
   * @defaultValue 8
   */
  readonly partitions?: number;
  /**
   * The AMQP heartbeat, in seconds: a connection silent for about twice this is taken for dead.
   * 0 turns heartbeats off.
   * @defaultValue 30
   */
  readonly heartbeatSeconds?: number;
  /**
   * How long a publish (or a settle that publishes) waits for RabbitMQ while it cannot be reached,
   * in ms, before it rejects with HarrierError `rabbitmq-unavailable` (an outage to the dispatcher).
   * @defaultValue 10000
   */
  readonly publishTimeoutMs?: number;
  /**
   * The longest delay queue, in ms, a power of two: a longer wait goes through it several times.
   * @defaultValue 2147483648 (2^31, about 24.8 days)
   */
  readonly maxDelayBucketMs?: number;
  /**
   * The delivery ledger that makes publish idempotent and scheduled messages cancellable
   * (`RedisDeliveryLedger` from `harrier/redis`, `PostgresDeliveryLedger` from `harrier/postgres`):
   * every copy is admitted by the ledger before it is handed out and settled in it before it is
   * acked, two round trips per delivery. The broker does not close it. Every broker sharing a prefix
   * must use the same ledger. See docs/rabbitmq.md.
   * @defaultValue none: a publish made again (a replay of the outbox, a retried publish) may add a
   * copy, `capabilities().dedupeWindowMs` is 0 and `cancelScheduled` false
   */
  readonly ledger?: DeliveryLedger;
  /**
   * How long the ledger remembers a message id per subscription to drop a second publish of it, in
   * ms; only with a `ledger`.
   * @defaultValue 86400000 (24 hours)
   */
  readonly dedupeWindowMs?: number;
  /**
   * How many messages of each partition queue a receiver takes ahead of its handlers (RabbitMQ's
   * prefetch of that queue's consumer; at least the receiver's own `prefetch`, which still bounds
   * the deliveries out). A key waiting for its retry, or for a slow handler, holds up the other keys
   * of its partition only once the messages of waiting keys fill this window. Each graceful stop of
   * a receiver returns up to this many messages of each partition queue with the channel, which a
   * quorum queue counts as an unsettled end. From 1 to 65535.
   * @defaultValue 128
   */
  readonly partitionPrefetch?: number;
  /**
   * The longest a receiver keeps a message it has not handed out (waiting for its turn, or an
   * ordered retry waiting for its time) unacknowledged, in ms: after that it gives it back to its
   * queue and takes it again (an ordered one in its place, keeping its failed attempts; the return
   * spends no attempt), so RabbitMQ's `consumer_timeout` (30 minutes by default) never closes the
   * channel over it. Keep it below the server's `consumer_timeout`. A delivery out to a handler
   * cannot be renewed: a handler must finish within `consumer_timeout`.
   * @defaultValue 900000 (15 minutes)
   */
  readonly holdLimitMs?: number;
  /**
   * Where reconnects and dropped facts are reported.
   * @defaultValue consoleLogger
   */
  readonly logger?: Logger;
}

/** What the test hooks below do to a broker. */
interface TestHooks {
  readonly dropChannel: (deliveryId: string) => Promise<void>;
  readonly dropConnection: () => Promise<void>;
}

const testHooks = new WeakMap<RabbitMqBroker, TestHooks>();

/**
 * Makes the broker lose the channel of `deliveryId` as if its process died (tests of unsettled ends):
 * RabbitMQ puts back everything that channel held.
 */
export async function dropChannelOf(broker: RabbitMqBroker, deliveryId: string): Promise<void> {
  await testHooks.get(broker)?.dropChannel(deliveryId);
}

/** Makes the broker lose its connection as if the network dropped it (tests of reconnecting). */
export async function dropConnectionOf(broker: RabbitMqBroker): Promise<void> {
  await testHooks.get(broker)?.dropConnection();
}

/**
 * The RabbitMQ broker: durable quorum queues on a RabbitMQ server (3.10 or later), no plugins.
 *
 * @remarks
 * Each command type has an exchange (its route) and a queue; each event subscription a queue bound
 * to the events exchange; ordered messages go to partition queues with a single active consumer.
 * A command published now and not ordered goes straight into its type's queue (the default
 * exchange, `mandatory`). Publishes are confirmed; retries and delays wait in TTL queues that
 * dead-letter back. The message id and type travel in AMQP properties, the other delivery facts in
 * `x-harrier-*` headers, the body is the envelope as published. See docs/rabbitmq.md.
 * @example
 * ```ts
 * const broker = new RabbitMqBroker({ connection: process.env.RABBITMQ_URL! });
 * const bus = createBus({ broker, endpoint: 'orders', handlers: [PlaceOrderHandler] });
 * ```
 */
export class RabbitMqBroker implements MessageBroker {
  readonly #names: RabbitMqNames;
  readonly #queueType: RabbitMqQueueType;
  readonly #partitions: number;
  readonly #publishTimeoutMs: number;
  readonly #maxBucketMs: number;
  readonly #partitionPrefetch: number;
  readonly #holdLimitMs: number;
  readonly #logger: Logger;
  readonly #connection: RabbitMqConnection;
  readonly #registered = new Map<string, { specs: SubscriptionSpec[]; topology: EndpointTopology }>();
  readonly #receivers = new Set<RabbitMqReceiver>();
  readonly #held = new Map<string, Taken>();
  /** The copies an outage took from the receivers: their return spends no attempt. */
  readonly #outageReturns = new OutageReturns();
  /** Command types found routed, and when. */
  readonly #routes = new Map<string, number>();
  /**
   * Command types a registration removed whose exchange RabbitMQ did not confirm deleting (an
   * outage): deleted again before their route is trusted.
   */
  readonly #unremovedRoutes = new Set<string>();
  /** The check of a command type's route in progress: true when it has one. */
  readonly #routeChecks = new Map<string, Promise<boolean>>();
  /** The channel route checks share (a check of a missing route closes it: opened again on the next). */
  #routeChannel: Promise<Channel> | undefined;
  /** Route checks run one at a time on their channel: a 404 closes it under the one it answers. */
  #routeCheckTail: Promise<unknown> = Promise.resolve();
  /** Delay queues declared, and when. */
  readonly #delayQueues = new Map<number, number>();
  /** Queues declared for a publish (requireRoute false, replays), and when. */
  readonly #declared = new Map<string, number>();
  readonly #instance = Math.random().toString(36).slice(2, 10);
  readonly #ledger: DeliveryLedger | undefined;
  /** The dedupe window with a ledger, else 0. */
  readonly #windowMs: number;
  #nextId = 0;
  #closed = false;
  #closing: Promise<void> | undefined;

  /** @throws HarrierError `invalid-option` naming the fix for a bad option. */
  constructor(options: RabbitMqBrokerOptions) {
    const given = options as Partial<RabbitMqBrokerOptions> | undefined;
    if (
      given?.connection === undefined ||
      (typeof given.connection !== 'string' && typeof given.connection !== 'object')
    ) {
      throw new HarrierError(
        'invalid-option',
        "RabbitMqBroker needs a connection: pass { connection: process.env.RABBITMQ_URL } (an amqp:// URL) or amqplib's connect options",
      );
    }
    const prefix = options.prefix ?? 'harrier';
    if (!/^[A-Za-z0-9_-]{1,100}$/.test(prefix)) {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqBroker option prefix is "${prefix}": use 1 to 100 letters, digits, '_' or '-', e.g. "harrier" (or leave it out)`,
      );
    }
    const queueType: string = options.queueType ?? 'quorum';
    if (queueType !== 'quorum' && queueType !== 'classic') {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqBroker option queueType is "${queueType}": use 'quorum' or 'classic' (or leave it out for 'quorum')`,
      );
    }
    this.#partitions = whole('partitions', options.partitions, 8, 1, 'e.g. 8');
    partitionOf('', this.#partitions);
    const heartbeat = whole(
      'heartbeatSeconds',
      options.heartbeatSeconds,
      30,
      0,
      'e.g. 30 (0 turns heartbeats off)',
    );
    this.#publishTimeoutMs = whole('publishTimeoutMs', options.publishTimeoutMs, 10_000, 1, 'e.g. 10000');
    this.#partitionPrefetch = whole('partitionPrefetch', options.partitionPrefetch, 128, 1, 'e.g. 128');
    if (this.#partitionPrefetch > 65_535) {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqBroker option partitionPrefetch is ${this.#partitionPrefetch}: use 1 to 65535 (AMQP's prefetch count), e.g. 128 (or leave it out)`,
      );
    }
    this.#holdLimitMs = whole('holdLimitMs', options.holdLimitMs, 15 * 60_000, 1_000, 'e.g. 900000');
    this.#maxBucketMs = whole(
      'maxDelayBucketMs',
      options.maxDelayBucketMs,
      2 ** 31,
      MIN_DELAY_BUCKET_MS,
      'a power of two such as 2147483648',
    );
    if (!Number.isInteger(Math.log2(this.#maxBucketMs)) || this.#maxBucketMs > 2 ** 31) {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqBroker option maxDelayBucketMs is ${this.#maxBucketMs}: use a power of two from ${MIN_DELAY_BUCKET_MS} to 2147483648 (or leave it out)`,
      );
    }
    const windowMs = whole(
      'dedupeWindowMs',
      options.dedupeWindowMs,
      DEFAULT_DEDUPE_WINDOW_MS,
      1,
      'e.g. 86400000',
    );
    this.#names = new RabbitMqNames(prefix);
    this.#queueType = queueType;
    this.#logger = options.logger ?? consoleLogger;
    this.#ledger = options.ledger;
    this.#windowMs = this.#ledger === undefined ? 0 : windowMs;
    if (this.#ledger === undefined) {
      this.#logger.warn(
        'RabbitMqBroker without a ledger: publish is not idempotent, so a publish made again (an outbox replay, a retried publish) may add a copy, a dead-letter replay of a message still queued adds one, and scheduled messages cannot be cancelled; pass the ledger option (RedisDeliveryLedger or PostgresDeliveryLedger) to have both',
        { prefix },
      );
    }
    this.#connection = new RabbitMqConnection({
      target: options.connection,
      heartbeatSeconds: heartbeat,
      logger: this.#logger,
      setup: async (channel) => {
        this.#delayQueues.clear();
        this.#declared.clear();
        await declareBase(channel, this.#names);
        // After a reconnect: what the endpoints registered, in case the server lost it (a reset node).
        for (const { topology } of this.#registered.values()) await this.#declare(channel, topology);
        // Once connected (not awaited: the connection is handed out after this), each on a channel
        // of its own: the routes whose delete an outage lost.
        for (const type of this.#unremovedRoutes) void this.#removeRoute(type);
      },
    });
    testHooks.set(this, {
      dropChannel: async (deliveryId) => {
        await this.#held.get(deliveryId)?.receiver.dropChannel();
      },
      dropConnection: () => this.#connection.drop(),
    });
  }

  /** The prefix of every exchange and queue name. */
  get prefix(): string {
    return this.#names.prefix;
  }

  /**
   * Declares the endpoint's queues, exchanges and bindings, and removes the bindings of what its
   * previous registration (made through this broker, or kept in RabbitMQ by another) had and this one
   * has not; the queues stay, with their messages. A command type no endpoint binds any more loses
   * its exchange: publishes refuse it with `no-route`.
   */
  async register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void> {
    this.#assertOpen();
    if (endpoint.length === 0) {
      throw new HarrierError('invalid-option', 'An endpoint name is empty: name the endpoint, e.g. "orders"');
    }
    for (const sub of subscriptions) {
      if (sub.handler.length === 0) {
        throw new HarrierError(
          'invalid-option',
          `A subscription of endpoint "${endpoint}" has an empty handler name: name it, e.g. "onOrderPlaced"`,
        );
      }
    }
    const topology = endpointTopology(this.#names, endpoint, subscriptions, this.#partitions);
    for (const role of topology.queues) assertNameLength(role.queue, `endpoint "${endpoint}"`);
    const registry = `${this.#names.prefix}.registry.${encodeURIComponent(endpoint)}`;
    assertNameLength(registry, `endpoint "${endpoint}"`);
    const registryArgs = { 'x-queue-type': 'classic', 'x-max-length': 1 };
    const stale: Binding[] = [];
    const removedTypes: string[] = [];
    await this.#connection.withChannel(
      this.#publishTimeoutMs,
      'registering subscriptions',
      async (channel) => {
        // The previous registration, kept in RabbitMQ so that another process's is known too.
        await channel.assertQueue(registry, { durable: true, arguments: registryArgs });
        const previousMessage = await channel.get(registry, { noAck: false });
        let previous: EndpointTopology | undefined = this.#registered.get(endpoint)?.topology;
        if (previousMessage !== false) {
          try {
            const specs = JSON.parse(previousMessage.content.toString('utf8')) as SubscriptionSpec[];
            previous = endpointTopology(this.#names, endpoint, specs, this.#partitions);
          } catch {
            // Unreadable: only this process's own previous registration is undone.
          }
        }
        for (const role of topology.queues)
          await declareQueue(channel, this.#names, role.queue, this.#queueType, role.ordered);
        for (const type of topology.commandTypes)
          await channel.assertExchange(this.#names.commandType(type), 'topic', { durable: true });
        for (const binding of topology.bindings) await bind(channel, binding);
        if (previous !== undefined) {
          const now = new Set(topology.bindings.map(bindingId));
          const sources = new Set([this.#names.route, this.#names.commands]);
          for (const binding of previous.bindings)
            if (!now.has(bindingId(binding)) && !sources.has(binding.source)) stale.push(binding);
          const kept = new Set(topology.commandTypes);
          for (const type of previous.commandTypes) if (!kept.has(type)) removedTypes.push(type);
        }
        channel.sendToQueue(registry, Buffer.from(JSON.stringify(subscriptions)), { persistent: true });
        if (previousMessage !== false) channel.ack(previousMessage);
        // A round trip after the publish and the ack: both are done when it answers.
        await channel.assertQueue(registry, { durable: true, arguments: registryArgs });
      },
    );
    // Each on a channel of its own: a binding whose exchange is gone already fails and closes it.
    for (const binding of stale) {
      await this.#connection
        .withChannel(this.#publishTimeoutMs, 'removing a binding', (channel) => unbind(channel, binding))
        .catch(() => undefined);
    }
    for (const type of topology.commandTypes) this.#unremovedRoutes.delete(type);
    // With the routes an earlier removal left (the registry no longer names them).
    for (const type of new Set([...removedTypes, ...this.#unremovedRoutes])) await this.#removeRoute(type);
    this.#routes.clear();
    this.#registered.set(endpoint, { specs: [...subscriptions], topology });
    await this.#recordRegistration(endpoint, subscriptions);
  }

  /**
   * Deletes `type`'s exchange unless an endpoint still binds it (RabbitMQ refuses then, 406). A
   * failure of another kind (RabbitMQ unreachable) keeps the type in {@link #unremovedRoutes}, with
   * a warning: the next connection, the next registration and each check of the type's route try
   * again. Never rejects. Left, the
   * exchange would be found by the route check and its commands put in a queue no endpoint takes.
   */
  async #removeRoute(type: string): Promise<void> {
    try {
      await this.#connection.withChannel(this.#publishTimeoutMs, 'removing a command route', (channel) =>
        channel.deleteExchange(this.#names.commandType(type), { ifUnused: true }),
      );
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      // 406: still bound by an endpoint, so still a route; 404: gone already.
      if (code !== 406 && code !== 404) {
        if (!this.#unremovedRoutes.has(type)) {
          this.#logger.warn(
            'The route of a command type no endpoint takes any more could not be removed; trying again at the next registration and route check',
            { type, error: error instanceof Error ? error.message : String(error) },
          );
        }
        this.#unremovedRoutes.add(type);
        return;
      }
    }
    this.#unremovedRoutes.delete(type);
  }

  /**
   * Appends the registration to the registry stream that tools read (RabbitMQ cannot list queues
   * over AMQP); a failure is logged, not thrown: the endpoint works, tools miss it until it
   * registers again.
   */
  async #recordRegistration(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void> {
    const record = registrationOf(this.#names, endpoint, subscriptions, {
      queueType: this.#queueType,
      partitions: this.#partitions,
      minDelayBucketMs: MIN_DELAY_BUCKET_MS,
      maxDelayBucketMs: this.#maxBucketMs,
      registeredAt: Date.now(),
    });
    try {
      const model = await this.#connection.model(this.#publishTimeoutMs, 'recording the registration');
      await recordRegistration(model, this.#names.prefix, record);
    } catch (error) {
      this.#logger.warn('The registration could not be recorded for tools (harrier topology)', {
        endpoint,
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }

  /** Declares an endpoint's queues, command type exchanges and bindings (idempotent). */
  async #declare(channel: Channel, topology: EndpointTopology): Promise<void> {
    for (const role of topology.queues)
      await declareQueue(channel, this.#names, role.queue, this.#queueType, role.ordered);
    for (const type of topology.commandTypes)
      await channel.assertExchange(this.#names.commandType(type), 'topic', { durable: true });
    for (const binding of topology.bindings) await bind(channel, binding);
  }

  receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
    const registered = this.#registered.get(options.endpoint);
    if (registered === undefined) {
      throw new HarrierError(
        'not-registered',
        `Endpoint "${options.endpoint}" has not registered its subscriptions: call register() first (bus.start() does)`,
      );
    }
    const prefetch = options.prefetch ?? 16;
    return {
      [Symbol.asyncIterator]: () => {
        const receiver = new RabbitMqReceiver(
          {
            connection: this.#connection,
            endpoint: options.endpoint,
            roles: registered.topology.queues,
            prefetch: Math.max(1, prefetch),
            partitionPrefetch: Math.min(65_535, Math.max(1, prefetch, this.#partitionPrefetch)),
            holdLimitMs: this.#holdLimitMs,
            logger: this.#logger,
            timeoutMs: this.#publishTimeoutMs,
            outageReturns: this.#outageReturns,
            nextId: () => `${this.#instance}:${String(++this.#nextId)}`,
            handOut: (taken) => {
              if (taken.id !== undefined) this.#held.set(taken.id, taken);
            },
            forget: (id) => {
              this.#held.delete(id);
            },
            admit: this.#ledger === undefined ? undefined : (taken) => this.#admit(taken),
            recordLosses: this.#ledger === undefined ? undefined : (lost) => this.#recordLosses(lost),
            takeLoss: this.#ledger === undefined ? undefined : (taken) => this.#takeLoss(taken),
            moveBack: async (taken, facts) => {
              await this.#sendToQueue(taken.role.queue, taken, facts);
              await taken.receiver.ackMessage(taken);
            },
            copyToTail: (taken) => this.#sendToQueue(taken.role.queue, taken, taken.facts, true),
            declare: () =>
              this.#connection.withChannel(this.#publishTimeoutMs, 'declaring queues', (channel) =>
                this.#declare(channel, registered.topology),
              ),
            ended: (ended) => {
              this.#receivers.delete(ended);
            },
          },
          options.signal,
        );
        if (this.#closed) receiver.end();
        else this.#receivers.add(receiver);
        return receiver;
      },
    };
  }

  /**
   * Publishes the message, confirmed by RabbitMQ. A command's route is checked first (trusted for a
   * second once found): without one it is refused with `no-route`, nothing published.
   */
  publish(message: OutgoingMessage): Promise<void> {
    // Not async: a command whose route was checked within the second costs no promise beyond its
    // publish's own.
    try {
      this.#assertOpen();
      if (message.kind !== 'event' && message.requireRoute !== false && !this.#routeTrusted(message.type)) {
        // A deliverAt no Date holds is refused before the route, as by publishBatch.
        notBeforeOf(message.deliverAt, 0);
        return this.#routeExists(message.type).then((routed) => {
          if (!routed) throw noRouteError(message.type);
          return this.#publishOne(message);
        });
      }
      return this.#publishOne(message);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
  }

  /**
   * Publishes every message, each confirmed by RabbitMQ. The routes of the batch's commands are
   * checked first: one without a route refuses the whole batch with `no-route`, nothing published;
   * so does a `deliverAt` that is not a time a `Date` holds, with `invalid-option`.
   */
  async publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
    this.#assertOpen();
    if (messages.length === 0) return;
    // A deliverAt no Date holds refuses the batch before anything is published.
    for (const message of messages) notBeforeOf(message.deliverAt, 0);
    const required = new Set<string>();
    for (const message of messages)
      if (message.kind !== 'event' && message.requireRoute !== false) required.add(message.type);
    const missing = await this.#unrouted([...required]);
    if (missing !== undefined) throw noRouteError(missing);
    await Promise.all(messages.map((message) => this.#publishOne(message)));
  }

  /**
   * Publishes one message whose route (a command's) was checked. A command published now, not
   * ordered, goes straight into its type's queue through the default exchange, `mandatory` (a
   * missing queue comes back as returned, where a missing exchange would close the channel); an
   * ordered one enters at `<prefix>.commands`, whose type exchange routes it to the lane of the
   * endpoint's partition queues; an event at `<prefix>.events`; a message for later goes into
   * the delay queues.
   */
  #publishOne(message: OutgoingMessage): Promise<void> {
    const now = Date.now();
    const notBefore = notBeforeOf(message.deliverAt, now);
    if (notBefore !== undefined || (message.kind !== 'event' && message.requireRoute === false))
      return this.#publishOther(message, notBefore);
    const facts = this.#freshFacts(message, notBefore);
    const content = Buffer.from(message.body, 'utf8');
    const timestamp = Math.floor(now / 1000);
    if (message.kind === 'event') {
      const key = this.#names.eventKey(message.type, this.#partition(message));
      return this.#connection.publish(
        this.#names.events,
        key,
        content,
        publishOptionsOf(facts, { timestamp }),
        this.#publishTimeoutMs,
      );
    }
    const options = publishOptionsOf(facts, { timestamp, mandatory: true });
    const returned = (): Promise<void> => this.#commandReturned(message, content, options);
    if (message.ordered === true) {
      // The partition queues are the consuming endpoint's: its type exchange knows them.
      return this.#connection.publish(
        this.#names.commands,
        this.#names.commandKey(message.type, this.#partition(message)),
        content,
        options,
        this.#publishTimeoutMs,
        returned,
      );
    }
    return this.#connection.publish(
      '',
      this.#names.commandType(message.type),
      content,
      options,
      this.#publishTimeoutMs,
      returned,
    );
  }

  /**
   * A command published `mandatory` reached no queue: its route went away since it was checked (or
   * its queue was deleted). Refused with `no-route`; with `requireRoute: false`, put in its type's
   * queue (declared again) for the endpoint that will take the type.
   */
  async #commandReturned(message: OutgoingMessage, content: Buffer, options: Options.Publish): Promise<void> {
    this.#routes.delete(message.type);
    if (message.requireRoute !== false) throw noRouteError(message.type);
    const queue = this.#names.commandType(message.type);
    this.#declared.delete(queue);
    await this.#ensureQueue(queue);
    const { mandatory: _mandatory, ...plain } = options;
    await this.#connection.publish('', queue, content, plain, this.#publishTimeoutMs);
  }

  /** A message for later (into the delay queues), or a command that may have no route yet. */
  async #publishOther(message: OutgoingMessage, notBefore: number | undefined): Promise<void> {
    const facts = this.#freshFacts(message, notBefore);
    if (notBefore !== undefined && this.#ledger !== undefined && facts.token !== undefined) {
      // Before the publish: a cancel from now on finds it.
      const queues =
        message.kind === 'event' ? this.#eventQueues(message.type) : [commandQueue(message.type)];
      await this.#ledger.scheduled(message.id, facts.token, queues, notBefore);
    }
    const content = Buffer.from(message.body, 'utf8');
    const timestamp = Math.floor(Date.now() / 1000);
    const partition = this.#partition(message);
    if (message.kind === 'event') {
      const key = this.#names.eventKey(message.type, partition);
      if (notBefore !== undefined) await this.#publishDelayed(key, content, facts, notBefore, timestamp);
      else
        await this.#connection.publish(
          this.#names.events,
          key,
          content,
          publishOptionsOf(facts, { timestamp }),
          this.#publishTimeoutMs,
        );
      return;
    }
    const unrouted = message.requireRoute === false && (await this.#unrouted([message.type])) !== undefined;
    if (notBefore !== undefined) {
      const key = unrouted
        ? this.#names.queueKey(await this.#typeQueue(message.type))
        : this.#names.commandKey(message.type, partition);
      await this.#publishDelayed(key, content, facts, notBefore, timestamp);
      return;
    }
    if (!unrouted) {
      await this.#connection.publish(
        message.ordered === true ? this.#names.commands : '',
        message.ordered === true
          ? this.#names.commandKey(message.type, partition)
          : this.#names.commandType(message.type),
        content,
        publishOptionsOf(facts, { timestamp, mandatory: true }),
        this.#publishTimeoutMs,
        () => this.#commandReturned(message, content, publishOptionsOf(facts, { timestamp })),
      );
      return;
    }
    // No endpoint handles the type yet: it waits in the type's queue for the one that will.
    const queue = await this.#typeQueue(message.type);
    await this.#connection.publish(
      '',
      queue,
      content,
      publishOptionsOf(facts, { timestamp }),
      this.#publishTimeoutMs,
    );
  }

  /** The facts of a message published now: attempt 1, its publish token with a ledger. */
  #freshFacts(message: OutgoingMessage, notBefore: number | undefined): CarriedFacts {
    return {
      messageId: message.id,
      kind: message.kind,
      type: message.type,
      partitionKey: message.partitionKey,
      ordered: message.ordered === true,
      failures: 0,
      ends: 0,
      history: NO_HISTORY,
      pendingDeadLetter: undefined,
      replayOf: undefined,
      notBefore,
      token: this.#ledger === undefined ? undefined : createPublishToken(),
      whileQueued: message.dedupe === 'while-queued',
    };
  }

  /** The partition of an ordered message, else undefined (lane `all`). */
  #partition(message: OutgoingMessage): number | undefined {
    return message.ordered === true ? partitionOf(message.partitionKey ?? '', this.#partitions) : undefined;
  }

  /**
   * The subscription queues (`evt~<endpoint>~<handler>`) of an event type that this broker knows:
   * those of the endpoints registered through it. A publisher that registers no subscriber of the
   * type records a scheduled event for none, and a cancel of it returns 0 (docs/rabbitmq.md).
   */
  #eventQueues(type: string): string[] {
    const queues: string[] = [];
    for (const [endpoint, { specs }] of this.#registered) {
      for (const spec of specs)
        if (spec.kind === 'event' && spec.types.includes(type))
          queues.push(subscriptionQueue(endpoint, spec.handler));
    }
    return queues;
  }

  /** The queue of a command type, declared (for a command published before any endpoint took the type). */
  async #typeQueue(type: string): Promise<string> {
    const queue = this.#names.commandType(type);
    await this.#ensureQueue(queue);
    return queue;
  }

  async #ensureQueue(queue: string): Promise<void> {
    const at = this.#declared.get(queue);
    if (at !== undefined && Date.now() - at < DELAY_QUEUE_REDECLARE_MS) return;
    assertNameLength(queue, 'a message queue');
    await this.#connection.withChannel(this.#publishTimeoutMs, 'declaring a queue', (channel) =>
      declareQueue(channel, this.#names, queue, this.#queueType, false),
    );
    this.#declared.set(queue, Date.now());
  }

  /**
   * The first of `types` without a route (its exchange), checking those not confirmed within the
   * last second; undefined when all are routed.
   */
  async #unrouted(types: readonly string[]): Promise<string | undefined> {
    const now = Date.now();
    for (const type of types) {
      const at = this.#routes.get(type);
      if (at !== undefined && now - at < ROUTE_MAX_AGE_MS) continue;
      if (!(await this.#routeExists(type))) return type;
    }
    return undefined;
  }

  /** Whether `type`'s route was found within the last second (no check needed). */
  #routeTrusted(type: string): boolean {
    const at = this.#routes.get(type);
    return at !== undefined && Date.now() - at < ROUTE_MAX_AGE_MS;
  }

  /** Whether `type` has a route (its exchange): one check at a time per type, the callers sharing it. */
  #routeExists(type: string): Promise<boolean> {
    let check = this.#routeChecks.get(type);
    if (check === undefined) {
      const run = (): Promise<boolean> => this.#checkRoute(type);
      check = this.#routeCheckTail.then(run, run).finally(() => {
        this.#routeChecks.delete(type);
      });
      this.#routeCheckTail = check.catch(() => undefined);
      this.#routeChecks.set(type, check);
    }
    return check;
  }

  async #checkRoute(type: string): Promise<boolean> {
    if (this.#unremovedRoutes.has(type)) {
      await this.#removeRoute(type);
      if (this.#unremovedRoutes.has(type)) {
        throw rabbitMqUnavailable(
          this.#connection.where,
          'checking command routes',
          new Error(`the route of ${type}, removed by a registration, could not be deleted yet`),
        );
      }
    }
    const channel = await this.#routeCheckChannel();
    try {
      await channel.checkExchange(this.#names.commandType(type));
    } catch (error) {
      // 404 closed the channel; any other failure leaves it unusable too.
      this.#routeChannel = undefined;
      void channel.close().catch(() => undefined);
      if ((error as { code?: unknown }).code === 404) {
        this.#routes.delete(type);
        return false;
      }
      throw rabbitMqUnavailable(this.#connection.where, 'checking command routes', error);
    }
    this.#routes.set(type, Date.now());
    return true;
  }

  /** The channel route checks share, opened when none is open. */
  #routeCheckChannel(): Promise<Channel> {
    if (this.#routeChannel !== undefined) return this.#routeChannel;
    const opening = this.#connection
      .openChannel(this.#publishTimeoutMs, 'checking command routes')
      .then((channel) => {
        channel.once('close', () => {
          if (this.#routeChannel === opening) this.#routeChannel = undefined;
        });
        return channel;
      });
    opening.catch(() => {
      if (this.#routeChannel === opening) this.#routeChannel = undefined;
    });
    this.#routeChannel = opening;
    return opening;
  }

  /**
   * Publishes into the delay queue of the longest wait not past `notBefore` (the shortest one when
   * the wait is shorter), to come out into `<prefix>.route` under `key`; a receiver that gets it
   * before its time sends it round again. A delay queue found missing (returned) is declared
   * again, once.
   */
  async #publishDelayed(
    key: string,
    content: Buffer,
    facts: CarriedFacts,
    notBefore: number,
    timestamp?: number,
  ): Promise<void> {
    const bucket = bucketFor(notBefore - Date.now(), this.#maxBucketMs);
    const options = publishOptionsOf(facts, {
      ...(timestamp !== undefined ? { timestamp } : {}),
      mandatory: true,
      bucket: delayBucket(bucket, this.#queueType),
    });
    const missing = (): Promise<void> =>
      Promise.reject(
        rabbitMqUnavailable(
          this.#connection.where,
          'delaying a message',
          new Error(`delay queue ${bucket} ms is missing`),
        ),
      );
    const first = { returned: false };
    await this.#ensureDelayQueue(bucket, false);
    await this.#connection.publish(this.#names.delay, key, content, options, this.#publishTimeoutMs, () => {
      first.returned = true;
      return Promise.resolve();
    });
    if (!first.returned) return;
    await this.#ensureDelayQueue(bucket, true);
    await this.#connection.publish(this.#names.delay, key, content, options, this.#publishTimeoutMs, missing);
  }

  async #ensureDelayQueue(ms: number, force: boolean): Promise<void> {
    const at = this.#delayQueues.get(ms);
    if (!force && at !== undefined && Date.now() - at < DELAY_QUEUE_REDECLARE_MS) return;
    await this.#connection.withChannel(this.#publishTimeoutMs, 'declaring a delay queue', (channel) =>
      declareDelayQueue(channel, this.#names, ms, this.#queueType),
    );
    this.#delayQueues.set(ms, Date.now());
  }

  /**
   * Publishes a copy of `taken` carrying `facts` into `queue`, confirmed: through the delay queues
   * when it waits for a time, or, `keepingTime`, straight into `queue` with its time in its headers
   * (a receiver holds an ordered message until then), so copies published in turn stay in turn.
   */
  async #sendToQueue(queue: string, taken: Taken, facts: CarriedFacts, keepingTime = false): Promise<void> {
    if (keepingTime) {
      await this.#connection.publish(
        '',
        queue,
        taken.message.content,
        publishOptionsOf(facts),
        this.#publishTimeoutMs,
      );
    } else if (facts.notBefore !== undefined && facts.notBefore > Date.now()) {
      await this.#publishDelayed(this.#names.queueKey(queue), taken.message.content, facts, facts.notBefore);
    } else {
      await this.#connection.publish(
        '',
        queue,
        taken.message.content,
        publishOptionsOf({ ...facts, notBefore: undefined }),
        this.#publishTimeoutMs,
      );
    }
  }

  ack(deliveryId: string): Promise<void> {
    const taken = this.#current(deliveryId);
    if (taken === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    if (this.#ledgerCopy(taken) !== undefined)
      return this.#settleInLedger(deliveryId, taken, 'done').then(() => this.#ackNow(deliveryId));
    return this.#ackNow(deliveryId);
  }

  /** Acks the delivery on its channel (the ledger settled already). */
  #ackNow(deliveryId: string): Promise<void> {
    const taken = this.#current(deliveryId);
    if (taken === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    const sent = taken.receiver.ackMessage(taken);
    if (sent === false) {
      this.#held.delete(deliveryId);
      return Promise.reject(new StaleDeliveryError(deliveryId));
    }
    taken.receiver.settled(taken);
    // Resolves once the ack is written to the channel (with the other acks of this turn).
    return sent.then((written) => {
      if (!written) throw new StaleDeliveryError(deliveryId);
    });
  }

  nack(deliveryId: string, options: NackOptions): Promise<void> {
    if ('deadLetter' in options) return this.ack(deliveryId);
    const taken = this.#current(deliveryId);
    if (taken === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    if (this.#ledgerCopy(taken) !== undefined) {
      return this.#settleInLedger(deliveryId, taken, 'waiting').then(() =>
        this.#nackNow(deliveryId, options),
      );
    }
    return this.#nackNow(deliveryId, options);
  }

  /** Moves the delivery back for its retry or release (the ledger settled already). */
  #nackNow(deliveryId: string, options: NackOptions): Promise<void> {
    if ('deadLetter' in options) return this.#ackNow(deliveryId);
    const taken = this.#current(deliveryId);
    if (taken === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    const now = Date.now();
    let facts: CarriedFacts;
    let at: number;
    if ('release' in options) {
      at = options.retryAt ?? now;
      facts = { ...taken.facts, notBefore: at > now ? at : undefined };
    } else {
      at = options.retryAt;
      const attempt = taken.facts.failures + taken.facts.ends + 1;
      facts = {
        ...taken.facts,
        failures: taken.facts.failures + 1,
        history:
          options.error === undefined
            ? taken.facts.history
            : [...taken.facts.history, { attempt, at: now, error: options.error }].slice(
                -MAX_ATTEMPT_HISTORY,
              ),
        pendingDeadLetter: options.pendingDeadLetter,
        notBefore: at > now ? at : undefined,
      };
    }
    if (taken.lane !== undefined) {
      // An ordered message holds its key: it waits here, unacked, and is handed out again.
      taken.receiver.holdForLater(taken, facts, at);
      return SETTLED;
    }
    return this.#moveBackSettled(deliveryId, taken, facts);
  }

  /** The ledger's name of `taken`'s copy; undefined without a ledger or a token (foreign bytes). */
  #ledgerCopy(taken: Taken): LedgerCopy | undefined {
    const { token, messageId } = taken.facts;
    if (this.#ledger === undefined || token === undefined || messageId === undefined) return undefined;
    return { queue: logicalQueue(taken.receiver.endpoint, taken.role, taken.facts), messageId, token };
  }

  /**
   * Asks the ledger whether a copy taken from RabbitMQ is to be handed out: `deliver`, or `drop`
   * (a duplicate publish, a cancelled scheduled message). Rejects when the ledger is unreachable.
   */
  async #admit(taken: Taken): Promise<'deliver' | 'drop'> {
    const copy = this.#ledgerCopy(taken);
    if (copy === undefined || this.#ledger === undefined) return 'deliver';
    const verdict = await this.#ledger.admit(copy, this.#windowMs);
    return verdict === 'deliver' ? 'deliver' : 'drop';
  }

  /** Records copies a dropped channel held as lost in an outage, on their ledger entries. */
  async #recordLosses(lost: readonly LostTaken[]): Promise<void> {
    const copies: LostCopy[] = [];
    for (const { taken, deliveryCount, excused, droppedAt } of lost) {
      const copy = this.#ledgerCopy(taken);
      if (copy !== undefined) copies.push({ ...copy, deliveryCount, excusedEnds: excused, droppedAt });
    }
    if (copies.length > 0) await this.#ledger?.lost(copies, Math.max(this.#windowMs, LOSS_MS));
  }

  /** The latest loss in an outage the ledger knows of `taken`'s copy (forgotten there). */
  async #takeLoss(taken: Taken): Promise<OutageLoss | undefined> {
    const copy = this.#ledgerCopy(taken);
    if (copy === undefined || this.#ledger === undefined) return undefined;
    return this.#ledger.takeLoss(copy);
  }

  /**
   * Settles the delivery in the ledger before its channel: `done` (acked, dead-lettered; with
   * `dedupe: 'while-queued'` the id is forgotten) or `waiting` (a retry, a release). A second settle
   * of the id meanwhile is stale; a ledger that fails leaves the delivery held, to settle again.
   */
  async #settleInLedger(deliveryId: string, taken: Taken, settlement: LedgerSettlement): Promise<void> {
    const copy = this.#ledgerCopy(taken);
    if (copy === undefined || this.#ledger === undefined) return;
    this.#held.delete(deliveryId);
    // `dedupe: 'while-queued'` keeps the window too: a second copy still queued may be taken only
    // after the first one settled, and must still be dropped then.
    try {
      await this.#ledger.settle(copy, settlement, this.#windowMs);
    } finally {
      if (taken.receiver.holds(taken) && taken.id === deliveryId) this.#held.set(deliveryId, taken);
    }
  }

  async #moveBackSettled(deliveryId: string, taken: Taken, facts: CarriedFacts): Promise<void> {
    // A second settle of the id while the copy is published is stale.
    this.#held.delete(deliveryId);
    try {
      await this.#sendToQueue(taken.role.queue, taken, facts);
    } catch (error) {
      if (taken.receiver.holds(taken)) this.#held.set(deliveryId, taken);
      throw error;
    }
    const sent = taken.receiver.ackMessage(taken);
    taken.receiver.settled(taken);
    await sent;
  }

  /**
   * Puts the message into the subscription's queue (a command: its type's queue) with attempt 1 and
   * `replayOf`, through the default exchange.
   *
   * @remarks
   * RabbitMQ cannot look into a queue: a copy still waiting there (or in a delay queue for its
   * retry) is not found, so the subscription then gets the message twice. A delivery of it held by
   * a receiver of this broker is waited for (2 s) first, and refused with `message-in-flight` if
   * still held then.
   */
  async redeliver(target: RedeliveryTarget): Promise<void> {
    this.#assertOpen();
    const { message } = target;
    const queue =
      message.kind === 'event'
        ? this.#names.subscription(target.endpoint, target.handler)
        : this.#names.commandType(message.type);
    const logical =
      message.kind === 'event'
        ? subscriptionQueue(target.endpoint, target.handler)
        : commandQueue(message.type);
    if (this.#ledger !== undefined) {
      await this.#redeliverThroughLedger(target, queue, logical);
      return;
    }
    const until = Date.now() + REDELIVER_ACTIVE_WAIT_MS;
    while (this.#holdsMessage(target.endpoint, logical, message.id)) {
      if (Date.now() >= until) {
        throw new HarrierError(
          'message-in-flight',
          `message ${message.id} is still being handled in queue ${logical} (held for ${REDELIVER_ACTIVE_WAIT_MS} ms): replay it again once it has settled`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    await this.#ensureQueue(queue);
    await this.#connection.publish(
      '',
      queue,
      Buffer.from(message.body, 'utf8'),
      publishOptionsOf(replayFacts(target, undefined)),
      this.#publishTimeoutMs,
    );
  }

  /**
   * A replay through the ledger: the copy of the message the subscription holds is replaced by the
   * replay (a copy still queued is dropped when it is taken), or left when it waits for a retry or a
   * release (`held`); a delivery of it not settled yet is waited for, then refused with
   * `message-in-flight`.
   */
  async #redeliverThroughLedger(target: RedeliveryTarget, queue: string, logical: string): Promise<void> {
    const ledger = this.#ledger as DeliveryLedger;
    const { message } = target;
    const copy: LedgerCopy = { queue: logical, messageId: message.id, token: createPublishToken() };
    const until = Date.now() + REDELIVER_ACTIVE_WAIT_MS;
    for (;;) {
      const outcome = await ledger.replace(copy, this.#windowMs);
      if (outcome === 'held') return;
      if (outcome === 'replaced') break;
      if (Date.now() >= until) {
        throw new HarrierError(
          'message-in-flight',
          `message ${message.id} is still being handled in queue ${logical} (not settled for ${REDELIVER_ACTIVE_WAIT_MS} ms): replay it again once it has settled`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, REDELIVER_POLL_MS));
    }
    const facts = replayFacts(target, copy.token);
    try {
      await this.#ensureQueue(queue);
      await this.#connection.publish(
        '',
        queue,
        Buffer.from(message.body, 'utf8'),
        publishOptionsOf(facts),
        this.#publishTimeoutMs,
      );
    } catch (error) {
      // Not published: the replay's claim must not hold the subscription's copies back.
      await ledger.settle(copy, 'done', this.#windowMs).catch(() => undefined);
      throw error;
    }
  }

  /**
   * Takes back a message published with a `deliverAt` not reached yet (through the ledger): its
   * copies are dropped when they come out of the delay queues. Resolves to the number of
   * subscriptions whose copy was cancelled (0 once delivered, or for an unknown id).
   * @throws HarrierError `not-supported` without a ledger.
   */
  async cancel(messageId: string): Promise<number> {
    this.#assertOpen();
    if (this.#ledger === undefined) {
      throw new HarrierError(
        'not-supported',
        'RabbitMqBroker cancels scheduled messages only with a delivery ledger: pass the ledger option (RedisDeliveryLedger or PostgresDeliveryLedger)',
      );
    }
    return this.#ledger.cancel(messageId);
  }

  #holdsMessage(endpoint: string, logical: string, messageId: string): boolean {
    for (const taken of this.#held.values()) {
      if (taken.receiver.endpoint !== endpoint || taken.facts.messageId !== messageId) continue;
      const queue =
        taken.role.kind === 'event'
          ? subscriptionQueue(endpoint, taken.role.handler ?? '')
          : commandQueue(taken.role.type ?? taken.facts.type ?? '');
      if (queue === logical) return true;
    }
    return false;
  }

  /**
   * Messages in each queue `endpoint` receives from: `waiting` ready in RabbitMQ, `active` held by
   * this broker's receivers; `delayed` is 0 (the delay queues are shared by every queue of the
   * prefix, so their messages are not counted per endpoint).
   */
  async queueDepths(endpoint: string): Promise<readonly QueueDepth[]> {
    this.#assertOpen();
    const registered = this.#registered.get(endpoint);
    if (registered === undefined) return [];
    const depths = new Map<string, { waiting: number; active: number; delayed: number }>();
    const depthOf = (queue: string): { waiting: number; active: number; delayed: number } => {
      let depth = depths.get(queue);
      if (depth === undefined) {
        depth = { waiting: 0, active: 0, delayed: 0 };
        depths.set(queue, depth);
      }
      return depth;
    };
    for (const role of registered.topology.queues) {
      const queue =
        role.kind === 'event'
          ? subscriptionQueue(endpoint, role.handler ?? '')
          : role.type !== undefined
            ? commandQueue(role.type)
            : role.queue;
      const count = await this.#connection
        .withChannel(this.#publishTimeoutMs, 'counting messages', (channel) => channel.checkQueue(role.queue))
        .then(
          (reply) => reply.messageCount,
          () => 0,
        );
      depthOf(queue).waiting += count;
    }
    for (const receiver of this.#receivers) {
      if (receiver.endpoint !== endpoint) continue;
      for (const [queue, held] of receiver.heldByQueue()) depthOf(queue).active += held;
    }
    return [...depths].map(([queue, depth]) => ({ queue, ...depth }));
  }

  /**
   * What RabbitMQ gives: delays (TTL queues), order (single active consumer partition queues),
   * replays, durable shared queues; crash counting on quorum queues (`x-delivery-count`). No publish
   * dedupe and no cancel of scheduled messages: RabbitMQ cannot look into its queues.
   */
  capabilities(): BrokerCapabilities {
    return {
      delayedDelivery: true,
      dedupeWindowMs: this.#windowMs,
      orderedDelivery: true,
      queueDepths: false,
      redeliver: true,
      durable: true,
      shared: true,
      crashCounting: this.#queueType === 'quorum',
      cancelScheduled: this.#ledger !== undefined,
    };
  }

  /** Ends every receiver (what they held goes back to RabbitMQ) and closes the connection. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      await Promise.all([...this.#receivers].map((receiver) => receiver.close()));
      this.#receivers.clear();
      this.#held.clear();
      await this.#connection.close();
    })();
    return this.#closing;
  }

  /** The delivery `id` if it is current. */
  #current(id: string): Taken | undefined {
    const taken = this.#held.get(id);
    if (taken === undefined) return undefined;
    if (!taken.receiver.holds(taken) || taken.id !== id) {
      this.#held.delete(id);
      return undefined;
    }
    return taken;
  }

  #assertOpen(): void {
    if (this.#closed)
      throw new HarrierError(
        'broker-closed',
        'The RabbitMQ broker is closed: create a new one to publish again',
      );
  }
}

function bindingId(binding: Binding): string {
  return JSON.stringify([binding.source, binding.destination, binding.toExchange, binding.key, binding.args]);
}

async function bind(channel: Channel, binding: Binding): Promise<void> {
  if (binding.toExchange)
    await channel.bindExchange(binding.destination, binding.source, binding.key, binding.args);
  else await channel.bindQueue(binding.destination, binding.source, binding.key, binding.args);
}

async function unbind(channel: Channel, binding: Binding): Promise<void> {
  if (binding.toExchange)
    await channel.unbindExchange(binding.destination, binding.source, binding.key, binding.args);
  else await channel.unbindQueue(binding.destination, binding.source, binding.key, binding.args);
}

/** @throws HarrierError `invalid-option` unless `value` (or its default) is a whole number of at least `min`. */
function whole(
  option: string,
  value: number | undefined,
  fallback: number,
  min: number,
  example: string,
): number {
  const v = value ?? fallback;
  assertWholeOption('RabbitMqBroker', option, v, min, `${example} (or leave it out for ${fallback})`);
  return v;
}

/** The facts of a replay: fresh attempts, the dead letter it replays, and its publish token if any. */
function replayFacts(target: RedeliveryTarget, token: string | undefined): CarriedFacts {
  const { message } = target;
  return {
    messageId: message.id,
    kind: message.kind,
    type: message.type,
    partitionKey: message.partitionKey,
    ordered: message.ordered === true,
    failures: 0,
    ends: 0,
    history: [],
    pendingDeadLetter: undefined,
    replayOf: target.deadLetterId,
    notBefore: undefined,
    ...(token !== undefined ? { token } : {}),
  };
}
