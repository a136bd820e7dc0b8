import amqplib from 'amqplib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  REGISTRY_MARKER_TYPE,
  recordRegistration,
  registryQueue,
  type RabbitMqRegistration,
} from '../../src/rabbitmq/rabbitmq-registry.js';
import { RegistryReader } from '../../src/rabbitmq/registry-reader.js';
import { rabbitmqUrl } from '../helpers/rabbitmq.js';
import { deleteRabbitMq, freshBrokerPrefix } from '../helpers/rabbitmq-queues.js';

let url: string;
let model: amqplib.ChannelModel;
const prefixes: string[] = [];

beforeAll(async () => {
  url = await rabbitmqUrl();
  model = await amqplib.connect(url);
}, 60_000);
afterAll(async () => {
  await model.close();
});
afterEach(async () => {
  await deleteRabbitMq(prefixes.splice(0).map(registryQueue));
});

function freshPrefix(): string {
  const prefix = freshBrokerPrefix();
  prefixes.push(prefix);
  return prefix;
}

function registration(endpoint: string, registeredAt: number, handlers: string[]): RabbitMqRegistration {
  return {
    endpoint,
    registeredAt,
    queueType: 'quorum',
    partitions: 0,
    subscriptions: handlers.map((handler) => ({
      subscription: { handler, kind: 'event', types: [`orders.${handler}`] },
      queues: [{ name: `x.evt.${endpoint}.${handler}` }],
    })),
  };
}

/** Appends raw bytes to the registry, as something other than a RabbitMqBroker might. */
async function appendRaw(prefix: string, body: string): Promise<void> {
  const channel = await model.createConfirmChannel();
  channel.sendToQueue(registryQueue(prefix), Buffer.from(body));
  await channel.waitForConfirms();
  await channel.close();
}

describe('recordRegistration and RegistryReader', () => {
  describe('.read', () => {
    it('returns undefined when no registration was ever recorded under the prefix', async () => {
      const reader = new RegistryReader(model, freshPrefix(), 5000);
      expect(await reader.read()).toBeUndefined();
    });

    describe('when an endpoint registered twice and another once', () => {
      it('keeps the latest registration of each endpoint, sorted by endpoint', async () => {
        const prefix = freshPrefix();
        const first = registration('orders', 1000, ['OrderPlaced']);
        const second = registration('orders', 2000, ['OrderPlaced', 'OrderShipped']);
        const billing = registration('billing', 1500, ['Invoice']);
        await recordRegistration(model, prefix, first);
        await recordRegistration(model, prefix, billing);
        await recordRegistration(model, prefix, second);

        const read = await new RegistryReader(model, prefix, 5000).read();

        expect(read).toEqual({ registrations: [billing, second], unreadable: [], skipped: 0 });
      });
    });

    describe('when the reader is read again after more registrations', () => {
      it('adds the new records to what it read before, and a new reader reads the same', async () => {
        const prefix = freshPrefix();
        const reader = new RegistryReader(model, prefix, 5000);
        await recordRegistration(model, prefix, registration('orders', 1000, ['A']));
        await recordRegistration(model, prefix, registration('billing', 1000, ['B']));
        expect((await reader.read())?.registrations.map((r) => r.endpoint)).toEqual(['billing', 'orders']);

        const later = registration('orders', 3000, ['A', 'C']);
        await recordRegistration(model, prefix, later);
        const again = await reader.read();

        expect(again?.registrations).toEqual([registration('billing', 1000, ['B']), later]);
        expect(await new RegistryReader(model, prefix, 5000).read()).toEqual(again);
      });
    });

    describe('when one reader is read several times at once', () => {
      it('runs the reads one after the other, each giving the latest registration of each endpoint', async () => {
        const prefix = freshPrefix();
        const opened: string[] = [];
        const connection = {
          createChannel: () => {
            opened.push('channel');
            return model.createChannel();
          },
          createConfirmChannel: () => {
            opened.push('confirm');
            return model.createConfirmChannel();
          },
        };
        const reader = new RegistryReader(connection, prefix, 5000);
        for (let i = 1; i <= 20; i++) {
          await recordRegistration(model, prefix, registration(`e${String(i % 4)}`, i, [`H${String(i)}`]));
        }
        const latest = [17, 18, 19, 20].map((i) => registration(`e${String(i % 4)}`, i, [`H${String(i)}`]));
        const expected = {
          registrations: [...latest].sort((a, b) => a.endpoint.localeCompare(b.endpoint)),
          unreadable: [],
          skipped: 0,
        };

        const reads = await Promise.all([reader.read(), reader.read()]);

        expect(reads).toEqual([expected, expected]);
        // Each read: a passive declare, its marker (confirmed), its consumer; the second after the first.
        expect(opened).toEqual(['channel', 'confirm', 'channel', 'channel', 'confirm', 'channel']);
      });
    });

    describe('when the registry was deleted and declared again since the last read', () => {
      it('reads the new stream from its start, forgetting the old registrations', async () => {
        const prefix = freshPrefix();
        const reader = new RegistryReader(model, prefix, 5000);
        for (let i = 0; i < 5; i++)
          await recordRegistration(model, prefix, registration(`old${String(i)}`, 1000, []));
        expect((await reader.read())?.registrations).toHaveLength(5);
        await deleteRabbitMq([registryQueue(prefix)]);
        const fresh = registration('orders', 2000, ['A']);
        await recordRegistration(model, prefix, fresh);

        expect(await reader.read()).toEqual({ registrations: [fresh], unreadable: [], skipped: 0 });
      });
    });

    describe('when the registry holds records no RabbitMqBroker wrote', () => {
      it('lists an endpoint whose latest record is unreadable, and counts records that name none', async () => {
        const prefix = freshPrefix();
        await recordRegistration(model, prefix, registration('orders', 1000, ['A']));
        await recordRegistration(model, prefix, registration('billing', 1000, ['B']));
        await appendRaw(prefix, JSON.stringify({ v: 99, endpoint: 'orders' }));
        await appendRaw(prefix, 'not json');
        await appendRaw(prefix, JSON.stringify({ hello: 'world' }));

        const read = await new RegistryReader(model, prefix, 5000).read();

        expect(read).toEqual({
          registrations: [registration('billing', 1000, ['B'])],
          unreadable: ['orders'],
          skipped: 2,
        });
      });
    });
  });

  describe('the registry stream', () => {
    it('is a durable stream that a stream consumer reads from the first record, markers included', async () => {
      const prefix = freshPrefix();
      await recordRegistration(model, prefix, registration('orders', 1000, ['A']));
      await new RegistryReader(model, prefix, 5000).read();

      const channel = await model.createChannel();
      await channel.prefetch(10);
      const types: unknown[] = [];
      const done = new Promise<void>((resolve) => {
        void channel.consume(
          registryQueue(prefix),
          (message) => {
            if (message === null) return;
            channel.ack(message);
            types.push(message.properties.type);
            if (types.length === 2) resolve();
          },
          { arguments: { 'x-stream-offset': 'first' } },
        );
      });
      await done;
      await channel.close();

      expect(types).toEqual(['harrier.registration', REGISTRY_MARKER_TYPE]);
    });
  });
});
