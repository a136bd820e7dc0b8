import { HarrierError } from './harrier-error.js';

/** Thrown when an event log is asked for a topic it was not provisioned with. */
export class UnknownTopicError extends HarrierError {
  /** The topic that does not exist. */
  readonly topic: string;

  constructor(topic: string) {
    super(
      'unknown-topic',
      `Unknown topic "${topic}": provision it in the log's topics manifest first; topics are never auto-created`,
    );
    this.topic = topic;
  }
}
