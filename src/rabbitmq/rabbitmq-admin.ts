import type { ChannelModel, Options } from 'amqplib';
import type { EndpointTopology, SubscriptionTopology, Topology } from '../admin/topology.js';
import type { AdminBrokerOptions, TransportAdmin } from '../admin/transport-admin.js';
import type { MessageBroker, QueueDepth } from '../broker/message-broker.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import { HarrierError } from '../errors/harrier-error.js';
import { QueueProbe } from './queue-probe.js';
import { amqplib } from './rabbitmq-peers.js';
import { registryQueue, type RabbitMqRegistration, type RegisteredQueue } from './rabbitmq-registry.js';
import { RegistryReader } from './registry-reader.js';

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

/** Where `target` points, for messages: the URL without its user and password. */
function describeTarget(target: string | Options.Connect): string {
  if (typeof target === 'string') return target.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/?#]*@/, '$1***@');
  return `${target.protocol ?? 'amqp'}://${target.hostname ?? 'localhost'}:${String(target.port ?? 5672)}`;
}

function unavailable(where: string, doing: string, cause: unknown): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new HarrierError(
    'rabbitmq-unavailable',
    `RabbitMQ could not be reached at ${where} while ${doing} (${reason}): start RabbitMQ there, or point RABBITMQ_URL / --rabbitmq-url at a running server`,
    { cause },
  );
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
  readonly #model: ChannelModel;
  readonly #target: string | Options.Connect;
  readonly #prefix: string;
  readonly #where: string;
  readonly #reader: RegistryReader;
  readonly #opened: { close(): Promise<void> }[] = [];
  #closed = false;

  private constructor(
    model: ChannelModel,
    target: string | Options.Connect,
    prefix: string,
    readTimeoutMs: number,
  ) {
    this.#model = model;
    this.#target = target;
    this.#prefix = prefix;
    this.#where = describeTarget(target);
    this.#reader = new RegistryReader(model, prefix, readTimeoutMs);
  }

  /** @see {@link openRabbitMqAdmin} */
  static async open(
    connection: string | Options.Connect,
    options: RabbitMqAdminOptions = {},
  ): Promise<RabbitMqAdmin> {
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    if (prefix === '') {
      throw new HarrierError(
        'invalid-option',
        `RabbitMqAdmin: prefix must be non-empty: give the prefix the system's RabbitMqBrokers were given (default "${DEFAULT_PREFIX}")`,
      );
    }
    const where = describeTarget(connection);
    let model: ChannelModel;
    try {
      model = await amqplib.connect(connection, {
        timeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      });
    } catch (error) {
      throw unavailable(where, 'connecting', error);
    }
    // A connection that drops shows as the failure of the operation in progress.
    model.on('error', () => undefined);
    return new RabbitMqAdmin(model, connection, prefix, options.readTimeoutMs ?? DEFAULT_READ_TIMEOUT_MS);
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
   * their queues holds: `waiting` the ready ones, `delayed` those in the queue's delay queues, and
   * `active` 0 (AMQP does not tell; the note says so).
   */
  async topology(): Promise<Topology> {
    const read = await this.#readRegistry();
    if (read === undefined) {
      return {
        endpoints: [],
        note: `no endpoint registered with a RabbitMqBroker under prefix "${this.#prefix}" at ${this.#where} (its registry stream "${registryQueue(this.#prefix)}" does not exist): check --rabbitmq-prefix`,
      };
    }
    const probe = new QueueProbe(this.#model);
    try {
      const endpoints: EndpointTopology[] = [];
      for (const registration of read.registrations) {
        endpoints.push(await this.#endpointTopology(registration, probe));
      }
      const notes = [RABBITMQ_ACTIVE_NOTE];
      if (read.skipped > 0) {
        notes.push(
          `${String(read.skipped)} record${read.skipped === 1 ? '' : 's'} of "${registryQueue(this.#prefix)}" named no endpoint (something other than a RabbitMqBroker wrote them) and were skipped`,
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
   * A broker of the system, set up as its endpoints registered (prefix, queue type), to send
   * messages back through (`harrier dlq replay`, the dashboard's actions); it opens a connection of
   * its own and is closed with the admin.
   * @throws HarrierError `invalid-argument` when no endpoint registered under the prefix: a replay
   *   would send messages no queue takes.
   */
  broker(options: AdminBrokerOptions = {}): Promise<MessageBroker> {
    this.#checkOpen();
    return Promise.reject(
      new HarrierError(
        'not-supported',
        `RabbitMqAdmin.broker (${describeTarget(this.#target)}, logger ${options.logger === undefined ? 'default' : 'given'}): not yet`,
      ),
    );
  }

  /** Closes everything opened through this admin, then its connection. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const opened = this.#opened.splice(0).reverse();
    await Promise.allSettled(opened.map((part) => part.close()));
    await this.#model.close().catch(() => undefined);
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

  #checkOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'admin-closed',
        'The RabbitMqAdmin is closed: open a new one with openRabbitMqAdmin',
      );
    }
  }
}

/** The depth of one registered queue: its ready messages, and those in its delay queues. */
async function queueDepth(queue: RegisteredQueue, probe: QueueProbe): Promise<QueueDepth> {
  const waiting = (await probe.counts(queue.name))?.ready ?? 0;
  let delayed = 0;
  for (const delay of queue.delayQueues ?? []) delayed += (await probe.counts(delay))?.ready ?? 0;
  return { queue: queue.name, waiting, active: 0, delayed };
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
 * @throws HarrierError `rabbitmq-unavailable` when RabbitMQ cannot be reached, `invalid-option` for an
 *   empty prefix.
 */
export function openRabbitMqAdmin(
  connection: string | Options.Connect,
  options: RabbitMqAdminOptions = {},
): Promise<RabbitMqAdmin> {
  return RabbitMqAdmin.open(connection, options);
}
