import { z } from '../messages/supported-zod.js';
import {
  MAX_ATTEMPT_HISTORY,
  type AttemptRecord,
  type ErrorInfo,
  type PendingDeadLetter,
} from './message-broker.js';

/** Longest stack kept in an {@link ErrorInfo}, in characters. */
const MAX_STACK_CHARS = 4096;
/** Longest error name, message or code kept from untrusted facts, in characters. */
const MAX_TEXT_CHARS = 8192;

const text = z.string().transform((value) => value.slice(0, MAX_TEXT_CHARS));

const errorInfoSchema = z.object({
  name: text,
  message: text,
  code: text.optional().catch(undefined),
  stack: z
    .string()
    .transform((value) => value.slice(0, MAX_STACK_CHARS))
    .optional()
    .catch(undefined),
});

const attemptRecordSchema = z.object({
  attempt: z.number().int().min(1),
  at: z.number(),
  error: errorInfoSchema,
});

const pendingDeadLetterSchema = z.object({
  reason: z.string().min(1),
  handler: z.string().optional().catch(undefined),
  attempt: z.number().int().min(1),
  at: z.number(),
  error: errorInfoSchema,
});

/** Copies only the fields of {@link ErrorInfo}, dropping `undefined` optional ones. */
function cleanError(error: z.infer<typeof errorInfoSchema>): ErrorInfo {
  return {
    name: error.name,
    message: error.message,
    ...(error.code !== undefined ? { code: error.code } : {}),
    ...(error.stack !== undefined ? { stack: error.stack } : {}),
  };
}

/** An attempt history read from untrusted storage, and how many of its entries were unusable. */
export interface ParsedHistory {
  /** The well-formed entries, newest last, at most {@link MAX_ATTEMPT_HISTORY}. */
  readonly history: readonly AttemptRecord[];
  /** Entries dropped because they were not attempt records (not an array counts as one). */
  readonly dropped: number;
}

const EMPTY: ParsedHistory = { history: [], dropped: 0 };

/**
 * Reads an attempt history kept beside an envelope (in a job, a file, another process's memory),
 * keeping the well-formed entries and counting the rest; never throws.
 *
 * @remarks
 * Delivery facts are not covered by the envelope's signature, so anything could be there: a forged
 * job, a record written by another version, a damaged value. A dead letter must still be recorded
 * for such a delivery, so a bad entry is dropped (and counted, for a log line), never thrown on.
 */
export function parseAttemptHistory(value: unknown): ParsedHistory {
  if (value === undefined || value === null) return EMPTY;
  if (!Array.isArray(value)) return { history: [], dropped: 1 };
  const history: AttemptRecord[] = [];
  let dropped = 0;
  for (const entry of value.slice(-MAX_ATTEMPT_HISTORY * 4)) {
    const parsed = attemptRecordSchema.safeParse(entry);
    if (parsed.success) {
      history.push({
        attempt: parsed.data.attempt,
        at: parsed.data.at,
        error: cleanError(parsed.data.error),
      });
    } else {
      dropped++;
    }
  }
  dropped += Math.max(0, value.length - MAX_ATTEMPT_HISTORY * 4);
  return { history: history.slice(-MAX_ATTEMPT_HISTORY), dropped };
}

/** Reads a {@link PendingDeadLetter} from untrusted storage; undefined when it is not one. Never throws. */
export function parsePendingDeadLetter(value: unknown): PendingDeadLetter | undefined {
  if (value === undefined || value === null) return undefined;
  const parsed = pendingDeadLetterSchema.safeParse(value);
  if (!parsed.success) return undefined;
  const { reason, handler, attempt, at, error } = parsed.data;
  return { reason, attempt, at, error: cleanError(error), ...(handler !== undefined ? { handler } : {}) };
}
