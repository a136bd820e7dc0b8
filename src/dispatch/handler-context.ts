import type { MessageContext, SendOptions } from '../handlers/message-context.js';
import type {
  CommandDefinition,
  EventDefinition,
  InputOf,
  MessageDefinition,
} from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  buildEnvelope,
  prepareMessage,
  type EnvelopeEncoder,
  type PreparedMessage,
  type TraceparentProvider,
} from '../messages/prepare-message.js';
import {
  deterministicUuidV7,
  reserveUuidV7,
  reservedUuidV7Ms,
  uuidV7Text,
  uuidV7Time,
} from '../messages/uuid-v7.js';

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

/** What `recorded` is until a handler records: nothing, with no array made per call. */
const NOTHING_RECORDED: readonly PreparedMessage[] = Object.freeze([]);

/**
 * The {@link MessageContext} of one handler call, with the unit of work it records into.
 *
 * @remarks
 * The message fields (`messageId`, `correlationId`, `causationId`, `headers`) are read from the
 * envelope, which a {@link LocalHandlerContext} builds only when something reads it.
 */
export class HandlerContext<P = unknown> implements MessageContext<P> {
  #envelope: Envelope<P> | undefined;
  /**
   * What the handler recorded (see `recorded`). A TS `private` rather than `#private`: read on every
   * call (`recorded.length`), and a `#` field costs a brand check per access in the profile.
   */
  private recordedList: PreparedMessage[] | undefined;
  #signal: AbortSignal | (() => AbortSignal);

  /**
   * @param signal - the handler's abort signal, or a function that makes it when first read (most
   *   handlers never read it, and an AbortController per message is measurable on a busy worker).
   */
  constructor(
    envelope: Envelope<P>,
    readonly attempt: number,
    readonly endpoint: string,
    readonly handler: string,
    signal: AbortSignal | (() => AbortSignal),
    private readonly env: HandlerContextEnv,
  ) {
    this.#envelope = envelope;
    this.#signal = signal;
  }

  /** The handled message. */
  get envelope(): Envelope<P> {
    return this.#envelope ?? (this.#envelope = this.buildEnvelope());
  }

  /**
   * Builds the envelope on first read, for a context made without one ({@link LocalHandlerContext}).
   * @throws HarrierError `internal` here: only a subclass constructed without an envelope overrides it.
   */
  protected buildEnvelope(): Envelope<P> {
    throw new HarrierError('internal', `The context of handler "${this.handler}" has no envelope`);
  }

  get messageId(): string {
    return this.envelope.id;
  }

  get correlationId(): string {
    return this.envelope.meta.correlationId;
  }

  get causationId(): string | undefined {
    return this.envelope.meta.causationId;
  }

  get headers(): Readonly<Record<string, string>> {
    return this.envelope.meta.headers;
  }

  /** What the handler recorded, in order; published only if it succeeds. */
  get recorded(): readonly PreparedMessage[] {
    return this.recordedList ?? NOTHING_RECORDED;
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
    const recorded = this.recordedList ?? [];
    // Same handled message, handler and position: same id, so a redelivery records no duplicates.
    const id =
      options.id ??
      deterministicUuidV7(`${this.idSeed()}\u0000${recorded.length}`, uuidV7Time(this.messageId));
    const envelope = this.envelope;
    const prepared = prepareMessage(
      definition,
      payload,
      { ...options, id },
      {
        now: this.env.now(),
        cause: {
          correlationId: envelope.meta.correlationId,
          messageId: envelope.id,
          traceparent: envelope.meta.traceparent,
        },
        maxBytes: this.env.maxBytes,
        encode: this.env.encode,
        traceparent: this.env.traceparent,
        deferred: true,
      },
    );
    recorded.push(prepared);
    this.recordedList = recorded;
    return prepared.envelope.id;
  }
}

/** No options given: one shared object instead of a new `{}` per call (never copied). */
export const NO_OPTIONS: SendOptions = Object.freeze({});

/**
 * The context of a message made in this process (`execute`): checked when made, its envelope (id,
 * time, meta, headers) built only when something reads it.
 *
 * @remarks
 * The envelope is the one `prepareEnvelope` would have built at the call: its id carries the time
 * of the call (`now`), and the options are copied at the call, so a caller that changes its options
 * object afterwards changes nothing here. Most handlers of `execute` read only their payload, so
 * most calls never make an id, a time text or a `meta`.
 */
export class LocalHandlerContext<P = unknown> extends HandlerContext<P> {
  readonly #definition: MessageDefinition;
  readonly #payload: P;
  readonly #now: number;
  readonly #options: SendOptions;
  readonly #partitionKey: string | undefined;
  /**
   * The millisecond of the id taken at the call when it is not the call's own (`now`), else -1: the
   * id's time is almost always the call's, so only the rare other one is stored (ids never take a
   * negative time).
   */
  readonly #idMs: number = -1;
  /** The counter of the id taken at the call (when the caller gave none). */
  readonly #idCounter: number = 0;

  /**
   * @param payload - the payload as its schema parsed it (`checkMessage`).
   * @param now - the clock time of the call: the envelope's `occurredAt` and its id's time.
   * @throws what the definition's partition key function throws (at the call, as `prepareEnvelope`).
   */
  constructor(
    definition: MessageDefinition,
    payload: P,
    now: number,
    options: SendOptions,
    endpoint: string,
    handler: string,
    signal: AbortSignal | (() => AbortSignal),
    env: HandlerContextEnv,
  ) {
    super(undefined as unknown as Envelope<P>, 1, endpoint, handler, signal, env);
    this.#definition = definition;
    this.#payload = payload;
    this.#now = now;
    this.#options = options === NO_OPTIONS ? options : copyOptions(options);
    this.#partitionKey = options.partitionKey ?? definition.partitionKeyOf(payload);
    // The id's place is taken now (its text only when read): an id made before the read (another
    // call's, a send's) must not move this one's time past the call's, nor sort it after its own.
    if ((this.#options.id ?? undefined) === undefined) {
      this.#idCounter = reserveUuidV7(now);
      const ms = reservedUuidV7Ms();
      if (ms !== now) this.#idMs = ms;
    }
  }

  /** The parsed payload, without building the envelope. */
  get payload(): P {
    return this.#payload;
  }

  protected override buildEnvelope(): Envelope<P> {
    const options = this.#options;
    const now = this.#now;
    return buildEnvelope(
      this.#definition,
      this.#payload,
      options.id ?? uuidV7Text(this.#idMs === -1 ? now : this.#idMs, this.#idCounter),
      this.#partitionKey,
      options,
      { now },
    ) as Envelope<P>;
  }
}

/** `options` as they are now, headers included (an `id` of `null` from an untyped caller stays). */
function copyOptions(options: SendOptions): SendOptions {
  return options.headers === undefined ? { ...options } : { ...options, headers: { ...options.headers } };
}
