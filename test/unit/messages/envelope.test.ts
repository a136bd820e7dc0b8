import { describe, expect, it } from 'vitest';
import { envelopeSchema, type Envelope } from '../../../src/messages/envelope.js';

const good: Envelope = {
  v: 1,
  id: '0190b8e2-7c1a-7abc-8def-0123456789ab',
  kind: 'command',
  type: 'orders.PlaceOrder',
  payload: { orderId: 'o-1' },
  meta: {
    correlationId: '0190b8e2-7c1a-7abc-8def-0123456789ab',
    causationId: '3b241101-e2bb-4255-8caf-4136c566a962',
    occurredAt: '2026-01-01T00:00:00.000Z',
    partitionKey: 'o-1',
    headers: { tenant: 'acme' },
    traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  },
  sig: 'v1=abc',
};

const {
  causationId: _causationId,
  partitionKey: _partitionKey,
  traceparent: _traceparent,
  ...requiredMeta
} = good.meta;

/** The zod issue codes of parsing `value`, or an empty list when it parses. */
function issueCodes(value: unknown): string[] {
  const result = envelopeSchema.safeParse(value);
  return result.success ? [] : result.error.issues.map((issue) => issue.code);
}

describe('envelopeSchema', () => {
  describe('when given a well-formed envelope', () => {
    it('accepts it with every optional field', () => {
      expect(envelopeSchema.parse(good)).toEqual(good);
    });

    it('accepts it without the optional fields', () => {
      const { sig: _sig, ...minimal } = { ...good, meta: requiredMeta };

      expect(envelopeSchema.safeParse(minimal).success).toBe(true);
    });
  });

  describe('when the envelope has an unknown top-level key', () => {
    it('rejects it as unrecognized_keys', () => {
      expect(issueCodes({ ...good, attempt: 2 })).toEqual(['unrecognized_keys']);
    });
  });

  describe('when meta has an unknown key', () => {
    it('rejects it as unrecognized_keys', () => {
      expect(issueCodes({ ...good, meta: { ...good.meta, handler: 'x' } })).toEqual(['unrecognized_keys']);
    });
  });

  describe('when an id is malformed', () => {
    it.each([
      ['a UUIDv4 envelope id', { ...good, id: '3b241101-e2bb-4255-8caf-4136c566a962' }],
      ['an upper-case envelope id', { ...good, id: good.id.toUpperCase() }],
      ['a non-UUID envelope id', { ...good, id: 'order-1' }],
      ['a non-UUID correlationId', { ...good, meta: { ...good.meta, correlationId: 'corr-1' } }],
      ['a non-UUID causationId', { ...good, meta: { ...good.meta, causationId: '' } }],
    ])('rejects %s', (_case, value) => {
      expect(issueCodes(value)).toEqual(['invalid_format']);
    });
  });

  describe('when the version, kind or time is wrong', () => {
    it.each([
      ['version 2', { ...good, v: 2 }],
      ['kind "job"', { ...good, kind: 'job' }],
      ['an empty type', { ...good, type: '' }],
      ['occurredAt not ISO', { ...good, meta: { ...good.meta, occurredAt: 'yesterday' } }],
      ['headers with a number', { ...good, meta: { ...good.meta, headers: { retries: 1 } } }],
    ])('rejects %s', (_case, value) => {
      expect(issueCodes(value)).toHaveLength(1);
    });
  });
});
