import { describe, expect, it } from 'vitest';
import { envelopeSchema, isEnvelopeFrame, type Envelope } from '../../../src/messages/envelope.js';

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

const full: Record<string, unknown> & { id: string; meta: Envelope['meta'] } = good;
type Json = Record<string, unknown>;
const minimal: Json = {
  v: 1,
  id: full.id,
  kind: 'event',
  type: 'orders.OrderPlaced',
  payload: null,
  meta: { correlationId: full.meta.correlationId, occurredAt: '2026-01-01T00:00:00Z', headers: {} },
};

/** The envelope with one top-level field set (`undefined` removes it). */
const withField = (base: Json, key: string, value: unknown): Json => {
  const copy: Json = { ...base };
  if (value === undefined) Reflect.deleteProperty(copy, key);
  else copy[key] = value;
  return copy;
};
const withMeta = (base: Json, key: string, value: unknown): Json =>
  withField(base, 'meta', withField(base.meta as Json, key, value));

const topValues: Record<string, unknown[]> = {
  v: [undefined, 0, 2, '1', 1.5, null],
  id: [undefined, '', full.id.toUpperCase(), '3b241101-e2bb-4255-8caf-4136c566a962', `${full.id} `, 7],
  kind: [undefined, 'Command', 'projection', '', null],
  type: [undefined, '', 'x', 'x'.repeat(200), 'x'.repeat(201), 3],
  payload: [undefined, null, 0, '', [], { a: [1] }],
  meta: [undefined, null, [], 'meta', {}],
  sig: [undefined, '', 'v1=abc', 1, null],
  extra: [1, null, 'x'],
  __proto__: ['x'],
};
const metaValues: Record<string, unknown[]> = {
  correlationId: [undefined, '', full.id, full.meta.causationId, full.id.toUpperCase(), 1],
  causationId: [undefined, full.id, 'nope', null],
  occurredAt: [
    undefined,
    '2026-01-01T00:00:00Z',
    '2026-01-01T00:00:00.123456789Z',
    '2026-01-01T00:00Z',
    '2026-01-01T00:00:00+01:00',
    '2026-01-01 00:00:00Z',
    '2026-02-30T00:00:00Z',
    '2024-02-29T23:59:59Z',
    '2023-02-29T23:59:59Z',
    '2026-13-01T00:00:00Z',
    '2026-01-01T24:00:00Z',
    1767225600000,
  ],
  partitionKey: [undefined, '', 'k'.repeat(1024), 'k'.repeat(1025), 5],
  headers: [undefined, {}, { a: 'b' }, { a: 1 }, { a: null }, [], null, JSON.parse('{"__proto__":"x"}')],
  traceparent: [undefined, '', 't'.repeat(256), 't'.repeat(257), false],
  extra: ['x'],
};

/** Every base envelope with one field changed, at the top or in meta. */
function variants(): Json[] {
  const out: Json[] = [];
  for (const base of [full, minimal]) {
    out.push(base);
    for (const [key, values] of Object.entries(topValues)) {
      for (const value of values) out.push(withField(base, key, value));
    }
    for (const [key, values] of Object.entries(metaValues)) {
      for (const value of values) out.push(withMeta(base, key, value));
    }
  }
  // As the receive path sees them: freshly parsed JSON.
  return out.map((value) => JSON.parse(JSON.stringify(value)) as Json);
}

describe('isEnvelopeFrame', () => {
  describe('when the schema accepts the envelope as it is', () => {
    it('accepts the envelopes Harrier writes, with and without the optional fields', () => {
      expect(isEnvelopeFrame(JSON.parse(JSON.stringify(full)))).toBe(true);
      expect(isEnvelopeFrame(JSON.parse(JSON.stringify(minimal)))).toBe(true);
    });
  });

  describe('when the schema refuses the envelope', () => {
    it('never accepts it, for any one field changed at the top or in meta', () => {
      const cases = variants();
      const wronglyAccepted = cases.filter(
        (value) => isEnvelopeFrame(value) && !envelopeSchema.safeParse(value).success,
      );
      expect(cases.length).toBeGreaterThan(100);
      expect(wronglyAccepted).toEqual([]);
    });

    it('refuses a malformed correlation or causation id that is not the id', () => {
      for (const field of ['correlationId', 'causationId']) {
        const value = { ...good, meta: { ...good.meta, [field]: 'not-a-uuid' } };
        expect(isEnvelopeFrame(JSON.parse(JSON.stringify(value)))).toBe(false);
      }
    });

    it('refuses a malformed id that the correlation id repeats, whatever the key order', () => {
      const meta = { ...good.meta, correlationId: 'not-a-uuid', causationId: 'not-a-uuid' };
      const { meta: _meta, ...rest } = good;
      expect(isEnvelopeFrame({ ...good, id: 'not-a-uuid', meta })).toBe(false);
      // meta before id: the id is checked after the meta that repeats it.
      expect(isEnvelopeFrame({ meta, ...rest, id: 'not-a-uuid' })).toBe(false);
    });

    it('refuses non-objects and arrays', () => {
      for (const value of [null, undefined, 1, 'x', [], [full]]) expect(isEnvelopeFrame(value)).toBe(false);
    });
  });

  describe('when the correlation or causation id is the id', () => {
    it('accepts it, whatever the key order', () => {
      const meta = { ...good.meta, correlationId: good.id, causationId: good.id };
      const { meta: _meta, ...rest } = good;
      expect(isEnvelopeFrame(JSON.parse(JSON.stringify({ ...good, meta })))).toBe(true);
      expect(isEnvelopeFrame(JSON.parse(JSON.stringify({ meta, ...rest })))).toBe(true);
    });
  });

  describe('when it accepts', () => {
    it('agrees with the schema on every variant it accepts, and accepts most valid ones', () => {
      const cases = variants();
      const valid = cases.filter((value) => envelopeSchema.safeParse(value).success);
      const accepted = valid.filter((value) => isEnvelopeFrame(value));
      const leftToSchema = valid.filter((value) => !isEnvelopeFrame(value));
      // Only a missing payload and a `__proto__` header are left to the schema among these.
      for (const value of leftToSchema) {
        const headers = (value.meta as Json).headers as Json;
        expect(!('payload' in value) || Object.hasOwn(headers, '__proto__')).toBe(true);
      }
      expect(accepted.length).toBeGreaterThan(valid.length - 5);
      for (const value of accepted) expect(envelopeSchema.parse(value)).toEqual(value);
    });
  });
});
