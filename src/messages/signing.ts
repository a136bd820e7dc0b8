import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { HarrierError } from '../errors/harrier-error.js';
import type { Envelope } from './envelope.js';

/** A signing key: 32 bytes, as a Buffer/Uint8Array, 64 hex characters or base64 (standard or url). */
export type SigningKeyInput = Uint8Array | string;

/** Options of {@link createEnvelopeSigner}. */
export interface SigningOptions {
  /**
   * The key that signs outgoing envelopes, followed by older keys still accepted when verifying
   * (key rotation: put the new key first, keep the old ones until no message signed with them is
   * left in any queue or dead-letter store).
   */
  readonly keys: readonly SigningKeyInput[];
}

/** Signs encoded envelopes and verifies received ones with HMAC-SHA256. */
export interface EnvelopeSigner {
  /** Encodes an envelope as JSON with a `sig` field over every other byte. */
  encode(envelope: Envelope): string;
  /** Checks a received body; returns why it is refused, or undefined when it verifies. */
  verify(body: string): string | undefined;
}

const SIG_PREFIX = ',"sig":"';

function decodeKey(input: SigningKeyInput, index: number): Buffer {
  let key: Buffer;
  if (typeof input !== 'string') key = Buffer.from(input);
  else if (/^[0-9a-fA-F]{64}$/.test(input)) key = Buffer.from(input, 'hex');
  else key = Buffer.from(input.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (key.length !== 32) {
    throw new HarrierError(
      'invalid-key',
      `Signing key #${index + 1} is ${key.length} bytes: use exactly 32 random bytes (64 hex characters or base64), e.g. from \`openssl rand -hex 32\``,
    );
  }
  const first = key[0];
  if (key.every((byte) => byte === first)) {
    throw new HarrierError(
      'weak-key',
      `Signing key #${index + 1} repeats one byte (0x${(first ?? 0).toString(16).padStart(2, '0')}) 32 times: use 32 random bytes, e.g. from \`openssl rand -hex 32\``,
    );
  }
  if (new Set(key).size < 8) {
    throw new HarrierError(
      'weak-key',
      `Signing key #${index + 1} has fewer than 8 distinct bytes: use 32 random bytes, e.g. from \`openssl rand -hex 32\``,
    );
  }
  return key;
}

/** A short, non-secret id of a key, so a verifier can pick the right one among several. */
function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 8);
}

function mac(key: Buffer, data: string): string {
  return createHmac('sha256', key).update(data, 'utf8').digest('base64url');
}

/**
 * Creates the signer of a bus: HMAC-SHA256 over the exact encoded bytes.
 *
 * @remarks
 * The signature covers the envelope's JSON text exactly as sent, minus its own `sig` field, so
 * verification needs no re-encoding and any change of any byte (payload, headers, ids) is caught.
 * A received envelope without `sig`, with an unknown key id or with a wrong MAC is refused.
 * @throws HarrierError `invalid-key` (not 32 bytes) or `weak-key` (all one byte, too few distinct bytes).
 */
export function createEnvelopeSigner(options: SigningOptions): EnvelopeSigner {
  if (options.keys.length === 0) {
    throw new HarrierError(
      'invalid-key',
      'signing.keys is empty: give at least one key of 32 random bytes (the first one signs), e.g. from `openssl rand -hex 32`',
    );
  }
  const keys = options.keys.map((k, i) => decodeKey(k, i));
  const byId = new Map(keys.map((k) => [keyId(k), k]));
  const signing = keys[0] as Buffer;
  const signingId = keyId(signing);
  return {
    encode(envelope) {
      const { sig: _ignored, ...unsigned } = envelope;
      const text = JSON.stringify(unsigned);
      return `${text.slice(0, -1)}${SIG_PREFIX}${signingId}.${mac(signing, text)}"}`;
    },
    verify(body) {
      const at = body.lastIndexOf(SIG_PREFIX);
      if (at < 0 || !body.endsWith('"}')) return 'the envelope is not signed';
      const sig = body.slice(at + SIG_PREFIX.length, -2);
      const dot = sig.indexOf('.');
      if (dot < 0) return 'the signature is malformed';
      const key = byId.get(sig.slice(0, dot));
      if (key === undefined)
        return `the envelope was signed with key ${sig.slice(0, dot)}, which is not among the verification keys`;
      const expected = Buffer.from(mac(key, `${body.slice(0, at)}}`));
      const actual = Buffer.from(sig.slice(dot + 1));
      if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
        return 'the signature does not match the envelope (it was changed after signing)';
      }
      return undefined;
    },
  };
}
