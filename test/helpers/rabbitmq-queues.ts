/** Queues of the tests of RabbitMQ's tools: a broker prefix, named queues filled with messages, deleted after. */
import amqplib from 'amqplib';
import { rabbitmqUrl } from './rabbitmq.js';

export { freshBrokerPrefix } from './rabbitmq.js';

/** Deletes `queues` (those that exist), each on a channel of its own. */
export async function deleteRabbitMq(queues: readonly string[]): Promise<void> {
  if (queues.length === 0) return;
  const model = await amqplib.connect(await rabbitmqUrl());
  model.on('error', () => undefined);
  try {
    for (const queue of queues) {
      const channel = await model.createChannel();
      channel.on('error', () => undefined);
      try {
        await channel.deleteQueue(queue);
      } catch (error) {
        if ((error as { code?: unknown }).code !== 404)
          throw new Error(`deleting ${queue}`, { cause: error });
      }
      await channel.close().catch(() => undefined);
    }
  } finally {
    await model.close().catch(() => undefined);
  }
}

/** Declares classic queues `queues` and puts `count` messages into each. */
export async function fillQueues(queues: Readonly<Record<string, number>>): Promise<void> {
  const model = await amqplib.connect(await rabbitmqUrl());
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
