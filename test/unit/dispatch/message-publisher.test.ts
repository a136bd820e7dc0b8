import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  InMemoryBroker,
  createBus,
  defineCommand,
  silentLogger,
} from '../../../src/index.js';
import { HandlerRegistry, MessagePublisher } from '../../../src/extend.js';
import type { OutgoingMessage } from '../../../src/broker/message-broker.js';
import { SETTLED } from '../../../src/broker/settled.js';

const ShipOrder = defineCommand('publisher.ShipOrder', { schema: z.object({ orderId: z.string() }) });
const BillOrder = defineCommand('publisher.BillOrder', { schema: z.object({ orderId: z.string() }) });

@CommandHandler(ShipOrder)
class ShipOrderHandler {
  handle(): void {
    // nothing to do: the tests look at what reaches the broker
  }
}

/** An in-memory broker that keeps every message it was asked to publish, as it was given. */
class RecordingBroker extends InMemoryBroker {
  readonly published: OutgoingMessage[] = [];
  override publish(message: OutgoingMessage): Promise<void> {
    this.published.push(message);
    return super.publish(message);
  }
}

const message = (type: string): OutgoingMessage => ({
  id: '0190a5c4-0000-7000-8000-000000000001',
  kind: 'command',
  type,
  body: '{}',
});

describe('MessagePublisher', () => {
  describe('.publish', () => {
    describe('when this endpoint handles the command and has not registered its routes yet', () => {
      it('publishes it with requireRoute false, so it waits in its queue for start()', async () => {
        const broker = new RecordingBroker();
        const registry = HandlerRegistry.build([ShipOrderHandler], [ShipOrder]);
        const publisher = new MessagePublisher({ broker, registry, requireCommandRoute: true });
        await publisher.publish([message(ShipOrder.type)]);
        expect(broker.published[0]?.requireRoute).toBe(false);
      });
    });

    describe('when this endpoint handles the command and its routes are registered', () => {
      it('hands the broker the message itself, without a copy, and the broker accepts it', async () => {
        const broker = new RecordingBroker();
        const registry = HandlerRegistry.build([ShipOrderHandler], [ShipOrder]);
        const publisher = new MessagePublisher({ broker, registry, requireCommandRoute: true });
        await broker.register('shipping', registry.subscriptionSpecs());
        publisher.routesRegistered(broker, registry);
        const given = message(ShipOrder.type);
        await publisher.publish([given]);
        expect(broker.published[0]).toBe(given);
        expect(broker.stats().ready).toBe(1);
      });
    });

    describe('when the routes registered are those of another registry or broker', () => {
      it('keeps publishing the command with requireRoute false', async () => {
        const broker = new RecordingBroker();
        const registry = HandlerRegistry.build([ShipOrderHandler], [ShipOrder]);
        const publisher = new MessagePublisher({ broker, registry });
        publisher.routesRegistered(broker, HandlerRegistry.build([ShipOrderHandler], [ShipOrder]));
        publisher.routesRegistered(new InMemoryBroker(), registry);
        await publisher.publish([message(ShipOrder.type)]);
        expect(broker.published[0]?.requireRoute).toBe(false);
      });
    });

    describe('when requireCommandRoute is true and another endpoint handles the command', () => {
      it('leaves requireRoute unset (the broker default, true) and still refuses an unrouted command', async () => {
        const broker = new RecordingBroker();
        const publisher = new MessagePublisher({
          broker,
          registry: HandlerRegistry.build([], []),
          requireCommandRoute: true,
        });
        const given = message(BillOrder.type);
        await expect(publisher.publish([given])).rejects.toMatchObject({ code: 'no-route' });
        expect(broker.published[0]).toBe(given);
      });
    });

    describe('when requireCommandRoute is false', () => {
      it('publishes the command with requireRoute false', async () => {
        const broker = new RecordingBroker();
        const publisher = new MessagePublisher({ broker, requireCommandRoute: false });
        await publisher.publish([message(BillOrder.type)]);
        expect(broker.published[0]?.requireRoute).toBe(false);
        expect(broker.stats().unconsumed).toBe(1);
      });
    });
  });
});

describe('createBus', () => {
  describe('.send of a command the bus handles', () => {
    it('sets requireRoute false before start() and leaves it unset once the dispatcher registered the route', async () => {
      const broker = new RecordingBroker();
      const bus = createBus({
        endpoint: 'shipping',
        broker,
        handlers: [ShipOrderHandler],
        logger: silentLogger,
      });
      await bus.send(ShipOrder, { orderId: 'o-1' });
      await bus.start();
      await bus.send(ShipOrder, { orderId: 'o-2' });
      await bus.stop();
      expect(broker.published.map((m) => m.requireRoute)).toEqual([false, undefined]);
    });
  });
});

describe('InMemoryBroker', () => {
  describe('.publish and .ack', () => {
    it('return the shared SETTLED promise once the work is done, so the dispatcher need not wait a tick', async () => {
      const broker = new InMemoryBroker();
      await broker.register('shipping', [{ handler: 'ship', kind: 'command', types: [ShipOrder.type] }]);
      expect(broker.publish(message(ShipOrder.type))).toBe(SETTLED);
      const iterator = broker.receiver({ endpoint: 'shipping' })[Symbol.asyncIterator]();
      const next = await iterator.next();
      expect(next.done).toBe(false);
      if (next.done === true) return;
      expect(broker.ack(next.value.id)).toBe(SETTLED);
      await expect(broker.ack(next.value.id)).rejects.toMatchObject({ code: 'stale-delivery' });
      await iterator.return?.();
      expect(await iterator.next()).toEqual({ done: true, value: undefined });
      await broker.close();
    });
  });
});
