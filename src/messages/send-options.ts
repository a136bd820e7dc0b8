/** Options of a message sent or published from a handler or the bus. */
export interface SendOptions {
  /**
   * The message id; publishing the same id twice delivers it once per subscription.
   * @defaultValue a new UUIDv7
   */
  readonly id?: string;
  /**
   * Partition key, overriding the definition's.
   * @defaultValue the definition's partition key of the payload
   */
  readonly partitionKey?: string;
  /**
   * Headers copied into the envelope.
   * @defaultValue `{}`
   */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * Deliver no sooner than this many ms from now.
   * @defaultValue 0
   */
  readonly delayMs?: number;
  /**
   * Correlation id; inside a handler it is always the handled message's.
   * @defaultValue a new id (outside a handler)
   */
  readonly correlationId?: string;
  /**
   * Causation id; inside a handler it is always the handled message's id.
   * @defaultValue none (outside a handler)
   */
  readonly causationId?: string;
  /** W3C traceparent to carry along. @defaultValue none */
  readonly traceparent?: string;
}
