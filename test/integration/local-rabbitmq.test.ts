/**
 * The tests' own RabbitMQ (test/helpers/local-rabbitmq.ts): it starts on a port of its own, and a
 * durable quorum queue keeps a confirmed persistent message across a graceful restart and across a
 * SIGKILL, which is what the broker's fault tests rely on.
 */
import amqplib from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { amqpAnswers, startRabbitMqServer, type LocalRabbitMq } from '../helpers/local-rabbitmq.js';
import { waitFor } from '../helpers/local-redis.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';

/** Each start takes about 5 s on a 2-vCPU host; a loaded CI runner may take twice as long. */
const SERVER_TIMEOUT_MS = 60_000;

let server: LocalRabbitMq;

beforeAll(async () => {
  server = await startRabbitMqServer();
}, SERVER_TIMEOUT_MS);

afterAll(async () => {
  await server.dispose();
});

/** Declares a durable quorum queue. */
async function declareQuorumQueue(queue: string): Promise<void> {
  const connection = await amqplib.connect(server.url);
  try {
    const channel = await connection.createChannel();
    await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  } finally {
    await connection.close();
  }
}

/** Publishes `body` persistently to `queue`, waiting for the broker's confirm. */
async function publishPersistent(queue: string, body: string): Promise<void> {
  const connection = await amqplib.connect(server.url);
  try {
    const channel = await connection.createConfirmChannel();
    channel.sendToQueue(queue, Buffer.from(body), { persistent: true });
    await channel.waitForConfirms();
  } finally {
    await connection.close();
  }
}

/**
 * The bodies of `expected` messages taken from `queue` one by one (a queue just recovered may first
 * answer empty); each basic.get is bounded, as a quorum queue without a leader never answers.
 */
async function drain(queue: string, expected: number): Promise<string[]> {
  const connection = await amqplib.connect(server.url);
  try {
    const channel = await connection.createChannel();
    const bodies: string[] = [];
    await waitFor(
      `${String(expected)} messages from ${queue}`,
      async () => {
        const message = await Promise.race([
          channel.get(queue, { noAck: true }),
          new Promise<false>((resolve) =>
            setTimeout(() => {
              resolve(false);
            }, 2_000),
          ),
        ]);
        if (message !== false) bodies.push(message.content.toString());
        return bodies.length >= expected;
      },
      { timeoutMs: 10_000, explain: () => `got ${JSON.stringify(bodies)}` },
    );
    return bodies;
  } finally {
    await connection.close();
  }
}

describe('startRabbitMqServer', () => {
  it('starts a server of its own on a loopback port, not the system one', () => {
    expect(server.url).toMatch(/^amqp:\/\/guest:guest@127\.0\.0\.1:\d+$/);
    expect(server.port).not.toBe(5672);
    expect(server.nodeName).toMatch(/^harrier-test-[0-9a-f]+@localhost$/);
  });

  describe('.restart', () => {
    it(
      'brings back a durable quorum queue with its persistent message after a graceful stop',
      async () => {
        await declareQuorumQueue('smoke.graceful');
        await publishPersistent('smoke.graceful', 'kept across a restart');
        await server.restart();
        expect(await drain('smoke.graceful', 1)).toEqual(['kept across a restart']);
      },
      SERVER_TIMEOUT_MS,
    );

    it(
      'brings back a confirmed persistent message in a quorum queue after kill (SIGKILL)',
      async () => {
        await declareQuorumQueue('smoke.killed');
        // RabbitMQ 3.10.8 saves the registration of a new quorum queue's Raft member lazily (a DETS
        // table, names.dets): killed before that, it starts a new, empty member for the queue, which
        // never elects a leader nor answers. A graceful restart saves it; messages published after
        // that survive the kill, which is what this asserts.
        await server.restart();
        await publishPersistent('smoke.killed', 'kept across a kill');
        await server.kill();
        expect(await amqpAnswers(server.url)).toBe(false);
        await server.restart();
        expect(await drain('smoke.killed', 1)).toEqual(['kept across a kill']);
      },
      SERVER_TIMEOUT_MS,
    );
  });
});

describe('rabbitmqUrl', () => {
  it(
    "resolves to the global setup's RabbitMQ once it accepts connections",
    async () => {
      const url = await rabbitmqUrl();
      expect(url).not.toBe(server.url);
      expect(await amqpAnswers(url)).toBe(true);
    },
    SERVER_TIMEOUT_MS,
  );
});
