import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { silentLogger } from '../../src/logging/logger.js';
import { RabbitMqConnection } from '../../src/rabbitmq/rabbitmq-connection.js';
import { freshBrokerPrefix, rabbitmqUrl } from '../helpers/rabbitmq.js';

let url: string;

beforeAll(async () => {
  url = await rabbitmqUrl();
}, 60_000);

/** A proxy to RabbitMQ whose answers can be held back (no confirm, no return arrives) and let through. */
interface Proxy {
  readonly url: string;
  hold(): void;
  release(): void;
  /** Cuts every connection as a network failure would. */
  cut(): void;
  close(): Promise<void>;
}

const opened: { proxy: Proxy; connection: RabbitMqConnection }[] = [];

afterEach(async () => {
  for (const { proxy, connection } of opened.splice(0)) {
    await connection.close();
    await proxy.close();
  }
});

async function proxyToRabbitMq(): Promise<Proxy> {
  const target = new URL(url);
  const pairs: { client: Socket; server: Socket }[] = [];
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5672), target.hostname);
    pairs.push({ client, server: upstream });
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String((server.address() as AddressInfo).port);
  return {
    url: proxied.toString(),
    hold: () => {
      for (const pair of pairs) {
        pair.server.unpipe(pair.client);
        pair.server.pause();
      }
    },
    release: () => {
      for (const pair of pairs) {
        pair.server.pipe(pair.client);
        pair.server.resume();
      }
    },
    cut: () => {
      for (const pair of pairs.splice(0)) {
        pair.client.destroy();
        pair.server.destroy();
      }
    },
    close: async () => {
      for (const pair of pairs) {
        pair.client.destroy();
        pair.server.destroy();
      }
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function connectionThroughProxy(): Promise<{ proxy: Proxy; connection: RabbitMqConnection }> {
  const proxy = await proxyToRabbitMq();
  const connection = new RabbitMqConnection({
    target: proxy.url,
    heartbeatSeconds: 0,
    logger: silentLogger,
    setup: () => Promise.resolve(),
  });
  const pair = { proxy, connection };
  opened.push(pair);
  return pair;
}

/** A queue name no queue has: a `mandatory` publish to it through the default exchange comes back. */
const nowhere = (): string => `${freshBrokerPrefix()}.nowhere`;

describe('RabbitMqConnection', () => {
  describe('.publish of mandatory messages returned after their deadline', () => {
    it('keeps no publish token of them', async () => {
      const { proxy, connection } = await connectionThroughProxy();
      const queue = nowhere();
      // Opens the confirm channel (an unroutable publish that is not mandatory is confirmed).
      await connection.publish('', queue, Buffer.from('{}'), {}, 2_000);
      proxy.hold();
      const returned: string[] = [];
      // Two of one message id: the second carries a publish token.
      const first = connection.publish(
        '',
        queue,
        Buffer.from('{}'),
        { messageId: 'm', mandatory: true },
        200,
        () => {
          returned.push('first');
          return Promise.resolve();
        },
      );
      const second = connection.publish(
        '',
        queue,
        Buffer.from('{}'),
        { messageId: 'm', mandatory: true },
        200,
        () => {
          returned.push('second');
          return Promise.resolve();
        },
      );
      const errors = await Promise.all([first.catch((e: unknown) => e), second.catch((e: unknown) => e)]);
      expect(errors.every((error) => HarrierError.is(error, 'rabbitmq-unavailable'))).toBe(true);

      proxy.release();
      // Confirms come in order: once this one is, the two returns and confirms above are in.
      await connection.publish('', queue, Buffer.from('{}'), {}, 2_000);

      expect(returned).toEqual([]);
      expect(connection.returnsTracked()).toBe(0);
    });

    it('forgets every return it tracks when closed', async () => {
      const { proxy, connection } = await connectionThroughProxy();
      const queue = nowhere();
      await connection.publish('', queue, Buffer.from('{}'), {}, 2_000);
      proxy.hold();
      const pending = [1, 2].map(() =>
        connection
          .publish('', queue, Buffer.from('{}'), { messageId: 'm', mandatory: true }, 1_000)
          .catch(() => undefined),
      );
      expect(connection.returnsTracked()).toBe(1);

      // Its close waits for RabbitMQ's answer, held back: what it forgets, it forgets at once.
      const closing = connection.close();

      expect(connection.returnsTracked()).toBe(0);
      proxy.release();
      await closing;
      await Promise.all(pending);
    });
  });

  describe('.publish whose try fails for an outage close to its deadline', () => {
    it('rejects at once, without trying again with too little time for a confirm', async () => {
      const { proxy, connection } = await connectionThroughProxy();
      const queue = nowhere();
      await connection.publish('', queue, Buffer.from('{}'), {}, 2_000);
      proxy.hold();
      const started = Date.now();
      const publishing = connection.publish('', queue, Buffer.from('{}'), {}, 1_000).then(
        () => undefined,
        (error: unknown) => ({ error, at: Date.now() }),
      );
      // The connection drops 130 ms before the deadline: a retry 100 ms later would have 30 ms.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, started + 870 - Date.now())));
      const cutAt = Date.now();
      proxy.cut();

      const outcome = await publishing;

      expect(HarrierError.is(outcome?.error, 'rabbitmq-unavailable')).toBe(true);
      expect((outcome?.at ?? Number.POSITIVE_INFINITY) - cutAt).toBeLessThan(60);
    });
  });
});
