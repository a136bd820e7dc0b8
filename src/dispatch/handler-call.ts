import { toErrorInfo } from '../broker/message-broker.js';
import type { Clock } from '../clock/clock.js';
import { Timeouts, type Timeout } from '../clock/timeouts.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { DEFAULT_HANDLER_TIMEOUT_MS, checkTimeoutMs } from '../handlers/handler-timeout.js';
import type { Logger } from '../logging/logger.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { HandlerContext } from './handler-context.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import { composeMiddleware } from './middleware.js';

/**
 * One call of a handler: its middleware around it, and its time-out once it returned a promise.
 *
 * @remarks
 * What the handler returns is handed on as it is (a plain value stays one): the attempts decide
 * whether anything has to be waited for, so a handler that returns at once costs no promise here.
 */
export class HandlerCall {
  readonly #o: HandlerPipelineOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  /** The time-out of a handler whose decorator sets none. */
  readonly #timeoutMs: number;
  /** Bounds every handler call that returned a promise, with one clock timer for all of them. */
  readonly #timeouts: Timeouts;

  /**
   * @throws HarrierError `invalid-option` for a bad `handlerTimeoutMs` or a handler's `timeoutMs`.
   */
  constructor(options: HandlerPipelineOptions, clock: Clock, logger: Logger) {
    this.#o = options;
    this.#clock = clock;
    this.#logger = logger;
    this.#timeoutMs = options.handlerTimeoutMs ?? DEFAULT_HANDLER_TIMEOUT_MS;
    checkTimeoutMs(this.#timeoutMs, 'handlerTimeoutMs');
    // The decorators check theirs; metadata set another way is checked here, before any call.
    for (const entry of options.registry.entries()) {
      if (entry.options.timeoutMs !== undefined) {
        checkTimeoutMs(entry.options.timeoutMs, `timeoutMs of handler "${entry.name}"`);
      }
    }
    this.#timeouts = new Timeouts(clock);
  }

  /**
   * Middleware and the handler: what the handler returned (a plain value, or a promise), or a
   * promise through the middleware. May throw (the callers turn it into a rejection).
   */
  invoke(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: HandlerContext,
    type: string,
    payload: unknown,
    inProcess: boolean,
  ): unknown {
    const method = entry.methods.get(type) ?? 'handle';
    const middleware = this.#o.middleware;
    if (middleware === undefined || middleware.length === 0) {
      return this.#o.invoke(entry, method, payload, context);
    }
    return composeMiddleware(
      middleware,
      { definition, handler: entry.name, handlerKind: entry.kind, message: context, inProcess },
      () => promiseOf(() => this.#o.invoke(entry, method, payload, context)),
      (m, error) => {
        this.#logger.error('Middleware after() threw; ignored', {
          middleware: m.name ?? 'middleware',
          error: toErrorInfo(error),
        });
      },
    );
  }

  /**
   * Middleware and the handler as a promise, bounded by the handler's time-out when it returns one
   * (see {@link HandlerCall.bounded}). Not async, so the invoker's promise is handed on as it
   * is within the bound; what throws here still reaches the caller as a rejection.
   */
  invokeBounded(
    entry: HandlerEntry,
    definition: MessageDefinition,
    context: HandlerContext,
    type: string,
    payload: unknown,
    inProcess: boolean,
    call: CallTarget,
  ): Promise<unknown> {
    let result: unknown;
    try {
      result = this.invoke(entry, definition, context, type, payload, inProcess);
      if (!isThenable(result)) return Promise.resolve(result);
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    return this.bounded(result, entry, context, call);
  }

  /**
   * What a handler call returned, bounded by its time-out (`timeoutMs` of its decorator, else
   * `handlerTimeoutMs`): settles as `result` does, or, once the time-out runs out first, aborts the
   * call's signal and rejects with HarrierError `handler-timeout`. What the call returns or throws
   * after that is logged and ignored.
   *
   * @remarks
   * JavaScript cannot stop the call: it goes on until it settles (or for ever), but nothing waits
   * for it, so its delivery's slot is free and its attempt counts. One clock timer serves every
   * pending call ({@link Timeouts}); a call that returned a plain value never gets here.
   */
  bounded(
    result: PromiseLike<unknown>,
    entry: HandlerEntry,
    context: HandlerContext,
    call: CallTarget,
  ): Promise<unknown> {
    const ms = entry.options.timeoutMs ?? this.#timeoutMs;
    return new Promise((resolve, reject) => {
      let timedOut = false;
      const timeout = this.#timeouts.set(ms, () => {
        timedOut = true;
        const error = timeoutError(entry.name, ms, context);
        try {
          call.timedOut?.(error);
        } catch {
          // Only our own signal code runs here (abort listeners report their errors on their own).
        }
        reject(error);
      });
      try {
        result.then(
          (value) => {
            if (timedOut) {
              this.#late(entry, context, timeout, 'returned');
              return;
            }
            this.#timeouts.clear(timeout);
            call.endCall?.();
            resolve(value);
          },
          (error: unknown) => {
            if (timedOut) {
              this.#late(entry, context, timeout, 'threw', error);
              return;
            }
            this.#timeouts.clear(timeout);
            call.endCall?.();
            // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as thrown
            reject(error);
          },
        );
      } catch (error) {
        // A thenable whose `then` throws: the handler's failure, as `await` would reject with it.
        this.#timeouts.clear(timeout);
        call.endCall?.();
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passed on as thrown
        reject(error);
      }
    });
  }

  /** Logs a handler call that settled after its time-out: what it returned or threw is ignored. */
  #late(
    entry: HandlerEntry,
    context: HandlerContext,
    timeout: Timeout,
    outcome: 'returned' | 'threw',
    error?: unknown,
  ): void {
    try {
      this.#logger.warn(`A handler ${outcome} after its time-out; ignored`, {
        handler: entry.name,
        messageId: context.messageId,
        lateMs: this.#clock.now() - timeout.at,
        ...(outcome === 'threw' ? { error: toErrorInfo(error) } : {}),
      });
    } catch {
      // A logger that throws here would make an unhandled rejection of a call nobody waits for.
    }
  }
}

/**
 * What a handler call's time-out aborts (the call's signal), and what is told when the call is over
 * (a signal that followed a shared one stops following it).
 */
export interface CallTarget {
  timedOut?(reason: HarrierError): void;
  endCall?(): void;
}

/** The error a handler call that ran past its time-out of `ms` fails with (its signal's reason). */
function timeoutError(handler: string, ms: number, context: HandlerContext): HarrierError {
  let message: string;
  try {
    message = ` on "${context.envelope.type}" (message ${context.messageId})`;
  } catch {
    // An execute context builds its envelope on first read; never let that stop the time-out.
    message = '';
  }
  return new HarrierError(
    'handler-timeout',
    `Handler "${handler}" ran past its time-out of ${ms} ms${message}: its signal is aborted and what it does from now on is ignored. Make it finish sooner and pass ctx.signal to its I/O, or raise timeoutMs in its decorator's options (or handlerTimeoutMs of createBus)`,
  );
}

/** True for a promise or any other thenable (what `await` would wait for). */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value instanceof Promise ||
    (((typeof value === 'object' && value !== null) || typeof value === 'function') &&
      typeof (value as { then?: unknown }).then === 'function')
  );
}

/** What `call` returns, as a promise: a plain value resolved, a throw rejected. */
function promiseOf(call: () => unknown): Promise<unknown> {
  try {
    return Promise.resolve(call());
  } catch (error) {
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    return Promise.reject(error);
  }
}
