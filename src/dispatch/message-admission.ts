import { toErrorInfo, type DeliveryFacts, type ErrorInfo } from '../broker/message-broker.js';
import type { DeadLetterReason } from '../dead-letters/dead-letter-store.js';
import type { HandlerEntry } from '../handlers/handler-registry.js';
import { decodeEnvelope, type DecodeOptions } from '../messages/codec.js';
import type { MessageDefinition } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';
import type { HandlerPipelineOptions } from './handler-pipeline-options.js';
import type { OutcomeReporter } from './outcome-reporter.js';
import type { PipelineInput } from './pipeline-input.js';
import { refused, type DeadLetterOutcome, type RetryOutcome } from './pipeline-outcome.js';
import { resolveRetryPolicy, type RetryPolicy } from './retry-policy.js';
import { HarrierError } from '../errors/harrier-error.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { versionWaitRetryAt } from './version-wait.js';

/** The error code of a waiting message (and of its dead letter, once it waited too long). */
const VERSION_UNSUPPORTED = 'version-unsupported';

/** See {@link HandlerPipelineOptions.crashLimit}. */
const DEFAULT_CRASH_LIMIT = 3;

/**
 * Decides whether a received message gets a handler attempt: decode (size, JSON, schemas), signature,
 * route to its handler, and the attempt limit of its retry policy; hands an admitted message on.
 *
 * @remarks
 * A refused message gets its dead-letter outcome here, before any handler ran. An admitted one is
 * handed to `admitted` with what admission found, as arguments rather than an object made per
 * message.
 */
export class MessageAdmission<R> {
  readonly #o: HandlerPipelineOptions;
  readonly #reporter: OutcomeReporter;
  readonly #admitted: AdmittedMessage<R>;
  readonly #policies = new WeakMap<HandlerEntry, Map<string, RetryPolicy>>();
  /** The lookup and options of every decode, made once rather than per delivery. */
  readonly #definitionOf: (type: string) => MessageDefinition | undefined;
  readonly #decodeOptions: DecodeOptions;
  readonly #crashLimit: number;
  readonly #clock: Clock;
  readonly #logger: Logger;

  /**
   * @param admitted - what runs an admitted message (the handler attempt); its result is `admit`'s.
   * @throws HarrierError `invalid-option` for a bad `retry` or `crashLimit`.
   */
  constructor(
    options: HandlerPipelineOptions,
    maxBytes: number,
    reporter: OutcomeReporter,
    admitted: AdmittedMessage<R>,
  ) {
    this.#o = options;
    this.#reporter = reporter;
    this.#admitted = admitted;
    const registry = options.registry;
    this.#definitionOf = (type) => registry.definition(type);
    this.#decodeOptions = { maxBytes };
    this.#crashLimit = options.crashLimit ?? DEFAULT_CRASH_LIMIT;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    if (!Number.isSafeInteger(this.#crashLimit) || this.#crashLimit < 1) {
      throw new HarrierError(
        'invalid-option',
        `crashLimit is ${String(this.#crashLimit)}: use a whole number of at least 1, e.g. 3 (the default), the times a message may end its worker before it is dead-lettered as worker-crashed`,
      );
    }
    // The endpoint's default policy is checked now, not by the first message that falls back to it.
    resolveRetryPolicy(options.retry);
  }

  /**
   * Admits one received message and returns what `admitted` returns for it, or refuses it: its
   * dead-letter outcome, told to telemetry unless the input says the caller will.
   */
  admit(input: PipelineInput): R | DeadLetterOutcome | RetryOutcome {
    const { facts } = input;
    const registry = this.#o.registry;
    const decoded = decodeEnvelope(input.body, this.#definitionOf, this.#decodeOptions);
    if (!decoded.ok) {
      if (decoded.reason === 'version-unsupported' && decoded.envelope && decoded.definition) {
        return this.#tooNew(input, decoded.envelope, decoded.definition, decoded.message);
      }
      const type = decoded.envelope?.type;
      return this.#refuse(
        input,
        input.handler?.name ??
          facts.handler ??
          (type === undefined ? undefined : registry.singleHandler(type)?.name),
        decoded.reason,
        { name: 'MessageDecodeError', message: decoded.message, code: decoded.reason },
        type === undefined ? false : (registry.definition(type)?.ordered ?? false),
        decoded.envelope,
      );
    }
    const { envelope, definition } = decoded;
    const refusal = this.#verify(input.body, envelope);
    if (refusal !== undefined) {
      return this.#refuse(
        input,
        input.handler?.name ?? facts.handler ?? registry.singleHandler(envelope.type)?.name,
        'signature-invalid',
        { name: 'SignatureError', message: refusal, code: 'signature-invalid' },
        definition.ordered,
        envelope,
      );
    }
    const entry = this.#route(envelope, facts, input.handler);
    if (entry === undefined) {
      const subscription = input.handler?.name ?? facts.handler;
      return this.#refuse(
        input,
        subscription,
        'no-handler',
        {
          name: 'HandlerNotFoundError',
          message: `No handler for ${envelope.kind} "${envelope.type}"${subscription !== undefined ? ` in subscription "${subscription}"` : ''} on endpoint "${this.#o.endpoint}"`,
          code: 'no-handler',
        },
        definition.ordered,
        envelope,
      );
    }
    const crashes = facts.unsettledEnds ?? 0;
    if (crashes >= this.#crashLimit) {
      // The message ended its workers crashLimit times (each crash counted by the broker): no more.
      return this.#refuse(
        input,
        entry.name,
        'worker-crashed',
        {
          name: 'WorkerCrashedError',
          message: `Delivered ${crashes} times to workers that stopped before settling it (crashed, or lost their hold): crashLimit is ${this.#crashLimit}; replay it once the handler no longer crashes on it`,
          code: 'worker-crashed',
        },
        definition.ordered,
        envelope,
      );
    }
    const policy = this.#policy(entry, definition);
    if (facts.attempt > policy.attempts) {
      // Only a worker that died mid-handler gets here: the last attempt allowed ended unsettled (the
      // pipeline dead-letters a failed last attempt itself), so the crash is what ended the message.
      const last = facts.history[facts.history.length - 1]?.error;
      return this.#refuse(
        input,
        entry.name,
        'worker-crashed',
        {
          name: 'WorkerCrashedError',
          message: `Attempt ${facts.attempt} of at most ${policy.attempts}: the worker handling the last attempt stopped before settling it${last !== undefined ? `; the last failure before it: ${last.name}: ${last.message}` : ''}`,
          code: 'worker-crashed',
        },
        definition.ordered,
        envelope,
      );
    }
    return this.#admitted(entry, definition, envelope, policy, input);
  }

  /**
   * Why the envelope's signature is refused, or undefined when it passes (or nothing verifies). A
   * verifier that throws refuses the message with what it threw: the message is dead-lettered as
   * `signature-invalid`, where it can be replayed once the verifier works, instead of leaving the
   * delivery unsettled.
   */
  #verify(body: string, envelope: Envelope): string | undefined {
    const verify = this.#o.verify;
    if (verify === undefined) return undefined;
    try {
      return verify(body, envelope);
    } catch (error) {
      return `the signature could not be checked: the verifier threw ${toErrorInfo(error).message}`;
    }
  }

  /**
   * A message written with a newer version of its definition than this process knows (a rolling
   * deploy): given back, spending no attempt, with a delay growing with its age, for a worker that
   * knows it, or dead-lettered as
   * `version-unsupported` once it is 24 hours old (`VERSION_WAIT_MS`).
   */
  #tooNew(
    input: PipelineInput,
    envelope: Envelope,
    definition: MessageDefinition,
    message: string,
  ): DeadLetterOutcome | RetryOutcome {
    const { facts } = input;
    const given = input.handler?.name ?? facts.handler ?? this.#o.registry.singleHandler(envelope.type)?.name;
    const refusal = this.#verify(input.body, envelope);
    if (refusal !== undefined) {
      const error = { name: 'SignatureError', message: refusal, code: 'signature-invalid' };
      return this.#refuse(input, given, 'signature-invalid', error, definition.ordered, envelope);
    }
    const error = { name: 'MessageVersionError', message, code: VERSION_UNSUPPORTED };
    const now = this.#clock.now();
    const age = now - Date.parse(envelope.meta.occurredAt);
    const retryAt = versionWaitRetryAt(age, now);
    if (retryAt === undefined) {
      const waited = {
        ...error,
        message: `${message}; it waited ${Math.round(age / 3_600_000)} hours for such a worker: replay it once one runs`,
      };
      return this.#refuse(input, given, VERSION_UNSUPPORTED, waited, definition.ordered, envelope);
    }
    this.#logger.warn(
      'Message is newer than this code; it goes back to wait for a worker that knows its version',
      {
        endpoint: this.#o.endpoint,
        messageId: envelope.id,
        type: envelope.type,
        version: envelope.ver ?? 1,
        knownVersion: definition.version,
        attempt: facts.attempt,
        retryAt,
      },
    );
    return {
      kind: 'retry',
      envelope,
      handler: given ?? '',
      attempt: facts.attempt,
      retryAt,
      error: new HarrierError(VERSION_UNSUPPORTED, message),
      errorInfo: error,
      uncounted: true,
    };
  }

  /** Refuses a message before any handler ran, and tells telemetry unless the caller will. */
  #refuse(
    input: PipelineInput,
    handler: string | undefined,
    reason: DeadLetterReason,
    error: ErrorInfo,
    ordered: boolean,
    envelope: Envelope | undefined,
  ): DeadLetterOutcome {
    const outcome = refused(handler, reason, error, ordered, envelope);
    if (input.reportRefusal !== false) this.#reporter.refused(outcome, input.facts.attempt);
    return outcome;
  }

  /**
   * The handler a message goes to: the one the caller gave, the subscription an event's delivery
   * names (each subscription gets its own copy), or a command's one handler.
   */
  #route(
    envelope: Envelope,
    facts: DeliveryFacts,
    given: HandlerEntry | undefined,
  ): HandlerEntry | undefined {
    if (given !== undefined) return given.methods.has(envelope.type) ? given : undefined;
    if (envelope.kind === 'event') {
      if (facts.handler === undefined) return undefined;
      const entry = this.#o.registry.subscription(facts.handler);
      return entry?.methods.has(envelope.type) === true ? entry : undefined;
    }
    if (envelope.kind === 'command') {
      const entry = this.#o.registry.singleHandler(envelope.type);
      return entry?.kind === 'command' || entry?.kind === 'saga' ? entry : undefined;
    }
    return undefined;
  }

  /** The retry policy of a handler for a definition, resolved once. */
  #policy(entry: HandlerEntry, definition: MessageDefinition): RetryPolicy {
    let byType = this.#policies.get(entry);
    if (byType === undefined) {
      byType = new Map();
      this.#policies.set(entry, byType);
    }
    let policy = byType.get(definition.type);
    if (policy === undefined) {
      policy = resolveRetryPolicy(entry.options.retry, definition.retry, this.#o.retry);
      byType.set(definition.type, policy);
    }
    return policy;
  }
}

/** Runs a message admission let through, with what admission found out about it. */
export type AdmittedMessage<R> = (
  entry: HandlerEntry,
  definition: MessageDefinition,
  envelope: Envelope,
  policy: RetryPolicy,
  input: PipelineInput,
) => R;
