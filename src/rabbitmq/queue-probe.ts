import type { Channel } from 'amqplib';
import { isNotFound, type RegistryConnection } from './rabbitmq-registry.js';

/** What RabbitMQ tells of a queue over AMQP (the reply to a passive declare). */
export interface QueueCounts {
  /** Messages ready for delivery (not those delivered and not acknowledged yet). */
  readonly ready: number;
  readonly consumers: number;
}

/**
 * Asks RabbitMQ how many messages queues hold, by passive declares on one channel.
 *
 * @remarks
 * A passive declare of a queue that does not exist (a delay queue never used, a queue deleted by
 * an operator) is answered with 404 and the channel closed: the probe counts that queue as absent
 * and opens a new channel for the next one.
 */
export class QueueProbe {
  readonly #connection: RegistryConnection;
  #channel: Promise<Channel> | undefined;

  constructor(connection: RegistryConnection) {
    this.#connection = connection;
  }

  /** The counts of `queue`, or undefined when it does not exist. */
  async counts(queue: string): Promise<QueueCounts | undefined> {
    const channel = await this.#open();
    try {
      const reply = await channel.checkQueue(queue);
      return { ready: reply.messageCount, consumers: reply.consumerCount };
    } catch (error) {
      this.#channel = undefined;
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /** Closes the probe's channel. */
  async close(): Promise<void> {
    const channel = this.#channel;
    this.#channel = undefined;
    if (channel !== undefined) await (await channel).close().catch(() => undefined);
  }

  #open(): Promise<Channel> {
    this.#channel ??= this.#connection.createChannel().then((channel) => {
      channel.on('error', () => undefined);
      return channel;
    });
    const opening = this.#channel;
    opening.catch(() => {
      if (this.#channel === opening) this.#channel = undefined;
    });
    return opening;
  }
}
