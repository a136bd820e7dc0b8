import type { MessageKind } from '../messages/definition.js';

import type { OutgoingMessage } from '../messages/outgoing-message.js';

export type { OutgoingMessage };

/** A serialisable description of an error, as kept in attempt histories and dead letters. */
export interface ErrorInfo {
  readonly name: string;
  readonly message: string;
  /** The error's `code`, when it has a string one. */
  readonly code?: string;
  /** The stack, capped at 4 KiB. */
  readonly stack?: string;
}

/** One failed attempt to handle a delivery. */
export interface AttemptRecord {
  /** 1-based attempt number. */
  readonly attempt: number;
  /** When the attempt failed, ms since the epoch. */
  readonly at: number;
  readonly error: ErrorInfo;
}

/** Most attempt records a broker keeps per message; older ones are dropped first. */
export const MAX_ATTEMPT_HISTORY = 10;

/**
 * A subscription an endpoint registers at start-up.
 *
 * @remarks
 * An event subscription gets its own copy of every event of its types, so it retries and dead-letters
 * on its own. A command subscription consumes the single queue of its command types.
 */
export interface SubscriptionSpec {
  /** Stable handler name, unique within its endpoint. */
  readonly handler: string;
  /** `command` consumes command queues; `event` receives a copy of each published event. */
  readonly kind: 'command' | 'event';
  /** The message types this subscription takes. */
  readonly types: readonly string[];
  /**
   * The types among `types` whose definitions are ordered (brokers that partition need to know).
   * @defaultValue []
   */
  readonly orderedTypes?: readonly string[];
}

/** Facts about one delivery, kept beside the envelope and never inside its signed part. */
export interface DeliveryFacts {
  /**
   * Message id as the broker knows it: the envelope id, or the broker's own id of the stored item
   * (`BullMqBroker`: the job id) for bytes pushed into a queue by something else; undefined when the
   * broker has neither.
   */
  readonly messageId: string | undefined;
  readonly kind: MessageKind | undefined;
  readonly type: string | undefined;
  /** The endpoint receiving the delivery. */
  readonly endpoint: string;
  /** The subscription's handler name; undefined for command queues (the dispatcher finds the handler by type). */
  readonly handler: string | undefined;
  /**
   * 1-based attempt number: the failed attempts (`nack` with `retryAt`) and the
   * {@link DeliveryFacts.unsettledEnds | unsettled ends} so far, plus one. A release
   * (`nack` with `release`: a graceful stop, an outage pause) does not count.
   */
  readonly attempt: number;
  /**
   * How many earlier deliveries of this message were taken and never settled: their holder went
   * away for good without acking, nacking or releasing them.
   *
   * @remarks
   * Each such end also counts in {@link DeliveryFacts.attempt}, so a message that kills the worker
   * handling it cannot crash-loop a fleet: the dispatcher dead-letters it as `worker-crashed` once
   * this reaches the bus's `crashLimit`. What counts is broker-specific:
   * - `BullMqBroker`: a job's lock that lapsed (its process died, or its event loop or its Redis
   *   connection stalled past `lockDurationMs`) and was found by a stalled check: BullMQ's
   *   `stalledCounter`, reset by a replay.
   * - `InMemoryBroker`: a delivery given up with `InMemoryBroker.abandon` (the queues die with the
   *   process, so nothing else can outlive its holder there).
   * - `RabbitMqBroker` on quorum queues: a message's returns to its queue (its channel or
   *   connection closed with it unacked: RabbitMQ's `x-delivery-count`), carried over to the copies
   *   a retry publishes. An ordered message a stopping receiver had taken but not handed out goes
   *   back the same way, and counts too.
   *
   * A receiver whose iteration ends is not such an end: its deliveries stay settleable by id, since
   * a dispatcher ends its receiver before it drains the handlers still running (a graceful stop),
   * and reopens a receiver that failed while its handlers go on.
   * @defaultValue 0 (a broker that cannot tell still counts these ends in `attempt`, where the
   *   retry policy's `attempts` bounds them)
   */
  readonly unsettledEnds?: number | undefined;
  /** Earlier failed attempts, newest last, at most {@link MAX_ATTEMPT_HISTORY}. */
  readonly history: readonly AttemptRecord[];
  /** Partition key as published. */
  readonly partitionKey: string | undefined;
  /**
   * The queue of the command type or event subscription this delivery came from, as every built-in
   * broker names it (`commandQueue(type)`, `subscriptionQueue(endpoint, handler)`: `cmd~<type>`,
   * `evt~<endpoint>~<handler>`), also when the broker carried it through a queue of its own (a
   * partition queue); part of a dead letter's identity, so the same job id in two queues never
   * shares a record, and the same message gets the same record id on every broker.
   * @defaultValue undefined (the endpoint and handler alone identify the subscription)
   */
  readonly queue?: string | undefined;
  /**
   * The id of the dead letter this delivery replays: set by brokers on deliveries of a message
   * put back by {@link MessageBroker.redeliver} with a `deadLetterId`, so the dispatcher can record
   * the replay's outcome (`DeadLetterStore.markReplayHandled`) when the message is handled.
   * @defaultValue undefined (not a replay, or a broker that does not carry it)
   */
  readonly replayOf?: string | undefined;
  /**
   * Set when an earlier delivery of this message decided to dead-letter it but could not record the
   * dead letter: the dispatcher records it now instead of running the handler again.
   * @defaultValue undefined
   */
  readonly pendingDeadLetter?: PendingDeadLetter | undefined;
}

/**
 * A dead-lettering that was decided but could not be recorded (the dead-letter store failed), carried
 * beside the envelope until a later delivery records it.
 */
export interface PendingDeadLetter {
  /** The dead-letter reason that was decided. */
  readonly reason: string;
  /** The handler the message died in, when one was found. */
  readonly handler?: string;
  /** The attempt that failed. */
  readonly attempt: number;
  /** When it failed, ms since the epoch. */
  readonly at: number;
  /** The last error. */
  readonly error: ErrorInfo;
}

/** One delivery of a message to an endpoint; settle it exactly once with `ack` or `nack`. */
export interface Delivery {
  /** Identifies this delivery only: after a redelivery the old id is refused. */
  readonly id: string;
  /** The encoded envelope exactly as published (or as found in the queue). */
  readonly body: string;
  readonly facts: DeliveryFacts;
}

/** How to settle a failed delivery. */
export type NackOptions =
  /**
   * Try again, not before `retryAt` (ms since the epoch); the attempt counter goes up. With
   * `pendingDeadLetter` the message goes back only because its dead letter could not be recorded: the
   * broker keeps it beside the envelope and hands it back in the next delivery's facts.
   */
  | {
      readonly retryAt: number;
      readonly error?: ErrorInfo | undefined;
      readonly pendingDeadLetter?: PendingDeadLetter | undefined;
    }
  /** Never deliver again: the caller has recorded the dead letter. */
  | { readonly deadLetter: string; readonly error?: ErrorInfo | undefined }
  /**
   * Give the message back unhandled (graceful stop, outage pause, a message newer than the
   * receiving code); neither the attempt counter nor {@link DeliveryFacts.unsettledEnds} moves.
   * With `retryAt` (ms since the epoch) it is not delivered again before then.
   */
  | { readonly release: true; readonly retryAt?: number | undefined };

/** Where a replayed dead letter goes back to. */
export interface RedeliveryTarget {
  readonly endpoint: string;
  /** The subscription handler (event) or command handler name. */
  readonly handler: string;
  readonly message: OutgoingMessage;
  /**
   * The dead letter being replayed: the broker hands it back in each delivery's
   * {@link DeliveryFacts.replayOf} until the message is settled for good.
   * @defaultValue undefined
   */
  readonly deadLetterId?: string | undefined;
}

/** Options of {@link MessageBroker.receiver}. */
export interface ReceiverOptions {
  /** The endpoint whose subscriptions to receive. */
  readonly endpoint: string;
  /**
   * How many deliveries of this receiver may be unsettled at once: it takes more as they settle
   * (brokers that prefetch use it as their window).
   * @defaultValue 16
   */
  readonly prefetch?: number;
  /** Stops the receiver: the iterator ends once aborted. */
  readonly signal?: AbortSignal;
}

/** Messages in one broker queue, by state. */
export interface QueueDepth {
  /** The queue: a command type, an event subscription, or the broker's own name for it. */
  readonly queue: string;
  /** Ready now. */
  readonly waiting: number;
  /** Taken by a worker, not settled yet. */
  readonly active: number;
  /** Waiting for their time (scheduled, or backing off before a retry). */
  readonly delayed: number;
}

/**
 * What a broker can do, as it declares it in {@link MessageBroker.capabilities}.
 *
 * @remarks
 * The conformance suite skips the tests of what a broker lacks, naming the capability (`needs
 * delayedDelivery`), and the bus reads the optional parts (`queueDepths`) only where declared. A
 * broker declares what it does in every configuration it accepts: what depends on how its server
 * is run (Redis persistence, say) is documented, not declared.
 */
export interface BrokerCapabilities {
  /** `deliverAt`, and a `retryAt` in the future, are honoured: nothing is delivered before its time. */
  readonly delayedDelivery: boolean;
  /**
   * How long a published message id is remembered per subscription to drop a second publish of it,
   * in ms (idempotent publish); 0 when every publish delivers.
   *
   * @remarks
   * The window of messages at the default {@link OutgoingMessage.dedupe}. A message with `dedupe:
   * 'while-queued'` may be remembered only while the broker holds it (waiting, delayed, taken and
   * not settled, or dead-lettered and kept), and at least that long when this is above 0: a second
   * publish while the first copy is queued is dropped. A broker may keep the window for those
   * messages too (the in-memory broker does); `BullMqBroker` does not, which is what makes them
   * cheaper to consume.
   */
  readonly dedupeWindowMs: number;
  /**
   * Messages of `ordered` definitions with one partition key are delivered one at a time in publish
   * order, a retry holding its key, while other keys go ahead.
   */
  readonly orderedDelivery: boolean;
  /** {@link MessageBroker.queueDepths} is implemented (telemetry's queue depth gauge reads it). */
  readonly queueDepths: boolean;
  /** {@link MessageBroker.redeliver} puts a message back into one subscription (dead-letter replay). */
  readonly redeliver: boolean;
  /** Queued messages survive a restart of the process: they are stored outside it. */
  readonly durable: boolean;
  /**
   * Processes share the queues: a message published through one broker instance reaches a receiver
   * of another instance on the same system (server and key prefix, database, virtual host).
   */
  readonly shared: boolean;
  /**
   * A delivery taken and never settled (its process died, its lease lapsed) goes back to its queue
   * and counts as an attempt, so a message that keeps killing its workers runs out of attempts.
   */
  readonly crashCounting: boolean;
  /**
   * {@link MessageBroker.cancel} is implemented: a message published with a `deliverAt` can be
   * taken back before its time (`bus.cancelScheduled`).
   */
  readonly cancelScheduled: boolean;
}

/**
 * The transport contract: the only thing Harrier needs from a broker.
 *
 * @remarks
 * Beyond DESIGN.md's `receiver`/`publish`/`publishBatch`/`ack`/`nack`/`close`/`capabilities`, a
 * broker has `register` (subscriptions are registered at start-up so publishers need not know
 * subscribers) and `redeliver` (dead-letter replay into one subscription), and may have
 * `queueDepths` (for telemetry) and `cancel` (taking back a scheduled message). See docs/architecture.md.
 */
export interface MessageBroker {
  /**
   * Sets an endpoint's subscriptions to `subscriptions`, replacing what it registered before;
   * idempotent. Must resolve before that endpoint receives; a receiver serves the subscriptions
   * registered when it began.
   *
   * @remarks
   * A `command` subscription is also the route of its types: from then on `publish` accepts them
   * from any publisher, for as long as the broker's state lasts or until the endpoint registers
   * again without them (an endpoint that stopped keeps its routes: commands wait in the queue for
   * it). A registration without an event subscription (or type) the endpoint had before stops
   * copies of events published after it from going to that subscription; a registration without
   * a command type stops routing it there, so `publish` refuses it with `no-route` unless another
   * endpoint registered it (or `requireRoute` is false). Messages already queued for what was
   * removed are kept, never deleted: they are delivered again if the endpoint registers it again
   * (a rollback), and a broker shared by processes of other versions lets those drain them.
   */
  register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void>;
  /**
   * Deliveries for one endpoint, until the signal aborts or the broker closes. The receiver holds at
   * most `prefetch` unsettled deliveries and takes more as they settle.
   * @throws HarrierError `not-registered` (from `receiver()` or its iterator's first `next()`) when
   * the endpoint has not called {@link MessageBroker.register} on this broker.
   */
  receiver(options: ReceiverOptions): AsyncIterable<Delivery>;
  /**
   * Publishes one message: a command to its queue, an event to one copy per subscription.
   * @throws HarrierError `no-route` (made by `noRouteError`) for a command whose type no endpoint
   * registered, unless `requireRoute` is false.
   */
  publish(message: OutgoingMessage): Promise<void>;
  /**
   * Publishes many messages; resolves only once every one is accepted.
   * @throws HarrierError `no-route` when any command of the batch has no route (unless its
   * `requireRoute` is false); then none of the batch is published.
   */
  publishBatch(messages: readonly OutgoingMessage[]): Promise<void>;
  /**
   * Settles a delivery as handled.
   *
   * @remarks
   * A broker whose ack is done by the time it returns (nothing left to wait for) may return the
   * shared `SETTLED` promise from `harrier/extend`: the dispatcher then arms no deadline and awaits
   * nothing. Any other promise is awaited within `settleTimeoutMs` and retried when it rejects or
   * times out, so an ack that does I/O returns its own promise.
   * @throws StaleDeliveryError when the id is not current.
   */
  ack(deliveryId: string): Promise<void>;
  /**
   * Settles a delivery as failed; may return `SETTLED` as {@link MessageBroker.ack} may.
   * @throws StaleDeliveryError when the id is not current.
   */
  nack(deliveryId: string, options: NackOptions): Promise<void>;
  /**
   * Puts a message back into one subscription with fresh attempts, ignoring the publish dedupe.
   *
   * @remarks
   * The subscription holds at most one copy of a message: when it still holds this one, waiting to
   * be delivered or for a retry, nothing changes (it is delivered once, its attempts as they were).
   * A delivery of it not settled yet is waited for (a few seconds), then the rule applies to what
   * the settle left.
   * @throws HarrierError `message-in-flight` when a delivery of the message stayed unsettled
   * throughout that wait.
   */
  redeliver(target: RedeliveryTarget): Promise<void>;
  /** Ends every receiver and releases the broker's resources. */
  close(): Promise<void>;
  /**
   * Messages in each queue an endpoint receives from, by state (telemetry's queue depth gauge).
   * Optional: a broker that cannot count cheaply leaves it out and declares
   * {@link BrokerCapabilities.queueDepths} false.
   */
  queueDepths?(endpoint: string): Promise<readonly QueueDepth[]>;
  /**
   * Cancels every copy of message `messageId` still waiting for its `deliverAt` (a command's one
   * copy, an event's copy in each subscription); resolves to how many copies it removed.
   *
   * @remarks
   * Only copies never delivered and not due yet are removed: a copy delivered (in flight, waiting
   * for a retry, or settled) or due already (ready to be taken) is left as it is, so a cancel never
   * races a handler. The message id is forgotten in the subscriptions whose copy was cancelled:
   * publishing it again there delivers it (a cancel followed by a schedule of the same id moves the
   * message), while the other subscriptions keep their dedupe window. Unknown ids resolve to 0.
   * Optional: a broker without it leaves it out and declares
   * {@link BrokerCapabilities.cancelScheduled} false.
   */
  cancel?(messageId: string): Promise<number>;
  /** What this broker can do; the same record for the broker's whole life. */
  capabilities(): BrokerCapabilities;
}

/** Builds an {@link ErrorInfo} from anything thrown. */
export function toErrorInfo(error: unknown): ErrorInfo {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return {
      name: error.name,
      message: error.message,
      ...(typeof code === 'string' ? { code } : {}),
      ...(error.stack !== undefined ? { stack: error.stack.slice(0, 4096) } : {}),
    };
  }
  return { name: 'NonError', message: typeof error === 'string' ? error : describeThrown(error) };
}

function describeThrown(value: unknown): string {
  // JSON.stringify returns undefined for undefined, functions and symbols, despite its declared type.
  const json = JSON.stringify(value) as string | undefined;
  return json ?? typeof value;
}
