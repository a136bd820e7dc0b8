import type { Channel, ChannelModel, ConfirmChannel } from 'amqplib';
import type { SubscriptionSpec } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { RabbitMqQueueType } from './rabbitmq-topology.js';

/**
 * What the registry is written and read through: an amqplib connection (a recovering one too).
 *
 * @remarks
 * The registry opens channels of its own rather than using one of the broker's: a passive declare
 * of a queue that does not exist closes the channel it ran on (AMQP 404), and that must never be a
 * channel the broker consumes or publishes on.
 */
export type RegistryConnection = Pick<ChannelModel, 'createChannel' | 'createConfirmChannel'>;

/** One queue a subscription is delivered from. */
export interface RegisteredQueue {
  /** The queue's name in RabbitMQ. */
  readonly name: string;
}

/** One subscription of a registration, with the queues its messages wait in. */
export interface RegisteredSubscription {
  readonly subscription: SubscriptionSpec;
  /**
   * The queues the subscription is delivered from, its own queue first, then its partition queues
   * when it has ordered types. A queue that several subscriptions share (an endpoint's one command
   * queue) is listed under each of them.
   */
  readonly queues: readonly RegisteredQueue[];
}

/**
 * What a RabbitMqBroker records in the registry each time an endpoint registers: the endpoint's
 * subscriptions, the settings its queues were declared with, and their names in RabbitMQ.
 */
export interface RabbitMqRegistration {
  /** The endpoint that registered. */
  readonly endpoint: string;
  /** When it registered, ms since the epoch. */
  readonly registeredAt: number;
  /** The `x-queue-type` of the endpoint's queues. */
  readonly queueType: RabbitMqQueueType;
  /** How many partition queues each queue with ordered types has (0: none). */
  readonly partitions: number;
  readonly subscriptions: readonly RegisteredSubscription[];
  /**
   * The delay queues of the prefix, one per delay bucket, whether declared yet or not: shared by
   * every queue (a message waits there for a retry or its scheduled time, then goes back to its
   * queue), so their depths add up to the system's delayed messages, not to one queue's.
   * @defaultValue []
   */
  readonly delayQueues?: readonly string[];
}

/** The AMQP `type` property of a registration record. */
export const REGISTRATION_TYPE = 'harrier.registration';

/** The AMQP `type` property of the marker a reader appends to find the end of the registry. */
export const REGISTRY_MARKER_TYPE = 'harrier.registry-marker';

/** The version of the record's JSON layout, its `v` field. */
export const REGISTRATION_VERSION = 1;

/**
 * The most bytes the registry keeps (`x-max-length-bytes`): older segments are removed past it,
 * so the newest records of each endpoint always stay.
 */
export const REGISTRY_MAX_BYTES = 64 * 1024 * 1024;

/**
 * The size of one segment file of the registry (`x-stream-max-segment-size-bytes`): retention
 * removes whole segments, so it is well under {@link REGISTRY_MAX_BYTES} (RabbitMQ's default,
 * 500 MB, would keep every record).
 */
export const REGISTRY_SEGMENT_BYTES = 4 * 1024 * 1024;

/** The name of the registry of the Harrier system under `prefix`: `<prefix>.registry`. */
export function registryQueue(prefix: string): string {
  return `${prefix}.registry`;
}

/** The arguments the registry stream is declared with. */
export const REGISTRY_ARGUMENTS: Readonly<Record<string, unknown>> = {
  'x-queue-type': 'stream',
  'x-max-length-bytes': REGISTRY_MAX_BYTES,
  'x-stream-max-segment-size-bytes': REGISTRY_SEGMENT_BYTES,
};

/** True when `error` is RabbitMQ's reply that a queue (or exchange) does not exist. */
export function isNotFound(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 404;
}

/**
 * Runs `body` on a channel of its own and closes the channel after; a channel error is the
 * rejection of `body`'s operation, never an unhandled `'error'` event.
 */
export async function onOwnChannel<C extends Channel, T>(
  open: () => Promise<C>,
  body: (channel: C) => Promise<T>,
): Promise<T> {
  const channel = await open();
  channel.on('error', () => undefined);
  try {
    return await body(channel);
  } finally {
    // A channel the server closed (a 404) is closed already.
    await channel.close().catch(() => undefined);
  }
}

/**
 * Whether the registry of `prefix` exists (a passive declare, on a channel of its own).
 */
export async function registryExists(connection: RegistryConnection, prefix: string): Promise<boolean> {
  try {
    await onOwnChannel(
      () => connection.createChannel(),
      (channel) => channel.checkQueue(registryQueue(prefix)),
    );
    return true;
  } catch (error) {
    if (isNotFound(error)) return false;
    throw error;
  }
}

/**
 * Declares the registry of `prefix` when it does not exist yet: a durable stream with
 * {@link REGISTRY_ARGUMENTS}. One that exists is left as it is, whatever its arguments (an operator
 * may have declared it with other retention).
 */
export async function declareRegistry(connection: RegistryConnection, prefix: string): Promise<void> {
  if (await registryExists(connection, prefix)) return;
  await onOwnChannel(
    () => connection.createChannel(),
    (channel) =>
      channel.assertQueue(registryQueue(prefix), { durable: true, arguments: { ...REGISTRY_ARGUMENTS } }),
  );
}

/** Publishes `body` to the registry of `prefix` and waits for RabbitMQ's confirm. */
export function appendToRegistry(
  channel: ConfirmChannel,
  prefix: string,
  body: Buffer,
  properties: { readonly type: string; readonly messageId: string; readonly timestamp: number },
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    channel.sendToQueue(
      registryQueue(prefix),
      body,
      {
        persistent: true,
        contentType: 'application/json',
        type: properties.type,
        messageId: properties.messageId,
        timestamp: Math.floor(properties.timestamp / 1000),
      },
      (error: unknown) => {
        if (error === null || error === undefined) resolve();
        else
          reject(error instanceof Error ? error : new Error('RabbitMQ refused the record', { cause: error }));
      },
    );
  });
}

/**
 * Appends `record` to the registry of the Harrier system under `prefix`, declaring the registry on
 * first use; resolves once RabbitMQ confirmed it. A RabbitMqBroker calls it in `register`, so that
 * tools (`RabbitMqAdmin`, `harrier topology --rabbitmq-url`) can list what is registered: RabbitMQ
 * cannot list queues or bindings over AMQP.
 *
 * @remarks
 * The registry is a stream queue, `<prefix>.registry`: an append-only log RabbitMQ keeps on disk
 * and replicates like a quorum queue, read from its first record by any number of readers without
 * removing anything. Each registration appends one record; a reader keeps the latest record of each
 * endpoint. Retention ({@link REGISTRY_MAX_BYTES}) removes the oldest segments only, so an endpoint
 * registered long ago by processes that never restarted stays listed until 64 MiB of newer records
 * (tens of thousands of registrations) follow it.
 * @param connection - the broker's connection; the record is written on a channel of its own.
 * @throws HarrierError `publish-failed` when RabbitMQ refuses the declare or the record (streams
 *   need RabbitMQ 3.9 or later), with RabbitMQ's error as `cause`.
 */
export async function recordRegistration(
  connection: RegistryConnection,
  prefix: string,
  record: RabbitMqRegistration,
): Promise<void> {
  const body = Buffer.from(
    JSON.stringify({
      v: REGISTRATION_VERSION,
      endpoint: record.endpoint,
      registeredAt: record.registeredAt,
      queueType: record.queueType,
      partitions: record.partitions,
      subscriptions: record.subscriptions,
      ...(record.delayQueues !== undefined ? { delayQueues: record.delayQueues } : {}),
    }),
  );
  try {
    await declareRegistry(connection, prefix);
    await onOwnChannel(
      () => connection.createConfirmChannel(),
      (channel) =>
        appendToRegistry(channel, prefix, body, {
          type: REGISTRATION_TYPE,
          messageId: `${record.endpoint}@${String(record.registeredAt)}`,
          timestamp: record.registeredAt,
        }),
    );
  } catch (error) {
    throw new HarrierError(
      'publish-failed',
      `Could not record the registration of endpoint "${record.endpoint}" in RabbitMQ's stream "${registryQueue(prefix)}" (${error instanceof Error ? error.message : String(error)}): tools will not list it until it registers again. Streams need RabbitMQ 3.9 or later; check that the user may declare and write queues named "${prefix}.*"`,
      { cause: error },
    );
  }
}
