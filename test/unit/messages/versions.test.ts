import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { HarrierError } from '../../../src/errors/harrier-error.js';
import { decodeEnvelope, encodeEnvelope } from '../../../src/messages/codec.js';
import {
  defineCommand,
  defineEvent,
  upcasters,
  type MessageDefinition,
  type UpcasterChain,
} from '../../../src/messages/definition.js';
import { envelopeSchema, isEnvelopeFrame, type Envelope } from '../../../src/messages/envelope.js';
import { prepareMessage } from '../../../src/messages/prepare-message.js';
import { createEnvelopeSigner } from '../../../src/messages/signing.js';

interface V1 {
  readonly orderId: string;
  readonly amount: number;
}
interface V2 {
  readonly orderId: string;
  readonly amount: number;
  readonly currency: string;
}
const schema = z.object({
  orderId: z.string(),
  total: z.object({ amount: z.number(), currency: z.string() }),
});
const OrderPlaced = defineEvent('orders.OrderPlaced', {
  version: 3,
  schema,
  aliases: ['orders.OrderCreated'],
  upcast: upcasters<V1>()
    .step((v1): V2 => ({ ...v1, currency: 'EUR' }))
    .step((v2) => ({ orderId: v2.orderId, total: { amount: v2.amount, currency: v2.currency } })),
});

const lookup = (type: string): MessageDefinition | undefined =>
  type === OrderPlaced.type || OrderPlaced.aliases.includes(type) ? OrderPlaced : undefined;

const envelope = (ver: number | undefined, payload: unknown, type: string = OrderPlaced.type): Envelope => ({
  v: 1,
  id: '0190b8e2-7c1a-7abc-8def-0123456789ab',
  kind: 'event',
  type,
  ...(ver === undefined ? {} : { ver }),
  payload,
  meta: {
    correlationId: '0190b8e2-7c1a-7abc-8def-0123456789ab',
    occurredAt: '2026-01-01T00:00:00.000Z',
    headers: {},
  },
});

const V3_PAYLOAD = { orderId: 'o-1', total: { amount: 12, currency: 'EUR' } };

describe('defineEvent', () => {
  describe('when given a version', () => {
    it('keeps the version and aliases, and defaults to version 1 with none', () => {
      expect(OrderPlaced.version).toBe(3);
      expect(OrderPlaced.aliases).toEqual(['orders.OrderCreated']);
      const Plain = defineEvent('orders.Plain', { schema: z.object({}) });
      expect(Plain.version).toBe(1);
      expect(Plain.aliases).toEqual([]);
    });

    it('raises a payload step by step from any older version', () => {
      expect(OrderPlaced.upcast({ orderId: 'o-1', amount: 12 }, 1)).toEqual(V3_PAYLOAD);
      expect(OrderPlaced.upcast({ orderId: 'o-1', amount: 12, currency: 'EUR' }, 2)).toEqual(V3_PAYLOAD);
      expect(OrderPlaced.upcast(V3_PAYLOAD, 3)).toEqual(V3_PAYLOAD);
    });

    it.each([
      ['no steps', { version: 2 }, /version 2 with 0 upcast steps: give one step per older version \(1\)/],
      [
        'too few steps',
        { version: 3, upcast: upcasters<{ a: number }>().step((v) => v) },
        /version 3 with 1 upcast steps.*upcasters<V1>\(\)\.step\(\(v1\) => v2\)\.step\(\(v2\) => v3\)/,
      ],
      [
        'too many steps',
        { upcast: upcasters<{ a: number }>().step((v) => v) },
        /version 1 with 1 upcast steps/,
      ],
      ['a version of 0', { version: 0 }, /has version 0: use a whole number of at least 1/],
      ['a fractional version', { version: 1.5 }, /has version 1.5/],
      ['an alias equal to the type', { aliases: ['orders.Thing'] }, /has alias "orders.Thing"/],
      ['a malformed alias', { aliases: ['not a name'] }, /has alias "not a name"/],
    ])('refuses %s with invalid-definition', (_name, options, message) => {
      let thrown: unknown;
      try {
        defineEvent('orders.Thing', { schema: z.object({ a: z.number() }), ...(options as object) });
      } catch (error) {
        thrown = error;
      }
      expect(HarrierError.is(thrown)).toBe(true);
      expect((thrown as HarrierError).code).toBe('invalid-definition');
      expect((thrown as HarrierError).message).toMatch(message);
    });
  });

  describe('upcasters (types)', () => {
    it('types each step by the one before and checks the last against the schema input', () => {
      const chain = upcasters<V1>().step((v1) => {
        expectTypeOf(v1).toEqualTypeOf<V1>();
        return { ...v1, currency: 'EUR' };
      });
      expectTypeOf(chain).toEqualTypeOf<
        UpcasterChain<{ currency: string; orderId: string; amount: number }>
      >();
      defineEvent('orders.Typed', {
        version: 2,
        schema: z.object({ orderId: z.string(), amount: z.number(), currency: z.string() }),
        upcast: chain,
      });
      defineEvent('orders.Typed', {
        version: 2,
        schema: z.object({ orderId: z.string(), amount: z.number(), currency: z.string() }),
        // @ts-expect-error the last step must produce the schema's input: currency is missing
        upcast: upcasters<V1>().step((v1) => ({ orderId: v1.orderId, amount: v1.amount })),
      });
      upcasters<V1>()
        .step((v1) => ({ id: v1.orderId }))
        // @ts-expect-error a step takes what the step before it returned
        .step((v2: V1) => v2);
      expect(chain.steps).toHaveLength(1);
    });
  });
});

describe('decodeEnvelope', () => {
  describe('when the envelope was written with an older version', () => {
    it.each([
      ['no ver (version 1)', undefined, { orderId: 'o-1', amount: 12 }],
      ['ver 2', 2, { orderId: 'o-1', amount: 12, currency: 'EUR' }],
      ['ver 3', 3, V3_PAYLOAD],
    ])(
      'raises %s to the current version, validates it and marks the envelope current',
      (_n, ver, payload) => {
        const result = decodeEnvelope(encodeEnvelope(envelope(ver, payload)), lookup);
        expect(result.ok).toBe(true);
        if (!result.ok) return;
        expect(result.envelope.payload).toEqual(V3_PAYLOAD);
        expect(result.envelope.ver).toBe(3);
      },
    );

    it('refuses a raised payload that fails the schema as validation-failed', () => {
      const result = decodeEnvelope(encodeEnvelope(envelope(undefined, { orderId: 'o-1' })), lookup);
      expect(result).toMatchObject({ ok: false, reason: 'validation-failed' });
    });

    it('refuses a payload an upcast step throws on as validation-failed, naming the versions', () => {
      const Throwing = defineEvent('orders.Throwing', {
        version: 2,
        schema: z.object({ a: z.number() }),
        upcast: upcasters<unknown>().step((): { a: number } => {
          throw new Error('no a');
        }),
      });
      const result = decodeEnvelope(
        encodeEnvelope({ ...envelope(undefined, {}), type: Throwing.type }),
        () => Throwing,
      );
      expect(result).toMatchObject({ ok: false, reason: 'validation-failed' });
      expect(!result.ok && result.message).toMatch(
        /version 1 could not be raised to version 2: an upcast step threw no a/,
      );
    });
  });

  describe('when the envelope was written with a newer version', () => {
    it('answers version-unsupported with the definition, naming both versions', () => {
      const result = decodeEnvelope(encodeEnvelope(envelope(4, { anything: true })), lookup);
      expect(result).toMatchObject({ ok: false, reason: 'version-unsupported', definition: OrderPlaced });
      expect(!result.ok && result.message).toMatch(
        /written with version 4, and this process knows versions up to 3/,
      );
    });
  });

  describe('when the envelope has an alias type', () => {
    it('decodes it with the aliased definition and renames the envelope', () => {
      const result = decodeEnvelope(
        encodeEnvelope(envelope(undefined, { orderId: 'o-1', amount: 12 }, 'orders.OrderCreated')),
        lookup,
      );
      expect(result.ok).toBe(true);
      if (!result.ok) return;
      expect(result.envelope.type).toBe('orders.OrderPlaced');
      expect(result.envelope.payload).toEqual(V3_PAYLOAD);
    });
  });
});

describe('envelope ver', () => {
  const context = { now: Date.parse('2026-01-01T00:00:00.000Z') };

  it('is written after type for a versioned definition, and absent for version 1', () => {
    const { outgoing } = prepareMessage(OrderPlaced, V3_PAYLOAD, {}, context);
    expect(outgoing.body).toMatch(/"type":"orders\.OrderPlaced","ver":3,"payload":/);
    const Plain = defineCommand('orders.Plain', { schema: z.object({}) });
    expect(prepareMessage(Plain, {}, {}, context).outgoing.body).not.toContain('"ver"');
  });

  it('is accepted by the fast frame check and the schema alike, and refused below 2', () => {
    const raw = JSON.parse(encodeEnvelope(envelope(3, V3_PAYLOAD))) as unknown;
    expect(isEnvelopeFrame(raw)).toBe(true);
    expect(envelopeSchema.safeParse(raw).success).toBe(true);
    for (const ver of [1, 0, 2.5, '3']) {
      const bad = JSON.parse(encodeEnvelope(envelope(undefined, V3_PAYLOAD))) as Record<string, unknown>;
      bad.ver = ver;
      expect(isEnvelopeFrame(bad)).toBe(false);
      expect(envelopeSchema.safeParse(bad).success).toBe(false);
    }
  });

  it('is covered by the signature', () => {
    const signer = createEnvelopeSigner({
      keys: ['0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'],
    });
    const body = signer.encode(envelope(2, { orderId: 'o-1', amount: 1, currency: 'EUR' }));
    expect(signer.verify(body)).toBeUndefined();
    expect(signer.verify(body.replace('"ver":2', '"ver":3'))).toMatch(/does not match/);
  });
});
