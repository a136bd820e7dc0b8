import type { ErrorInfo, OutgoingMessage } from '../broker/message-broker.js';
import type { HarrierError } from '../errors/harrier-error.js';
import type { DeadLetterReason } from '../dead-letters/dead-letter-store.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { HandlerContext, HandlerContextEnv } from './handler-context.js';
import type { SagaInstanceInfo } from './message-telemetry.js';

/**
 * Runs one handler call of a kind in its own way: an error it throws is retried or dead-lettered
 * like a handler's.
 */
export type StepRunner = (step: PipelineStep) => Promise<StepResult>;

/** One handler call handed to a {@link StepRunner}: what it may run and commit, in its own way. */
export interface PipelineStep {
  readonly entry: HandlerEntry;
  readonly definition: MessageDefinition;
  readonly envelope: Envelope;
  readonly attempt: number;
  readonly endpoint: string;
  /** The handler's abort signal, or a function that makes it on first read. */
  readonly signal: AbortSignal | (() => AbortSignal);
  /** What a context of this handler's kind needs (to construct a `ReceivedHandlerContext` or a subclass). */
  readonly env: HandlerContextEnv;
  /** Runs middleware and the handler with `context`. */
  invoke(context: HandlerContext): Promise<unknown>;
  /** True once a stop released the delivery: nothing the step does from now on may commit. */
  abandoned?(): boolean;
  /**
   * Publishes messages a handler recorded (the unit of work's commit), idempotent by id; refuses
   * (`stopping`) once a stop released the delivery, unless `committed` says the transaction that
   * applied the step committed already (the redelivery may skip the step, so publish them anyway).
   */
  publish(messages: readonly OutgoingMessage[], options?: { readonly committed?: boolean }): Promise<void>;
  /** Tells telemetry which saga instance the step runs for (e.g. attributes of its span). */
  sagaInstance?(instance: SagaInstanceInfo): void;
}

/**
 * How a {@link StepRunner} ended a step that threw nothing: handled, dead-lettered, or released
 * (`release`: the message is not at fault, e.g. the state it needs was saved by newer code; it goes
 * back unhandled, spending no attempt, not to be delivered again before `retryAt`).
 */
export type StepResult =
  | { readonly kind: 'handled'; readonly outgoing: readonly OutgoingMessage[] }
  | { readonly kind: 'dead-letter'; readonly reason: DeadLetterReason; readonly error: ErrorInfo }
  | { readonly kind: 'release'; readonly retryAt: number; readonly error: HarrierError };
