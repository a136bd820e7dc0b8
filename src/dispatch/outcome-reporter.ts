import { toErrorInfo } from '../broker/message-broker.js';
import type { Clock } from '../clock/clock.js';
import type { DeadLetterRecord } from '../dead-letters/dead-letter-store.js';
import type { Logger } from '../logging/logger.js';
import { runObserved } from '../logging/run-observed.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import type { ProcessEnd, ProcessInfo, ProcessObservation } from './message-telemetry.js';
import type { OutageListener, PausedEvent, ResumedEvent } from './outage-breaker.js';
import {
  ABANDONED,
  type DeadLetterOutcome,
  type HandledOutcome,
  type PipelineOutcome,
  type RetryOutcome,
} from './pipeline-outcome.js';

/**
 * Tells the lifecycle hooks and telemetry how handler runs went; what a hook or telemetry throws is
 * logged and never changes an outcome.
 *
 * @remarks
 * Outcomes are reported once the caller settled them (acked, nacked, stored, completed in a lane),
 * so whoever hears "handled" may rely on it; telemetry's observation of a call wraps the call itself.
 */
export class OutcomeReporter {
  readonly #o: HandlerPipelineOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;

  constructor(options: HandlerPipelineOptions, clock: Clock, logger: Logger) {
    this.#o = options;
    this.#clock = clock;
    this.#logger = logger;
  }

  /** Reports a handled outcome once it is settled (acked, or completed in its lane). */
  handled(outcome: HandledOutcome): void {
    this.#hook('onHandled', () =>
      this.#o.hooks?.onHandled?.({
        envelope: outcome.envelope,
        handler: outcome.handler,
        attempt: outcome.attempt,
        durationMs: this.#clock.now() - outcome.startedAt,
      }),
    );
  }

  /** Reports a retry once it is settled (nacked with its time, or waiting in its lane). */
  retrying(outcome: RetryOutcome): void {
    this.#hook('onRetrying', () =>
      this.#o.hooks?.onRetrying?.({
        envelope: outcome.envelope,
        handler: outcome.handler,
        attempt: outcome.attempt,
        error: outcome.error,
        retryAt: outcome.retryAt,
      }),
    );
  }

  /** Reports a dead letter once it is stored. */
  deadLettered(record: DeadLetterRecord, error: unknown): void {
    this.#hook('onDeadLettered', () => this.#o.hooks?.onDeadLettered?.({ record, error }));
  }

  /** Tells the hooks and telemetry of pauses and resumptions (what an `OutageBreaker` reports). */
  readonly outageListener: OutageListener = {
    paused: (event: PausedEvent): void => {
      this.#hook('onPaused', () => this.#o.hooks?.onPaused?.(event));
      this.guard('pauseChanged', () => this.#o.telemetry?.pauseChanged?.(event, true));
    },
    resumed: (event: ResumedEvent): void => {
      this.#hook('onResumed', () => this.#o.hooks?.onResumed?.(event));
      this.guard('pauseChanged', () => this.#o.telemetry?.pauseChanged?.(event, false));
    },
  };

  /** Tells telemetry of a message refused before any handler ran, once it is dead-lettered. */
  refused(outcome: DeadLetterOutcome, attempt: number): void {
    const telemetry = this.#o.telemetry;
    if (telemetry?.refused === undefined) return;
    this.guard('refused', () =>
      telemetry.refused?.({
        envelope: outcome.envelope,
        handler: outcome.handler,
        endpoint: this.#o.endpoint,
        attempt,
        reason: outcome.reason,
        error: outcome.error,
      }),
    );
  }

  /**
   * Telemetry's observation of one handler call, or undefined when there is no telemetry or its
   * `process` threw (the call then runs unobserved).
   */
  observe(info: ProcessInfo): ProcessObservation | undefined {
    const telemetry = this.#o.telemetry;
    if (telemetry === undefined) return undefined;
    return this.guard('process', () => telemetry.process(info));
  }

  /**
   * Runs a handler call inside telemetry's observation of it; a failing telemetry hook is logged and
   * never changes the outcome (the call runs once either way).
   */
  async observed<T>(
    observation: ProcessObservation,
    call: () => Promise<T>,
    endOf: (result: T) => ProcessEnd,
  ): Promise<T> {
    let result: T;
    try {
      result = await runObserved(
        (run) => observation.within(run),
        call,
        (error) => {
          this.#telemetryFailed('within', error);
        },
      );
    } catch (error) {
      // execute() failed (or, for a delivery, a bug: the attempt settles all a handler does).
      this.guard('end', () => {
        observation.end({ kind: 'failed', error });
      });
      throw error;
    }
    this.guard('end', () => {
      observation.end(endOf(result));
    });
    return result;
  }

  /** Calls a telemetry hook; logs what it throws, and returns undefined then. */
  guard<T>(hook: string, call: () => T): T | undefined {
    try {
      return call();
    } catch (error) {
      this.#telemetryFailed(hook, error);
      return undefined;
    }
  }

  #telemetryFailed(hook: string, error: unknown): void {
    this.#logger.error(`Telemetry ${hook} threw; ignored`, { error: toErrorInfo(error) });
  }

  #hook(name: string, call: () => unknown): void {
    let result: unknown;
    try {
      result = call();
    } catch (error) {
      this.#logger.error(`Hook ${name} threw; ignored`, { error: toErrorInfo(error) });
      return;
    }
    // An async hook is allowed by the type (a promise is assignable to void): its rejection is
    // logged the same way, never left to become an unhandled rejection that ends the process.
    if (result instanceof Promise) {
      result.catch((error: unknown) => {
        try {
          this.#logger.error(`Hook ${name} rejected; ignored`, { error: toErrorInfo(error) });
        } catch {
          // A logger that throws here would leave the rejection unhandled after all.
        }
      });
    }
  }
}

/** What telemetry is told of a handled call: one object for all of them. */
export const HANDLED_END: ProcessEnd = { kind: 'handled' };

/** What telemetry is told of an outcome decided at `now`. */
export function processEnd(outcome: PipelineOutcome, now: number): ProcessEnd {
  switch (outcome.kind) {
    case 'handled':
      return HANDLED_END;
    case 'retry':
      return {
        kind: 'retry',
        error: outcome.error,
        retryAt: outcome.retryAt,
        delayMs: Math.max(0, outcome.retryAt - now),
      };
    case 'dead-letter':
      return { kind: 'dead-letter', reason: outcome.reason, error: outcome.thrown };
    case 'paused':
      return { kind: 'paused', error: outcome.error };
    case 'abandoned':
      return ABANDONED;
  }
}
