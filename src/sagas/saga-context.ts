import type { HandlerContextEnv } from '../dispatch/handler-context.js';
import { ReceivedHandlerContext } from '../dispatch/handler-context.js';
import type { MessageContext } from '../handlers/message-context.js';
import type { CommandDefinition, EventDefinition, InputOf } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { SagaTimeoutRecord } from './saga-store.js';

/** Header naming the saga a timeout message is for. */
export const SAGA_NAME_HEADER = 'harrier-saga';
/** Header carrying the saga instance id of a timeout message. */
export const SAGA_ID_HEADER = 'harrier-saga-id';

/**
 * The context of one saga step: the message context, the instance's state and what a step may do
 * to its instance.
 *
 * @remarks
 * `send` and `publish` record into the unit of work as in any handler: the messages are published
 * only after the state is saved, with ids derived from the saga name, the saga id, the handled
 * message id and their position, so a redelivered step publishes the same ids again.
 */
export interface SagaContext<S = unknown, P = unknown> extends MessageContext<P> {
  /** The instance id (what the correlation returned). */
  readonly sagaId: string;
  /** The saga's name. */
  readonly saga: string;
  /** True when this step creates the instance. */
  readonly isNew: boolean;
  /**
   * The instance's state: a draft to change in place; saved (parsed with the saga's schema) when
   * the step returns.
   */
  state: S;
  /** Replaces the whole state. */
  setState(next: S): void;
  /**
   * Delivers `payload` as `definition` to this instance after `delayMs`, unless the instance has
   * completed by then; returns the timeout id.
   *
   * @remarks
   * The saga must handle `definition` with `@Handles(definition)`. The pending timeout is saved with
   * the state and removed when it runs, so it runs once; a completed instance drops it.
   */
  requestTimeout<D extends EventDefinition | CommandDefinition>(
    definition: D,
    delayMs: number,
    payload: InputOf<D>,
  ): string;
  /** Completes the instance when the step returns: it handles no further messages. */
  complete(): void;
}

/**
 * The {@link SagaContext} of one saga step (one try of it); the runner makes it before it reads the
 * instance (a unit of work knows its transaction by it), then {@link SagaStepContext.load}s it.
 */
export class SagaStepContext<S = unknown, P = unknown>
  extends ReceivedHandlerContext<P>
  implements SagaContext<S, P>
{
  state: S;
  completed = false;
  readonly timeouts: SagaTimeoutRecord[] = [];
  #isNew = true;

  constructor(
    envelope: Envelope<P>,
    attempt: number,
    endpoint: string,
    readonly saga: string,
    signal: AbortSignal | (() => AbortSignal),
    env: HandlerContextEnv,
    readonly sagaId: string,
    isNew = true,
    state?: S,
    timeouts: readonly SagaTimeoutRecord[] = [],
  ) {
    super(envelope, attempt, endpoint, saga, signal, env);
    this.#isNew = isNew;
    this.state = state as S;
    this.timeouts.push(...timeouts);
    this.#now = env.now;
  }

  readonly #now: () => number;

  get isNew(): boolean {
    return this.#isNew;
  }

  /** Gives the step its instance as read: whether it is new, its state and its pending timeouts. */
  load(isNew: boolean, state: S, timeouts: readonly SagaTimeoutRecord[]): void {
    this.#isNew = isNew;
    this.state = state;
    this.timeouts.splice(0, this.timeouts.length, ...timeouts);
  }

  setState(next: S): void {
    this.state = next;
  }

  requestTimeout<D extends EventDefinition | CommandDefinition>(
    definition: D,
    delayMs: number,
    payload: InputOf<D>,
  ): string {
    const id = this.record(definition, payload, {
      delayMs,
      headers: { [SAGA_NAME_HEADER]: this.saga, [SAGA_ID_HEADER]: this.sagaId },
    });
    this.timeouts.push({ id, type: definition.type, dueAt: this.#now() + delayMs });
    return id;
  }

  complete(): void {
    this.completed = true;
  }

  protected override idSeed(): string {
    return `${this.messageId}\u0000${this.saga}\u0000${this.sagaId}`;
  }
}
