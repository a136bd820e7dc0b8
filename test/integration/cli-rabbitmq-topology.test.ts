import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import amqplib from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { CliIo } from '../../src/cli/cli-io.js';
import { dashboardCommand } from '../../src/cli/dashboard-command.js';
import { silentLogger } from '../../src/logging/logger.js';
import { RabbitMqBroker } from '../../src/rabbitmq/rabbitmq-broker.js';
import { recordRegistration, registryQueue } from '../../src/rabbitmq/rabbitmq-registry.js';
import { RedisDeadLetterStore } from '../../src/redis/redis-dead-letter-store.js';
import { runCli } from '../helpers/cli-in-process.js';
import { countDeadLetter } from '../helpers/harrier-cli.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { deleteRabbitMq, fillQueues, freshBrokerPrefix } from '../helpers/rabbitmq-queues.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);

let url: string;
let model: amqplib.ChannelModel;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  url = await rabbitmqUrl();
  model = await amqplib.connect(url);
}, 60_000);
afterAll(async () => {
  await model.close();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A Redis prefix and a RabbitMQ prefix of the test's own, deleted after it. */
function freshSystem(queues: readonly string[] = []): { prefix: string; rabbitPrefix: string } {
  const prefix = freshPrefix();
  const rabbitPrefix = freshBrokerPrefix();
  cleanups.push(() => deleteKeys(redis.client, prefix));
  cleanups.push(() =>
    deleteRabbitMq([registryQueue(rabbitPrefix), ...queues.map((q) => `${rabbitPrefix}.${q}`)]),
  );
  return { prefix, rabbitPrefix };
}

function jsonLines(text: string): Record<string, unknown>[] {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('harrier topology --rabbitmq-url', () => {
  describe('when an endpoint registered in RabbitMQ and its dead letters are in Redis', () => {
    it('lists its queues with RabbitMQ’s depths and the dead letters of the Redis store', async () => {
      const { prefix, rabbitPrefix } = freshSystem(['cmd.cli.Count', 'evt.counter.Audit']);
      const countQueue = `${rabbitPrefix}.cmd.cli.Count`;
      const auditQueue = `${rabbitPrefix}.evt.counter.Audit`;
      await recordRegistration(model, rabbitPrefix, {
        endpoint: 'counter',
        registeredAt: Date.UTC(2026, 0, 1),
        queueType: 'quorum',
        partitions: 0,
        subscriptions: [
          {
            subscription: { handler: 'CountHandler', kind: 'command', types: ['cli.Count'] },
            queues: [{ name: countQueue }],
          },
          {
            subscription: { handler: 'Audit', kind: 'event', types: ['cli.Counted'] },
            queues: [{ name: auditQueue }],
          },
        ],
      });
      await fillQueues({ [countQueue]: 7, [auditQueue]: 2 });
      const store = new RedisDeadLetterStore({ connection: redis.client, prefix });
      await store.add(countDeadLetter({ n: 1 }));
      await store.add(countDeadLetter({ n: 2 }));
      await store.close();

      const result = await runCli([
        'topology',
        '--json',
        '--url',
        redisUrl,
        '--prefix',
        prefix,
        '--rabbitmq-url',
        url,
        '--rabbitmq-prefix',
        rabbitPrefix,
      ]);

      expect(result.code).toBe(0);
      expect(result.stderr).toContain('note: RabbitMQ tells over AMQP how many messages a queue holds ready');
      expect(jsonLines(result.stdout)).toEqual([
        {
          endpoint: 'counter',
          registeredAt: '2026-01-01T00:00:00.000Z',
          handler: 'CountHandler',
          kind: 'command',
          types: ['cli.Count'],
          orderedTypes: [],
          queues: [{ queue: countQueue, waiting: 7, active: 0, delayed: 0 }],
          total: { queue: countQueue, waiting: 7, active: 0, delayed: 0 },
          deadLetters: 2,
        },
        {
          endpoint: 'counter',
          registeredAt: '2026-01-01T00:00:00.000Z',
          handler: 'Audit',
          kind: 'event',
          types: ['cli.Counted'],
          orderedTypes: [],
          queues: [{ queue: auditQueue, waiting: 2, active: 0, delayed: 0 }],
          total: { queue: auditQueue, waiting: 2, active: 0, delayed: 0 },
          deadLetters: 0,
        },
      ]);
    });
  });

  describe('when nothing registered under the RabbitMQ prefix', () => {
    it('says so, naming the RabbitMQ prefix, with RABBITMQ_URL from the environment', async () => {
      const { prefix, rabbitPrefix } = freshSystem();
      const result = await runCli(
        ['topology', '--url', redisUrl, '--prefix', prefix, '--rabbitmq-prefix', rabbitPrefix],
        { tty: true, env: { RABBITMQ_URL: url } },
      );
      expect(result.code).toBe(0);
      expect(result.stdout).toBe(`No endpoints registered under RabbitMQ prefix ${rabbitPrefix}.\n`);
      expect(result.stderr).toContain(`registry stream "${rabbitPrefix}.registry" does not exist`);
    });
  });

  describe('when RabbitMQ cannot be reached', () => {
    it('exits 3 for topology naming --rabbitmq-url, while dlq list (stores only) never connects to it', async () => {
      const { prefix } = freshSystem();
      const unreachable = 'amqp://guest:secret@127.0.0.1:1';
      const topology = await runCli(['topology', '--url', redisUrl, '--prefix', prefix], {
        env: { RABBITMQ_URL: unreachable },
      });
      expect(topology.code).toBe(3);
      expect(topology.stderr).toContain('RabbitMQ could not be reached at amqp://guest:***@127.0.0.1:1');
      expect(topology.stderr).toContain('--rabbitmq-url');
      expect(topology.stderr).not.toContain('secret');

      const list = await runCli(['dlq', 'list', '--url', redisUrl, '--prefix', prefix], {
        env: { RABBITMQ_URL: unreachable },
      });
      expect(list.code).toBe(0);
      expect(list.stdout).toBe('');
    });
  });

  describe('when the RabbitMQ URL is given as --url', () => {
    it('exits 2 saying to give the stores’ URL with --url and RabbitMQ’s with --rabbitmq-url', async () => {
      const result = await runCli(['topology', '--url', 'amqp://guest:guest@127.0.0.1:5672']);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `harrier: --url "amqp://***@127.0.0.1:5672" is a RabbitMQ URL, and RabbitMQ carries only the messages of a Harrier system: its dead letters, sagas, checkpoints and schedules are in Redis or PostgreSQL. Give the stores' URL with --url (e.g. redis://127.0.0.1:6379 or postgres://...) and RabbitMQ's with --rabbitmq-url amqp://***@127.0.0.1:5672\n`,
      );
    });
  });
});

describe('harrier dashboard --rabbitmq-url', () => {
  it('shows RabbitMQ’s queues and depths on the topology page, with the note of what AMQP does not tell', async () => {
    const { prefix, rabbitPrefix } = freshSystem(['cmd.cli.Count']);
    const countQueue = `${rabbitPrefix}.cmd.cli.Count`;
    await recordRegistration(model, rabbitPrefix, {
      endpoint: 'counter',
      registeredAt: Date.UTC(2026, 0, 1),
      queueType: 'quorum',
      partitions: 0,
      subscriptions: [
        {
          subscription: { handler: 'CountHandler', kind: 'command', types: ['cli.Count'] },
          queues: [{ name: countQueue }],
        },
      ],
    });
    await fillQueues({ [countQueue]: 4 });
    let stdout = '';
    const io: CliIo = {
      stdout: { write: (text: string) => (stdout += text), isTTY: false },
      stderr: { write: () => true, isTTY: false },
      stdin: new PassThrough(),
      env: { RABBITMQ_URL: url },
    };
    const signals = new EventEmitter();
    const running = dashboardCommand(
      ['--port', '0', '--url', redisUrl, '--prefix', prefix, '--rabbitmq-prefix', rabbitPrefix],
      io,
      signals,
    );
    try {
      await expect.poll(() => stdout, { timeout: 10_000 }).toContain('"url"');
      const { url } = JSON.parse(stdout.split('\n')[0] ?? '') as { url: string };
      const page = await (await fetch(`${url}topology`)).text();
      // The queue's row: its name, then waiting 4, active 0, delayed 0.
      expect(page).toMatch(
        new RegExp(
          `<code>${countQueue}</code></td><td class="num">4</td><td class="num">0</td><td class="num">0</td>`,
        ),
      );
      expect(page).toMatch(/data-endpoint="counter"/);
      expect(page).toContain('data-testid="topology-note"');
      expect(page).toContain('ACTIVE shows 0');
    } finally {
      signals.emit('SIGTERM');
      expect(await running).toBe(0);
    }
  });
});

describe('harrier dlq replay --rabbitmq-url', () => {
  it('sends the dead letters of the Redis store back into their RabbitMQ queue through a RabbitMqBroker', async () => {
    const prefix = freshPrefix();
    const rabbitPrefix = freshBrokerPrefix();
    cleanups.push(() => deleteKeys(redis.client, prefix));
    const broker = new RabbitMqBroker({
      connection: url,
      prefix: rabbitPrefix,
      logger: silentLogger,
    });
    await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: ['cli.Count'] }]);
    await broker.close();
    const store = new RedisDeadLetterStore({ connection: redis.client, prefix });
    const records = [countDeadLetter({ n: 1 }), countDeadLetter({ n: 2 })];
    for (const record of records) await store.add(record);

    const result = await runCli([
      'dlq',
      'replay',
      '--all',
      '--url',
      redisUrl,
      '--prefix',
      prefix,
      '--rabbitmq-url',
      url,
      '--rabbitmq-prefix',
      rabbitPrefix,
    ]);

    expect(result.code).toBe(0);
    const channel = await model.createChannel();
    try {
      expect((await channel.checkQueue(`${rabbitPrefix}.cmd.cli.Count`)).messageCount).toBe(2);
    } finally {
      await channel.close();
    }
    expect(await store.count({ status: 'replayed' })).toBe(2);
    await store.close();
  });
});
