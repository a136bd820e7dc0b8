import { describe, expect, it } from 'vitest';
import { encodeEnvelope, traceparentOfBody } from '../../../src/messages/codec.js';
import type { Envelope } from '../../../src/messages/envelope.js';
import { createEnvelopeSigner } from '../../../src/messages/signing.js';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
const OTHER = '00-11111111111111111111111111111111-2222222222222222-01';
const KEY = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';

/** An envelope laid out as prepareMessage builds it (meta last, traceparent after headers). */
function envelope(
  payload: unknown,
  headers: Record<string, string> = {},
  traceparent: string | null = TRACEPARENT,
): Envelope {
  return {
    v: 1,
    id: '0190a0b0-0000-7000-8000-000000000001',
    kind: 'event',
    type: 'test.Thing',
    payload,
    meta: {
      correlationId: '0190a0b0-0000-7000-8000-000000000001',
      occurredAt: '2026-01-01T00:00:00.000Z',
      headers,
      ...(traceparent !== null ? { traceparent } : {}),
    },
  };
}

describe('traceparentOfBody', () => {
  describe('when the envelope carries a traceparent', () => {
    it('reads it from an encoded envelope', () => {
      expect(traceparentOfBody(encodeEnvelope(envelope({ n: 1 })))).toBe(TRACEPARENT);
    });

    it('reads it from a signed envelope', () => {
      const signed = createEnvelopeSigner({ keys: [KEY] }).encode(envelope({ n: 1 }));
      expect(signed).toContain('"sig":"');
      expect(traceparentOfBody(signed)).toBe(TRACEPARENT);
    });

    it('takes the meta field, not a payload field or a header of that name', () => {
      const body = encodeEnvelope(
        envelope({ traceparent: OTHER, meta: { x: {}, traceparent: OTHER } }, { traceparent: OTHER }),
      );
      expect(traceparentOfBody(body)).toBe(TRACEPARENT);
    });
  });

  describe('when the envelope carries none', () => {
    it('gives undefined', () => {
      expect(traceparentOfBody(encodeEnvelope(envelope({ n: 1 }, {}, null)))).toBeUndefined();
    });

    it('never takes a payload field or a header of that name for it', () => {
      const payload = { traceparent: OTHER, meta: { x: {}, traceparent: OTHER } };
      expect(traceparentOfBody(encodeEnvelope(envelope(payload, {}, null)))).toBeUndefined();
      const headers = { a: 'b', traceparent: OTHER };
      expect(traceparentOfBody(encodeEnvelope(envelope({}, headers, null)))).toBeUndefined();
      const signed = createEnvelopeSigner({ keys: [KEY] }).encode(envelope(payload, headers, null));
      expect(traceparentOfBody(signed)).toBeUndefined();
    });

    it('gives undefined for text that is not an envelope', () => {
      expect(traceparentOfBody('')).toBeUndefined();
      expect(traceparentOfBody('not json "traceparent":"x"')).toBeUndefined();
      expect(traceparentOfBody(`{"meta":{},"traceparent":"${'a'.repeat(200)}"}`)).toBeUndefined();
    });
  });
});
