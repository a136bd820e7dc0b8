import type { Delivery, DeliveryFacts, PendingDeadLetter } from '../broker/message-broker.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { PipelineInput } from './pipeline-input.js';

/**
 * A delivery being processed, and the pipeline's input for it: one object per delivery where an
 * input object and its `abandoned` closure were made beside it.
 */
export class InFlight implements PipelineInput {
  readonly body: string;
  readonly facts: DeliveryFacts;
  /** Made only when the handler reads its signal (see {@link flightSignal}). */
  abort: AbortController | undefined = undefined;
  /** Why the delivery was aborted, once it was. */
  abortReason: unknown = undefined;
  /** Why the handler's signal was aborted when its call ran past its time-out. */
  timeoutReason: HarrierError | undefined = undefined;
  released = false;
  /** Let through as the probe of a paused endpoint: its end, however it ends, ends the probe. */
  probe = false;
  /** Set once a settle step on the broker (ack, nack, release) has begun for this delivery. */
  settling = false;
  /** A dead-lettering decided and not yet recorded: a stop sends it back with it, never plain. */
  decided: PendingDeadLetter | undefined = undefined;
  /** The handler's abort signal, made on first read (a function the handler context calls). */
  readonly signal = (): AbortSignal =>
    this.timeoutReason === undefined ? flightSignal(this) : AbortSignal.abort(this.timeoutReason);

  constructor(readonly delivery: Delivery) {
    this.body = delivery.body;
    this.facts = delivery.facts;
  }

  /**
   * Marks the delivery released by a stop and aborts its handler's signal (made now or later) with
   * HarrierError `stopping`; what the handler does from now on is not committed.
   */
  release(): void {
    this.released = true;
    this.abortReason = new HarrierError('stopping', 'The bus is stopping and the grace period ran out');
    this.abort?.abort(this.abortReason);
  }

  /** True once a stop released the delivery (see {@link PipelineInput.abandoned}). */
  abandoned(): boolean {
    return this.released;
  }

  /** Aborts the handler's signal: it ran past its time-out (see {@link PipelineInput.timedOut}). */
  timedOut(reason: HarrierError): void {
    this.timeoutReason = reason;
    const abort = this.abort;
    if (abort === undefined) return;
    // The handler's signal ends here; the settle steps after it (which a stop cuts short through
    // flightSignal) get a controller of their own, or a time-out would cut their pauses short.
    this.abort = undefined;
    abort.abort(reason);
  }
}

/** The handler's abort signal of a delivery, made on first read. */
export function flightSignal(flight: InFlight): AbortSignal {
  if (flight.abort === undefined) {
    flight.abort = new AbortController();
    if (flight.released) flight.abort.abort(flight.abortReason);
  }
  return flight.abort.signal;
}
