import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import {
  defineCommand,
  defineEvent,
  defineQuery,
  isMessageDefinition,
  type DefinitionOptions,
  type MessageDefinition,
} from '../../../src/messages/definition.js';

const schema = z.object({ orderId: z.string(), lines: z.number().optional() });

/** The `code` of what `fn` throws, or undefined when it does not throw a HarrierError. */
function thrownCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return HarrierError.is(error) ? error.code : 'not a HarrierError';
  }
  return undefined;
}

const definers: Record<
  string,
  (type: string, options: DefinitionOptions<typeof schema>) => MessageDefinition
> = {
  defineCommand,
  defineEvent,
  defineQuery,
};

describe('defineCommand / defineEvent / defineQuery', () => {
  describe.each(Object.entries(definers))('%s', (_name, define) => {
    describe('when the type is not a stable dotted name', () => {
      it.each([
        ['empty', ''],
        ['starting with a digit', '1orders.PlaceOrder'],
        ['starting with a dot', '.orders'],
        ['ending with a dot', 'orders.'],
        ['with two dots in a row', 'orders..PlaceOrder'],
        ['with a space', 'orders.Place Order'],
        ['with a slash', 'orders/PlaceOrder'],
        ['longer than 200 characters', `orders.${'A'.repeat(194)}`],
      ])('throws invalid-definition for a type %s', (_case, type) => {
        expect(thrownCode(() => define(type, { schema }))).toBe('invalid-definition');
      });

      it('accepts letters, digits, _ and - up to 200 characters', () => {
        expect(thrownCode(() => define(`my-app.orders_v2.${'A'.repeat(183)}`, { schema }))).toBeUndefined();
      });
    });

    describe('when the schema is missing', () => {
      it('throws invalid-definition', () => {
        expect(thrownCode(() => define('orders.Thing', {} as never))).toBe('invalid-definition');
      });
    });

    describe('when ordered is true without a partitionKey', () => {
      it('throws invalid-definition', () => {
        expect(thrownCode(() => define('orders.Thing', { schema, ordered: true }))).toBe(
          'invalid-definition',
        );
      });
    });

    describe('when ordered is true with a partitionKey', () => {
      it('makes an ordered definition', () => {
        expect(define('orders.Thing', { schema, ordered: true, partitionKey: 'orderId' }).ordered).toBe(true);
      });
    });

    describe('when dedupe is given', () => {
      it("keeps 'window' and 'while-queued', and defaults to 'window'", () => {
        expect(define('orders.Thing', { schema }).dedupe).toBe('window');
        expect(define('orders.Thing', { schema, dedupe: 'window' }).dedupe).toBe('window');
        expect(define('orders.Thing', { schema, dedupe: 'while-queued' }).dedupe).toBe('while-queued');
      });

      it.each([
        ['a misspelt mode', 'while_queued'],
        ['a mode of another library', 'keep-last'],
        ['a boolean', false],
      ])('throws invalid-definition naming both modes for %s', (_case, dedupe) => {
        let thrown: unknown;
        try {
          define('orders.Thing', { schema, dedupe: dedupe as never });
        } catch (error) {
          thrown = error;
        }
        expect(HarrierError.is(thrown) && thrown.code).toBe('invalid-definition');
        expect((thrown as Error).message).toContain('"orders.Thing"');
        expect((thrown as Error).message).toContain("'window'");
        expect((thrown as Error).message).toContain("'while-queued'");
      });
    });
  });

  describe('defineCommand', () => {
    describe('when given a type and a schema', () => {
      it('returns a frozen, recognisable command definition with defaults', () => {
        const retry = { attempts: 3 };
        const PlaceOrder = defineCommand('orders.PlaceOrder', { schema, retry });

        expect(PlaceOrder).toMatchObject({
          kind: 'command',
          type: 'orders.PlaceOrder',
          schema,
          ordered: false,
          retry,
          topic: undefined,
        });
        expect(Object.isFrozen(PlaceOrder)).toBe(true);
        expect(isMessageDefinition(PlaceOrder)).toBe(true);
        expect(isMessageDefinition({ kind: 'command', type: 'orders.PlaceOrder', schema })).toBe(false);
      });
    });
  });

  describe('defineQuery', () => {
    describe('when given a type and a schema', () => {
      it('returns a query definition without a topic', () => {
        const GetOrder = defineQuery('orders.GetOrder', { schema, result: z.string() });

        expect(GetOrder).toMatchObject({ kind: 'query', type: 'orders.GetOrder', topic: undefined });
        expect(isMessageDefinition(GetOrder)).toBe(true);
      });
    });
  });

  describe('defineEvent', () => {
    describe('when no topic is given', () => {
      it.each([
        ['orders.OrderPlaced', 'orders'],
        ['shop.orders.OrderPlaced', 'shop.orders'],
        ['Heartbeat', 'Heartbeat'],
      ])('uses the part of %s before the last dot: %s', (type, topic) => {
        expect(defineEvent(type, { schema }).topic).toBe(topic);
      });
    });

    describe('when a topic is given', () => {
      it('uses it', () => {
        expect(defineEvent('orders.OrderPlaced', { schema, topic: 'sales' }).topic).toBe('sales');
      });
    });
  });

  describe('.partitionKeyOf', () => {
    describe('when partitionKey names a field', () => {
      it('returns the field as a string, or undefined when the field is missing', () => {
        const keyed = defineCommand('orders.Keyed', {
          schema: z.object({ orderId: z.string().optional(), shard: z.number() }),
          partitionKey: 'shard',
        });
        const byOrder = defineCommand('orders.ByOrder', {
          schema: z.object({ orderId: z.string().optional() }),
          partitionKey: 'orderId',
        });

        expect(keyed.partitionKeyOf({ shard: 42 })).toBe('42');
        expect(byOrder.partitionKeyOf({ orderId: 'o-1' })).toBe('o-1');
        expect(byOrder.partitionKeyOf({})).toBeUndefined();
      });
    });

    describe('when partitionKey is a function', () => {
      it('returns what the function returns for the payload', () => {
        const ItemAdded = defineEvent('orders.ItemAdded', {
          schema: z.object({ orderId: z.string(), sku: z.string() }),
          partitionKey: (payload) => `${payload.orderId}/${payload.sku}`,
        });

        expect(ItemAdded.partitionKeyOf({ orderId: 'o-1', sku: 'A' })).toBe('o-1/A');
      });
    });

    describe('when there is no partitionKey', () => {
      it('returns undefined', () => {
        expect(
          defineCommand('orders.PlaceOrder', { schema }).partitionKeyOf({ orderId: 'o-1' }),
        ).toBeUndefined();
      });
    });
  });
});
