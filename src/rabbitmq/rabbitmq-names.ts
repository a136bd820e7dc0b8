import { HarrierError } from '../errors/harrier-error.js';

/** Longest queue, exchange or routing key name RabbitMQ accepts, in UTF-8 bytes. */
const MAX_NAME_BYTES = 255;

/**
 * One part of a RabbitMQ name or topic routing key: letters, digits, `_` and `-` as they are, every
 * other UTF-8 byte (`.` included, which separates the parts) as `%XX`.
 */
export function nameSegment(value: string): string {
  return encodeURIComponent(value).replace(
    /[.!~*'()]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/**
 * The names of everything a {@link RabbitMqBroker} declares under one prefix.
 *
 * @remarks
 * - `<prefix>.route` (topic): where every retry and delay expiry enters (an ordered command or an
 *   event published now enters at `<prefix>.commands` or `<prefix>.events` with the same key; a
 *   command published now and not ordered goes straight into its type's queue through the default
 *   exchange, where lane `all` of its type's exchange leads). `c.<type>.<lane>` goes
 *   on to `<prefix>.commands`, `e.<type>.<lane>` to `<prefix>.events`, `q.<queue>` to that queue.
 *   `<lane>` is `all`, or `p<n>` for an ordered message of partition n.
 * - `<prefix>.commands` (topic) -> one exchange per registered command type, `<prefix>.cmd.<type>`
 *   (topic): its existence is the type's route. It routes to the type's queue `<prefix>.cmd.<type>`,
 *   and the lanes `p<n>` of an ordered type to the endpoint's partition queues
 *   `<prefix>.ordered.<endpoint>.p<n>` (one set per endpoint, shared by its ordered types, so a key
 *   keeps its order across them).
 * - `<prefix>.events` (topic) -> each subscription's queue `<prefix>.evt.<endpoint>.<handler>`, and
 *   the lanes `p<n>` of its ordered types to `<prefix>.evt.<endpoint>.<handler>.p<n>`.
 * - `<prefix>.delay` (headers) -> the delay queues `<prefix>.delay.<bucket>` (`<bucket>` is `q<ms>`
 *   for quorum delay queues, `<ms>` for classic ones), which dead-letter what expires into
 *   `<prefix>.route` under the routing key it was published with; `<prefix>.unrouted`, bound to
 *   `<prefix>.route` under `#`, takes (and drops at once) what expires into no other queue.
 * Endpoint and handler names are encoded by {@link nameSegment}; a type stays as it is in queue and
 * exchange names (it is their last part) and is encoded in routing keys.
 */
export class RabbitMqNames {
  constructor(readonly prefix: string) {}

  get route(): string {
    return `${this.prefix}.route`;
  }

  get commands(): string {
    return `${this.prefix}.commands`;
  }

  get events(): string {
    return `${this.prefix}.events`;
  }

  get delay(): string {
    return `${this.prefix}.delay`;
  }

  /** The exchange of a command type (its route) and, same name, the type's queue. */
  commandType(type: string): string {
    return `${this.prefix}.cmd.${type}`;
  }

  /** Partition queue `n` of an endpoint's ordered commands. */
  orderedCommands(endpoint: string, partition: number): string {
    return `${this.prefix}.ordered.${nameSegment(endpoint)}.p${partition}`;
  }

  /** An event subscription's queue, or its partition queue `n`. */
  subscription(endpoint: string, handler: string, partition?: number): string {
    const base = `${this.prefix}.evt.${nameSegment(endpoint)}.${nameSegment(handler)}`;
    return partition === undefined ? base : `${base}.p${partition}`;
  }

  /** The delay queue of a bucket (see `delayBucket`): `<prefix>.delay.q<ms>` or `<prefix>.delay.<ms>`. */
  delayQueue(bucket: string): string {
    return `${this.prefix}.delay.${bucket}`;
  }

  /**
   * The queue bound to `<prefix>.route` under `#` that drops at once whatever reaches it: a quorum
   * delay queue dead-letters at least once, so a message that expired into no queue (an event no
   * one subscribes to, a command whose route went away) would otherwise stay in it, retried, and
   * hold back the messages behind it.
   */
  get unrouted(): string {
    return `${this.prefix}.unrouted`;
  }

  /** The message's lane in routing keys: `all`, or `p<n>` for an ordered message of partition n. */
  static lane(partition: number | undefined): string {
    return partition === undefined ? 'all' : `p${partition}`;
  }

  /** The routing key of a command into `<prefix>.route`. */
  commandKey(type: string, partition: number | undefined): string {
    return `c.${nameSegment(type)}.${RabbitMqNames.lane(partition)}`;
  }

  /** The routing key of an event into `<prefix>.route`. */
  eventKey(type: string, partition: number | undefined): string {
    return `e.${nameSegment(type)}.${RabbitMqNames.lane(partition)}`;
  }

  /** The routing key of one queue into `<prefix>.route` (a retry, a delay's next leg). */
  queueKey(queue: string): string {
    return `q.${nameSegment(queue)}`;
  }
}

/**
 * @throws HarrierError `invalid-option` when `name` is too long for RabbitMQ (255 UTF-8 bytes).
 */
export function assertNameLength(name: string, what: string): void {
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) {
    throw new HarrierError(
      'invalid-option',
      `The RabbitMQ name "${name.slice(0, 80)}…" of ${what} is longer than ${MAX_NAME_BYTES} bytes: use a shorter prefix, endpoint, handler name or message type`,
    );
  }
}
