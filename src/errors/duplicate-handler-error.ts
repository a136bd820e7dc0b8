import { HarrierError } from './harrier-error.js';

/** Thrown at start-up when two handlers claim the same command or query type. */
export class DuplicateHandlerError extends HarrierError {
  /** The message type claimed twice. */
  readonly messageType: string;

  constructor(messageType: string, first: string, second: string) {
    super(
      'duplicate-handler',
      `Two handlers for "${messageType}": ${first} and ${second}. A command or query has exactly one handler in the whole system; remove one of them from handlers`,
    );
    this.messageType = messageType;
  }
}
