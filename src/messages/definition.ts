import type { z } from 'zod';
import { HarrierError } from '../errors/harrier-error.js';

/** The three kinds of message. */
export type MessageKind = 'command' | 'event' | 'query';

/**
 * Backoff between attempts: exponential from `baseMs`, capped at `maxMs`, with +/- `jitter` spread.
 */
export interface BackoffOptions {
  /**
   * Delay before the second attempt, in ms; each later attempt doubles it.
   * @defaultValue 200
   */
  readonly baseMs?: number;
  /**
   * Upper bound of any single delay, in ms.
   * @defaultValue 60000
   */
  readonly maxMs?: number;
  /**
   * Random spread as a fraction of the delay (0.2 means +/-20%).
   * @defaultValue 0.2
   */
  readonly jitter?: number;
}

/** How a handler retries a failed message before it is dead-lettered. */
export interface RetryOptions {
  /**
   * Attempts in all, the first included; 1 means no retry.
   * @defaultValue 8 (the first, 2 immediate retries, then 5 delayed ones spanning about 77 s)
   */
  readonly attempts?: number;
  /**
   * Retries made at once after a failure, before the delayed ones begin (a failure that a second
   * try fixes, such as a lost race, costs no wait).
   * @defaultValue 2
   */
  readonly immediate?: number;
  /**
   * Delay of the delayed retries: `baseMs` before the first, doubling up to `maxMs`.
   * @defaultValue `{ baseMs: 2500, maxMs: 60000, jitter: 0.2 }`
   */
  readonly backoff?: BackoffOptions;
  /**
   * Errors that retrying cannot fix: return true to dead-letter at once. `UnrecoverableError` is
   * always permanent.
   * @defaultValue none besides `UnrecoverableError`
   */
  readonly permanent?: (error: unknown) => boolean;
}

/**
 * How long a broker drops a second publish of a message id (guarantee 5, idempotent publish):
 * `'window'` for the broker's dedupe window after the first publish, `'while-queued'` only while the
 * broker still holds the first copy. See {@link DefinitionOptions.dedupe}.
 */
export type DedupeMode = 'window' | 'while-queued';

const DEDUPE_MODES: readonly DedupeMode[] = ['window', 'while-queued'];

/** A partition key: the name of a payload field, or a function of the payload. */
export type PartitionKeyOption<P> = (keyof P & string) | ((payload: P) => string);

/** Options shared by every kind of definition. */
export interface DefinitionOptions<S extends z.ZodType> {
  /** The zod schema of the payload; payload types are inferred from it. */
  readonly schema: S;
  /**
   * Where the partition key of a message comes from; messages with one key are handled in publish
   * order when `ordered` is true.
   * @defaultValue none (no key)
   */
  readonly partitionKey?: PartitionKeyOption<z.output<S>>;
  /**
   * Handle messages with the same partition key one at a time, in publish order, retries included.
   * @defaultValue false
   */
  readonly ordered?: boolean;
  /**
   * Retry policy of this message's handlers, unless a handler sets its own.
   * @defaultValue the bus's retry policy
   */
  readonly retry?: RetryOptions;
  /**
   * How long a second publish of a message id is dropped: `'window'` for the broker's dedupe window
   * after the first publish (`dedupeWindowMs`, 24 hours on `BullMqBroker`), `'while-queued'` only
   * while the broker still holds the first copy (waiting, delayed, being handled, or dead-lettered
   * and kept). Commands and events; queries are answered in-process and ignore it.
   *
   * @remarks
   * `'while-queued'` is a throughput choice for Redis: `BullMqBroker` then stores no deduplication
   * key per message (one Redis key with a time-to-live, written on publish and read again when the
   * message is handled), and only the job id, which is the message id, drops a duplicate. It weakens
   * idempotent publish for these messages: once the first copy has been handled (its job removed), a
   * publish of the same id is delivered again. A publisher that retries after a time-out, an outbox
   * relay or a saga step that re-publishes after a crash can then deliver a message twice, so give
   * the receiving handlers an inbox (harrier/postgres) or make them idempotent. Set it on the
   * definition both sides share: it is the receivers' guarantee that changes. The in-memory broker
   * keeps its window for these messages too (a broker may always drop more duplicates), and the
   * PostgreSQL outbox stores no mode, so what its relay publishes keeps the window.
   *
   * @defaultValue 'window'
   */
  readonly dedupe?: DedupeMode;
  /**
   * The version of the payload schema. Raise it when the schema changes in a way stored copies of
   * the old shape would fail, and give an {@link DefinitionOptions.upcast} step from each older
   * version.
   * @defaultValue 1
   */
  readonly version?: number;
  /**
   * How a payload written with an older version is raised to this one: one step per older version,
   * built with {@link upcasters}; the last step returns the schema's input.
   * @defaultValue none (required when `version` is above 1)
   */
  readonly upcast?: Upcasters<z.input<S>>;
  /**
   * Older type names of this message: an envelope of one of them is handled by this definition, and
   * the endpoint subscribes to them too, so messages still published under an old name arrive.
   * @defaultValue none
   */
  readonly aliases?: readonly string[];
}

/**
 * The steps that raise a payload from version 1 to the current version, built with
 * {@link upcasters}. `Last` is what the last step returns.
 */
export interface Upcasters<Last> {
  /** The steps in order: `steps[0]` raises version 1 to 2, `steps[1]` 2 to 3, and so on. */
  readonly steps: readonly ((payload: never) => unknown)[];
  /** Phantom type of the last step's result; never set at run time. */
  readonly __last?: Last;
}

/** An {@link Upcasters} chain being built: `step` adds the step from the last version to the next. */
export interface UpcasterChain<Last> extends Upcasters<Last> {
  /** Adds the step raising a payload of the chain's last version to the next version. */
  step<Next>(raise: (payload: Last) => Next): UpcasterChain<Next>;
}

function chain<Last>(steps: readonly ((payload: never) => unknown)[]): UpcasterChain<Last> {
  return Object.freeze({
    steps,
    step<Next>(raise: (payload: Last) => Next): UpcasterChain<Next> {
      return chain<Next>([...steps, raise]);
    },
  });
}

/**
 * Starts the upcast chain of a versioned definition; `V1` is the payload type of version 1.
 *
 * @example
 * ```ts
 * type V1 = { orderId: string; amount: number };
 * export const OrderPlaced = defineEvent('orders.OrderPlaced', {
 *   version: 3,
 *   schema: z.object({ orderId: z.string(), total: z.object({ amount: z.number(), currency: z.string() }) }),
 *   upcast: upcasters<V1>()
 *     .step((v1) => ({ orderId: v1.orderId, total: v1.amount, currency: 'EUR' }))
 *     .step((v2) => ({ orderId: v2.orderId, total: { amount: v2.total, currency: v2.currency } })),
 * });
 * ```
 */
export function upcasters<V1>(): UpcasterChain<V1> {
  return chain<V1>([]);
}

/** Options of {@link defineCommand}. */
export interface CommandOptions<
  S extends z.ZodType,
  R extends z.ZodType | undefined,
> extends DefinitionOptions<S> {
  /**
   * Schema of the value `execute` returns; only its type is used.
   * @defaultValue none (`execute` resolves to `unknown`)
   */
  readonly result?: R;
}

/** Options of {@link defineEvent}. */
export interface EventOptions<S extends z.ZodType> extends DefinitionOptions<S> {
  /**
   * The event-log topic this event is appended to.
   * @defaultValue the part of the type before the last dot (`orders` for `orders.OrderPlaced`)
   */
  readonly topic?: string;
}

/** Options of {@link defineQuery}. */
export interface QueryOptions<
  S extends z.ZodType,
  R extends z.ZodType | undefined,
> extends DefinitionOptions<S> {
  /**
   * Schema of the value the query returns; only its type is used.
   * @defaultValue none (`execute` resolves to `unknown`)
   */
  readonly result?: R;
}

const definitionBrand: unique symbol = Symbol.for('harrier/MessageDefinition') as never;

/** A message definition: its kind, its stable `type` string and its payload schema. */
export interface MessageDefinition<
  K extends MessageKind = MessageKind,
  T extends string = string,
  S extends z.ZodType = z.ZodType,
  R = unknown,
> {
  readonly kind: K;
  /** The stable routing and wire identity, e.g. `orders.PlaceOrder`. */
  readonly type: T;
  readonly schema: S;
  readonly ordered: boolean;
  readonly retry: RetryOptions | undefined;
  /** How long a second publish of a message id is dropped ({@link DefinitionOptions.dedupe}). */
  readonly dedupe: DedupeMode;
  /** Event-log topic (events only). */
  readonly topic: string | undefined;
  /** The payload schema's version ({@link DefinitionOptions.version}). */
  readonly version: number;
  /** Older type names routed to this definition ({@link DefinitionOptions.aliases}). */
  readonly aliases: readonly string[];
  /**
   * Raises a payload written with version `from` (below {@link MessageDefinition.version}) to the
   * current version, step by step; the result is not validated yet.
   */
  upcast(payload: unknown, from: number): unknown;
  /** The partition key of a payload, or undefined when the definition has none. */
  partitionKeyOf(payload: z.output<S>): string | undefined;
  /** Phantom type of the handler's result; never set at run time. */
  readonly __result?: R;
}

/** Any command definition. */
export type CommandDefinition<
  T extends string = string,
  S extends z.ZodType = z.ZodType,
  R = unknown,
> = MessageDefinition<'command', T, S, R>;
/** Any event definition. */
export type EventDefinition<T extends string = string, S extends z.ZodType = z.ZodType> = MessageDefinition<
  'event',
  T,
  S
>;
/** Any query definition. */
export type QueryDefinition<
  T extends string = string,
  S extends z.ZodType = z.ZodType,
  R = unknown,
> = MessageDefinition<'query', T, S, R>;

/** The payload type of a definition (the schema's output). */
export type PayloadOf<D extends MessageDefinition> = z.output<D['schema']>;
/** The payload type a caller passes (the schema's input). */
export type InputOf<D extends MessageDefinition> = z.input<D['schema']>;
/** The result type of a command or query definition. */
export type ResultOf<D extends MessageDefinition> =
  D extends MessageDefinition<MessageKind, string, z.ZodType, infer R> ? R : never;

type ResultType<R extends z.ZodType | undefined> = R extends z.ZodType ? z.output<R> : unknown;

const TYPE_PATTERN = /^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$/;

function create<K extends MessageKind, T extends string, S extends z.ZodType, R>(
  kind: K,
  type: T,
  options: DefinitionOptions<S> & { readonly topic?: string },
): MessageDefinition<K, T, S, R> {
  if (typeof type !== 'string' || type.length === 0 || type.length > 200 || !TYPE_PATTERN.test(type)) {
    throw new HarrierError(
      'invalid-definition',
      `Invalid message type ${JSON.stringify(type)}: use a stable dotted name such as "orders.PlaceOrder" (letters, digits, _ and -, at most 200 characters)`,
    );
  }
  if (
    typeof (options as { schema?: { safeParse?: unknown } } | undefined)?.schema?.safeParse !== 'function'
  ) {
    throw new HarrierError(
      'invalid-definition',
      `Definition "${type}" needs a zod schema: pass { schema: z.object({ ... }) }`,
    );
  }
  if (options.ordered === true && options.partitionKey === undefined) {
    throw new HarrierError(
      'invalid-definition',
      `Definition "${type}" is ordered but has no partitionKey: order is kept per key, so pass partitionKey: 'someField' or a function of the payload`,
    );
  }
  const dedupe = options.dedupe ?? 'window';
  if (!DEDUPE_MODES.includes(dedupe)) {
    throw new HarrierError(
      'invalid-definition',
      `Definition "${type}" has dedupe ${JSON.stringify(dedupe)}: use 'window' (the default: a second publish of an id is dropped for the broker's dedupe window) or 'while-queued' (only while the first copy is queued)`,
    );
  }
  const { version, steps } = checkVersion(type, options);
  const aliases = checkAliases(type, options.aliases);
  const upcast = (payload: unknown, from: number): unknown => {
    let value = payload;
    for (let at = Math.max(from, 1) - 1; at < version - 1; at++) {
      value = (steps[at] as (payload: unknown) => unknown)(value);
    }
    return value;
  };
  const key = options.partitionKey;
  const partitionKeyOf =
    key === undefined
      ? () => undefined
      : typeof key === 'function'
        ? (payload: z.output<S>) => key(payload)
        : (payload: z.output<S>) => {
            const value = (payload as Record<string, unknown>)[key];
            return value === undefined || value === null
              ? undefined
              : typeof value === 'string'
                ? value
                : JSON.stringify(value);
          };
  const lastDot = type.lastIndexOf('.');
  const definition: MessageDefinition<K, T, S, R> = Object.freeze({
    kind,
    type,
    schema: options.schema,
    ordered: options.ordered ?? false,
    retry: options.retry,
    dedupe,
    topic: kind === 'event' ? (options.topic ?? (lastDot > 0 ? type.slice(0, lastDot) : type)) : undefined,
    version,
    aliases,
    upcast,
    partitionKeyOf,
    [definitionBrand]: true,
  });
  return definition;
}

function checkVersion(
  type: string,
  options: Pick<DefinitionOptions<z.ZodType>, 'version' | 'upcast'>,
): { version: number; steps: readonly ((payload: never) => unknown)[] } {
  const version = options.version ?? 1;
  if (!Number.isSafeInteger(version) || version < 1) {
    throw new HarrierError(
      'invalid-definition',
      `Definition "${type}" has version ${String(version)}: use a whole number of at least 1 (1, the default, for a schema that never changed)`,
    );
  }
  const steps = options.upcast?.steps ?? [];
  if (
    !Array.isArray(steps) ||
    steps.length !== version - 1 ||
    !steps.every((step) => typeof step === 'function')
  ) {
    throw new HarrierError(
      'invalid-definition',
      `Definition "${type}" is version ${version} with ${Array.isArray(steps) ? steps.length : 0} upcast steps: give one step per older version (${version - 1}), e.g. upcast: upcasters<V1>()${Array.from({ length: version - 1 }, (_, i) => `.step((v${i + 1}) => v${i + 2})`).join('')}`,
    );
  }
  return { version, steps };
}

function checkAliases(type: string, aliases: readonly string[] | undefined): readonly string[] {
  if (aliases === undefined) return Object.freeze([]);
  for (const alias of aliases) {
    if (
      typeof alias !== 'string' ||
      alias === type ||
      alias.length === 0 ||
      alias.length > 200 ||
      !TYPE_PATTERN.test(alias)
    ) {
      throw new HarrierError(
        'invalid-definition',
        `Definition "${type}" has alias ${JSON.stringify(alias)}: an alias is an older type name of this message, a dotted name such as "orders.OrderCreated" other than the type itself`,
      );
    }
  }
  return Object.freeze([...new Set(aliases)]);
}

/**
 * Defines a command: an imperative request with exactly one handler in the whole system.
 *
 * @example
 * ```ts
 * export const PlaceOrder = defineCommand('orders.PlaceOrder', {
 *   schema: z.object({ orderId: z.string(), items: z.array(z.string()) }),
 *   partitionKey: 'orderId',
 * });
 * ```
 * @throws HarrierError `invalid-definition` when the type or options are malformed.
 */
export function defineCommand<
  T extends string,
  S extends z.ZodType,
  R extends z.ZodType | undefined = undefined,
>(type: T, options: CommandOptions<S, R>): CommandDefinition<T, S, ResultType<R>> {
  return create<'command', T, S, ResultType<R>>('command', type, options);
}

/**
 * Defines an event: a past-tense fact delivered to every subscription.
 *
 * @example
 * ```ts
 * export const OrderPlaced = defineEvent('orders.OrderPlaced', {
 *   schema: z.object({ orderId: z.string(), total: z.number() }),
 * });
 * ```
 * @throws HarrierError `invalid-definition` when the type or options are malformed.
 */
export function defineEvent<T extends string, S extends z.ZodType>(
  type: T,
  options: EventOptions<S>,
): EventDefinition<T, S> {
  return create<'event', T, S, unknown>('event', type, options);
}

/**
 * Defines a query: a request answered in-process by exactly one handler through `execute`.
 *
 * @throws HarrierError `invalid-definition` when the type or options are malformed.
 */
export function defineQuery<
  T extends string,
  S extends z.ZodType,
  R extends z.ZodType | undefined = undefined,
>(type: T, options: QueryOptions<S, R>): QueryDefinition<T, S, ResultType<R>> {
  return create<'query', T, S, ResultType<R>>('query', type, options);
}

/** True when `value` was made by `defineCommand`, `defineEvent` or `defineQuery`. */
export function isMessageDefinition(value: unknown): value is MessageDefinition {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as Record<symbol, unknown>)[definitionBrand] === true
  );
}
