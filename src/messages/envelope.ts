import { z } from 'zod';

/** The current envelope version. */
export const ENVELOPE_VERSION = 1;

const uuidV7 = z
  .string()
  .regex(
    /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    'expected a lower-case UUIDv7',
  );
const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'expected a UUID');

/** The zod schema of envelope metadata. */
export const envelopeMetaSchema = z.strictObject({
  correlationId: uuid,
  causationId: uuid.optional(),
  occurredAt: z.iso.datetime(),
  partitionKey: z.string().max(1024).optional(),
  headers: z.record(z.string(), z.string()),
  traceparent: z.string().max(256).optional(),
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
  type: z.string().min(1).max(200),
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
