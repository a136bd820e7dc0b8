import { Container } from 'inversify';
import { InMemoryBroker } from '../broker/in-memory-broker.js';
import { toErrorInfo, type MessageBroker } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import { InMemoryDeadLetterStore } from '../dead-letters/in-memory-dead-letter-store.js';
import {
  replayDeadLetters,
  type ProjectionReplayer,
  type ReplayDeadLettersOptions,
  type ReplayResult,
  type ReplayRunOptions,
} from '../dead-letters/replay-dead-letters.js';
import { Dispatcher, type StopOptions } from '../dispatch/dispatcher.js';
import { NO_OPTIONS } from '../dispatch/handler-context.js';
import type { DispatchHooks } from '../dispatch/dispatch-hooks.js';
import type {
  EnvelopeVerifier,
  HandlerInvoker,
  HandlerPipelineOptions,
} from '../dispatch/handler-pipeline-options.js';
import { MessagePublisher } from '../dispatch/message-publisher.js';
import type { Middleware } from '../dispatch/middleware.js';
import type { OutageOptions } from '../dispatch/outage-breaker.js';
import type { MessageTelemetry, TelemetrySources } from '../dispatch/message-telemetry.js';
import type { TransactionalUnitOfWork } from '../dispatch/transactional-unit-of-work.js';
import { HandlerNotFoundError } from '../errors/handler-not-found-error.js';
import { HarrierError } from '../errors/harrier-error.js';
import { withArticle } from '../errors/with-article.js';
import { getHandlerMetadata, type HandlerClass } from '../handlers/handler-metadata.js';
import { HandlerRegistry, type HandlerEntry } from '../handlers/handler-registry.js';
import type { SendOptions } from '../handlers/message-context.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';
import type { CheckpointStore } from '../log/checkpoint-store.js';
import type { EventLog } from '../log/event-log.js';
import { InMemoryCheckpointStore } from '../log/in-memory-checkpoint-store.js';
import { settlesWithin } from '../clock/deadline.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { ProjectionRunner, type PoisonPolicy } from '../projections/projection-runner.js';
import { DEFAULT_MAX_ENVELOPE_BYTES, encodeEnvelope } from '../messages/codec.js';
import {
  assertMessageDefinition,
  checkMessage,
  prepareMessage,
  type EnvelopeEncoder,
  type TraceparentProvider,
} from '../messages/prepare-message.js';
import { createEnvelopeSigner, type SigningOptions } from '../messages/signing.js';
import type {
  CommandDefinition,
  EventDefinition,
  InputOf,
  MessageDefinition,
  QueryDefinition,
  ResultOf,
  RetryOptions,
} from '../messages/definition.js';
import { InMemorySagaStore } from '../sagas/in-memory-saga-store.js';
import { createSagaStepRunner } from '../sagas/saga-step-runner.js';
import type { SagaStore } from '../sagas/saga-store.js';
import { InMemoryScheduleStore } from '../schedules/in-memory-schedule-store.js';
import { RecurringSchedules, type EveryOptions } from '../schedules/recurring-schedules.js';
import type { ScheduleTiming } from '../schedules/schedule-record.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
import { containerInvoker, ownContainer, type MessageScopeOptions } from './container-invoker.js';
import { HarrierTokens } from './tokens.js';

/** Options of {@link createBus}. */
export interface BusOptions {
  /**
   * The endpoint name: a logical service whose processes compete for its messages.
   * @defaultValue 'app'
   */
  readonly endpoint?: string;
  /**
   * The transport.
   * @defaultValue a new {@link InMemoryBroker}
   */
  readonly broker?: MessageBroker;
  /**
   * The inversify container handlers are resolved from (through one child container per message).
   * @defaultValue a new empty container
   */
  readonly container?: Container;
  /**
   * Handler classes of this endpoint.
   * @defaultValue []
   */
  readonly handlers?: readonly HandlerClass[];
  /**
   * `@Saga` classes of this endpoint: each is one subscription to the events its steps take,
   * resolved from the container like a handler. See docs/sagas.md.
   * @defaultValue []
   */
  readonly sagas?: readonly HandlerClass[];
  /**
   * Where saga instances are stored (with `sagas`). A store that joins the bus's `unitOfWork` at
   * start (`PostgresSagaStore` with `postgresUnitOfWork`) keeps each step's instance in the unit's
   * transaction.
   * @defaultValue a new {@link InMemorySagaStore} on the bus's clock
   */
  readonly sagaStore?: SagaStore;
  /**
   * Definitions this endpoint sends or publishes without handling, checked at start-up.
   * @defaultValue []
   */
  readonly definitions?: readonly MessageDefinition[];
  /**
   * Refuse to send a command that no endpoint handles: `send`, `schedule` and the commands handlers
   * record reject with HarrierError `no-route` unless some endpoint's started bus registered a
   * `@CommandHandler` for its type in the broker (on Redis, registrations of earlier runs count).
   *
   * @remarks
   * Set it to `false` in a sender that may start before the handler's endpoint has ever started (a
   * deploy order): the command then waits in its queue for the handler. A command that this bus
   * handles itself is always accepted, also before `start()`. See docs/messages.md.
   * @defaultValue true
   */
  readonly requireCommandRoute?: boolean;
  /**
   * Where dead letters go.
   * @defaultValue a new in-memory store
   */
  readonly deadLetters?: DeadLetterStore;
  /**
   * Most handler calls running at once in this process.
   * @defaultValue 16
   */
  readonly concurrency?: number;
  /**
   * Retry policy where neither handler nor definition sets one.
   * @defaultValue `DEFAULT_RETRY`: 8 attempts, 2 immediate retries, then backoff 2.5 s base doubling, 60 s cap, 0.2 jitter
   */
  readonly retry?: RetryOptions;
  /**
   * Marks failures of your own dependencies as outages: return true for an error that means "the
   * dependency is down" (the endpoint pauses and the attempt is not counted), false for a message
   * failure, undefined to leave it to Harrier's rules. Throwing a `TransientError` does the same
   * from inside a handler.
   * @defaultValue Harrier's rules: `TransientError`, PostgreSQL and Redis connection errors, socket
   *   errors such as ECONNREFUSED and ECONNRESET (see docs/guarantees/outages-pause.md)
   */
  readonly isTransient?: (error: unknown) => boolean | undefined;
  /**
   * How an endpoint (or projection lane) paused by an outage probes for its end: the wait before the
   * first probe, doubling after each probe that meets the outage, up to `probeMaxMs`.
   * @defaultValue `{ probeBaseMs: 1000, probeMaxMs: 15000, maxProbesPerMessage: 10 }`
   */
  readonly outage?: OutageOptions;
  /**
   * How many times a message may end the worker handling it before it is dead-lettered as
   * `worker-crashed`: its delivery taken and never settled because the process died (a crash, an
   * out-of-memory kill, `process.exit` in a handler) or lost its hold on the message (on Redis, a
   * job lock that lapsed). Its next delivery after that many is dead-lettered without running the
   * handler, so one poison message cannot crash-loop every process of the endpoint. Each such end
   * also counts as an attempt of the retry policy. A whole number of at least 1. See
   * docs/retries-and-dead-letters.md.
   * @defaultValue 3
   */
  readonly crashLimit?: number;
  /** @defaultValue [] */
  readonly middleware?: readonly Middleware[];
  /**
   * Traces and measures every handler call, outgoing message, commit and replay, e.g.
   * `harrierTelemetry()` or `harrierTracing()` from `harrier/telemetry` (OpenTelemetry; see
   * docs/telemetry.md). It observes a handler call outside all middleware.
   * @defaultValue none: no spans or metrics, and outgoing messages carry their cause's traceparent
   */
  readonly telemetry?: MessageTelemetry;
  /** @defaultValue {} */
  readonly hooks?: DispatchHooks;
  /**
   * The transaction handlers and projections run in, so their writes, the messages they record and
   * the proof that they ran commit together, e.g. `postgresUnitOfWork(...)` from harrier/postgres
   * (outbox and inbox in the application's database). Saga steps run in it when the saga store
   * joins it at start (`SagaStore.joinUnitOfWork`: a `PostgresSagaStore` on the unit's database and
   * schema; one elsewhere makes `start` reject); with other stores they run apart from it.
   * @defaultValue none: a handler runs, then what it recorded is published
   */
  readonly unitOfWork?: TransactionalUnitOfWork;
  /**
   * How each message's child container is set up.
   * @defaultValue `{}`
   */
  readonly messageScope?: MessageScopeOptions;
  /**
   * Makes (or finds) the handler instance for each message and calls its method, in place of
   * resolving it from `container`: the seam for another injector (harrier/nestjs resolves handlers
   * from Nest's). It gets the handler's registry entry, the method, the payload and the message's
   * context, and returns what the method returned (a plain value or a promise); what it throws is
   * the handler's failure. Not together with `messageScope`, which only the container uses.
   * @throws HarrierError `invalid-option` from {@link createBus} when `messageScope` is given as well.
   * @defaultValue resolves each handler from `container` as `messageScope` says
   */
  readonly invoke?: HandlerInvoker;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /**
   * Where {@link MessageBus.every} keeps its recurring schedules and their last tick: share one
   * (`RedisScheduleStore`) between the processes of an endpoint so a restart catches up what all missed.
   * @defaultValue a new {@link InMemoryScheduleStore}
   */
  readonly scheduleStore?: ScheduleStore;
  /** @defaultValue warnings and errors as JSON lines on stderr */
  readonly logger?: Logger;
  /**
   * Largest encoded envelope, in bytes, on send and on receive.
   * @defaultValue 1048576 (1 MiB)
   */
  readonly maxEnvelopeBytes?: number;
  /**
   * How long `stop()` lets in-flight handlers finish before releasing their messages, in ms.
   *
   * @remarks
   * `stop()` resolves within this plus a fixed bound: two tries of releasing each delivery still
   * running (each at most `settleTimeoutMs`) and 5 s for the broker's receiver to close. See
   * docs/guarantees/graceful-stop.md.
   * @defaultValue 10000
   */
  readonly gracePeriodMs?: number;
  /**
   * How long one step of settling a delivery (storing its dead letter, acking, nacking) may take
   * before it counts as failed, in ms. A dead letter that cannot be stored in 3 tries sends its
   * message back to the queue with backoff (1 s doubling to 60 s) instead of holding it. At most
   * 2147483647 (the longest Node timer).
   * @defaultValue 5000
   */
  readonly settleTimeoutMs?: number;
  /**
   * How long a handler call (with its middleware) may run, in ms, where its decorator sets no
   * `timeoutMs`. Past it, the call's `ctx.signal` aborts with HarrierError `handler-timeout` and its
   * attempt fails with that error: retried by the retry policy and dead-lettered after the last
   * attempt (`handler-failed`, or `projection-failed` for a projection), its slot freed at once;
   * `execute` rejects with it. JavaScript cannot stop the call: what it returns or throws afterwards
   * is logged and ignored, what it recorded is discarded, and a `postgresUnitOfWork` transaction is
   * rolled back. Only a call that returns a promise is timed, on the bus's `clock`. Above 0 and at
   * most 2147483647. See docs/handlers.md.
   * @defaultValue 300000 (5 minutes)
   */
  readonly handlerTimeoutMs?: number;
  /**
   * Encodes outgoing envelopes: a low-level hook; use `signing` to sign them. Not together with
   * `signing`.
   * @defaultValue JSON
   */
  readonly encode?: EnvelopeEncoder;
  /**
   * Verifies incoming envelopes: a low-level hook; use `signing` to check signatures. Not together
   * with `signing`.
   * @defaultValue none
   */
  readonly verify?: EnvelopeVerifier;
  /**
   * Signs every envelope this bus sends, publishes or schedules (also those recorded by handlers)
   * with HMAC-SHA256 under the first key, and verifies every envelope it receives against all keys.
   *
   * @remarks
   * A received envelope that is unsigned, signed with an unknown key or changed after signing is
   * dead-lettered as `signature-invalid` and never handled; {@link MessageBus.replayDeadLetters}
   * refuses a record whose envelope no longer verifies. Keys are 32 random bytes (e.g.
   * `openssl rand -hex 32`); list the new key first and keep the old ones while messages signed with
   * them may still be queued or dead-lettered. See docs/signing.md.
   * @throws HarrierError `invalid-key` / `weak-key` from {@link createBus} for a bad key, and
   * `invalid-option` when `encode` or `verify` is given as well.
   * @defaultValue none (envelopes are neither signed nor verified)
   */
  readonly signing?: SigningOptions;
  /**
   * The event log. When set, every published event is appended to it (idempotent by event id)
   * before it is fanned out, and `@Projection`s are fed from it with checkpoints instead of from the
   * broker.
   * @defaultValue none (projections are broker subscriptions)
   */
  readonly eventLog?: EventLog;
  /**
   * Where projection checkpoints are kept (with `eventLog`).
   * @defaultValue a new in-memory store
   */
  readonly checkpoints?: CheckpointStore;
  /**
   * How projections run (with `eventLog`).
   * @defaultValue `{ onPoison: 'skip', commitEvery: 100, commitIntervalMs: 1000,
   *   rebuildCheckIntervalMs: 5000, rebuildTakeoverMs: 30000 }` (see ProjectionRunnerOptions)
   */
  readonly projections?: {
    readonly onPoison?: PoisonPolicy;
    readonly commitEvery?: number;
    readonly commitIntervalMs?: number;
    readonly rebuildCheckIntervalMs?: number;
    readonly rebuildTakeoverMs?: number;
  };
}

/** Options of {@link MessageBus.schedule}: when to deliver. */
export type ScheduleOptions = SendOptions & ({ readonly at: Date } | { readonly delayMs: number });

/** Options of {@link MessageBus.prepare}: those of `send`, and when to deliver. */
export type PrepareOptions = SendOptions & {
  /**
   * Deliver no sooner than this time (instead of `delayMs`).
   * @defaultValue now (or `delayMs` from now)
   */
  readonly at?: Date;
};

/**
 * The application's entry point to messaging.
 *
 * @remarks
 * `send` and `publish` resolve once the broker has accepted the message: from then on it is handled
 * or dead-lettered. `execute` runs a command or query handler in this process and returns its result.
 */
export interface MessageBus {
  readonly endpoint: string;
  readonly broker: MessageBroker;
  readonly deadLetters: DeadLetterStore;
  readonly container: Container;
  /**
   * True while the endpoint takes no messages because a dependency is unreachable (it probes and
   * resumes by itself; see `hooks.onPaused`). A readiness check may report it.
   */
  readonly paused: boolean;
  /** Sends a command to its one handler, wherever it runs; resolves to the message id. */
  send<D extends CommandDefinition>(
    definition: D,
    payload: InputOf<D>,
    options?: SendOptions,
  ): Promise<string>;
  /** Publishes an event to every subscription; resolves to the message id. */
  publish<D extends EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options?: SendOptions,
  ): Promise<string>;
  /**
   * Sends a command or publishes an event for later delivery; resolves to its schedule id, which is
   * the message id (the `id` option when given), for {@link MessageBus.cancelScheduled}.
   */
  schedule<D extends CommandDefinition | EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: ScheduleOptions,
  ): Promise<string>;
  /**
   * Cancels a scheduled message not delivered yet: every copy still waiting for its time (a
   * command's one copy, an event's copy in each subscription) is removed.
   *
   * @remarks
   * Resolves to true when some copy was cancelled, false when none was waiting (delivered, being
   * handled, due already, cancelled before, or an unknown id). A copy already delivered or in flight
   * is not affected. The id may be scheduled again afterwards. An event with a topic stays in the
   * event log, which records it when it is scheduled.
   * @throws HarrierError `not-supported` when the broker cannot cancel
   * (`capabilities().cancelScheduled` is false); `invalid-argument` for an id that is not a
   * non-empty string.
   */
  cancelScheduled(id: string): Promise<boolean>;
  /**
   * Sends a command or publishes an event on every tick of a cron pattern or an interval, from now
   * on and while the bus runs; calling it again with the same `name` replaces the schedule.
   *
   * @remarks
   * Each tick's message id is derived from `name` and the tick's time, so when several processes
   * run the same schedule the broker's idempotent publish keeps one message per tick. The schedule
   * and its last tick are kept in `scheduleStore`; see docs/schedules.md for catch-up and
   * daylight-saving changes.
   * @throws HarrierError `invalid-option` for a bad name, timing, `catchUp`, or a definition with
   * `dedupe: 'while-queued'`; `wrong-kind` for a query; MessageValidationError for the payload.
   * @example
   * ```ts
   * await bus.every('close-day', { cron: '0 18 * * 1-5', timeZone: 'Europe/Berlin' }, CloseDay, {});
   * ```
   */
  every<D extends CommandDefinition | EventDefinition>(
    name: string,
    timing: ScheduleTiming,
    definition: D,
    payload: InputOf<D>,
    options?: EveryOptions,
  ): Promise<void>;
  /** Stops the recurring schedule `name` and removes it from the store; resolves to true when there was one. */
  cancelEvery(name: string): Promise<boolean>;
  /**
   * Runs the handler of a command or query in this process and returns its result; what the
   * handler records is published once it succeeds. No retries: errors reach the caller.
   * @throws HandlerNotFoundError when no handler of this bus handles it.
   */
  execute<D extends CommandDefinition | QueryDefinition>(
    definition: D,
    payload: InputOf<D>,
    options?: SendOptions,
  ): Promise<ResultOf<D>>;
  /**
   * Validates, encodes and signs a command or an event exactly as `send`, `publish` and `schedule`
   * do, without publishing it: for an outbox that stores it in the application's own transaction
   * and hands it to {@link MessageBus.publisher} later (harrier/postgres's outbox and relay).
   * @throws MessageValidationError, HarrierError `too-large` / `invalid-option` / `wrong-kind` as `send`.
   */
  prepare<D extends CommandDefinition | EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options?: PrepareOptions,
  ): OutgoingMessage;
  /**
   * The one commit path of this bus (event log append, then broker fan-out, idempotent by id), for
   * a relay that publishes what {@link MessageBus.prepare} made.
   */
  readonly publisher: MessagePublisher;
  /** Registers subscriptions and starts handling messages. */
  start(): Promise<void>;
  /** Graceful stop: stops taking work, drains within the grace period, closes the broker and store. */
  stop(options?: StopOptions & { readonly closeBroker?: boolean }): Promise<void>;
  /**
   * The projection runner, when the bus has an event log: a bus that {@link createBus} made with
   * `eventLog` is typed {@link MessageBusWithProjections}, where it is always defined.
   */
  readonly projections: ProjectionRunner | undefined;
  /**
   * Replays dead letters into their subscriptions (same message id, fresh attempts).
   *
   * @remarks
   * With `signing`, a record whose stored envelope no longer verifies is refused with error
   * `signature-invalid` and not redelivered. A `projection-failed` record of a projection fed from
   * the event log is run through that projection here, before this resolves: its result is `ok`
   * only if the projection handled the event, and `projection-failed` (the record dead again) if not.
   * Runs {@link replayDeadLetters} (the same replay as `harrier dlq replay`): records of an ordered
   * type with the same partition key go back one at a time in the order of `ids`; `concurrency`,
   * `rate` and `onResult` are passed through, paced by this bus's clock.
   */
  replayDeadLetters(ids: readonly string[], options?: ReplayRunOptions): Promise<ReplayResult[]>;
}

/**
 * A bus made with an `eventLog`: its `@Projection`s are fed from the log by its `projections` runner.
 *
 * @remarks
 * What {@link createBus} returns when its options name an `eventLog`, so
 * `bus.projections.whenCaughtUp()` needs no `!`. A bus whose options are only known as
 * {@link BusOptions} is a {@link MessageBus}, whose `projections` may be undefined.
 */
export interface MessageBusWithProjections extends MessageBus {
  /** The projection runner: checkpoints, status, rebuild, `whenCaughtUp`. */
  readonly projections: ProjectionRunner;
}

class HarrierBus implements MessageBus {
  readonly endpoint: string;
  readonly broker: MessageBroker;
  readonly deadLetters: DeadLetterStore;
  readonly container: Container;
  readonly dispatcher: Dispatcher;

  get paused(): boolean {
    return this.dispatcher.isPaused();
  }
  readonly projections: ProjectionRunner | undefined;
  readonly #eventLog: EventLog | undefined;
  readonly #unitOfWork: TransactionalUnitOfWork | undefined;
  readonly #checkpoints: CheckpointStore | undefined;
  readonly #registry: HandlerRegistry;
  readonly #clock: Clock;
  readonly #maxBytes: number;
  readonly #encode: EnvelopeEncoder;
  readonly #traceparent: TraceparentProvider | undefined;
  readonly #telemetry: MessageTelemetry | undefined;
  #unobserve: (() => void) | undefined;
  /** Checks a dead letter's envelope before replay (with `signing` only). */
  readonly #verifyReplay: ReplayDeadLettersOptions['verifySignature'];
  /** Runs replays of dead letters of projections fed from the event log (none without a log). */
  readonly #projectionReplayer: ProjectionReplayer | undefined;
  readonly #gracePeriodMs: number;
  readonly #logger: Logger;
  readonly #scheduleStore: ScheduleStore;
  readonly #schedules: RecurringSchedules;
  readonly publisher: MessagePublisher;
  readonly #stopController = new AbortController();
  readonly #sagaStore: SagaStore | undefined;
  /** The unit of work saga steps run in: set at start when the saga store joined it. */
  #sagaUnit: TransactionalUnitOfWork | undefined;
  /** Asks the saga store to join the unit of work (at start), when there are sagas and both. */
  readonly #joinSagaUnit: (() => Promise<void>) | undefined;
  #state: 'created' | 'started' | 'stopped' = 'created';
  /** The definition `execute` ran last, and its handler entry (see {@link HarrierBus.execute}). */
  #lastDefinition: MessageDefinition | undefined;
  #lastEntry: HandlerEntry | undefined;

  constructor(options: BusOptions) {
    this.endpoint = options.endpoint ?? 'app';
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(this.endpoint)) {
      throw new HarrierError(
        'invalid-option',
        `endpoint ${JSON.stringify(this.endpoint)} is not a valid name: use letters, digits, '.', '_' and '-' (at most 100), e.g. "orders"`,
      );
    }
    const sagas = options.sagas ?? [];
    this.#sagaStore =
      sagas.length === 0 && options.sagaStore === undefined
        ? undefined
        : (options.sagaStore ??
          new InMemorySagaStore(options.clock !== undefined ? { clock: options.clock } : {}));
    for (const target of options.handlers ?? []) {
      if (getHandlerMetadata(target)?.kind === 'saga') {
        throw new HarrierError(
          'invalid-handler',
          `${target.name} is a @Saga listed in handlers: list it in sagas instead (createBus({ sagas: [${target.name}] }))`,
        );
      }
    }
    this.#registry = HandlerRegistry.build(
      [...(options.handlers ?? []), ...sagas],
      options.definitions ?? [],
    );
    this.broker =
      options.broker ?? new InMemoryBroker(options.clock !== undefined ? { clock: options.clock } : {});
    this.deadLetters = options.deadLetters ?? new InMemoryDeadLetterStore();
    this.container =
      options.container === undefined ? new Container() : ownContainer(options.container, 'createBus');
    this.#clock = options.clock ?? systemClock;
    this.#maxBytes = options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
    let verify = options.verify;
    if (options.signing === undefined) {
      this.#encode = options.encode ?? encodeEnvelope;
    } else {
      const given = [
        ...(options.encode !== undefined ? ['encode'] : []),
        ...(options.verify !== undefined ? ['verify'] : []),
      ];
      if (given.length > 0) {
        throw new HarrierError(
          'invalid-option',
          `signing cannot be combined with ${given.join(' and ')}: signing sets both hooks itself, so remove ${given.join(' and ')} (or remove signing and sign in your own hooks)`,
        );
      }
      const signer = createEnvelopeSigner(options.signing);
      this.#encode = (envelope) => signer.encode(envelope);
      verify = (body) => signer.verify(body);
      this.#verifyReplay = (body) => signer.verify(body);
    }
    this.#gracePeriodMs = options.gracePeriodMs ?? 10_000;
    if (!this.container.isBound(HarrierTokens.MessageBus))
      this.container.bind(HarrierTokens.MessageBus).toConstantValue(this);
    this.#eventLog = options.eventLog;
    this.#unitOfWork = options.unitOfWork;
    this.#traceparent = options.telemetry?.traceparent;
    this.#telemetry = options.telemetry;
    this.publisher = new MessagePublisher({
      ...(options.telemetry !== undefined
        ? { telemetry: options.telemetry, logger: options.logger ?? consoleLogger }
        : {}),
      broker: this.broker,
      registry: this.#registry,
      requireCommandRoute: options.requireCommandRoute ?? true,
      ...(options.eventLog !== undefined ? { eventLog: options.eventLog } : {}),
    });
    this.#checkpoints =
      options.eventLog === undefined ? undefined : (options.checkpoints ?? new InMemoryCheckpointStore());
    const logger = options.logger ?? consoleLogger;
    this.#logger = logger;
    this.#scheduleStore = options.scheduleStore ?? new InMemoryScheduleStore();
    this.#schedules = new RecurringSchedules({
      store: this.#scheduleStore,
      clock: this.#clock,
      logger,
      send: (definition, payload, sendOptions) =>
        this.#dispatch(definition.kind, 'every', definition, payload, sendOptions),
      check: (definition, payload) => {
        this.#prepare(definition.kind, 'every', definition, payload, NO_OPTIONS);
      },
    });
    // One pipeline configuration for the dispatcher and the projection runner alike.
    const pipeline: HandlerPipelineOptions = {
      registry: this.#registry,
      endpoint: this.endpoint,
      invoke: this.#invokerOf(options),
      publisher: this.publisher,
      ...(options.retry !== undefined ? { retry: options.retry } : {}),
      ...(options.isTransient !== undefined ? { isTransient: options.isTransient } : {}),
      ...(options.outage !== undefined ? { outage: options.outage } : {}),
      ...(options.crashLimit !== undefined ? { crashLimit: options.crashLimit } : {}),
      ...(options.middleware !== undefined && options.middleware.length > 0
        ? { middleware: options.middleware }
        : {}),
      ...(options.telemetry !== undefined ? { telemetry: options.telemetry } : {}),
      ...(options.hooks !== undefined ? { hooks: options.hooks } : {}),
      ...(options.unitOfWork !== undefined ? { unitOfWork: options.unitOfWork } : {}),
      clock: this.#clock,
      ...(options.handlerTimeoutMs !== undefined ? { handlerTimeoutMs: options.handlerTimeoutMs } : {}),
      logger,
      maxEnvelopeBytes: this.#maxBytes,
      encode: this.#encode,
      ...(verify !== undefined ? { verify } : {}),
      ...(sagas.length > 0
        ? {
            steps: {
              saga: createSagaStepRunner({
                sagas,
                store: this.#sagaStore ?? new InMemorySagaStore(),
                clock: this.#clock,
                logger,
                unitOfWork: () => this.#sagaUnit,
              }),
            },
          }
        : {}),
    };
    const unit = options.unitOfWork;
    const sagaStore = this.#sagaStore;
    this.#joinSagaUnit =
      sagas.length > 0 && unit !== undefined && sagaStore?.joinUnitOfWork !== undefined
        ? async () => {
            this.#sagaUnit = (await sagaStore.joinUnitOfWork?.(unit)) === true ? unit : undefined;
          }
        : undefined;
    this.projections =
      this.#eventLog === undefined || this.#checkpoints === undefined
        ? undefined
        : new ProjectionRunner({
            ...pipeline,
            log: this.#eventLog,
            checkpoints: this.#checkpoints,
            deadLetters: this.deadLetters,
            ...(options.projections?.onPoison !== undefined
              ? { onPoison: options.projections.onPoison }
              : {}),
            ...(options.projections?.commitEvery !== undefined
              ? { commitEvery: options.projections.commitEvery }
              : {}),
            ...(options.projections?.commitIntervalMs !== undefined
              ? { commitIntervalMs: options.projections.commitIntervalMs }
              : {}),
            ...(options.projections?.rebuildCheckIntervalMs !== undefined
              ? { rebuildCheckIntervalMs: options.projections.rebuildCheckIntervalMs }
              : {}),
            ...(options.projections?.rebuildTakeoverMs !== undefined
              ? { rebuildTakeoverMs: options.projections.rebuildTakeoverMs }
              : {}),
          });
    const runner = this.projections;
    this.#projectionReplayer =
      runner === undefined
        ? undefined
        : {
            handles: (record) => runner.handlesDeadLetter(record),
            replay: (record) => runner.replayDeadLetter(record),
          };
    this.dispatcher = new Dispatcher({
      ...pipeline,
      broker: this.broker,
      deadLetters: this.deadLetters,
      publisher: this.publisher,
      projectionsViaBroker: this.#eventLog === undefined,
      concurrency: options.concurrency ?? 16,
      ...(options.settleTimeoutMs !== undefined ? { settleTimeoutMs: options.settleTimeoutMs } : {}),
    });
  }

  /** The given `invoke`, else the inversify container's invoker. */
  #invokerOf(options: BusOptions): HandlerInvoker {
    if (options.invoke === undefined) return containerInvoker(this.container, options.messageScope);
    if (options.messageScope !== undefined) {
      throw new HarrierError(
        'invalid-option',
        'messageScope cannot be combined with invoke: messageScope sets up the inversify container handlers are resolved from, and invoke replaces that resolution. Remove messageScope (scope handlers in the injector invoke resolves from), or remove invoke',
      );
    }
    if (typeof options.invoke !== 'function') {
      throw new HarrierError(
        'invalid-option',
        `invoke is ${withArticle(typeof options.invoke)}: pass a function (entry, method, payload, context) => result`,
      );
    }
    return options.invoke;
  }

  send<D extends CommandDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: SendOptions = {},
  ): Promise<string> {
    return this.#dispatch('command', 'send', definition, payload, options);
  }

  publish<D extends EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: SendOptions = {},
  ): Promise<string> {
    return this.#dispatch('event', 'publish', definition, payload, options);
  }

  schedule<D extends CommandDefinition | EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: ScheduleOptions,
  ): Promise<string> {
    const delayMs = 'at' in options ? options.at.getTime() - this.#clock.now() : options.delayMs;
    if (!Number.isFinite(delayMs)) {
      return Promise.reject(
        new HarrierError(
          'invalid-option',
          'schedule needs { at: Date } or { delayMs: number } with a valid time',
        ),
      );
    }
    return this.#dispatch(
      definition.kind,
      'schedule',
      definition,
      payload,
      this.#withDelay(options, delayMs),
    );
  }

  async cancelScheduled(id: string): Promise<boolean> {
    if (typeof id !== 'string' || id === '') {
      throw new HarrierError(
        'invalid-argument',
        `cancelScheduled takes the id bus.schedule resolved to, not ${typeof id === 'string' ? 'an empty string' : withArticle(typeof id)}`,
      );
    }
    const { broker } = this;
    if (broker.cancel === undefined || !broker.capabilities().cancelScheduled) {
      throw new HarrierError(
        'not-supported',
        `cancelScheduled needs a broker that can cancel scheduled messages, and ${broker.constructor.name} cannot: use InMemoryBroker, BullMqBroker (harrier/redis) or PostgresBroker (harrier/postgres)`,
      );
    }
    return (await broker.cancel(id)) > 0;
  }

  every<D extends CommandDefinition | EventDefinition>(
    name: string,
    timing: ScheduleTiming,
    definition: D,
    payload: InputOf<D>,
    options: EveryOptions = {},
  ): Promise<void> {
    return this.#schedules.every(name, timing, definition, payload, options);
  }

  cancelEvery(name: string): Promise<boolean> {
    return this.#schedules.cancel(name);
  }

  prepare<D extends CommandDefinition | EventDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: PrepareOptions = {},
  ): OutgoingMessage {
    const delayMs =
      options.at === undefined ? (options.delayMs ?? 0) : options.at.getTime() - this.#clock.now();
    if (!Number.isFinite(delayMs)) {
      throw new HarrierError(
        'invalid-option',
        'prepare needs { at: Date } with a valid time (or delayMs >= 0)',
      );
    }
    return this.#prepare(definition.kind, 'prepare', definition, payload, this.#withDelay(options, delayMs));
  }

  /** `options` without `at`, and with `delayMs` (never below 0). */
  #withDelay(options: SendOptions & { readonly at?: Date }, delayMs: number): SendOptions {
    const { ...rest } = options as SendOptions & { at?: Date; delayMs?: number };
    delete rest.at;
    return { ...rest, delayMs: Math.max(0, delayMs) };
  }

  /**
   * Runs a command or query handler in this process.
   *
   * @remarks
   * Kept small so V8 inlines it into the caller: its errors are made in `#refusal`, and the handler
   * entry of the last executed definition is remembered (the registry never changes after the bus
   * is made, so only another definition or `stop()` replaces it). Validation still runs on every
   * call. A void handler that records nothing may resolve to one shared frozen promise, so two calls
   * can return the same promise object.
   */
  execute<D extends CommandDefinition | QueryDefinition>(
    definition: D,
    payload: InputOf<D>,
    options: SendOptions = NO_OPTIONS,
  ): Promise<ResultOf<D>> {
    let entry: HandlerEntry | undefined;
    let data: unknown;
    let now: number;
    try {
      entry = this.#lastEntry;
      if (definition !== this.#lastDefinition) {
        // Checked before its type is read: an untyped caller may pass anything.
        assertMessageDefinition(definition);
        entry = this.#registry.singleHandler(definition.type);
        if (entry === undefined || entry.kind === 'saga' || this.#state === 'stopped') {
          return Promise.reject(this.#refusal(definition, entry));
        }
        // Only a runnable handler is remembered, and stop() forgets it: a stopped bus never hits it.
        this.#lastDefinition = definition;
        this.#lastEntry = entry;
      }
      // Validated like a sent message, but never encoded: the envelope does not leave the process, so
      // its wire text (and signature) would only be thrown away. Handler-recorded messages still are.
      // Nor is it built here: the context builds it (with an id of this time) when something reads it.
      data = checkMessage(definition, payload, options);
      now = this.#clock.now();
    } catch (refused) {
      // Everything thrown is a rejection, as from an async function (Error or not).
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(refused);
    }
    return this.dispatcher.invokeChecked(
      entry as HandlerEntry,
      definition,
      data,
      now,
      options,
      this.#stopController.signal,
    ) as Promise<ResultOf<D>>;
  }

  /** Why `execute` cannot run `definition`: the bus is stopped, it has no handler, or a saga's. */
  #refusal(definition: MessageDefinition, entry: HandlerEntry | undefined): HarrierError {
    if (this.#state === 'stopped') {
      return new HarrierError('bus-stopped', `Cannot execute "${definition.type}": the bus is stopped`);
    }
    if (entry === undefined) {
      return new HandlerNotFoundError(
        definition.type,
        `decorate a class with @${definition.kind === 'query' ? 'QueryHandler' : 'CommandHandler'}(${definition.type.split('.').pop() ?? definition.type}) and list it in handlers of this bus (execute runs in-process)`,
      );
    }
    return new HarrierError(
      'wrong-kind',
      `"${definition.type}" is handled by the saga "${entry.name}", which runs only from a delivery: send it instead of executing it`,
    );
  }

  /**
   * Starts consuming: attaches the unit of work (`TransactionalUnitOfWork.attach`), asks the saga
   * store to join it (when the bus has both), then starts the dispatcher and the projections.
   * @throws what the unit's `attach` throws (`invalid-option` for a `postgresUnitOfWork({ broker })`
   * that cannot hand messages to this bus's broker), and what the saga store's `joinUnitOfWork`
   * throws (`invalid-option` for a `PostgresSagaStore` on another database or schema than
   * `postgresUnitOfWork`).
   */
  async start(): Promise<void> {
    if (this.#state === 'stopped')
      throw new HarrierError('bus-stopped', 'This bus was stopped: create a new bus to start again');
    if (this.#state === 'started') return;
    // Before anything starts: a unit that cannot work with this bus (its hand-off to the broker), or
    // a saga store that cannot join the unit of work, refuses the start, which may be retried.
    await this.#unitOfWork?.attach?.({
      endpoint: this.endpoint,
      broker: this.broker,
      eventLog: this.#eventLog !== undefined,
      forBroker: (message) => this.publisher.forBroker(message),
    });
    await this.#joinSagaUnit?.();
    // Another start() went first meanwhile, or a stop() came.
    if (!this.#isCreated()) return;
    this.#state = 'started';
    await this.dispatcher.start();
    await this.projections?.start();
    // A stop() while the broker was registering: it has stopped what started, so observe nothing.
    if (!this.#isStarted()) return;
    await this.#schedules.start();
    const telemetry = this.#telemetry;
    if (telemetry?.observe !== undefined) {
      this.#unobserve = this.#guardTelemetry('observe', () => telemetry.observe?.(this.#telemetrySources()));
    }
  }

  #isStarted(): boolean {
    return this.#state === 'started';
  }

  #isCreated(): boolean {
    return this.#state === 'created';
  }

  /** Calls a telemetry hook; logs what it throws (a broken integration must not stop the bus). */
  #guardTelemetry<T>(hook: string, call: () => T): T | undefined {
    try {
      return call();
    } catch (error) {
      this.#logger.error(`Telemetry ${hook} threw; ignored`, { error: toErrorInfo(error) });
      return undefined;
    }
  }

  /** The gauges telemetry may read: projection lag, and queue depths where the broker counts them. */
  #telemetrySources(): TelemetrySources {
    const runner = this.projections;
    const broker = this.broker;
    const endpoint = this.endpoint;
    return {
      endpoint,
      ...(runner !== undefined
        ? {
            projectionLag: async () =>
              (await runner.status()).flatMap((projection) =>
                projection.partitions.map(({ topic, partition, lag }) => ({
                  projection: projection.name,
                  topic,
                  partition,
                  lag,
                })),
              ),
          }
        : {}),
      // Read only where the broker declares it counts: a method alone may be a stub.
      ...(broker.queueDepths !== undefined && broker.capabilities().queueDepths
        ? { queueDepths: () => broker.queueDepths?.(endpoint) ?? Promise.resolve([]) }
        : {}),
    };
  }

  async stop(options: StopOptions & { readonly closeBroker?: boolean } = {}): Promise<void> {
    if (this.#state === 'stopped') return;
    const wasStarted = this.#state === 'started';
    this.#state = 'stopped';
    this.#lastDefinition = undefined;
    this.#lastEntry = undefined;
    const unobserve = this.#unobserve;
    this.#unobserve = undefined;
    if (unobserve !== undefined) this.#guardTelemetry('unobserve', unobserve);
    // Its timers end now; a tick under way is awaited below (not here: the dispatcher stops first).
    const schedulesStopped = this.#schedules.stop();
    if (wasStarted) {
      await this.dispatcher.stop({ gracePeriodMs: options.gracePeriodMs ?? this.#gracePeriodMs });
      // Stops the lanes and commits what they completed.
      const runner = this.projections;
      if (runner !== undefined) {
        // Bounded like the dispatcher: a projection handler that ignores its signal must not hold
        // stop() for ever (its lane is left to end in the background; its event stays uncommitted).
        if (!(await settlesWithin(runner.stop(), options.gracePeriodMs ?? this.#gracePeriodMs))) {
          this.#logger.warn('Projections did not stop within the grace period; stopped waiting for them');
        }
      }
    }
    await schedulesStopped;
    this.#stopController.abort();
    if (options.closeBroker ?? true) {
      await this.broker.close();
      await this.deadLetters.close();
      await this.#sagaStore?.close();
      await this.#scheduleStore.close();
    }
  }

  replayDeadLetters(ids: readonly string[], options: ReplayRunOptions = {}): Promise<ReplayResult[]> {
    return replayDeadLetters({
      ...options,
      store: this.deadLetters,
      broker: this.broker,
      ids,
      clock: this.#clock,
      ...(this.#verifyReplay !== undefined ? { verifySignature: this.#verifyReplay } : {}),
      ...(this.#projectionReplayer !== undefined ? { projections: this.#projectionReplayer } : {}),
      ...(this.#telemetry?.replay !== undefined ? { telemetry: this.#telemetry.replay } : {}),
    });
  }

  async #dispatch(
    expected: MessageDefinition['kind'],
    verb: string,
    definition: MessageDefinition,
    payload: unknown,
    options: SendOptions,
  ): Promise<string> {
    const outgoing = this.#prepare(expected, verb, definition, payload, options);
    await this.publisher.publish([outgoing]);
    return outgoing.id;
  }

  #prepare(
    expected: MessageDefinition['kind'],
    verb: string,
    definition: MessageDefinition,
    payload: unknown,
    options: SendOptions,
  ): OutgoingMessage {
    const either = verb === 'schedule' || verb === 'prepare';
    if (definition.kind !== expected || (either && definition.kind === 'query')) {
      throw new HarrierError(
        'wrong-kind',
        `${verb} takes ${either ? 'a command or an event' : withArticle(expected)}, but "${definition.type}" is ${withArticle(definition.kind)}: use ${definition.kind === 'event' ? 'publish' : definition.kind === 'query' ? 'execute' : 'send'}`,
      );
    }
    if (this.#state === 'stopped')
      throw new HarrierError('bus-stopped', `Cannot ${verb} "${definition.type}": the bus is stopped`);
    const { outgoing } = prepareMessage(definition, payload, options, {
      now: this.#clock.now(),
      maxBytes: this.#maxBytes,
      encode: this.#encode,
      traceparent: this.#traceparent,
      // What `prepare` makes goes to an outbox, and its relay commits it later.
      deferred: verb === 'prepare',
    });
    return outgoing;
  }
}

/**
 * Creates a message bus for one endpoint.
 *
 * @throws DuplicateHandlerError when two handlers claim one command.
 * @throws HarrierError `invalid-handler` / `invalid-option` on any other start-up mistake, naming the fix.
 * @throws HarrierError `foreign-container` when `container` comes from another copy of inversify.
 * @example
 * ```ts
 * const bus = createBus({ endpoint: 'orders', handlers: [PlaceOrderHandler, OrderPlacedHandler] });
 * await bus.start();
 * await bus.send(PlaceOrder, { orderId: 'o-1', items: ['book'] });
 * ```
 */
export function createBus(options: BusOptions & { readonly eventLog: EventLog }): MessageBusWithProjections;
export function createBus(options?: BusOptions): MessageBus;
export function createBus(options: BusOptions = {}): MessageBus {
  return new HarrierBus(options);
}

/** The dispatcher of a bus made by {@link createBus} (for the testing helpers). */
export function dispatcherOf(bus: MessageBus): Dispatcher | undefined {
  return bus instanceof HarrierBus ? bus.dispatcher : undefined;
}
