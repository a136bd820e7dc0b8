// Types only: the broker's message shape and the send options are what this builds, not code it runs.
import { HarrierError } from '../errors/harrier-error.js';
import { MessageValidationError } from '../errors/message-validation-error.js';
import { DEFAULT_MAX_ENVELOPE_BYTES, encodeEnvelope, sizeIfOver } from './codec.js';
import { isMessageDefinition, type MessageDefinition } from './definition.js';
import { ENVELOPE_VERSION, type Envelope, type EnvelopeMeta } from './envelope.js';
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

/** What a {@link TraceparentProvider} is told of a message being prepared. */
export interface OutgoingTraceInfo {
  readonly id: string;
  readonly kind: MessageDefinition['kind'];
  readonly type: string;
  readonly correlationId: string;
  /** The traceparent the message would carry without a provider (its cause's, or the option). */
  readonly traceparent: string | undefined;
  /**
   * True when the message is committed later, with others (what a handler records, what an outbox
   * stores): its span marks its creation, and the commit gets a span of its own.
   */
  readonly deferred: boolean;
}

/**
 * Gives the W3C traceparent an outgoing message carries, e.g. of a producer span started in the
 * active trace context (harrier/telemetry); `undefined` keeps the traceparent it would carry anyway.
 */
export type TraceparentProvider = (message: OutgoingTraceInfo) => string | undefined;

/** A message ready for the broker, with the envelope it carries. */
export interface PreparedMessage {
  readonly envelope: Envelope;
  readonly outgoing: OutgoingMessage;
}

/** What {@link prepareEnvelope} and {@link prepareMessage} are told besides the payload and options. */
export interface PrepareContext {
  readonly now: number;
  readonly cause?: CausingMessage | undefined;
  readonly maxBytes?: number;
  readonly encode?: EnvelopeEncoder;
  /** @defaultValue none: the cause's traceparent, else `options.traceparent` */
  readonly traceparent?: TraceparentProvider | undefined;
  /** @defaultValue false (see {@link OutgoingTraceInfo.deferred}) */
  readonly deferred?: boolean;
}

/**
 * Validates a payload against its definition and builds its envelope, without encoding it: for a
 * message that never leaves the process (`execute`), where the wire text would only be thrown away.
 * `maxBytes` and `encode` of the context are not used.
 *
 * @throws MessageValidationError when the payload does not match the schema.
 * @throws HarrierError `invalid-option` for a bad id or delay.
 */
export function prepareEnvelope(
  definition: MessageDefinition,
  payload: unknown,
  options: SendOptions,
  context: PrepareContext,
): Envelope {
  const data = checkMessage(definition, payload, options);
  const id = options.id ?? uuidv7(context.now);
  const partitionKey = options.partitionKey ?? definition.partitionKeyOf(data);
  return buildEnvelope(definition, data, id, partitionKey, options, context);
}

/**
 * Checks that `definition` is one made by `defineCommand`, `defineEvent` or `defineQuery` (an untyped
 * caller may pass anything).
 * @throws HarrierError `invalid-definition` naming the fix.
 */
export function assertMessageDefinition(definition: unknown): asserts definition is MessageDefinition {
  if (!isMessageDefinition(definition)) {
    throw new HarrierError(
      'invalid-definition',
      `${String(definition)} is not a message definition: pass one made by defineCommand, defineEvent or defineQuery`,
    );
  }
}

/**
 * Everything {@link prepareEnvelope} checks before it builds the envelope, in the same order: the
 * definition, the payload against its schema, the caller's id and delay; returns the parsed payload.
 *
 * @remarks
 * With {@link buildEnvelope} it lets `execute` check a message when called and build its envelope
 * only if something reads it.
 * @throws MessageValidationError when the payload does not match the schema.
 * @throws HarrierError `invalid-definition`, or `invalid-option` for a bad id or delay.
 */
export function checkMessage(definition: MessageDefinition, payload: unknown, options: SendOptions): unknown {
  assertMessageDefinition(definition);
  const parsed = definition.schema.safeParse(payload);
  if (!parsed.success) throw new MessageValidationError(definition.type, parsed.error.issues);
  // Only a caller's id needs the check: uuidv7() makes valid ones, and the regex costs per message.
  // `null` from an untyped caller (options read from JSON) means no id, as it always has.
  const given = options.id ?? undefined;
  if (given !== undefined && !isUuidV7(given)) {
    throw new HarrierError(
      'invalid-option',
      `Message id "${given}" is not a lower-case UUIDv7: omit id to get one, or make it with uuidv7()`,
    );
  }
  const delayMs = options.delayMs ?? 0;
  if (!Number.isFinite(delayMs) || delayMs < 0) {
    throw new HarrierError('invalid-option', `delayMs is ${delayMs}: use a number of milliseconds >= 0`);
  }
  return parsed.data;
}

/**
 * The envelope of a message {@link checkMessage} accepted: `data` is its parsed payload, `id` and
 * `partitionKey` already resolved (the caller's, else a new id and the definition's key).
 */
export function buildEnvelope(
  definition: MessageDefinition,
  data: unknown,
  id: string,
  partitionKey: string | undefined,
  options: SendOptions,
  context: PrepareContext,
): Envelope {
  const cause = context.cause;
  const correlationId = cause?.correlationId ?? options.correlationId ?? id;
  const inherited = cause?.traceparent ?? options.traceparent;
  // The envelope is signed after this, so the provider's traceparent is covered by the signature.
  const traceparent =
    context.traceparent?.({
      id,
      kind: definition.kind,
      type: definition.type,
      correlationId,
      traceparent: inherited,
      deferred: context.deferred ?? false,
    }) ?? inherited;
  // Built field by field rather than with conditional spreads (one object each): the field order is
  // the wire order, and traceparentOfBody relies on traceparent coming last, after headers.
  const meta = { correlationId } as Mutable<EnvelopeMeta>;
  const causationId = cause !== undefined ? cause.messageId : options.causationId;
  if (causationId !== undefined) meta.causationId = causationId;
  meta.occurredAt = isoTime(context.now);
  if (partitionKey !== undefined) meta.partitionKey = partitionKey;
  meta.headers = { ...options.headers };
  if (traceparent !== undefined) meta.traceparent = traceparent;
  // A version-1 message carries no `ver`: its bytes are those of a message from before versions.
  return definition.version === 1
    ? { v: ENVELOPE_VERSION, id, kind: definition.kind, type: definition.type, payload: data, meta }
    : {
        v: ENVELOPE_VERSION,
        id,
        kind: definition.kind,
        type: definition.type,
        ver: definition.version,
        payload: data,
        meta,
      };
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

let lastIsoMs = Number.NaN;
let lastIso = '';

/** `new Date(ms).toISOString()`, remembered for the last ms: a burst of messages shares its clock tick. */
function isoTime(ms: number): string {
  if (ms !== lastIsoMs) {
    lastIso = new Date(ms).toISOString();
    lastIsoMs = ms;
  }
  return lastIso;
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
  context: PrepareContext,
): PreparedMessage {
  const envelope = prepareEnvelope(definition, payload, options, context);
  const { id, meta } = envelope;
  const partitionKey = meta.partitionKey;
  const traceparent = meta.traceparent;
  const delayMs = options.delayMs ?? 0;
  const body = (context.encode ?? encodeEnvelope)(envelope);
  const maxBytes = context.maxBytes ?? DEFAULT_MAX_ENVELOPE_BYTES;
  const size = sizeIfOver(body, maxBytes);
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
      // Only for telemetry's batch spans: without a provider nothing reads it (saga stores keep it).
      traceparent: context.traceparent === undefined ? undefined : traceparent,
      deliverAt: delayMs > 0 ? context.now + delayMs : undefined,
      // Only the weaker mode is spelled out: a message at the default carries no field, as before.
      dedupe: definition.dedupe === 'window' ? undefined : definition.dedupe,
    },
  };
}
