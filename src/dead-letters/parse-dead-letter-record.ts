import { z } from '../messages/supported-zod.js';
import type { ErrorInfo } from '../broker/message-broker.js';
import type { DeadLetterRecord } from './dead-letter-store.js';

const errorInfoSchema = z.object({
  name: z.string(),
  message: z.string(),
  code: z.string().optional(),
  stack: z.string().optional(),
});

/** A {@link DeadLetterRecord} as plain JSON (as `harrier dlq export` writes it), checked field by field. */
const deadLetterRecordSchema = z.object({
  id: z.string().min(1),
  messageId: z.string().optional(),
  kind: z.enum(['command', 'event', 'query']).optional(),
  type: z.string().optional(),
  endpoint: z.string().min(1),
  handler: z.string().optional(),
  reason: z.string().min(1),
  error: errorInfoSchema,
  attempts: z.array(z.object({ attempt: z.number(), at: z.number(), error: errorInfoSchema })),
  attemptCount: z.number().int().nonnegative(),
  firstFailedAt: z.number(),
  lastFailedAt: z.number(),
  fingerprint: z.string(),
  envelope: z.string(),
  partitionKey: z.string().optional(),
  ordered: z.boolean(),
  logPosition: z
    .object({
      topic: z.string().min(1),
      partition: z.number().int().nonnegative(),
      offset: z.number().int().nonnegative(),
    })
    .optional(),
  status: z.enum(['dead', 'replayed']),
  replays: z.array(z.object({ at: z.number(), by: z.string().optional(), handledAt: z.number().optional() })),
});

/** What {@link parseDeadLetterRecord} found: the record, or what is wrong with the value. */
export type ParsedDeadLetterRecord =
  | { readonly ok: true; readonly record: DeadLetterRecord }
  | {
      readonly ok: false;
      /** One line per problem: the field's path and what is wrong with it. */
      readonly issues: readonly string[];
    };

function errorOf(e: z.output<typeof errorInfoSchema>): ErrorInfo {
  return {
    name: e.name,
    message: e.message,
    ...(e.code !== undefined ? { code: e.code } : {}),
    ...(e.stack !== undefined ? { stack: e.stack } : {}),
  };
}

/**
 * Checks that a parsed JSON value is a complete dead-letter record (such as a line of
 * `harrier dlq export`) and returns it as the stores' record type.
 *
 * @remarks
 * Optional fields come back present as undefined, as the stores return them; `logPosition` is kept,
 * so a record of a projection fed from an event log stays one after an export and import.
 */
export function parseDeadLetterRecord(value: unknown): ParsedDeadLetterRecord {
  const result = deadLetterRecordSchema.safeParse(value);
  if (!result.success) {
    return {
      ok: false,
      issues: result.error.issues.map((i) => `${i.path.join('.') || '(record)'}: ${i.message}`),
    };
  }
  const { logPosition, ...parsed } = result.data;
  return {
    ok: true,
    record: {
      ...parsed,
      messageId: parsed.messageId,
      kind: parsed.kind,
      type: parsed.type,
      handler: parsed.handler,
      partitionKey: parsed.partitionKey,
      error: errorOf(parsed.error),
      attempts: parsed.attempts.map((a) => ({ attempt: a.attempt, at: a.at, error: errorOf(a.error) })),
      replays: parsed.replays.map((r) => ({
        at: r.at,
        ...(r.by !== undefined ? { by: r.by } : {}),
        ...(r.handledAt !== undefined ? { handledAt: r.handledAt } : {}),
      })),
      ...(logPosition !== undefined ? { logPosition } : {}),
    },
  };
}
