import type { z } from 'zod';
import { HarrierError } from './harrier-error.js';

/** Thrown when a payload or envelope does not match its zod schema; carries the zod issues. */
export class MessageValidationError extends HarrierError {
  /** The message type whose schema rejected the payload. */
  readonly messageType: string;
  /** The zod issues, with their stable `code`s and paths. */
  readonly issues: readonly z.core.$ZodIssue[];

  constructor(messageType: string, issues: readonly z.core.$ZodIssue[]) {
    const summary = issues
      .slice(0, 3)
      .map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`)
      .join('; ');
    super(
      'validation-failed',
      `Payload of "${messageType}" does not match its schema (${summary}): fix the payload or the schema given to its definition`,
    );
    this.messageType = messageType;
    this.issues = issues;
  }
}
