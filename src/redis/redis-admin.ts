import type { SystemAdmin } from '../admin/system-admin.js';
import type { EndpointTopology, SubscriptionTopology, Topology } from '../admin/topology.js';
import type { QueueDepth, SubscriptionSpec } from '../broker/message-broker.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { TopicSpec } from '../log/event-log.js';
import { checkpointLags, type CheckpointLag } from '../projections/projection-lag.js';
import { BullMqBroker, type BullMqBrokerOptions } from './bullmq-broker.js';
import { DEPTH_STATES, queueDepthOf } from './queue-depth.js';
import { orderedCommandTypes, QueueLayout, type QueueSpec } from './queue-layout.js';
import { RedisCheckpointStore } from './redis-checkpoint-store.js';
import type { RedisConnectionOptions } from './redis-connection.js';
import { RedisDeadLetterStore } from './redis-dead-letter-store.js';
import { RedisDeliveryLedger } from './redis-delivery-ledger.js';
import { redisUnavailable } from './redis-errors.js';
import { bullmq } from './redis-peers.js';
import { RedisEventLog, scanLogPartitions } from './redis-event-log.js';
import { RedisSagaStore } from './redis-saga-store.js';
import { RedisScheduleStore } from './redis-schedule-store.js';
import { connectionFor, keyPrefixOf, runCommand, type RedisConnection } from './redis-support.js';

/**
 * The handler name under which {@link RedisAdmin.topology} lists the partition queues an endpoint's
 * ordered command types share (they belong to no one command subscription).
 */
export const ORDERED_COMMANDS = '(ordered commands)';

/** Options of {@link openRedisAdmin}. */
export interface RedisAdminOptions {
  /**
   * Key prefix of the Harrier system to look at: the `prefix` its broker and stores were given.
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
}

/**
 * Connects for a tool and checks with PING that Redis answers: a client that gives up after a few
 * quick retries, so a Redis that is down is reported instead of waited for. A client passed in is
 * only pinged.
 *
 * @throws HarrierError `redis-unavailable` naming where Redis was looked for and the fix.
 */
export async function connectToolClient(connection: RedisConnectionOptions): Promise<RedisConnection> {
  const opened = connectionFor(connection, { lazyConnect: true, reconnectAttempts: 2 });
  try {
    if (opened.owned) await opened.client.connect();
    await opened.client.ping();
  } catch (error) {
    if (opened.owned) opened.client.disconnect();
    throw redisUnavailable(opened.where, opened.lastError() ?? error, opened.cluster);
  }
  return opened;
}

/**
 * The queries and parts a tool needs to operate a Harrier system on Redis (the `harrier` CLI, a
 * dashboard): the {@link SystemAdmin} of Redis (topology, projection lag, and the stores and broker
 * of the system), plus what only Redis has (partition count, the log's partitions, the log), all on
 * one connection. Open one with {@link openRedisAdmin}; {@link RedisAdmin.close} closes everything
 * opened through it.
 *
 * @remarks
 * It reads Redis only through the layouts of the parts that write it (the broker's queue names, the
 * log's keys), so a tool never repeats a key layout.
 */
export class RedisAdmin implements SystemAdmin {
  readonly #connection: RedisConnection;
  readonly #options: RedisConnectionOptions;
  readonly #prefix: string;
  readonly #opened: { close(): Promise<void> }[] = [];
  #closed = false;

  private constructor(connection: RedisConnection, options: RedisConnectionOptions, prefix: string) {
    this.#connection = connection;
    this.#options = options;
    this.#prefix = prefix;
  }

  /** @see {@link openRedisAdmin} */
  static async open(
    connection: RedisConnectionOptions,
    options: RedisAdminOptions = {},
  ): Promise<RedisAdmin> {
    const prefix = keyPrefixOf(options.prefix, 'RedisAdmin');
    return new RedisAdmin(await connectToolClient(connection), connection, prefix);
  }

  /** The key prefix of the system. */
  get prefix(): string {
    return this.#prefix;
  }

  /** Where Redis is, for messages (never a password). */
  get where(): string {
    return this.#connection.where;
  }

  /**
   * The partition count the system's brokers agreed on (stored by the first to start under the
   * prefix); undefined when no broker has started under it.
   */
  async partitionCount(): Promise<number | undefined> {
    const stored = await this.#run(() =>
      this.#connection.client.get(new QueueLayout(this.#prefix, 0).key('partitions')),
    );
    return stored === null ? undefined : Number(stored);
  }

  /**
   * Every endpoint registered under the prefix, its subscriptions, and how many jobs each of their
   * queues holds (waiting, active, delayed), partition queues of ordered types included: those of
   * an event subscription under it, those the endpoint's ordered command types share as one more
   * entry after its subscriptions, a `command` subscription named {@link ORDERED_COMMANDS} whose
   * types are those ordered types (its total is the `cmd~<endpoint>~ordered` row of `queueDepths`).
   */
  async topology(): Promise<Topology> {
    const layout = new QueueLayout(this.#prefix, (await this.partitionCount()) ?? 0);
    const registrations = await this.#run(() => this.#connection.client.hgetall(layout.key('endpoints')));
    const endpoints: EndpointTopology[] = [];
    const unreadable: string[] = [];
    for (const endpoint of Object.keys(registrations).sort()) {
      let registered: { subscriptions?: SubscriptionSpec[]; registeredAt?: number };
      try {
        registered = JSON.parse(registrations[endpoint] ?? '') as typeof registered;
      } catch {
        unreadable.push(endpoint);
        continue;
      }
      const subscriptions: SubscriptionTopology[] = [];
      const specs = registered.subscriptions ?? [];
      for (const subscription of specs) {
        subscriptions.push(
          await this.#subscriptionTopology(subscription, layout.queuesFor(endpoint, subscription)),
        );
      }
      const orderedCommands = [...orderedCommandTypes(specs)];
      if (orderedCommands.length > 0) {
        const spec: SubscriptionSpec = {
          handler: ORDERED_COMMANDS,
          kind: 'command',
          types: orderedCommands,
          orderedTypes: orderedCommands,
        };
        subscriptions.push(await this.#subscriptionTopology(spec, layout.orderedCommandQueues(endpoint)));
      }
      endpoints.push({ endpoint, registeredAt: registered.registeredAt, subscriptions });
    }
    return { endpoints, unreadable };
  }

  /**
   * Every (topic, partition) the event log under the prefix has appended to, partitions ascending.
   * A partition that never had an append does not show.
   */
  logPartitions(): Promise<Map<string, number[]>> {
    return this.#run(() => scanLogPartitions(this.#connection.client, this.#prefix));
  }

  /**
   * Checkpoint, log end and lag of each projection with checkpoints (or of `projection` alone), on
   * every partition of the topics it reads: the partitions the log has appended to and those with a
   * checkpoint. Sorted by projection, topic and partition; empty when nothing matches.
   */
  async projectionLags(projection?: string): Promise<CheckpointLag[]> {
    return checkpointLags({
      checkpoints: await this.checkpointStore().list(projection),
      logPartitions: await this.logPartitions(),
      log: (topics) => this.eventLog(topics),
    });
  }

  /** The system's checkpoint store, on this admin's connection. */
  checkpointStore(): RedisCheckpointStore {
    return this.#track(
      new RedisCheckpointStore({ connection: this.#connection.client, prefix: this.#prefix }),
    );
  }

  /** The system's dead-letter store, on this admin's connection. */
  deadLetterStore(): RedisDeadLetterStore {
    return this.#track(
      new RedisDeadLetterStore({ connection: this.#connection.client, prefix: this.#prefix }),
    );
  }

  /**
   * The system's saga store, on this admin's connection.
   *
   * @remarks
   * Reading needs no retention; pass the application's `completedRetentionMs` only to save through it.
   */
  sagaStore(options: { readonly completedRetentionMs?: number } = {}): RedisSagaStore {
    return this.#track(
      new RedisSagaStore({ connection: this.#connection.client, prefix: this.#prefix, ...options }),
    );
  }

  /**
   * The system's delivery ledger (the `RedisDeliveryLedger` of its RabbitMQ brokers, under the
   * prefix), on this admin's connection: a replay through RabbitMQ goes through it.
   */
  deliveryLedger(): RedisDeliveryLedger {
    return this.#track(
      new RedisDeliveryLedger({ connection: this.#connection.client, prefix: this.#prefix }),
    );
  }

  /** The system's schedule store, on this admin's connection. */
  scheduleStore(): RedisScheduleStore {
    return this.#track(new RedisScheduleStore({ connection: this.#connection.client, prefix: this.#prefix }));
  }

  /**
   * The system's event log with the manifest `topics`, on this admin's connection.
   * @throws HarrierError `invalid-topic` when the manifest breaks a naming or partition rule.
   */
  eventLog(topics: readonly TopicSpec[]): RedisEventLog {
    return this.#track(
      new RedisEventLog({ connection: this.#connection.client, prefix: this.#prefix, topics }),
    );
  }

  /**
   * A broker of the system, with the partition count its brokers agreed on (the broker's default
   * when none has started yet). It opens connections of its own, to the Redis this admin was opened on.
   */
  async broker(
    options: Omit<BullMqBrokerOptions, 'connection' | 'prefix' | 'partitions'> = {},
  ): Promise<BullMqBroker> {
    const partitions = await this.partitionCount();
    return this.#track(
      new BullMqBroker({
        ...options,
        connection: this.#options,
        prefix: this.#prefix,
        ...(partitions === undefined ? {} : { partitions }),
      }),
    );
  }

  /** Closes everything opened through this admin, then its connection (a client passed in stays open). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const opened = this.#opened.splice(0).reverse();
    await Promise.allSettled(opened.map((part) => part.close()));
    if (this.#connection.owned) this.#connection.client.disconnect();
  }

  /** A subscription's queues' depths, and their sum named after the group they belong to. */
  async #subscriptionTopology(
    subscription: SubscriptionSpec,
    specs: readonly QueueSpec[],
  ): Promise<SubscriptionTopology> {
    const queues: QueueDepth[] = [];
    for (const { name } of specs) queues.push(await this.#queueDepth(name));
    return { subscription, queues, total: sumQueueDepths(specs[0]?.group ?? '', queues) };
  }

  async #queueDepth(name: string): Promise<QueueDepth> {
    const queue = new bullmq.Queue(name, { connection: this.#connection.client, prefix: this.#prefix });
    // The failure reaches the caller through getJobCounts; unheard, BullMQ would print it to stderr.
    queue.on('error', () => undefined);
    try {
      return queueDepthOf(name, await this.#run(() => queue.getJobCounts(...DEPTH_STATES)));
    } finally {
      await queue.close();
    }
  }

  #track<T extends { close(): Promise<void> }>(part: T): T {
    this.#checkOpen();
    this.#opened.push(part);
    return part;
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError('admin-closed', 'The RedisAdmin is closed: open a new one with openRedisAdmin');
    }
  }

  #run<T>(body: () => Promise<T>): Promise<T> {
    this.#checkOpen();
    return runCommand(body, {
      connection: this.#connection,
      command: 'a query of the Harrier system',
      keyspace: this.#prefix,
    });
  }
}

/**
 * Opens a {@link RedisAdmin} on the Harrier system under `options.prefix`: connects, and checks with
 * PING that Redis answers.
 *
 * @example
 * ```ts
 * const admin = await openRedisAdmin('redis://127.0.0.1:6379', { prefix: '{billing-prod}' });
 * try {
 *   for (const { endpoint, subscriptions } of (await admin.topology()).endpoints) console.log(endpoint, subscriptions.length);
 * } finally {
 *   await admin.close();
 * }
 * ```
 * @throws HarrierError `redis-unavailable` when Redis cannot be reached, `invalid-option` for an
 * empty prefix.
 */
export function openRedisAdmin(
  connection: RedisConnectionOptions,
  options: RedisAdminOptions = {},
): Promise<RedisAdmin> {
  return RedisAdmin.open(connection, options);
}
