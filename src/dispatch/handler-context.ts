import type { MessageContext, SendOptions } from '../handlers/message-context.js';
import type {
  CommandDefinition,
  EventDefinition,
  InputOf,
  MessageDefinition,
} from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
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
import { CallSignal } from './call-signal.js';

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
 * The {@link MessageContext} of one handler call, with the unit of work it records into: what every
 * handler's context shares. {@link ReceivedHandlerContext} is the context of a received message (and
 * of a saga step), {@link LocalHandlerContext} that of a message `execute` made in this process.
 *
 * @remarks
 * No constructor and no field initialisers here: each subclass sets every field in its own
 * constructor. A base constructor that stores fields is one function for every subclass, so in a
 * process that both receives and executes its stores see several object shapes and V8 no longer
 * specialises them (`npm run bench:handler-context`: 36 to 47 ns per construction of `execute`'s
 * context before, 17 to 21 after; docs/benchmarks.md). Subclasses `declare` their fields and set
 * each once in their constructor (a plain field declaration would define it as undefined first).
 *
 * The message fields (`messageId`, `correlationId`, `causationId`, `headers`) are read from the
 * envelope, which a {@link LocalHandlerContext} builds only when something reads it.
 */
export abstract class HandlerContext<P = unknown> implements MessageContext<P> {
  /** Which try of the message this call is (1 for the first). */
  abstract readonly attempt: number;
  /** The endpoint (process role) that runs the handler. */
  abstract readonly endpoint: string;
  /** The handler's name. */
  abstract readonly handler: string;
  /** The handled message. */
  abstract readonly envelope: Envelope<P>;
  protected abstract readonly env: HandlerContextEnv;
  /**
   * What the handler recorded (see `recorded`); every subclass's constructor sets it to undefined.
   * A TS `protected` rather than `#private`: read on every call (`recorded.length`), and a `#` field
   * costs a brand check per access in the profile. `declare`d, so this class initialises nothing.
   */
  declare protected recordedList: PreparedMessage[] | undefined;
  /**
   * The handler's abort signal, or a function that makes it when first read (most handlers never
   * read it, and an AbortController per message is measurable on a busy worker). Set by every
   * subclass's constructor.
   */
  declare protected signalSource: AbortSignal | (() => AbortSignal);

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
    const source = this.signalSource;
    return typeof source === 'function' ? (this.signalSource = source()) : source;
  }

  send<D extends CommandDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    if (this.env.refuse !== undefined) throw this.env.refuse('send', definition, this);
    return this.record(definition, payload, options);
  }

  publish<D extends EventDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    if (this.env.refuse !== undefined) throw this.env.refuse('publish', definition, this);
    return this.record(definition, payload, options);
  }

  /**
   * What the id of every message this context records is derived from, beside its position: the
   * handled message and the handler (a saga step adds its saga id).
   */
  protected idSeed(): string {
    return `${this.messageId}\u0000${this.handler}`;
  }

  /**
   * Records a message into the unit of work; returns its id. Not a `#` method: a class with one
   * brands every instance in its constructor, a store every subclass's instances would share.
   */
  protected record(definition: MessageDefinition, payload: unknown, options: SendOptions): string {
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

/** The context of a received message's handler call (and, as its base, of a saga step). */
export class ReceivedHandlerContext<P = unknown> extends HandlerContext<P> {
  declare readonly envelope: Envelope<P>;
  declare readonly attempt: number;
  declare readonly endpoint: string;
  declare readonly handler: string;
  declare protected readonly env: HandlerContextEnv;
  declare protected recordedList: PreparedMessage[] | undefined;
  declare protected signalSource: AbortSignal | (() => AbortSignal);

  /** @param signal - the handler's abort signal, or a function that makes it when first read. */
  constructor(
    envelope: Envelope<P>,
    attempt: number,
    endpoint: string,
    handler: string,
    signal: AbortSignal | (() => AbortSignal),
    env: HandlerContextEnv,
  ) {
    super();
    this.envelope = envelope;
    this.attempt = attempt;
    this.endpoint = endpoint;
    this.handler = handler;
    this.env = env;
    this.recordedList = undefined;
    this.signalSource = signal;
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
  declare readonly attempt: number;
  declare readonly endpoint: string;
  declare readonly handler: string;
  declare protected readonly env: HandlerContextEnv;
  declare protected recordedList: PreparedMessage[] | undefined;
  declare protected signalSource: AbortSignal | (() => AbortSignal);
  #envelope: Envelope<P> | undefined;
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
  readonly #idMs: number;
  /** The counter of the id taken at the call (when the caller gave none). */
  readonly #idCounter: number;
  /**
   * The call's own signal, made on the first read of `signal` or at a time-out: the signal given is
   * the bus's, shared by every `execute`, which a time-out of one call must not abort.
   */
  #call: CallSignal | undefined;

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
    super();
    this.attempt = 1;
    this.endpoint = endpoint;
    this.handler = handler;
    this.env = env;
    this.recordedList = undefined;
    this.signalSource = signal;
    this.#envelope = undefined;
    this.#call = undefined;
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
      this.#idMs = ms === now ? -1 : ms;
    } else {
      this.#idCounter = 0;
      this.#idMs = -1;
    }
  }

  /** The handled message, built on first read. */
  get envelope(): Envelope<P> {
    return this.#envelope ?? (this.#envelope = this.buildEnvelope());
  }

  /** The call's abort signal: aborted when the bus stops or the call runs past its time-out. */
  override get signal(): AbortSignal {
    return (this.#call ??= new CallSignal(this.signalSource)).signal;
  }

  /** Aborts the call's signal with `reason`: it ran past its time-out. */
  timedOut(reason: unknown): void {
    (this.#call ??= new CallSignal(this.signalSource)).timedOut(reason);
  }

  /** The call is over: its signal stops following the bus's. */
  endCall(): void {
    this.#call?.endCall();
  }

  /** The parsed payload, without building the envelope. */
  get payload(): P {
    return this.#payload;
  }

  /** Not a `#` method, whose brand would be one more store in every construction. */
  private buildEnvelope(): Envelope<P> {
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
