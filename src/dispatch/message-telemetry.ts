import type { OutgoingMessage, QueueDepth } from '../broker/message-broker.js';
import type { DeadLetterReason } from '../dead-letters/dead-letter-store.js';
import type { ReplayTelemetry } from '../dead-letters/replay-dead-letters.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { Envelope } from '../messages/envelope.js';
import type { TraceparentProvider } from '../messages/prepare-message.js';
import type { PauseSubject } from './outage-breaker.js';
import type { LogPosition } from './transactional-unit-of-work.js';

/** One handler call as telemetry is told of it: one delivery attempt, one log event, or one `execute`. */
export interface ProcessInfo {
  readonly envelope: Envelope;
  /** The handler (subscription) that runs. */
  readonly handler: string;
  readonly handlerKind: HandlerKind;
  /** The endpoint the handler runs for (the consumer group). */
  readonly endpoint: string;
  /** The delivery attempt, from 1. */
  readonly attempt: number;
  /** True for `execute` (in the caller's process and trace), false for a delivery. */
  readonly inProcess: boolean;
  /** The event's place in the log, for a projection fed from the event log. */
  readonly position?: LogPosition;
}

/** How a handler call ended, once the pipeline decided what happens to its message. */
export type ProcessEnd =
  | { readonly kind: 'handled' }
  | {
      readonly kind: 'retry';
      readonly error: unknown;
      /** When the message is tried again (ms since the epoch). */
      readonly retryAt: number;
      /** From the decision to `retryAt`, in ms. */
      readonly delayMs: number;
    }
  | { readonly kind: 'dead-letter'; readonly reason: DeadLetterReason; readonly error: unknown }
  /** `execute` failed: the error reaches the caller. */
  | { readonly kind: 'failed'; readonly error: unknown }
  /** A stop released the delivery before anything was committed: it is delivered again. */
  | { readonly kind: 'abandoned' }
  /**
   * The attempt met an outage of a dependency: the delivery goes back uncounted and the endpoint (or
   * projection lane) pauses until a probe gets through.
   */
  | { readonly kind: 'paused'; readonly error: unknown };

/** The saga instance a saga step runs for. */
export interface SagaInstanceInfo {
  /** The saga's name (`@Saga('name')`), which is also the step's handler name. */
  readonly saga: string;
  /** The saga id the step's message correlated to. */
  readonly id: string;
}

/** Telemetry's view of one handler call, from before its middleware to the decision on its message. */
export interface ProcessObservation {
  /** Runs the call (middleware, handler, commit) in this observation's context, e.g. with its span active. */
  within<T>(run: () => Promise<T>): Promise<T>;
  /**
   * Called during `within` by a saga step once it correlated its message, before it loads the
   * instance (not called when correlation fails).
   * @defaultValue not observed
   */
  sagaInstance?(instance: SagaInstanceInfo): void;
  /** Called once, after `within` settled, with what happens to the message. */
  end(end: ProcessEnd): void;
}

/** A received message refused before any handler ran: undecodable, unsigned, or without a handler. */
export interface RefusedInfo {
  /** The envelope, when decoding got that far. */
  readonly envelope: Envelope | undefined;
  readonly handler: string | undefined;
  readonly endpoint: string;
  readonly attempt: number;
  readonly reason: DeadLetterReason;
  readonly error: unknown;
}

/**
 * Where messages handed to the broker come from, when not from `bus.send` / `bus.publish` /
 * `bus.schedule`: what a handler recorded, or what an outbox relay read.
 */
export type PublishOrigin = 'handler' | 'outbox';

/** Gauges the bus offers telemetry, read when a metrics reader collects. */
export interface TelemetrySources {
  readonly endpoint: string;
  /** How far each projection fed from the event log is behind its log, per partition. */
  projectionLag?(): Promise<readonly ProjectionLag[]>;
  /** Messages waiting in each of the broker's queues of this bus's endpoint, where the broker can tell. */
  queueDepths?(): Promise<readonly QueueDepth[]>;
}

/** Events of a projection's log partition not yet applied. */
export interface ProjectionLag {
  readonly projection: string;
  readonly topic: string;
  readonly partition: number;
  readonly lag: number;
}

/**
 * What a telemetry integration hands the bus: the traceparent of every message prepared, and hooks
 * around every handler call, every commit to the broker, every replay, plus the gauges it reads.
 *
 * @remarks
 * The contract knows nothing of OpenTelemetry, so the bus never loads it: `harrierTracing()` and
 * `harrierTelemetry()` from `harrier/telemetry` make one (see docs/telemetry.md). A hook that throws
 * is a bug of the integration; the pipeline does not guard against it.
 */
export interface MessageTelemetry {
  /** Called as each outgoing message is prepared, in the sender's async context. */
  readonly traceparent: TraceparentProvider;
  /**
   * Called as a handler call starts (before its middleware), after routing found its handler.
   * Returns `undefined` when there is nothing to observe (no SDK registered): the call then runs
   * exactly as without telemetry.
   */
  process(info: ProcessInfo): ProcessObservation | undefined;
  /** Called when a received message is dead-lettered before any handler ran. */
  refused?(info: RefusedInfo): void;
  /**
   * Called when an endpoint or a projection lane pauses because a dependency is unreachable
   * (`paused` true), and when it resumes (false).
   */
  pauseChanged?(subject: PauseSubject, paused: boolean): void;
  /**
   * Wraps one commit of messages to the broker (the event log append, then the fan-out).
   * @param origin `undefined` for `bus.send`, `bus.publish` and `bus.schedule`, `'handler'` for what a
   *   handler recorded, `'outbox'` for an outbox relay
   */
  publish?(
    messages: readonly OutgoingMessage[],
    origin: PublishOrigin | undefined,
    run: () => Promise<void>,
  ): Promise<void>;
  /** Wraps the replay of one dead letter. */
  readonly replay?: ReplayTelemetry;
  /** Called by `bus.start()`; the function it returns is called by `bus.stop()`. */
  observe?(sources: TelemetrySources): () => void;
}
