import { randomUUID } from 'node:crypto';
import type { Channel, ConsumeMessage } from 'amqplib';
import type { SubscriptionSpec } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import { z } from '../messages/supported-zod.js';
import {
  REGISTRATION_VERSION,
  REGISTRY_MARKER_TYPE,
  appendToRegistry,
  onOwnChannel,
  registryExists,
  registryQueue,
  type RabbitMqRegistration,
  type RegisteredSubscription,
  type RegistryConnection,
} from './rabbitmq-registry.js';

/**
 * How long a read that goes on from where the last one stopped waits for its marker before it reads
 * the whole stream again, in ms.
 */
const RESUME_TIMEOUT_MS = 2000;

/** How many records RabbitMQ may send a reader ahead of its acks (a stream consumer must set one). */
const READ_PREFETCH = 500;

const subscriptionSchema = z.object({
  handler: z.string().min(1),
  kind: z.enum(['command', 'event']),
  types: z.array(z.string()),
  orderedTypes: z.array(z.string()).optional(),
});

const registrationSchema = z.object({
  v: z.literal(REGISTRATION_VERSION),
  endpoint: z.string().min(1),
  registeredAt: z.number(),
  queueType: z.enum(['quorum', 'classic']),
  partitions: z.number().int().min(0),
  subscriptions: z.array(
    z.object({
      subscription: subscriptionSchema,
      queues: z.array(z.object({ name: z.string().min(1) })),
    }),
  ),
  delayQueues: z.array(z.string().min(1)).optional(),
});

/** A registration as read: its record, or its endpoint alone when the record was not readable. */
type Entry =
  | { readonly registration: RabbitMqRegistration }
  | { readonly registration?: undefined; readonly unreadable: true };

/** What {@link RegistryReader.read} found. */
export interface RegistryRead {
  /** The latest readable registration of each endpoint, by endpoint name. */
  readonly registrations: readonly RabbitMqRegistration[];
  /** Endpoints whose latest record is not a registration this version of Harrier reads. */
  readonly unreadable: readonly string[];
  /** Records that named no endpoint at all (written by something else), skipped. */
  readonly skipped: number;
}

/** The registration `body` holds, the endpoint of an unreadable one, or nothing to go by. */
function parseRecord(body: Buffer): { registration: RabbitMqRegistration } | { endpoint?: string } {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    return {};
  }
  const parsed = registrationSchema.safeParse(json);
  if (!parsed.success) {
    const endpoint = (json as { endpoint?: unknown } | null)?.endpoint;
    return typeof endpoint === 'string' && endpoint !== '' ? { endpoint } : {};
  }
  const { endpoint, registeredAt, queueType, partitions, delayQueues } = parsed.data;
  const subscriptions = parsed.data.subscriptions.map(({ subscription, queues }): RegisteredSubscription => ({
    subscription: {
      handler: subscription.handler,
      kind: subscription.kind,
      types: subscription.types,
      ...(subscription.orderedTypes !== undefined ? { orderedTypes: subscription.orderedTypes } : {}),
    } satisfies SubscriptionSpec,
    queues: queues.map(({ name }) => ({ name })),
  }));
  return {
    registration: {
      endpoint,
      registeredAt,
      queueType,
      partitions,
      subscriptions,
      ...(delayQueues !== undefined ? { delayQueues } : {}),
    },
  };
}

/** The stream offset RabbitMQ stamps on a delivery from a stream, if any. */
function offsetOf(message: ConsumeMessage): number | undefined {
  const offset: unknown = (message.properties.headers as Record<string, unknown> | undefined)?.[
    'x-stream-offset'
  ];
  return typeof offset === 'number' ? offset : undefined;
}

/**
 * Reads the registry of a Harrier system on RabbitMQ (`<prefix>.registry`, written by
 * `recordRegistration`) and keeps the latest registration of each endpoint.
 *
 * @remarks
 * A stream never says where it ends, and its message count is a statistic refreshed every few
 * seconds, so the reader finds the end by writing it: it appends a marker of its own (a few dozen
 * bytes), then consumes from where it stopped last time (the first record, the first time) until
 * its marker comes back. Every record confirmed before the marker is read, and nothing is waited
 * for on a timer. Later reads go on from the offset after the marker, so a reader that is kept
 * (a dashboard refreshing) reads each record once.
 */
export class RegistryReader {
  readonly #connection: RegistryConnection;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #entries = new Map<string, Entry>();
  #skipped = 0;
  #next: number | 'first' = 'first';
  /** The read in progress: reads run one at a time (a dashboard's pages may ask together). */
  #reading: Promise<unknown> = Promise.resolve();

  /**
   * @param timeoutMs - how long a read may wait for its marker to come back before it fails.
   */
  constructor(connection: RegistryConnection, prefix: string, timeoutMs: number) {
    this.#connection = connection;
    this.#prefix = prefix;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Reads the records appended since the last read, and returns the latest registration of each
   * endpoint; undefined when the registry does not exist (no RabbitMqBroker registered under the
   * prefix).
   * @throws HarrierError `rabbitmq-unavailable` when the marker does not come back in time; what
   *   amqplib throws when RabbitMQ refuses an operation.
   */
  read(): Promise<RegistryRead | undefined> {
    const read = this.#reading.then(() => this.#read());
    this.#reading = read.catch(() => undefined);
    return read;
  }

  async #read(): Promise<RegistryRead | undefined> {
    if (!(await registryExists(this.#connection, this.#prefix))) return undefined;
    const marker = randomUUID();
    await onOwnChannel(
      () => this.#connection.createConfirmChannel(),
      (channel) =>
        appendToRegistry(channel, this.#prefix, Buffer.from(JSON.stringify({ v: 1, marker })), {
          type: REGISTRY_MARKER_TYPE,
          messageId: marker,
          timestamp: Date.now(),
        }),
    );
    if (this.#next === 'first') {
      await this.#readFrom('first', marker, this.#timeoutMs);
    } else {
      try {
        await this.#readFrom(this.#next, marker, Math.min(this.#timeoutMs, RESUME_TIMEOUT_MS));
      } catch (error) {
        if (!HarrierError.is(error, 'rabbitmq-unavailable')) throw error;
        // The stream was deleted and declared again (its offsets start over, below where this reader
        // stopped), or RabbitMQ is slow: read it all again, which is right either way.
        this.#entries.clear();
        this.#skipped = 0;
        await this.#readFrom('first', marker, this.#timeoutMs);
      }
    }
    const registrations: RabbitMqRegistration[] = [];
    const unreadable: string[] = [];
    for (const endpoint of [...this.#entries.keys()].sort()) {
      const entry = this.#entries.get(endpoint);
      if (entry?.registration !== undefined) registrations.push(entry.registration);
      else unreadable.push(endpoint);
    }
    return { registrations, unreadable, skipped: this.#skipped };
  }

  #readFrom(from: number | 'first', marker: string, timeoutMs: number): Promise<void> {
    return onOwnChannel(
      () => this.#connection.createChannel(),
      (channel) => this.#consumeUntil(channel, from, marker, timeoutMs),
    );
  }

  #consumeUntil(channel: Channel, from: number | 'first', marker: string, timeoutMs: number): Promise<void> {
    const queue = registryQueue(this.#prefix);
    return new Promise<void>((resolve, reject) => {
      let consumerTag: string | undefined;
      let settled = false;
      const finish = (error?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        const cancelled =
          consumerTag === undefined ? Promise.resolve() : channel.cancel(consumerTag).then(() => undefined);
        void cancelled
          .catch(() => undefined)
          .then(() => {
            if (error === undefined) resolve();
            else reject(error);
          });
      };
      const timer = setTimeout(() => {
        finish(
          new HarrierError(
            'rabbitmq-unavailable',
            `RabbitMQ did not hand back the end of the registry stream "${queue}" within ${String(timeoutMs)} ms: check that RabbitMQ is not overloaded or blocked (a disk or memory alarm), or allow a reader more time`,
          ),
        );
      }, timeoutMs);
      channel.on('close', () => {
        finish(
          new HarrierError('rabbitmq-unavailable', `The channel reading "${queue}" was closed by RabbitMQ`),
        );
      });
      const onMessage = (message: ConsumeMessage | null) => {
        if (message === null) {
          finish(new HarrierError('rabbitmq-unavailable', `RabbitMQ cancelled the reader of "${queue}"`));
          return;
        }
        channel.ack(message);
        if (settled) return;
        const offset = offsetOf(message);
        // A stream hands out whole chunks: records before the offset asked for may come first.
        if (offset !== undefined && typeof from === 'number' && offset < from) return;
        const { type, messageId } = message.properties as { type?: unknown; messageId?: unknown };
        if (type === REGISTRY_MARKER_TYPE) {
          if (messageId !== marker) return;
          if (offset !== undefined) this.#next = offset + 1;
          finish();
          return;
        }
        this.#take(message.content);
      };
      channel
        .prefetch(READ_PREFETCH)
        .then(() =>
          channel.consume(queue, onMessage, { noAck: false, arguments: { 'x-stream-offset': from } }),
        )
        .then(
          (ok) => {
            consumerTag = ok.consumerTag;
            if (settled) void channel.cancel(ok.consumerTag).catch(() => undefined);
          },
          (error: unknown) => {
            finish(error instanceof Error ? error : new Error(String(error)));
          },
        );
    });
  }

  #take(body: Buffer): void {
    const parsed = parseRecord(body);
    if ('registration' in parsed) {
      this.#entries.set(parsed.registration.endpoint, { registration: parsed.registration });
    } else if (parsed.endpoint !== undefined) {
      this.#entries.set(parsed.endpoint, { unreadable: true });
    } else {
      this.#skipped += 1;
    }
  }
}
