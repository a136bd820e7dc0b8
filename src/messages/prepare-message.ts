// Types only: the broker's message shape and the send options are what this builds, not code it runs.
import { HarrierError } from '../errors/harrier-error.js';
import { MessageValidationError } from '../errors/message-validation-error.js';
import { DEFAULT_MAX_ENVELOPE_BYTES, encodeEnvelope, encodedSize } from './codec.js';
import { isMessageDefinition, type MessageDefinition } from './definition.js';
import { ENVELOPE_VERSION, type Envelope } from './envelope.js';
import type { OutgoingMessage } from './outgoing-message.js';
import type { SendOptions } from './send-options.js';
import { isUuidV7, uuidv7 } from './uuid-v7.js';

/** The message a new one is caused by: its correlation and causation flow on. */
export interface CausingMessage {
  readonly correlationId: string;
  readonly messageId: string;
  readonly traceparent?: string | undefined;
}

/** Turns an envelope into its wire text; the signing layer hooks in here. */
export type EnvelopeEncoder = (envelope: Envelope) => string;

/** A message ready for the broker, with the envelope it carries. */
export interface PreparedMessage {
  readonly envelope: Envelope;
  readonly outgoing: OutgoingMessage;
}

/**
 * Validates a payload against its definition and builds the envelope and broker message.
 *
 * @throws MessageValidationError when the payload does not match the schema.
 * @throws HarrierError `too-large` above `maxBytes`, `invalid-option` for a bad id or delay.
 */
export function prepareMessage(
  definition: MessageDefinition,
  payload: unknown,
  options: SendOptions,
  context: {
    readonly now: number;
    readonly cause?: CausingMessage | undefined;
    readonly maxBytes?: number;
    readonly encode?: EnvelopeEncoder;
  },
): PreparedMessage {
  if (!isMessageDefinition(definition)) {
    throw new HarrierError(
      'invalid-definition',
      `${String(definition)} is not a message definition: pass one made by defineCommand, defineEvent or defineQuery`,
    );
  }
  const parsed = definition.schema.safeParse(payload);
  if (!parsed.success) throw new MessageValidationError(definition.type, parsed.error.issues);
  const id = options.id ?? uuidv7(context.now);
  if (!isUuidV7(id)) {
    throw new HarrierError(
      'invalid-option',
      `Message id "${id}" is not a lower-case UUIDv7: omit id to get one, or make it with uuidv7()`,
    );
  }
  const delayMs = options.delayMs ?? 0;
  if (!Number.isFinite(delayMs) || delayMs < 0) {
    throw new HarrierError('invalid-option', `delayMs is ${delayMs}: use a number of milliseconds >= 0`);
  }
  const partitionKey = options.partitionKey ?? definition.partitionKeyOf(parsed.data);
  const cause = context.cause;
  const traceparent = cause?.traceparent ?? options.traceparent;
  const envelope: Envelope = {
    v: ENVELOPE_VERSION,
    id,
    kind: definition.kind,
    type: definition.type,
    payload: parsed.data,
    meta: {
      correlationId: cause?.correlationId ?? options.correlationId ?? id,
      ...(cause !== undefined
        ? { causationId: cause.messageId }
        : options.causationId !== undefined
          ? { causationId: options.causationId }
          : {}),
      occurredAt: new Date(context.now).toISOString(),
      ...(partitionKey !== undefined ? { partitionKey } : {}),
      headers: { ...options.headers },
      ...(traceparent !== undefined ? { traceparent } : {}),
    },
  };
  const body = (context.encode ?? encodeEnvelope)(envelope);
  const maxBytes = context.maxBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
  const size = encodedSize(body);
  if (size > maxBytes) {
    throw new HarrierError(
      'too-large',
      `Message "${definition.type}" encodes to ${size} bytes, above the limit of ${maxBytes}: send a reference to the data instead, or raise maxEnvelopeBytes`,
    );
  }
  return {
    envelope,
    outgoing: {
      id,
      kind: definition.kind,
      type: definition.type,
      body,
      partitionKey,
      ordered: definition.ordered,
      topic: definition.topic,
      deliverAt: delayMs > 0 ? context.now + delayMs : undefined,
    },
  };
}
