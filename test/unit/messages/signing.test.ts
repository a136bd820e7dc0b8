import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { HarrierError, type Envelope } from '../../../src/index.js';
import { createEnvelopeSigner } from '../../../src/extend.js';

const KEY_A = 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00';
const KEY_B = Buffer.from('0f1e2d3c4b5a69788796a5b4c3d2e1f00123456789abcdeffedcba9876543210', 'hex');

const envelope: Envelope = {
  v: 1,
  id: '0190a0b0-0000-7000-8000-000000000001',
  kind: 'command',
  type: 'test.PlaceOrder',
  payload: { orderId: 'o-1', amount: 3 },
  meta: {
    correlationId: '0190a0b0-0000-7000-8000-000000000001',
    occurredAt: '2024-07-01T00:00:00.000Z',
    headers: { tenant: 't-1' },
  },
};

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('createEnvelopeSigner', () => {
  describe('when a key is weak or malformed', () => {
    it.each([
      ['all 0x00', Buffer.alloc(32, 0x00), 'weak-key'],
      ['all 0xFF', Buffer.alloc(32, 0xff), 'weak-key'],
      ['all 0x00 as hex', '00'.repeat(32), 'weak-key'],
      [
        'fewer than 8 distinct bytes',
        Buffer.from([...Array<number>(32).keys()].map((i) => i % 7)),
        'weak-key',
      ],
      ['31 bytes', randomBytes(31), 'invalid-key'],
      ['33 bytes', randomBytes(33), 'invalid-key'],
      ['62 hex characters', 'ab'.repeat(31), 'invalid-key'],
      ['an empty string', '', 'invalid-key'],
    ])('refuses %s with code %s and names openssl rand -hex 32', (_name, key, code) => {
      const error = thrown(() => createEnvelopeSigner({ keys: [key] }));
      expect(HarrierError.is(error) && error.code).toBe(code);
      expect((error as Error).message).toContain('openssl rand -hex 32');
    });

    it('names which key of the list is bad', () => {
      const error = thrown(() => createEnvelopeSigner({ keys: [KEY_A, Buffer.alloc(32, 0xff)] }));
      expect((error as Error).message).toContain('Signing key #2');
    });

    it('refuses an empty key list with invalid-key', () => {
      const error = thrown(() => createEnvelopeSigner({ keys: [] }));
      expect(HarrierError.is(error) && error.code).toBe('invalid-key');
      expect((error as Error).message).toContain('openssl rand -hex 32');
    });
  });

  describe('when a key is given as hex, base64, base64url or bytes', () => {
    it('treats them as the same key', () => {
      const bytes = Buffer.from(KEY_A, 'hex');
      const bodies = [
        KEY_A,
        bytes.toString('base64'),
        bytes.toString('base64url'),
        new Uint8Array(bytes),
      ].map((key) => createEnvelopeSigner({ keys: [key] }).encode(envelope));
      expect(new Set(bodies).size).toBe(1);
    });
  });

  describe('.encode', () => {
    it('appends a sig field to the exact JSON of the envelope', () => {
      const body = createEnvelopeSigner({ keys: [KEY_A] }).encode(envelope);
      const parsed = JSON.parse(body) as Envelope;
      expect(body.startsWith(JSON.stringify(envelope).slice(0, -1))).toBe(true);
      expect(parsed.sig).toMatch(/^[0-9a-f]{8}\.[A-Za-z0-9_-]{43}$/);
      const { sig: _sig, ...rest } = parsed;
      expect(rest).toEqual(envelope);
    });

    it('replaces a sig already on the envelope instead of signing it', () => {
      const signer = createEnvelopeSigner({ keys: [KEY_A] });
      const once = signer.encode(envelope);
      const twice = signer.encode(JSON.parse(once) as Envelope);
      expect(twice).toBe(once);
    });
  });

  describe('.verify', () => {
    const signer = createEnvelopeSigner({ keys: [KEY_A] });

    it('accepts a body it signed', () => {
      expect(signer.verify(signer.encode(envelope))).toBeUndefined();
    });

    it('refuses a body changed after signing', () => {
      const body = signer.encode(envelope);
      const tampered = body.replace('"amount":3', '"amount":4');
      expect(tampered).not.toBe(body);
      expect(signer.verify(tampered)).toMatch(/changed after signing/);
    });

    it('refuses a body whose signature was changed', () => {
      const body = signer.encode(envelope);
      const last = body.at(-3) === 'A' ? 'B' : 'A';
      expect(signer.verify(`${body.slice(0, -3)}${last}"}`)).toMatch(/does not match/);
    });

    it('refuses an unsigned body', () => {
      expect(signer.verify(JSON.stringify(envelope))).toMatch(/not signed/);
    });

    it('refuses a body signed with a key it does not know', () => {
      const other = createEnvelopeSigner({ keys: [KEY_B] });
      expect(signer.verify(other.encode(envelope))).toMatch(/not among the verification keys/);
    });
  });

  describe('when keys are rotated', () => {
    it('signs with the first key and verifies with every key in the list', () => {
      const old = createEnvelopeSigner({ keys: [KEY_A] });
      const rotated = createEnvelopeSigner({ keys: [KEY_B, KEY_A] });
      const fresh = createEnvelopeSigner({ keys: [KEY_B] });
      expect(rotated.verify(old.encode(envelope))).toBeUndefined();
      expect(fresh.verify(rotated.encode(envelope))).toBeUndefined();
      expect(fresh.verify(old.encode(envelope))).toMatch(/not among the verification keys/);
    });
  });
});
