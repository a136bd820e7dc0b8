import 'reflect-metadata';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  HarrierError,
  UnrecoverableError,
  createBus,
  type Envelope,
  type MessageContext,
  type PayloadOf,
} from '../../../src/index.js';
import { createEnvelopeSigner, encodeEnvelope } from '../../../src/extend.js';
import { createTestBus, type TestBus, type TestBusOptions } from '../../../src/testing/index.js';
import { OrderPlaced, PlaceOrder, ReserveStock } from './fixtures.js';

const KEY = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';
const OLD_KEY = '5c0ffee15bad0dd5a1b2c3d4e5f60718293a4b5c6d7e8f9001020304050607f8';
const NEW_KEY = 'e7d6c5b4a3928170f0e1d2c3b4a5968778695a4b3c2d1e0f1122334455667788';

const ID = '0190a0b0-0000-7000-8000-0000000000c1';
const envelope: Envelope = {
  v: 1,
  id: ID,
  kind: 'command',
  type: PlaceOrder.type,
  payload: { orderId: 'o-1', amount: 1 },
  meta: { correlationId: ID, occurredAt: '2024-07-01T00:00:00.000Z', headers: {} },
};

const buses: TestBus[] = [];
afterEach(async () => {
  for (const bus of buses.splice(0)) await bus.stop({ gracePeriodMs: 100 });
});

async function testBus(options: TestBusOptions): Promise<TestBus> {
  const bus = await createTestBus(options);
  buses.push(bus);
  return bus;
}

/** A PlaceOrder handler that counts its calls. */
function placeOrderHandler(calls: { count: number }) {
  @CommandHandler(PlaceOrder)
  class Handler {
    handle() {
      calls.count++;
      return { accepted: true };
    }
  }
  return Handler;
}

/** Pushes bytes straight into the broker, as a foreign or malicious producer would. */
const push = (bus: TestBus, body: string) =>
  bus.broker.publish({ id: ID, kind: 'command', type: PlaceOrder.type, body });

describe('MessageBus signing', () => {
  describe('createBus', () => {
    describe('when a signing key is weak', () => {
      it('throws weak-key naming openssl rand -hex 32', () => {
        let error: unknown;
        try {
          createBus({ signing: { keys: [Buffer.alloc(32, 0)] } });
        } catch (e) {
          error = e;
        }
        expect(HarrierError.is(error) && error.code).toBe('weak-key');
        expect((error as Error).message).toContain('openssl rand -hex 32');
      });
    });

    describe.each([
      ['encode', { encode: encodeEnvelope }],
      ['verify', { verify: () => undefined }],
    ])('when %s is given as well', (hook, extra) => {
      it('throws invalid-option naming the hook to remove', () => {
        let error: unknown;
        try {
          createBus({ signing: { keys: [KEY] }, ...extra });
        } catch (e) {
          error = e;
        }
        expect(HarrierError.is(error) && error.code).toBe('invalid-option');
        expect((error as Error).message).toContain(`remove ${hook}`);
      });
    });
  });

  describe('.send', () => {
    describe('when the bus signs', () => {
      it('sends a signed envelope that is verified and handled', async () => {
        const calls = { count: 0 };
        const bus = await testBus({ handlers: [placeOrderHandler(calls)], signing: { keys: [KEY] } });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        const [sent] = bus.sent;
        expect(sent?.envelope.sig).toBeDefined();
        expect(createEnvelopeSigner({ keys: [KEY] }).verify(sent?.body ?? '')).toBeUndefined();
        expect(calls.count).toBe(1);
        expect(await bus.deadLetters.count()).toBe(0);
      });
    });
  });

  describe('.publish', () => {
    describe('when the bus signs', () => {
      it('publishes a signed event that is verified and handled', async () => {
        let handled = 0;
        @EventHandler(OrderPlaced)
        class Handler {
          handle() {
            handled++;
          }
        }
        const bus = await testBus({ handlers: [Handler], signing: { keys: [KEY] } });
        await bus.publish(OrderPlaced, { orderId: 'o-1', amount: 1 });
        await bus.whenIdle();
        expect(createEnvelopeSigner({ keys: [KEY] }).verify(bus.published[0]?.body ?? '')).toBeUndefined();
        expect(handled).toBe(1);
      });
    });
  });

  describe('receiving', () => {
    describe('when a signed envelope was changed after signing', () => {
      it('dead-letters it as signature-invalid and never calls the handler', async () => {
        const calls = { count: 0 };
        const bus = await testBus({ handlers: [placeOrderHandler(calls)], signing: { keys: [KEY] } });
        const signed = createEnvelopeSigner({ keys: [KEY] }).encode(envelope);
        const tampered = signed.replace('"amount":1', '"amount":9');
        expect(tampered).not.toBe(signed);
        await push(bus, tampered);
        await bus.whenIdle();
        const { records } = await bus.deadLetters.list();
        expect(records).toHaveLength(1);
        expect(records[0]?.reason).toBe('signature-invalid');
        expect(records[0]?.messageId).toBe(ID);
        expect(records[0]?.envelope).toBe(tampered);
        expect(records[0]?.error.message).toContain('changed after signing');
        expect(calls.count).toBe(0);
        expect(bus.broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
      });
    });

    describe('when an envelope is not signed', () => {
      it('dead-letters it as signature-invalid and never calls the handler', async () => {
        const calls = { count: 0 };
        const bus = await testBus({ handlers: [placeOrderHandler(calls)], signing: { keys: [KEY] } });
        await push(bus, encodeEnvelope(envelope));
        await bus.whenIdle();
        const [record] = (await bus.deadLetters.list()).records;
        expect(record?.reason).toBe('signature-invalid');
        expect(record?.error.message).toContain('not signed');
        expect(calls.count).toBe(0);
      });
    });

    describe('when a verify option throws', () => {
      it('dead-letters the message as signature-invalid with what it threw, and settles the delivery', async () => {
        const calls = { count: 0 };
        const bus = await testBus({
          handlers: [placeOrderHandler(calls)],
          verify: () => {
            throw new Error('key store down');
          },
        });
        await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
        // Before the fix the delivery stayed unsettled, and this never returned.
        await bus.whenIdle();
        const [record] = (await bus.deadLetters.list()).records;
        expect(record).toMatchObject({
          reason: 'signature-invalid',
          error: { message: 'the signature could not be checked: the verifier threw key store down' },
        });
        expect(calls.count).toBe(0);
        expect(bus.broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
      });
    });
  });

  describe('key rotation', () => {
    async function signedWithOldKey(): Promise<string> {
      // The handler runs on the receiver's bus, which starts later: the sender sends without a route.
      const sender = await testBus({
        definitions: [PlaceOrder],
        signing: { keys: [OLD_KEY] },
        requireCommandRoute: false,
      });
      await sender.send(PlaceOrder, { orderId: 'o-1', amount: 1 }, { id: ID });
      const body = sender.sent[0]?.body;
      if (body === undefined) throw new Error('the sender captured nothing');
      return body;
    }

    describe('when the receiver lists the new key first and keeps the old one', () => {
      it('handles a message signed with the old key', async () => {
        const body = await signedWithOldKey();
        const calls = { count: 0 };
        const receiver = await testBus({
          handlers: [placeOrderHandler(calls)],
          signing: { keys: [NEW_KEY, OLD_KEY] },
        });
        await push(receiver, body);
        await receiver.whenIdle();
        expect(calls.count).toBe(1);
        expect(await receiver.deadLetters.count()).toBe(0);
      });
    });

    describe('when the receiver has only the new key', () => {
      it('dead-letters a message signed with the old key as signature-invalid', async () => {
        const body = await signedWithOldKey();
        const calls = { count: 0 };
        const receiver = await testBus({
          handlers: [placeOrderHandler(calls)],
          signing: { keys: [NEW_KEY] },
        });
        await push(receiver, body);
        await receiver.whenIdle();
        const [record] = (await receiver.deadLetters.list()).records;
        expect(record?.reason).toBe('signature-invalid');
        expect(record?.error.message).toContain('not among the verification keys');
        expect(calls.count).toBe(0);
      });
    });
  });

  describe('.replayDeadLetters', () => {
    /** A signing bus whose PlaceOrder handler fails for good until `state.failing` is false. */
    async function busWithDeadLetter() {
      const state = { failing: true, calls: 0 };
      @CommandHandler(PlaceOrder)
      class Handler {
        handle() {
          state.calls++;
          if (state.failing) throw new UnrecoverableError('inventory is offline');
          return { accepted: true };
        }
      }
      const bus = await testBus({ handlers: [Handler], signing: { keys: [KEY] } });
      await bus.send(PlaceOrder, { orderId: 'o-1', amount: 1 });
      await bus.whenIdle();
      const [record] = (await bus.deadLetters.list()).records;
      if (record === undefined) throw new Error('nothing was dead-lettered');
      expect(record.reason).toBe('handler-failed');
      state.failing = false;
      return { bus, record, state };
    }

    describe('when the stored envelope still verifies', () => {
      it('redelivers it and the handler runs', async () => {
        const { bus, record, state } = await busWithDeadLetter();
        const results = await bus.replayDeadLetters([record.id]);
        await bus.whenIdle();
        expect(results).toEqual([{ id: record.id, ok: true }]);
        expect(state.calls).toBe(2);
      });
    });

    describe('when the stored envelope was changed', () => {
      it('refuses it with signature-invalid and redelivers nothing', async () => {
        const { bus, record, state } = await busWithDeadLetter();
        const tampered = record.envelope.replace('"amount":1', '"amount":1000');
        expect(tampered).not.toBe(record.envelope);
        await bus.deadLetters.add({ ...record, envelope: tampered });
        const results = await bus.replayDeadLetters([record.id], { by: 'test' });
        await bus.whenIdle();
        expect(results).toEqual([
          {
            id: record.id,
            ok: false,
            error: 'signature-invalid',
            message: expect.stringContaining('does not verify') as unknown,
          },
        ]);
        expect(state.calls).toBe(1);
        expect(bus.broker.stats()).toMatchObject({ ready: 0, waiting: 0, inFlight: 0 });
        const stored = await bus.deadLetters.get(record.id);
        expect(stored?.status).toBe('dead');
        expect(stored?.replays).toEqual([]);
      });
    });
  });

  describe('handler-recorded messages', () => {
    it('signs the events and commands a handler records, and they are handled', async () => {
      let reserved = 0;
      @CommandHandler(PlaceOrder)
      class PlaceOrderHandler {
        handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
          ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
          ctx.send(ReserveStock, { orderId: payload.orderId });
          return { accepted: true };
        }
      }
      @CommandHandler(ReserveStock)
      class ReserveStockHandler {
        handle() {
          reserved++;
        }
      }
      const bus = await testBus({
        handlers: [PlaceOrderHandler, ReserveStockHandler],
        definitions: [OrderPlaced],
        signing: { keys: [KEY] },
      });
      await bus.send(PlaceOrder, { orderId: 'o-1', amount: 2 });
      await bus.whenIdle();
      const signer = createEnvelopeSigner({ keys: [KEY] });
      const [event] = bus.messagesOf(OrderPlaced);
      const [command] = bus.messagesOf(ReserveStock);
      expect(event?.envelope.sig).toBeDefined();
      expect(signer.verify(event?.body ?? '')).toBeUndefined();
      expect(signer.verify(command?.body ?? '')).toBeUndefined();
      expect(reserved).toBe(1);
      expect(await bus.deadLetters.count()).toBe(0);
    });

    it('signs what a handler records during execute', async () => {
      @CommandHandler(PlaceOrder)
      class Handler {
        handle(payload: PayloadOf<typeof PlaceOrder>, ctx: MessageContext) {
          ctx.publish(OrderPlaced, { orderId: payload.orderId, amount: payload.amount });
          return { accepted: true };
        }
      }
      const bus = await testBus({
        handlers: [Handler],
        definitions: [OrderPlaced],
        signing: { keys: [KEY] },
      });
      await bus.execute(PlaceOrder, { orderId: 'o-2', amount: 1 });
      const [event] = bus.messagesOf(OrderPlaced);
      expect(createEnvelopeSigner({ keys: [KEY] }).verify(event?.body ?? '')).toBeUndefined();
    });
  });
});
