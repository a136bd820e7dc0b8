import type { CommandDefinition, EventDefinition, InputOf } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { SendOptions } from '../messages/send-options.js';

export type { SendOptions };

/**
 * What a handler knows about the message it handles, and how it emits further messages.
 *
 * @remarks
 * `send` and `publish` are the unit of work: what they record is published as one batch only after
 * the handler succeeds, and discarded if it throws. Every recorded message carries this message's
 * correlation id, and this message's id as its causation id.
 */
export interface MessageContext<P = unknown> {
  readonly envelope: Envelope<P>;
  readonly messageId: string;
  readonly correlationId: string;
  readonly causationId: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  /** 1-based attempt number (always 1 for `execute`). */
  readonly attempt: number;
  readonly endpoint: string;
  /** The handler's name. */
  readonly handler: string;
  /** Aborted when the bus stops and the grace period runs out. */
  readonly signal: AbortSignal;
  /** Records a command to send once the handler succeeds; returns its id. */
  send<D extends CommandDefinition>(definition: D, payload: InputOf<D>, options?: SendOptions): string;
  /** Records an event to publish once the handler succeeds; returns its id. */
  publish<D extends EventDefinition>(definition: D, payload: InputOf<D>, options?: SendOptions): string;
}
