import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  DEFAULT_MAX_ENVELOPE_BYTES,
  decodeEnvelope,
  encodeEnvelope,
  encodedSize,
  type DecodeFailure,
  type DecodeResult,
  type DecodeSuccess,
} from '../../../src/messages/codec.js';
import { defineCommand, defineEvent, type MessageDefinition } from '../../../src/messages/definition.js';
import type { Envelope } from '../../../src/messages/envelope.js';

const PlaceOrder = defineCommand('orders.PlaceOrder', {
  schema: z.object({
    orderId: z.string(),
    quantity: z.coerce.number().int().positive(),
    note: z.string().default('none'),
  }),
});
const OrderPlaced = defineEvent('orders.OrderPlaced', { schema: z.object({ orderId: z.string() }) });

const definitions = new Map<string, MessageDefinition>([
  [PlaceOrder.type, PlaceOrder],
  [OrderPlaced.type, OrderPlaced],
]);
const lookup = (type: string): MessageDefinition | undefined => definitions.get(type);

const envelope = (overrides: Partial<Envelope> = {}): Envelope => ({
  v: 1,
  id: '0190b8e2-7c1a-7abc-8def-0123456789ab',
  kind: 'command',
  type: PlaceOrder.type,
  payload: { orderId: 'o-1', quantity: 2 },
  meta: {
    correlationId: '0190b8e2-7c1a-7abc-8def-0123456789ab',
    occurredAt: '2026-01-01T00:00:00.000Z',
    headers: {},
  },
  ...overrides,
});

function expectFailure(result: DecodeResult): DecodeFailure {
  if (result.ok) throw new Error(`expected a decode failure, got ${JSON.stringify(result.envelope)}`);
  return result;
}

function expectSuccess(result: DecodeResult): DecodeSuccess {
  if (!result.ok) throw new Error(`expected success, got ${result.reason}: ${result.message}`);
  return result;
}

/** An encoded envelope of exactly `bytes` bytes, padded through a payload field. */
function bodyOfSize(bytes: number): string {
  const base = encodeEnvelope(envelope({ payload: { orderId: 'o-1', quantity: 2, note: '' } }));
  return encodeEnvelope(
    envelope({ payload: { orderId: 'o-1', quantity: 2, note: 'x'.repeat(bytes - encodedSize(base)) } }),
  );
}

describe('decodeEnvelope', () => {
  describe('when the bytes are a valid envelope of a known type', () => {
    it("returns the envelope with the schema's output as payload, and the definition", () => {
      const body = encodeEnvelope(envelope({ payload: { orderId: 'o-1', quantity: '3' } }));

      const result = expectSuccess(decodeEnvelope(body, lookup));

      expect(result.definition).toBe(PlaceOrder);
      expect(result.envelope).toEqual(envelope({ payload: { orderId: 'o-1', quantity: 3, note: 'none' } }));
    });

    it('accepts the bytes as a Uint8Array', () => {
      const body = new TextEncoder().encode(encodeEnvelope(envelope()));

      expect(expectSuccess(decodeEnvelope(body, lookup)).envelope.id).toBe(envelope().id);
    });
  });

  describe('when the bytes are not JSON', () => {
    it('fails as malformed without an envelope', () => {
      const result = expectFailure(decodeEnvelope('{"v":1,', lookup));

      expect(result.reason).toBe('malformed');
      expect(result.message).toMatch(/not JSON/);
      expect(result.envelope).toBeUndefined();
    });
  });

  describe('when the bytes are JSON but not an envelope', () => {
    it.each([
      ['an object of other keys', '{"hello":"world"}'],
      ['an array', '[]'],
      ['null', 'null'],
      ['an envelope with an extra key', JSON.stringify({ ...envelope(), attempt: 1 })],
    ])('fails %s as malformed with the zod issues', (_case, body) => {
      const result = expectFailure(decodeEnvelope(body, lookup));

      expect(result.reason).toBe('malformed');
      expect(result.issues?.length).toBeGreaterThan(0);
      expect(result.envelope).toBeUndefined();
    });
  });

  describe('when no definition knows the type', () => {
    it('fails as unknown-type and keeps the envelope', () => {
      const unknown = envelope({ type: 'orders.CancelOrder' });

      const result = expectFailure(decodeEnvelope(encodeEnvelope(unknown), lookup));

      expect(result.reason).toBe('unknown-type');
      expect(result.message).toContain('orders.CancelOrder');
      expect(result.envelope).toEqual(unknown);
    });
  });

  describe('when the kind differs from the definition', () => {
    it('fails as unknown-type naming both kinds', () => {
      const asCommand = envelope({ type: OrderPlaced.type, kind: 'command', payload: { orderId: 'o-1' } });

      const result = expectFailure(decodeEnvelope(encodeEnvelope(asCommand), lookup));

      expect(result.reason).toBe('unknown-type');
      expect(result.message).toContain('arrived as a command but is defined as an event');
      expect(result.envelope).toEqual(asCommand);
    });
  });

  describe('when the payload does not match the schema', () => {
    it('fails as validation-failed with the zod issues and the envelope', () => {
      const bad = envelope({ payload: { orderId: 7, quantity: -1 } });

      const result = expectFailure(decodeEnvelope(encodeEnvelope(bad), lookup));

      expect(result.reason).toBe('validation-failed');
      expect(result.issues?.map((issue) => [issue.code, issue.path.join('.')])).toEqual([
        ['invalid_type', 'orderId'],
        ['too_small', 'quantity'],
      ]);
      expect(result.envelope).toEqual(bad);
    });
  });

  describe('when the bytes exceed the size limit', () => {
    it('accepts exactly the default 1 MiB and refuses one byte more as too-large', () => {
      const atLimit = bodyOfSize(DEFAULT_MAX_ENVELOPE_BYTES);
      const overLimit = bodyOfSize(DEFAULT_MAX_ENVELOPE_BYTES + 1);
      expect(encodedSize(atLimit)).toBe(DEFAULT_MAX_ENVELOPE_BYTES);

      expect(decodeEnvelope(atLimit, lookup).ok).toBe(true);
      const result = expectFailure(decodeEnvelope(overLimit, lookup));
      expect(result.reason).toBe('too-large');
      expect(result.message).toContain(String(DEFAULT_MAX_ENVELOPE_BYTES));
    });

    it('applies a custom maxBytes, counting UTF-8 bytes rather than characters', () => {
      const body = encodeEnvelope(envelope({ payload: { orderId: 'é'.repeat(100), quantity: 1 } }));
      const bytes = encodedSize(body);
      expect(bytes).toBe(body.length + 100);

      expect(expectFailure(decodeEnvelope(body, lookup, { maxBytes: bytes - 1 })).reason).toBe('too-large');
      expect(decodeEnvelope(body, lookup, { maxBytes: bytes }).ok).toBe(true);
    });

    it('refuses oversized bytes before trying to parse them', () => {
      const result = expectFailure(decodeEnvelope('not json at all', lookup, { maxBytes: 4 }));

      expect(result.reason).toBe('too-large');
    });
  });
});
