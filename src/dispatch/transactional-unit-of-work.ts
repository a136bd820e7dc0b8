import type { MessageBroker, OutgoingMessage } from '../broker/message-broker.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { HandlerContext } from './handler-context.js';

/** Where in the event log a projection call applies its event: its checkpoint once it succeeds. */
export interface LogPosition {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  /**
   * The projection's generation the lane started at: a unit commits the checkpoint only while the
   * projection is still at it (no rebuild since), and otherwise rolls back with HarrierError
   * `projection-rebuilt`.
   * @defaultValue none: the checkpoint is raised whatever the generation
   */
  readonly generation?: number;
}

/** One handler call handed to a {@link TransactionalUnitOfWork}. */
export interface UnitOfWorkCall {
  /** The call's context: what the handler records lands in `context.recorded`. */
  readonly context: HandlerContext;
  /** The handler (subscription) name: the inbox key beside the message id. */
  readonly handler: string;
  readonly handlerKind: HandlerKind;
  readonly endpoint: string;
  /**
   * For a projection fed by the event log: the position of the event, so the unit can commit the
   * checkpoint with the handler's writes (and skip an event whose checkpoint is already past it).
   * Absent for broker deliveries, `execute`, and replays of dead letters.
   */
  readonly position?: LogPosition;
  /** True for `execute` (in-process), false for a delivery. */
  readonly inProcess: boolean;
  /** Runs middleware and the handler; rejects with the handler's error. */
  run(): Promise<unknown>;
  /**
   * True once the call's result no longer matters (a stop released the delivery): a unit checks it
   * just before it commits, and rolls back instead.
   */
  abandoned(): boolean;
}

/**
 * What a bus tells its {@link TransactionalUnitOfWork} when it starts
 * ({@link TransactionalUnitOfWork.attach}): enough for a unit that hands recorded messages to the
 * broker itself, in its transaction, to do it as the bus's own publish would.
 */
export interface UnitOfWorkBus {
  /** The bus's endpoint: the `endpoint` of the calls it hands the unit. */
  readonly endpoint: string;
  /** The broker the bus publishes through and receives from. */
  readonly broker: MessageBroker;
  /**
   * Whether the bus appends events to an event log before they fan out (`BusOptions.eventLog`):
   * then a message handed to the broker alone would miss the log.
   */
  readonly eventLog: boolean;
  /**
   * The message as the bus's publisher hands it to the broker: a command this endpoint handles, or
   * any command when `requireCommandRoute` is false, gets `requireRoute: false` unless it set it.
   */
  forBroker(message: OutgoingMessage): OutgoingMessage;
}

/**
 * How a {@link TransactionalUnitOfWork} ended a call that threw nothing:
 * - `ran`: the handler ran and its transaction committed; the pipeline publishes what it recorded, as without a unit;
 * - `stored`: the handler ran, and what it recorded was stored in the same transaction (an outbox),
 *   to be published by a relay: the pipeline publishes nothing;
 * - `skipped`: the call was applied before (an inbox or a checkpoint says so) and the handler did not
 *   run: the delivery is acked.
 */
export type UnitOfWorkResult = 'ran' | 'stored' | 'skipped';

/**
 * A transaction a handler call runs in, so the handler's own writes, what it records and the proof
 * that it ran commit together: the application's database transaction (harrier/postgres's
 * `postgresUnitOfWork`).
 *
 * @remarks
 * The pipeline hands every command handler, event handler and projection call to `run`; the saga
 * step runner hands it each try of a saga step when the saga store joined the unit at start
 * (`SagaStore.joinUnitOfWork`), the store then reading and saving the instance in the unit's
 * transaction through the call's context. A unit that does not want a call runs it as is and
 * returns `ran`. An error thrown by `run` fails the call like the handler's own error (retry, dead
 * letter); the unit must have rolled back by then. See docs/architecture.md.
 */
export interface TransactionalUnitOfWork {
  /** Name used in logs. */
  readonly name: string;
  run(call: UnitOfWorkCall): Promise<UnitOfWorkResult>;
  /**
   * Called by `bus.start()` before the bus receives, once per start: a unit that stores what
   * handlers record straight into the broker's queue checks there that it can (the bus's broker is
   * its own, no event log) and rejects, failing the start, when it cannot.
   * @defaultValue none (nothing to check)
   */
  attach?(bus: UnitOfWorkBus): Promise<void>;
}
