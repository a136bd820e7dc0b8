import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ManualClock,
  createBus,
  defineCommand,
  defineEvent,
  defineQuery,
  silentLogger,
} from '../../../src/index.js';
import { createEnvelopeSigner } from '../../../src/extend.js';
import { expectCode } from '../../../src/testing/expect-code.js';

const Placed = defineEvent('prep.Placed', {
  schema: z.object({ orderId: z.string() }),
  partitionKey: 'orderId',
});
const Ship = defineCommand('prep.Ship', { schema: z.object({ orderId: z.string() }) });
const Find = defineQuery('prep.Find', { schema: z.object({ orderId: z.string() }), result: z.string() });

describe('MessageBus', () => {
  describe('.prepare', () => {
    it('returns the message send/publish would hand the broker, signed, without publishing it', async () => {
      const key = randomBytes(32).toString('hex');
      const bus = createBus({ logger: silentLogger, signing: { keys: [key] } });
      const message = bus.prepare(Placed, { orderId: 'o-1' }, { headers: { tenant: 't' } });
      expect(message).toMatchObject({ kind: 'event', type: 'prep.Placed', partitionKey: 'o-1' });
      expect(createEnvelopeSigner({ keys: [key] }).verify(message.body)).toBeUndefined();
      expect(message.body).toContain('"sig":');
      expect(JSON.parse(message.body)).toMatchObject({ id: message.id, payload: { orderId: 'o-1' } });
      await bus.stop();
    });

    it('sets deliverAt from at or delayMs on the bus clock', () => {
      const clock = new ManualClock(1_000_000);
      const bus = createBus({ logger: silentLogger, clock });
      expect(bus.prepare(Ship, { orderId: 'o-1' }, { at: new Date(1_005_000) }).deliverAt).toBe(1_005_000);
      expect(bus.prepare(Ship, { orderId: 'o-1' }, { delayMs: 200 }).deliverAt).toBe(1_000_200);
      expect(bus.prepare(Ship, { orderId: 'o-1' }).deliverAt).toBeUndefined();
    });

    it('refuses an invalid payload and a query as send and publish do', () => {
      const bus = createBus({ logger: silentLogger });
      expect(() => bus.prepare(Ship, { orderId: 1 } as never)).toThrow(/prep\.Ship/);
      let error: unknown;
      try {
        bus.prepare(Find as never, { orderId: 'o-1' } as never);
      } catch (caught) {
        error = caught;
      }
      expectCode(error, 'wrong-kind');
    });
  });
});
