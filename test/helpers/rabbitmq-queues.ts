/** Queues of the tests of RabbitMQ's tools: named ones filled with messages, and deleted after. */
import { randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import { rabbitMqUrl } from './rabbitmq.js';

export { rabbitMqUrl };

/** A name prefix no other test uses. */
export function freshRabbitPrefix(label: string): string {
  return `hrt-${label}-${randomUUID().slice(0, 8)}`;
}

/** Deletes `queues` (those that exist) and `exchanges`, each on a channel of its own. */
export async function deleteRabbitMq(
  queues: readonly string[],
  exchanges: readonly string[] = [],
): Promise<void> {
  const model = await amqplib.connect(rabbitMqUrl);
  model.on('error', () => undefined);
  try {
    for (const [name, remove] of [
      ...queues.map((q) => [q, (c: amqplib.Channel) => c.deleteQueue(q)] as const),
      ...exchanges.map((e) => [e, (c: amqplib.Channel) => c.deleteExchange(e)] as const),
    ]) {
      const channel = await model.createChannel();
      channel.on('error', () => undefined);
      try {
        await remove(channel);
      } catch (error) {
        if ((error as { code?: unknown }).code !== 404) throw new Error(`deleting ${name}`, { cause: error });
      }
      await channel.close().catch(() => undefined);
    }
  } finally {
    await model.close().catch(() => undefined);
  }
}

/** Declares classic queues `queues` and puts `count` messages into each. */
export async function fillQueues(queues: Readonly<Record<string, number>>): Promise<void> {
  const model = await amqplib.connect(rabbitMqUrl);
  try {
    const channel = await model.createConfirmChannel();
    for (const [queue, count] of Object.entries(queues)) {
      await channel.assertQueue(queue, { durable: true });
      for (let i = 0; i < count; i++) channel.sendToQueue(queue, Buffer.from(`m${String(i)}`));
    }
    await channel.waitForConfirms();
    await channel.close();
  } finally {
    await model.close();
  }
}
