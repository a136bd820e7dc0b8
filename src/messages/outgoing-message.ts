import type { DedupeMode, MessageKind } from './definition.js';

/** A message on its way to the broker. */
export interface OutgoingMessage {
  /**
   * The envelope id; publishing the same id twice delivers it once per subscription (within the
   * broker's dedupe window, or while the first copy is queued: see {@link OutgoingMessage.dedupe}).
   */
  readonly id: string;
  readonly kind: MessageKind;
  readonly type: string;
  /** The encoded envelope, passed through untouched. */
  readonly body: string;
  /** Partition key, used for ordering when `ordered` is true. */
  readonly partitionKey?: string | undefined;
  /**
   * Deliver messages with the same partition key one at a time, in publish order.
   * @defaultValue false
   */
  readonly ordered?: boolean | undefined;
  /**
   * The W3C traceparent the envelope carries (brokers ignore it; telemetry links batch spans to it).
   * @defaultValue none
   */
  readonly traceparent?: string | undefined;
  /** The event-log topic of an event (brokers ignore it). */
  readonly topic?: string | undefined;
  /**
   * Do not deliver before this time (ms since the epoch).
   * @defaultValue now
   */
  readonly deliverAt?: number | undefined;
  /**
   * Refuse a command whose type no endpoint has registered (`register` with a `command`
   * subscription), with HarrierError `no-route`, instead of queueing it for a handler that may never
   * come. `false` queues it anyway, for deploy orders where the handler starts later. Events ignore
   * it: an event nobody subscribes to is delivered nowhere.
   * @defaultValue true
   */
  readonly requireRoute?: boolean | undefined;
  /**
   * How long a second publish of this id is dropped: `'while-queued'` only while the broker holds
   * the first copy, which weakens idempotent publish for this message (see
   * `DefinitionOptions.dedupe`); a broker may keep its window anyway. `prepareMessage` sets it from
   * the definition.
   * @defaultValue 'window' (the broker's `dedupeWindowMs`)
   */
  readonly dedupe?: DedupeMode | undefined;
}
