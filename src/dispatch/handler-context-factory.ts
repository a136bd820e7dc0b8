import type { Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { HandlerKind } from '../handlers/handler-metadata.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { encodeEnvelope } from '../messages/codec.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { SendOptions } from '../messages/send-options.js';
import {
  LocalHandlerContext,
  ReceivedHandlerContext,
  type HandlerContext,
  type HandlerContextEnv,
} from './handler-context.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';

/**
 * Makes the context of each handler call, with the env of its handler kind (a projection's refuses
 * `send` and `publish`).
 *
 * @remarks
 * The envs are made once, not per call: every kind that may send and publish shares one object, and
 * each kind that refuses has its own.
 */
export class HandlerContextFactory {
  readonly #o: HandlerPipelineOptions;
  readonly #clock: Clock;
  readonly #maxBytes: number;
  readonly #envs = new Map<HandlerKind, HandlerContextEnv>();
  /** The context env of every handler kind that may send and publish (see {@link HandlerContextFactory.env}). */
  readonly #plainEnv: HandlerContextEnv;

  constructor(options: HandlerPipelineOptions, clock: Clock, maxBytes: number) {
    this.#o = options;
    this.#clock = clock;
    this.#maxBytes = maxBytes;
    this.#plainEnv = this.#makeEnv(undefined);
  }

  /** The context of one call for a received message; a projection's refuses `send` and `publish`. */
  received(
    envelope: Envelope,
    attempt: number,
    entry: HandlerEntry,
    signal: AbortSignal | (() => AbortSignal),
  ): HandlerContext {
    return new ReceivedHandlerContext(
      envelope,
      attempt,
      this.#o.endpoint,
      entry.name,
      signal,
      this.env(entry.kind),
    );
  }

  /**
   * The context of one `execute` call, which builds the envelope only when something reads it.
   *
   * @throws what the definition's partition key function throws.
   */
  local(
    entry: HandlerEntry,
    definition: MessageDefinition,
    payload: unknown,
    now: number,
    options: SendOptions,
    signal: AbortSignal,
  ): LocalHandlerContext {
    return new LocalHandlerContext(
      definition,
      payload,
      now,
      options,
      this.#o.endpoint,
      entry.name,
      signal,
      this.env(entry.kind),
    );
  }

  /**
   * The context env of a handler kind: one object for every kind that may send and publish, one
   * per kind that refuses (a projection's), made once (read on every handler call).
   */
  env(kind: HandlerKind): HandlerContextEnv {
    const refuse = REFUSES_OUTGOING[kind];
    if (refuse === undefined) return this.#plainEnv;
    let env = this.#envs.get(kind);
    if (env === undefined) {
      env = this.#makeEnv(refuse);
      this.#envs.set(kind, env);
    }
    return env;
  }

  #makeEnv(refuse: HandlerContextEnv['refuse']): HandlerContextEnv {
    return {
      now: () => this.#clock.now(),
      maxBytes: this.#maxBytes,
      encode: this.#o.encode ?? encodeEnvelope,
      ...(this.#o.telemetry !== undefined ? { traceparent: this.#o.telemetry.traceparent } : {}),
      ...(refuse !== undefined ? { refuse } : {}),
    };
  }
}

/**
 * Why a projection may not send or publish: the fix is an event handler of the same event.
 *
 * @remarks
 * Projections are rebuilt by replaying the event log from offset 0, so a message sent from one would
 * be sent again on every rebuild (and on every replay of an uncommitted tail).
 */
function refuseFromProjection(
  verb: 'send' | 'publish',
  definition: MessageDefinition,
  context: HandlerContext,
): HarrierError {
  const event = context.envelope.type;
  return new HarrierError(
    'projection-publish',
    `Projection "${context.handler}" called ctx.${verb}("${definition.type}") while handling "${event}": projections are rebuilt from offset 0 of the event log, so the message would be ${verb === 'send' ? 'sent' : 'published'} again on every rebuild. ${verb === 'send' ? 'Send' : 'Publish'} it from an @EventHandler(${event.split('.').pop() ?? event}) instead (it handles each event once)`,
  );
}

/** Handler kinds whose context refuses `send` and `publish`, with the error it throws. */
const REFUSES_OUTGOING: Partial<Record<HandlerKind, HandlerContextEnv['refuse']>> = {
  projection: refuseFromProjection,
};
