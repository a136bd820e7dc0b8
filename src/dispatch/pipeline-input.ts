import type { DeliveryFacts } from '../broker/message-broker.js';
import type { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import type { LogPosition } from './transactional-unit-of-work.js';

/** One received message to run through the {@link HandlerPipeline}. */
export interface PipelineInput {
  /** The envelope as received (bytes as text): decoded, size-checked and verified here. */
  readonly body: string;
  /** The delivery facts: attempt, earlier failures, subscription (`handler`). */
  readonly facts: DeliveryFacts;
  /**
   * The handler to run.
   * @defaultValue routed from the envelope: a command to its one handler, an event to the
   *   subscription named in `facts.handler`
   */
  readonly handler?: HandlerEntry;
  /** The handler's abort signal, or a function that makes it on first read. */
  readonly signal: AbortSignal | (() => AbortSignal);
  /**
   * Aborts the handler's signal (`signal`, now or when it is made) with `reason`: the handler ran
   * past its time-out. Give it when `signal` is the handler's own; a signal shared with other calls
   * must not be aborted for one.
   * @defaultValue none: the signal is not aborted by a time-out (the attempt still fails)
   */
  timedOut?(reason: HarrierError): void;
  /**
   * True once the run's result no longer matters (the delivery was released by a stop): checked
   * after the handler, before anything is committed.
   * @defaultValue never
   */
  readonly abandoned?: () => boolean;
  /**
   * The event's place in the log, for a projection fed by it (given to the unit of work).
   * @defaultValue none
   */
  readonly position?: LogPosition;
  /**
   * Tell telemetry of a message refused before any handler ran as the pipeline refuses it. False
   * when the caller may not dead-letter it (a projection's lane skips events of types it has no
   * `@On` for): the caller then calls {@link HandlerPipeline.reportRefused} when it stores one.
   * @defaultValue true
   */
  readonly reportRefusal?: boolean;
}
