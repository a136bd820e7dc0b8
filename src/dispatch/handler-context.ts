import type { MessageContext, SendOptions } from '../handlers/message-context.js';
import type {
  CommandDefinition,
  EventDefinition,
  InputOf,
  MessageDefinition,
} from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import { prepareMessage, type EnvelopeEncoder, type PreparedMessage } from './outgoing.js';

/**
 * The {@link MessageContext} of one handler call, with the unit of work it records into.
 */
export class HandlerContext<P = unknown> implements MessageContext<P> {
  /** What the handler recorded, in order; published only if it succeeds. */
  readonly recorded: PreparedMessage[] = [];
  readonly messageId: string;
  readonly correlationId: string;
  readonly causationId: string | undefined;
  readonly headers: Readonly<Record<string, string>>;

  constructor(
    readonly envelope: Envelope<P>,
    readonly attempt: number,
    readonly endpoint: string,
    readonly handler: string,
    readonly signal: AbortSignal,
    private readonly env: {
      readonly now: () => number;
      readonly maxBytes: number;
      readonly encode: EnvelopeEncoder;
    },
  ) {
    this.messageId = envelope.id;
    this.correlationId = envelope.meta.correlationId;
    this.causationId = envelope.meta.causationId;
    this.headers = envelope.meta.headers;
  }

  send<D extends CommandDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    return this.#record(definition, payload, options);
  }

  publish<D extends EventDefinition>(definition: D, payload: InputOf<D>, options: SendOptions = {}): string {
    return this.#record(definition, payload, options);
  }

  #record(definition: MessageDefinition, payload: unknown, options: SendOptions): string {
    const prepared = prepareMessage(definition, payload, options, {
      now: this.env.now(),
      cause: {
        correlationId: this.correlationId,
        messageId: this.messageId,
        traceparent: this.envelope.meta.traceparent,
      },
      maxBytes: this.env.maxBytes,
      encode: this.env.encode,
    });
    this.recorded.push(prepared);
    return prepared.envelope.id;
  }
}
