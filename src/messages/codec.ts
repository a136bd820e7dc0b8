import type { z } from 'zod';
import { withArticle } from '../errors/with-article.js';
import type { MessageDefinition } from './definition.js';
import { envelopeSchema, isEnvelopeFrame, type Envelope } from './envelope.js';

/** Largest encoded envelope accepted by default: 1 MiB. */
export const DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024;

/** Why bytes could not become a handled message. */
export type DecodeFailureReason =
  'malformed' | 'unknown-type' | 'validation-failed' | 'too-large' | 'version-unsupported';

/** A decoded, validated envelope and the definition that validated it. */
export interface DecodeSuccess {
  readonly ok: true;
  readonly envelope: Envelope;
  readonly definition: MessageDefinition;
}

/** Bytes that could not be decoded, with a typed reason. */
export interface DecodeFailure {
  readonly ok: false;
  readonly reason: DecodeFailureReason;
  readonly message: string;
  /** zod issues for `malformed` envelopes and `validation-failed` payloads. */
  readonly issues?: readonly z.core.$ZodIssue[];
  /** The envelope, when it parsed far enough to have one. */
  readonly envelope?: Envelope;
  /**
   * The definition the envelope's type names, for `version-unsupported`: the message was written
   * with a newer version of it than this process knows.
   */
  readonly definition?: MessageDefinition;
}

/** The outcome of {@link decodeEnvelope}. */
export type DecodeResult = DecodeSuccess | DecodeFailure;

/** Options of {@link decodeEnvelope}. */
export interface DecodeOptions {
  /**
   * Encoded envelopes larger than this are refused as `too-large`.
   * @defaultValue 1048576 (1 MiB)
   */
  readonly maxBytes?: number;
}

/** Encodes an envelope to its wire text (JSON). */
export function encodeEnvelope(envelope: Envelope): string {
  return JSON.stringify(envelope);
}

const TRACEPARENT_FIELD = '"traceparent":"';
const META_FIELD = '"meta":{';
/** Longest traceparent read from a body (version 00 takes 55 characters; later versions may add fields). */
const MAX_TRACEPARENT_LENGTH = 128;

/**
 * The `meta.traceparent` of an encoded envelope, read from its text without parsing it: for
 * telemetry over stored or relayed bodies (an outbox row, a dead letter), where a JSON parse per
 * message would cost more than the rest of the work.
 *
 * @remarks
 * Reads the field where {@link encodeEnvelope} and the signer put it: `meta` is the envelope's last
 * object (only `sig`, a string, follows it) and `traceparent` its last field, after the `headers`
 * object. So the last `"traceparent":"` in the text is taken only when it comes after the last
 * `"meta":{` and right after the `}` of `headers`: a payload field or a header of that name is never
 * mistaken for it (inside a JSON string every `"` is escaped). A body laid out otherwise gives
 * `undefined`, never a wrong value. Two backward searches from the end of the text, no regex.
 *
 * @returns the traceparent text as stored (not validated), or `undefined` when there is none.
 */
export function traceparentOfBody(body: string): string | undefined {
  const at = body.lastIndexOf(TRACEPARENT_FIELD);
  if (at < 2 || body.charCodeAt(at - 1) !== 0x2c /* , */ || body.charCodeAt(at - 2) !== 0x7d /* } */) {
    return undefined;
  }
  const meta = body.lastIndexOf(META_FIELD);
  if (meta < 0 || meta > at) return undefined;
  const start = at + TRACEPARENT_FIELD.length;
  const end = body.indexOf('"', start);
  if (end < 0 || end - start > MAX_TRACEPARENT_LENGTH) return undefined;
  const value = body.slice(start, end);
  return value.includes('\\') ? undefined : value;
}

/** Size of an encoded envelope in bytes. */
export function encodedSize(body: string | Uint8Array): number {
  return typeof body === 'string' ? Buffer.byteLength(body, 'utf8') : body.byteLength;
}

/**
 * The size of `body` in bytes when it may be above `maxBytes`, else 0: a UTF-16 code unit takes at
 * most 3 bytes in UTF-8 (a surrogate pair, 2 units, takes 4), so a string that short cannot exceed
 * the limit and is not walked to count its bytes.
 */
export function sizeIfOver(body: string | Uint8Array, maxBytes: number): number {
  return typeof body === 'string' && body.length * 3 <= maxBytes ? 0 : encodedSize(body);
}

/**
 * Turns wire bytes into a validated envelope, or a typed reason why not.
 *
 * @param body - the encoded envelope as received.
 * @param lookup - finds the definition of a message type; undefined means unknown.
 * @remarks Never throws: every bad input becomes a {@link DecodeFailure} so it can be dead-lettered.
 */
export function decodeEnvelope(
  body: string | Uint8Array,
  lookup: (type: string) => MessageDefinition | undefined,
  options: DecodeOptions = {},
): DecodeResult {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
  const size = sizeIfOver(body, maxBytes);
  if (size > maxBytes) {
    return {
      ok: false,
      reason: 'too-large',
      message: `Envelope is ${size} bytes, above the limit of ${maxBytes} bytes`,
    };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(typeof body === 'string' ? body : Buffer.from(body).toString('utf8'));
  } catch (error) {
    return { ok: false, reason: 'malformed', message: `Envelope is not JSON: ${(error as Error).message}` };
  }
  let envelope: Envelope;
  if (isEnvelopeFrame(raw)) {
    // A fresh JSON.parse result nobody else holds: it can be the envelope itself, no copy needed.
    envelope = raw;
  } else {
    // The schema decides the unusual cases and names the issues of a bad envelope.
    const parsed = envelopeSchema.safeParse(raw);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      return {
        ok: false,
        reason: 'malformed',
        message: `Envelope does not match the wire schema: ${first ? `${first.path.join('.') || '(root)'}: ${first.message}` : 'invalid'}`,
        issues: parsed.error.issues,
      };
    }
    envelope = parsed.data;
  }
  const definition = lookup(envelope.type);
  if (definition === undefined) {
    return {
      ok: false,
      reason: 'unknown-type',
      message: `No definition for message type "${envelope.type}" in this process`,
      envelope,
    };
  }
  if (definition.kind !== envelope.kind) {
    return {
      ok: false,
      reason: 'unknown-type',
      message: `Message type "${envelope.type}" arrived as ${withArticle(envelope.kind)} but is defined as ${withArticle(definition.kind)}`,
      envelope,
    };
  }
  const written = envelope.ver ?? 1;
  if (written > definition.version) {
    return {
      ok: false,
      reason: 'version-unsupported',
      message: `Message "${envelope.type}" was written with version ${written}, and this process knows versions up to ${definition.version}: deploy the code with version ${written} of "${definition.type}"`,
      envelope,
      definition,
    };
  }
  let current = envelope.payload;
  if (written < definition.version) {
    try {
      current = definition.upcast(current, written);
    } catch (error) {
      return {
        ok: false,
        reason: 'validation-failed',
        message: `Payload of "${envelope.type}" version ${written} could not be raised to version ${definition.version}: an upcast step threw ${error instanceof Error ? error.message : String(error)}`,
        envelope,
      };
    }
  }
  const payload = definition.schema.safeParse(current);
  if (!payload.success) {
    const first = payload.error.issues[0];
    return {
      ok: false,
      reason: 'validation-failed',
      message: `Payload of "${envelope.type}" does not match its schema: ${first ? `${first.path.join('.') || '(root)'}: ${first.message}` : 'invalid'}`,
      issues: payload.error.issues,
      envelope,
    };
  }
  // The envelope is this call's own object (parsed here, or zod's copy), so it takes the validated payload in place.
  (envelope as { payload: unknown }).payload = payload.data;
  if (written !== definition.version || envelope.type !== definition.type) {
    // Raised or renamed: the envelope now says what its payload is, for whoever encodes it again.
    const mutable = envelope as { type: string; ver?: number };
    mutable.type = definition.type;
    if (definition.version === 1) delete mutable.ver;
    else mutable.ver = definition.version;
  }
  return { ok: true, envelope, definition };
}
