import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import amqplib from 'amqplib';

/** The RabbitMQ the tests use: RABBITMQ_URL, else the machine's own on the default port. */
export const rabbitMqUrl = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** A name prefix for one test file's brokers; {@link deleteRabbitMqPrefix} removes what it declared. */
export function freshRabbitMqPrefix(): string {
  return `hrt${randomUUID().replaceAll('-', '').slice(0, 10)}`;
}

const run = promisify(execFile);

/** The names `rabbitmqctl list_<what> name` prints that start with `prefix`; none if rabbitmqctl is missing. */
async function listed(what: 'queues' | 'exchanges', prefix: string): Promise<string[]> {
  try {
    const { stdout } = await run('rabbitmqctl', ['-q', `list_${what}`, 'name'], { timeout: 30_000 });
    return stdout
      .split('\n')
      .map((line) => line.trim())
      .filter((name) => name.startsWith(prefix));
  } catch {
    return [];
  }
}

/**
 * Deletes every queue and exchange whose name starts with `prefix` (found with rabbitmqctl, which
 * runs beside a local server; with a remote RABBITMQ_URL nothing is found and they are left).
 */
export async function deleteRabbitMqPrefix(prefix: string): Promise<void> {
  const [queues, exchanges] = await Promise.all([listed('queues', prefix), listed('exchanges', prefix)]);
  if (queues.length === 0 && exchanges.length === 0) return;
  const connection = await amqplib.connect(rabbitMqUrl);
  try {
    const channel = await connection.createChannel();
    for (const queue of queues) await channel.deleteQueue(queue);
    for (const exchange of exchanges) await channel.deleteExchange(exchange);
    await channel.close();
  } finally {
    await connection.close();
  }
}
