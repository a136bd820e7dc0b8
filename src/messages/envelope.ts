import { z } from './supported-zod.js';
import { UUID_V7 } from './uuid-v7.js';

/** The current envelope version. */
export const ENVELOPE_VERSION = 1;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** zod's own pattern for `z.iso.datetime()` (UTC, seconds required, any fraction). */
const DATETIME = z.regexes.datetime({});
const MAX_TYPE_LENGTH = 200;
const MAX_PARTITION_KEY_LENGTH = 1024;
const MAX_TRACEPARENT_LENGTH = 256;
const MAX_PAYLOAD_VERSION = 1_000_000;

const uuidV7 = z.string().regex(UUID_V7, 'expected a lower-case UUIDv7');
const uuid = z.string().regex(UUID, 'expected a UUID');

/** The zod schema of envelope metadata. */
export const envelopeMetaSchema = z.strictObject({
  correlationId: uuid,
  causationId: uuid.optional(),
  occurredAt: z.iso.datetime(),
  partitionKey: z.string().max(MAX_PARTITION_KEY_LENGTH).optional(),
  headers: z.record(z.string(), z.string()),
  traceparent: z.string().max(MAX_TRACEPARENT_LENGTH).optional(),
});

/**
 * The zod schema of the wire envelope (version 1), checked on send and on receive.
 *
 * @remarks
 * Delivery facts (attempt, destination) never live here: the envelope is what gets signed.
 */
export const envelopeSchema = z.strictObject({
  v: z.literal(ENVELOPE_VERSION),
  id: uuidV7,
  kind: z.enum(['command', 'event', 'query']),
  type: z.string().min(1).max(MAX_TYPE_LENGTH),
  /** The payload schema's version the message was written with; absent means 1. */
  ver: z.number().int().min(2).max(MAX_PAYLOAD_VERSION).optional(),
  payload: z.unknown(),
  meta: envelopeMetaSchema,
  sig: z.string().optional(),
});

/** Envelope metadata: correlation, causation, time, key, headers. */
export type EnvelopeMeta = z.output<typeof envelopeMetaSchema>;

/** The wire envelope of a message, with its payload typed as `P`. */
export type Envelope<P = unknown> = Omit<z.output<typeof envelopeSchema>, 'payload'> & {
  readonly payload: P;
};

/**
 * Whether `value` (freshly parsed JSON) is an envelope that {@link envelopeSchema} accepts as it is:
 * the receive path's check of the envelope frame, without building zod's copy of it.
 *
 * @remarks
 * A precompiled form of the schema's checks for the one input every delivery has: about a quarter of
 * the cost of `envelopeSchema.safeParse` on a typical envelope. It only ever answers `true` for input the
 * schema accepts unchanged, and may answer `false` for unusual input the schema would still accept
 * (a missing `payload`, a `__proto__` header): the caller then runs the schema, which decides and
 * gives the issues. The payload is not looked at here; its own schema checks it.
 */
export function isEnvelopeFrame(value: unknown): value is Envelope {
  if (!isPlainRecord(value)) return false;
  let fields = 0;
  for (const key in value) {
    const field = value[key];
    switch (key) {
      case 'v':
        if (field !== ENVELOPE_VERSION) return false;
        break;
      case 'id':
        if (typeof field !== 'string' || !UUID_V7.test(field)) return false;
        break;
      case 'kind':
        if (field !== 'command' && field !== 'event' && field !== 'query') return false;
        break;
      case 'type':
        if (typeof field !== 'string' || field.length < 1 || field.length > MAX_TYPE_LENGTH) return false;
        break;
      case 'ver':
        if (!Number.isSafeInteger(field) || (field as number) < 2 || (field as number) > MAX_PAYLOAD_VERSION)
          return false;
        break;
      case 'payload':
        if (field === undefined) return false;
        break;
      case 'meta':
        if (!isEnvelopeMeta(field, value.id)) return false;
        break;
      case 'sig':
        if (typeof field !== 'string') return false;
        break;
      default:
        return false;
    }
    fields++;
  }
  const optional = (value.sig === undefined ? 0 : 1) + (value.ver === undefined ? 0 : 1);
  // Every key was known and checked, none twice: the six required ones are there when the count says so.
  return fields === 6 + optional;
}

/**
 * @param id - the envelope's `id` as found, checked or not yet: the frame is only ever accepted once
 * it passed the UUIDv7 check, which is stricter than the UUID one, so an id equal to it needs no other.
 */
function isEnvelopeMeta(value: unknown, id: unknown): boolean {
  if (!isPlainRecord(value)) return false;
  let fields = 0;
  for (const key in value) {
    const field = value[key];
    switch (key) {
      case 'correlationId':
      case 'causationId':
        // The first message of a conversation is its own correlation: the same string as the id.
        if (field === id && typeof field === 'string') break;
        if (typeof field !== 'string' || !UUID.test(field)) return false;
        break;
      case 'occurredAt':
        if (typeof field !== 'string' || !DATETIME.test(field)) return false;
        break;
      case 'partitionKey':
        if (typeof field !== 'string' || field.length > MAX_PARTITION_KEY_LENGTH) return false;
        break;
      case 'headers':
        if (!isStringRecord(field)) return false;
        break;
      case 'traceparent':
        if (typeof field !== 'string' || field.length > MAX_TRACEPARENT_LENGTH) return false;
        break;
      default:
        return false;
    }
    fields++;
  }
  const optional =
    (value.causationId === undefined ? 0 : 1) +
    (value.partitionKey === undefined ? 0 : 1) +
    (value.traceparent === undefined ? 0 : 1);
  return fields === 3 + optional;
}

function isStringRecord(value: unknown): boolean {
  if (!isPlainRecord(value)) return false;
  for (const key in value) {
    // zod's record copies into a fresh object, where `__proto__` would not stay a key: let zod decide.
    if (key === '__proto__' || typeof value[key] !== 'string') return false;
  }
  return true;
}

/** A non-array object whose prototype is Object's, as JSON.parse makes them. */
function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype;
}
