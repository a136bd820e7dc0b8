import { HarrierError } from './harrier-error.js';

/** Thrown by `execute` when no handler in this process handles the command or query. */
export class HandlerNotFoundError extends HarrierError {
  /** The message type that has no handler. */
  readonly messageType: string;

  constructor(messageType: string, hint: string) {
    super('no-handler', `No handler for "${messageType}": ${hint}`);
    this.messageType = messageType;
  }
}
