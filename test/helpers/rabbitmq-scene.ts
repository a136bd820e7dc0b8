/**
 * The set-up the RabbitMqBroker integration tests share: the tests' RabbitMQ, an admin connection of
 * the file's own for checks, brokers on prefixes of their own, and messages to publish.
 */
import amqplib, { type ChannelModel } from 'amqplib';
import { afterAll, beforeAll } from 'vitest';
import type { Delivery, MessageBroker, OutgoingMessage } from '../../src/broker/message-broker.js';
import { silentLogger } from '../../src/logging/logger.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RabbitMqBroker, type RabbitMqBrokerOptions } from '../../src/rabbitmq/rabbitmq-broker.js';
import { freshBrokerPrefix, rabbitmqUrl } from './rabbitmq.js';

/** What {@link rabbitScene} gives a test file (plain functions: destructure what the file uses). */
export interface RabbitScene {
  /** The file's prefix, for brokers made some other way. */
  readonly filePrefix: string;
  /** The tests' RabbitMQ URL (once `beforeAll` has run). */
  readonly url: () => string;
  /** A broker with a prefix of its own (`<file prefix>-<n>`), closed by the caller. */
  readonly brokerWith: (options?: Partial<RabbitMqBrokerOptions>) => RabbitMqBroker;
  /** Another broker (as of another process) on `other`'s prefix, closed by the caller. */
  readonly brokerBeside: (other: RabbitMqBroker, options?: Partial<RabbitMqBrokerOptions>) => RabbitMqBroker;
  /** Runs `run` on a channel of the file's admin connection (a failed check closes only its channel). */
  readonly onChannel: <T>(run: (channel: amqplib.Channel) => Promise<T>) => Promise<T>;
  /** The ready messages in `queue`, or 'missing'. */
  readonly readyIn: (queue: string) => Promise<number | 'missing'>;
  /** Publishes raw bytes straight into `queue` (persistent), confirmed by a round trip. */
  readonly sendRaw: (queue: string, body: string, properties: amqplib.Options.Publish) => Promise<void>;
}

/**
 * Sets up a test file's RabbitMQ scene: call it at the top of the file (it adds a `beforeAll` that
 * waits for the server and opens the admin connection, and an `afterAll` that closes it).
 * @param defaults options every {@link RabbitScene.brokerWith} broker gets (before its own).
 */
export function rabbitScene(defaults: Partial<RabbitMqBrokerOptions> = {}): RabbitScene {
  const filePrefix = freshBrokerPrefix();
  let made = 0;
  let url: string | undefined;
  let admin: ChannelModel | undefined;

  beforeAll(async () => {
    url = await rabbitmqUrl();
    admin = await amqplib.connect(url);
  }, 60_000);

  afterAll(async () => {
    await admin?.close();
  });

  const urlOf = (): string => {
    if (url === undefined) throw new Error('rabbitScene: the URL is known once beforeAll has run');
    return url;
  };
  const brokerWith = (options: Partial<RabbitMqBrokerOptions> = {}): RabbitMqBroker =>
    new RabbitMqBroker({
      connection: urlOf(),
      prefix: `${filePrefix}-${String(++made)}`,
      logger: silentLogger,
      ...defaults,
      ...options,
    });
  const onChannel = async <T>(run: (channel: amqplib.Channel) => Promise<T>): Promise<T> => {
    if (admin === undefined) throw new Error('rabbitScene: the admin connection opens in beforeAll');
    const channel = await admin.createChannel();
    channel.on('error', () => undefined);
    try {
      return await run(channel);
    } finally {
      await channel.close().catch(() => undefined);
    }
  };
  return {
    filePrefix,
    url: urlOf,
    brokerWith,
    brokerBeside: (other, options = {}) => brokerWith({ prefix: other.prefix, ...options }),
    onChannel,
    readyIn: (queue) =>
      onChannel(async (channel) => (await channel.checkQueue(queue)).messageCount).catch(
        () => 'missing' as const,
      ),
    sendRaw: (queue, body, properties) =>
      onChannel(async (channel) => {
        channel.sendToQueue(queue, Buffer.from(body), { persistent: true, ...properties });
        // A round trip after the publish: it is in the queue when this answers.
        await channel.checkQueue(queue);
      }),
  };
}

/** A message of `kind` and `type` with a fresh id and a body naming its type. */
export function message(
  kind: 'command' | 'event',
  type: string,
  extra: Partial<OutgoingMessage> = {},
): OutgoingMessage {
  return { id: uuidv7(), kind, type, body: `{"type":"${type}"}`, ...extra };
}

/** Every delivery of `endpoint` within `ms` (each acked), or until `count` came. */
export async function deliveriesWithin(
  broker: MessageBroker,
  endpoint: string,
  ms: number,
  count: number,
): Promise<Delivery[]> {
  const seen: Delivery[] = [];
  for await (const delivery of broker.receiver({ endpoint, signal: AbortSignal.timeout(ms) })) {
    seen.push(delivery);
    await broker.ack(delivery.id);
    if (seen.length >= count) break;
  }
  return seen;
}
