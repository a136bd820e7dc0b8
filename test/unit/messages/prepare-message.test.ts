import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineCommand } from '../../../src/messages/definition.js';
import { prepareMessage } from '../../../src/messages/prepare-message.js';
import { isUuidV7, uuidv7 } from '../../../src/messages/uuid-v7.js';

const PlaceOrder = defineCommand('prepare.PlaceOrder', { schema: z.object({ orderId: z.string() }) });

describe('prepareMessage ids', () => {
  it('makes a UUIDv7 when no id is given, and when an untyped caller passes id: null', () => {
    for (const options of [{}, { id: null } as never]) {
      const { envelope } = prepareMessage(PlaceOrder, { orderId: 'o-1' }, options, { now: 1 });
      expect(isUuidV7(envelope.id)).toBe(true);
    }
  });

  it('keeps a caller-given UUIDv7 and refuses any other id, naming the fix', () => {
    const id = uuidv7(1);
    expect(prepareMessage(PlaceOrder, { orderId: 'o-1' }, { id }, { now: 1 }).envelope.id).toBe(id);
    expect(() => prepareMessage(PlaceOrder, { orderId: 'o-1' }, { id: 'order-1' }, { now: 1 })).toThrow(
      /not a lower-case UUIDv7: omit id to get one, or make it with uuidv7\(\)/,
    );
  });
});
