import { describe, expect, it } from 'vitest';
import { deliveryOfRow, parseDeliveryId, type TakenRow } from '../../../src/postgres/broker/queue-row.js';

const TOKEN = '0b7c3e9a-4d1f-4c8e-9a2b-5f6e7d8c9b0a';

const row = (extra: Partial<TakenRow> = {}): TakenRow => ({
  seq: '42',
  queue: 'cmd~orders.PlaceOrder',
  lane: 'cmd~orders.PlaceOrder',
  handler: null,
  message_id: 'm-1',
  kind: 'command',
  type: 'orders.PlaceOrder',
  body: Buffer.from('{"v":1}\u0000ü', 'utf8'),
  partition_key: 'order-1',
  order_key: null,
  attempt: 2,
  unsettled_ends: 1,
  history: [{ attempt: 1, at: 5, error: { name: 'Error', message: 'boom' } }],
  pending_dead_letter: null,
  replay_of: 'dl-1',
  delivery: TOKEN,
  ...extra,
});

describe('parseDeliveryId', () => {
  it('reads the row and token of an id the broker made', () => {
    expect(parseDeliveryId(`42:${TOKEN}`)).toEqual({ seq: '42', token: TOKEN });
  });

  it.each(['', '42', `x:${TOKEN}`, `42:${TOKEN}:1`, '42:not-a-uuid', `-1:${TOKEN}`])('refuses %j', (id) => {
    expect(parseDeliveryId(id)).toBeUndefined();
  });
});

describe('deliveryOfRow', () => {
  describe('when the row is well formed', () => {
    it('gives the body byte for byte and every fact, the queue as the row names it', () => {
      const { delivery, dropped } = deliveryOfRow(row(), 'orders');
      expect(dropped).toEqual([]);
      expect(delivery).toEqual({
        id: `42:${TOKEN}`,
        body: '{"v":1}\u0000ü',
        facts: {
          messageId: 'm-1',
          kind: 'command',
          type: 'orders.PlaceOrder',
          endpoint: 'orders',
          handler: undefined,
          attempt: 2,
          unsettledEnds: 1,
          history: [{ attempt: 1, at: 5, error: { name: 'Error', message: 'boom' } }],
          partitionKey: 'order-1',
          queue: 'cmd~orders.PlaceOrder',
          replayOf: 'dl-1',
          pendingDeadLetter: undefined,
        },
      });
    });
  });

  describe('when facts are malformed (a row written by hand)', () => {
    it('drops them, names them, and never throws', () => {
      const { delivery, dropped } = deliveryOfRow(
        row({ kind: 'bogus', history: { not: 'a list' }, pending_dead_letter: 'nope', attempt: 0 }),
        'orders',
      );
      expect(dropped).toEqual(['history', 'pending_dead_letter', 'kind']);
      expect(delivery.facts).toMatchObject({ kind: undefined, type: undefined, history: [], attempt: 1 });
      expect(delivery.facts.pendingDeadLetter).toBeUndefined();
    });
  });
});
