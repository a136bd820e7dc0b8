import type { MessageContext, SendOptions } from '../handlers/message-context.js';
import type {
  CommandDefinition,
  EventDefinition,
  InputOf,
  MessageDefinition,
} from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import {
  prepareMessage,
  type EnvelopeEncoder,
  type PreparedMessage,
  type TraceparentProvider,
} from '../messages/prepare-message.js';
import { deterministicUuidV7, uuidV7Time } from '../messages/uuid-v7.js';

/** What a {@link HandlerContext} needs from whoever runs handlers: the same for every message. */
export interface HandlerContextEnv {
  readonly now: () => number;
  readonly maxBytes: number;
  readonly encode: EnvelopeEncoder;
  /**
   * Gives the traceparent of each recorded message (telemetry's producer span).
   * @defaultValue none: recorded messages carry the handled message's traceparent
   */
  readonly traceparent?: TraceparentProvider;
  /**
   * When set, `send` and `publish` throw what it returns instead of recording (a projection's
   * context: see docs/projections.md).
   * @defaultValue none (both record into the unit of work)
   */
  readonly refuse?: (
    verb: 'send' | 'publish',
    definition: MessageDefinition,
    context: HandlerContext,
  ) => Error;
}

/**
 * The {@link MessageContext} of one handler call, with the unit of work it records into.
 */
export class HandlerContext<P = unknown> implements MessageContext<P> {
  /** What the handler recorded, in order; published only if it succeeds. */
  readonly recorded: PreparedMessage[] = [];
  readonly messageId: string;
  readonly correlationId: string;
  readonly causationId: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  #signal: AbortSignal | (() => AbortSignal);

  /**
   * @param signal - the handler's abort signal, or a function that makes it when first read (most
   *   handlers never read it, and an AbortController per message is measurable on a busy worker).
   */
  constructor(
    readonly envelope: Envelope<P>,
    readonly attempt: number,
    readonly endpoint: string,
    readonly handler: string,
    signal: AbortSignal | (() => AbortSignal),
    private readonly env: HandlerContextEnv,
  ) {
    this.messageId = envelope.id;
    this.correlationId = envelope.meta.correlationId;
    this.causationId = envelope.meta.causationId;
    this.headers = envelope.meta.headers;
    this.#signal = signal;
  }

  get signal(): AbortSignal {
    if (typeof this.#signal === 'function') this.#signal = this.#signal();
    return this.#signal;
  }

  send<D extends CommandDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    if (this.env.refuse !== undefined) throw this.env.refuse('send', definition, this);
    return this.#record(definition, payload, options);
  }

  publish<D extends EventDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    if (this.env.refuse !== undefined) throw this.env.refuse('publish', definition, this);
    return this.#record(definition, payload, options);
  }

  /**
   * What the id of every message this context records is derived from, beside its position: the
   * handled message and the handler (a saga step adds its saga id).
   */
  protected idSeed(): string {
    return `${this.messageId}\u0000${this.handler}`;
  }

  /** Records a message into the unit of work; returns its id. */
  protected record(definition: MessageDefinition, payload: unknown, options: SendOptions): string {
    return this.#record(definition, payload, options);
  }

  #record(definition: MessageDefinition, payload: unknown, options: SendOptions): string {
    // Same handled message, handler and position: same id, so a redelivery records no duplicates.
    const id =
      options.id ??
      deterministicUuidV7(`${this.idSeed()}\u0000${this.recorded.length}`, uuidV7Time(this.messageId));
    const prepared = prepareMessage(
      definition,
      payload,
      { ...options, id },
      {
        now: this.env.now(),
        cause: {
          correlationId: this.correlationId,
          messageId: this.messageId,
          traceparent: this.envelope.meta.traceparent,
        },
        maxBytes: this.env.maxBytes,
        encode: this.env.encode,
        traceparent: this.env.traceparent,
        deferred: true,
      },
    );
    this.recorded.push(prepared);
    return prepared.envelope.id;
  }
}
