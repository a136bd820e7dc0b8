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

describe('prepareMessage size limit', () => {
  /** The UTF-8 size of a PlaceOrder envelope whose orderId is `orderId`, as prepared with no limit. */
  const sizeOf = (orderId: string): number => {
    const { outgoing } = prepareMessage(PlaceOrder, { orderId }, {}, { now: 1 });
    return Buffer.byteLength(outgoing.body, 'utf8');
  };

  it('refuses an oversize message with its too-large error', () => {
    const size = sizeOf('x'.repeat(100));
    expect(() =>
      prepareMessage(PlaceOrder, { orderId: 'x'.repeat(100) }, {}, { now: 1, maxBytes: size - 1 }),
    ).toThrow(
      /encodes to \d+ bytes, above the limit of \d+: send a reference to the data instead, or raise maxEnvelopeBytes/,
    );
  });

  it('judges a multi-byte message just under and just over the limit by its exact UTF-8 size', () => {
    // 2-byte, 3-byte and 4-byte (surrogate pair) characters: each body is under 3 bytes per code unit.
    for (const orderId of ['é'.repeat(50), '€'.repeat(50), '😀'.repeat(50)]) {
      const size = sizeOf(orderId);
      expect(prepareMessage(PlaceOrder, { orderId }, {}, { now: 1, maxBytes: size }).outgoing.id).toBeTypeOf(
        'string',
      );
      expect(() => prepareMessage(PlaceOrder, { orderId }, {}, { now: 1, maxBytes: size - 1 })).toThrow(
        new RegExp(`encodes to ${size} bytes, above the limit of ${size - 1}`),
      );
    }
  });
});

describe('prepareMessage dedupe', () => {
  it("carries the definition's 'while-queued' to the broker, and nothing for the default window", () => {
    const Weaker = defineCommand('prepare.Weaker', {
      schema: z.object({ orderId: z.string() }),
      dedupe: 'while-queued',
    });
    expect(prepareMessage(Weaker, { orderId: 'o-1' }, {}, { now: 1 }).outgoing.dedupe).toBe('while-queued');
    expect(prepareMessage(PlaceOrder, { orderId: 'o-1' }, {}, { now: 1 }).outgoing.dedupe).toBeUndefined();
  });
});
