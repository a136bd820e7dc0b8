import type { EndpointTopology, SubscriptionTopology, Topology } from '../admin/topology.js';
import type { AdminBrokerOptions, TransportAdmin } from '../admin/transport-admin.js';
import type { MessageBroker, QueueDepth } from '../broker/message-broker.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import { HarrierError } from '../errors/harrier-error.js';
import { QueueProbe } from './queue-probe.js';
import { RabbitMqBroker } from './rabbitmq-broker.js';
import type { RabbitMqConnectionOptions } from './rabbitmq-connection.js';
import { registryQueue, type RabbitMqRegistration, type RegisteredQueue } from './rabbitmq-registry.js';
import { RegistryReader } from './registry-reader.js';
import { ToolConnection, toolUnavailable as unavailable } from './tool-connection.js';

/** Options of {@link openRabbitMqAdmin}. */
export interface RabbitMqAdminOptions {
  /**
   * Name prefix of the Harrier system to look at: the `prefix` its RabbitMqBrokers were given.
   * @defaultValue 'harrier'
   */
  readonly prefix?: string;
  /**
   * How long connecting may take before RabbitMQ counts as unreachable, in ms.
   * @defaultValue 5000
   */
  readonly connectTimeoutMs?: number;
  /**
   * How long reading the registry may take before it fails, in ms.
   * @defaultValue 10000
   */
  readonly readTimeoutMs?: number;
}

const DEFAULT_PREFIX = 'harrier';
const DEFAULT_CONNECT_TIMEOUT_MS = 5000;
const DEFAULT_READ_TIMEOUT_MS = 10_000;

/** What the topology says of `active` on RabbitMQ. */
export const RABBITMQ_ACTIVE_NOTE =
  'RabbitMQ tells over AMQP how many messages a queue holds ready, not how many are delivered and not acknowledged yet: ACTIVE shows 0 (RabbitMQ’s management UI or `rabbitmqctl list_queues name messages_unacknowledged` shows them)';

/** What the tests do to an admin. */
const testHooks = new WeakMap<RabbitMqAdmin, { readonly dropConnection: () => Promise<void> }>();

/** Makes the admin lose its connection as if the network dropped it (tests of reconnecting). */
export async function dropConnectionOfAdmin(admin: RabbitMqAdmin): Promise<void> {
  await testHooks.get(admin)?.dropConnection();
}

/**
 * The {@link TransportAdmin} of a Harrier system on RabbitMQ: the endpoints its RabbitMqBrokers
 * registered, the depths of their queues, and a broker to send messages back through (a replay).
 * Open one with {@link openRabbitMqAdmin}.
 *
 * @remarks
 * RabbitMQ cannot list queues or bindings over AMQP (that is its management plugin's HTTP API,
 * which this does not need): each RabbitMqBroker records its registrations in the stream
 * `<prefix>.registry`, and the admin reads them there, then asks each recorded queue its depth with
 * a passive declare. The stores of such a system (dead letters, sagas, checkpoints) are in Redis or
 * PostgreSQL: a tool composes this admin with theirs (`harrier ... --url redis://... --rabbitmq-url
 * amqp://...`).
 */
export class RabbitMqAdmin implements TransportAdmin {
  readonly #connection: ToolConnection;
  readonly #target: RabbitMqConnectionOptions;
  readonly #prefix: string;
  readonly #where: string;
  readonly #reader: RegistryReader;
  readonly #opened: { close(): Promise<void> }[] = [];
  #closed = false;

  private constructor(
    connection: ToolConnection,
    target: RabbitMqConnectionOptions,
    prefix: string,
    readTimeoutMs: number,
  ) {
    this.#connection = connection;
    this.#target = target;
    this.#prefix = prefix;
    this.#where = connection.where;
    this.#reader = new RegistryReader(connection, prefix, readTimeoutMs);
    testHooks.set(this, { dropConnection: () => connection.drop() });
  }

  /** @see {@link openRabbitMqAdmin} */
  static async open(
    connection: RabbitMqConnectionOptions,
    options: RabbitMqAdminOptions = {},
  ): Promise<RabbitMqAdmin> {
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    if (!/^[A-Za-z0-9_-]{1,100}$/.test(prefix)) {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqAdmin option prefix is "${prefix}": give the prefix the system's RabbitMqBrokers were given, 1 to 100 letters, digits, '_' or '-' (default "${DEFAULT_PREFIX}")`,
      );
    }
    const tool = new ToolConnection(connection, options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS);
    // Connect now, so an unreachable RabbitMQ is reported by open, not by the first query.
    await tool.model();
    return new RabbitMqAdmin(tool, connection, prefix, options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS);
  }

  /** The name prefix of the system. */
  get prefix(): string {
    return this.#prefix;
  }

  /** Where RabbitMQ is, for messages (never a password). */
  get where(): string {
    return this.#where;
  }

  /**
   * The latest registration of each endpoint, by endpoint name; empty when no RabbitMqBroker
   * registered under the prefix.
   */
  async registrations(): Promise<readonly RabbitMqRegistration[]> {
    return (await this.#readRegistry())?.registrations ?? [];
  }

  /**
   * Every endpoint registered under the prefix, its subscriptions, and how many messages each of
   * their queues holds: `waiting` the ready ones; `active` and `delayed` 0 (AMQP does not tell
   * unacknowledged messages, and the delay queues are shared by every queue): the note says so and
   * gives the delay queues' total.
   */
  async topology(): Promise<Topology> {
    const read = await this.#readRegistry();
    if (read === undefined) {
      return {
        endpoints: [],
        note: `no endpoint registered with a RabbitMqBroker under prefix "${this.#prefix}" at ${this.#where} (its registry stream "${registryQueue(this.#prefix)}" does not exist): check --rabbitmq-prefix`,
      };
    }
    const probe = new QueueProbe(this.#connection);
    try {
      const endpoints: EndpointTopology[] = [];
      for (const registration of read.registrations) {
        endpoints.push(await this.#endpointTopology(registration, probe));
      }
      const notes = [RABBITMQ_ACTIVE_NOTE];
      const delayed = await delayedMessages(read.registrations, probe);
      notes.push(
        `${plural(delayed.messages, 'message')} in the ${plural(delayed.queues, 'delay queue')} of the prefix ("${this.#prefix}.delay.*"), waiting for a retry or a scheduled time: every queue shares them, and RabbitMQ cannot tell over AMQP which queue each is for, so DELAYED shows 0`,
      );
      if (read.skipped > 0) {
        notes.push(
          `${plural(read.skipped, 'record')} of "${registryQueue(this.#prefix)}" named no endpoint (something other than a RabbitMqBroker wrote them) and were skipped`,
        );
      }
      return { endpoints, unreadable: read.unreadable, note: notes.join('; ') };
    } catch (error) {
      throw HarrierError.is(error) ? error : unavailable(this.#where, 'reading queue depths', error);
    } finally {
      await probe.close();
    }
  }

  /**
   * A broker of the system, set up as its endpoints last registered (prefix, queue type, partition
   * count), to send messages back through (`harrier dlq replay`, the dashboard's actions); it opens
   * a connection of its own and is closed with the admin. Give it the system's delivery ledger
   * (`options.ledger`) when its brokers have one: a replay then replaces a copy still queued
   * instead of adding one.
   * @throws HarrierError `invalid-argument` when no endpoint registered under the prefix: a replay
   *   would send messages no queue takes.
   */
  async broker(options: AdminBrokerOptions = {}): Promise<MessageBroker> {
    const registrations = await this.registrations();
    const latest = registrations.reduce<RabbitMqRegistration | undefined>(
      (found, registration) =>
        found === undefined || registration.registeredAt > found.registeredAt ? registration : found,
      undefined,
    );
    if (latest === undefined) {
      throw new HarrierError(
        'invalid-argument',
        `Cannot send messages back through RabbitMQ at ${this.#where}: no endpoint registered with a RabbitMqBroker under prefix "${this.#prefix}" (its registry stream "${registryQueue(this.#prefix)}" holds none). Check --rabbitmq-prefix, or start the system's endpoints first`,
      );
    }
    return this.#track(
      new RabbitMqBroker({
        connection: this.#target,
        prefix: this.#prefix,
        queueType: latest.queueType,
        ...(latest.partitions > 0 ? { partitions: latest.partitions } : {}),
        ...(options.logger !== undefined ? { logger: options.logger } : {}),
        ...(options.ledger !== undefined ? { ledger: options.ledger } : {}),
      }),
    );
  }

  /** Closes everything opened through this admin, then its connection. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const opened = this.#opened.splice(0).reverse();
    await Promise.allSettled(opened.map((part) => part.close()));
    await this.#connection.close();
  }

  async #readRegistry() {
    this.#checkOpen();
    try {
      return await this.#reader.read();
    } catch (error) {
      throw HarrierError.is(error) ? error : unavailable(this.#where, 'reading the registry', error);
    }
  }

  async #endpointTopology(registration: RabbitMqRegistration, probe: QueueProbe): Promise<EndpointTopology> {
    const subscriptions: SubscriptionTopology[] = [];
    for (const { subscription, queues } of registration.subscriptions) {
      const depths: QueueDepth[] = [];
      for (const queue of queues) depths.push(await queueDepth(queue, probe));
      subscriptions.push({
        subscription,
        queues: depths,
        total: sumQueueDepths(queues[0]?.name ?? '', depths),
      });
    }
    return { endpoint: registration.endpoint, registeredAt: registration.registeredAt, subscriptions };
  }

  #track<T extends { close(): Promise<void> }>(part: T): T {
    this.#checkOpen();
    this.#opened.push(part);
    return part;
  }

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'admin-closed',
        'The RabbitMqAdmin is closed: open a new one with openRabbitMqAdmin',
      );
    }
  }
}

/** `1 message`, `2 messages`. */
function plural(count: number, noun: string): string {
  return `${String(count)} ${noun}${count === 1 ? '' : 's'}`;
}

/** The depth of one registered queue: its ready messages. */
async function queueDepth(queue: RegisteredQueue, probe: QueueProbe): Promise<QueueDepth> {
  const waiting = (await probe.counts(queue.name))?.ready ?? 0;
  return { queue: queue.name, waiting, active: 0, delayed: 0 };
}

/** The messages in the delay queues the registrations name (each queue once), and in how many queues. */
async function delayedMessages(
  registrations: readonly RabbitMqRegistration[],
  probe: QueueProbe,
): Promise<{ messages: number; queues: number }> {
  const names = new Set(registrations.flatMap((registration) => registration.delayQueues ?? []));
  let messages = 0;
  let queues = 0;
  for (const name of [...names].sort()) {
    const counts = await probe.counts(name);
    if (counts === undefined) continue;
    queues += 1;
    messages += counts.ready;
  }
  return { messages, queues };
}

/**
 * Opens a {@link RabbitMqAdmin} on the Harrier system under `options.prefix`: connects to RabbitMQ.
 *
 * @example
 * ```ts
 * const admin = await openRabbitMqAdmin('amqp://guest:guest@127.0.0.1:5672', { prefix: 'harrier' });
 * try {
 *   for (const { endpoint, subscriptions } of (await admin.topology()).endpoints) console.log(endpoint, subscriptions.length);
 * } finally {
 *   await admin.close();
 * }
 * ```
 * @throws HarrierError `rabbitmq-unavailable` when RabbitMQ cannot be reached, `invalid-option` for a
 *   prefix no RabbitMqBroker takes.
 */
export function openRabbitMqAdmin(
  connection: RabbitMqConnectionOptions,
  options: RabbitMqAdminOptions = {},
): Promise<RabbitMqAdmin> {
  return RabbitMqAdmin.open(connection, options);
}
