import { toErrorInfo, type MessageBroker, type OutgoingMessage } from '../broker/message-broker.js';
import type { HandlerRegistry } from '../handlers/handler-registry.js';
import type { EventLog } from '../log/event-log.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { runObserved } from '../logging/run-observed.js';
import type { MessageTelemetry, PublishOrigin } from './message-telemetry.js';

/** Options of {@link MessagePublisher}. */
export interface MessagePublisherOptions {
  /** Where messages fan out to their queues and subscriptions. */
  readonly broker: MessageBroker;
  /**
   * The event log every event with a topic is appended to (idempotent by event id) before it fans
   * out.
   * @defaultValue none (events only go through the broker)
   */
  readonly eventLog?: EventLog;
  /**
   * The handlers of this endpoint: a command one of them handles never needs a registered route
   * (start() registers it, and until then the command waits in its queue).
   * @defaultValue none (every command follows `requireCommandRoute`)
   */
  readonly registry?: HandlerRegistry;
  /**
   * Refuse a command no endpoint has registered a route for (HarrierError `no-route`), unless the
   * message sets `requireRoute` itself or this endpoint handles it.
   * @defaultValue the broker's default (true)
   */
  readonly requireCommandRoute?: boolean;
  /**
   * Wraps each commit (harrier/telemetry: a `send` span for a batch, the sent counter).
   * @defaultValue none
   */
  readonly telemetry?: MessageTelemetry;
  /** Where a failing telemetry hook is reported. @defaultValue JSON lines on stderr */
  readonly logger?: Logger;
}

/** Options of one {@link MessagePublisher.publish}. */
export interface PublishOptions {
  /**
   * Where the messages come from, when not from the bus or a handler (telemetry names it).
   * @defaultValue the bus or a handler
   */
  readonly origin?: PublishOrigin;
}

/**
 * Commits outgoing messages: appends each event to the event log (idempotent by id), then fans
 * everything out through the broker.
 *
 * @remarks
 * The one commit path of Harrier: `bus.send` / `bus.publish` and what handlers record (after they
 * succeed) all go through it, so a {@link Dispatcher} used without the bus still writes the log.
 * Appending first, by id, makes a retry safe: if the process dies between the append and the fan-out,
 * the redelivered handler records the same ids, the log finds them, and the broker drops the copies
 * it already has.
 *
 * @example
 * ```ts
 * const publisher = new MessagePublisher({ broker, eventLog });
 * const dispatcher = new Dispatcher({ broker, publisher, registry, endpoint: 'orders', deadLetters, invoke });
 * ```
 */
export class MessagePublisher {
  readonly #o: MessagePublisherOptions;
  /** Whether the commands of `registry` have their routes registered on the broker (see {@link MessagePublisher.routesRegistered}). */
  #routed = false;

  constructor(options: MessagePublisherOptions) {
    this.#o = options;
  }

  /** The broker messages fan out through. */
  get broker(): MessageBroker {
    return this.#o.broker;
  }

  /**
   * Tells the publisher that an endpoint registered the subscriptions of `registry` on `broker`
   * (the {@link Dispatcher} does, once `register` resolved): when they are this publisher's own, a
   * command they handle has its route on the broker from then on, and is published as it is.
   *
   * @remarks
   * Until then such a command is published with `requireRoute: false` (it waits in its queue for
   * `start()`), which takes a copy of the message; a broker keeps a registered route until the
   * endpoint registers without it, so after registration the copy (4% of the in-memory send path)
   * is not needed.
   */
  routesRegistered(broker: MessageBroker, registry: HandlerRegistry): void {
    if (broker === this.#o.broker && registry === this.#o.registry) this.#routed = true;
  }

  /**
   * Appends the events to the log, then publishes every message through the broker.
   * @throws what the log or the broker throws (e.g. HarrierError `no-route`); nothing of a batch the
   *   broker refused is delivered, and a retry with the same ids is safe.
   */
  publish(given: readonly OutgoingMessage[], options?: PublishOptions): Promise<void> {
    // Not async: a publish without telemetry costs no promise beyond the commit's own.
    if (given.length === 0) return Promise.resolve();
    const telemetry = this.#o.telemetry;
    if (telemetry?.publish === undefined) return this.#publish(given);
    return runObserved(
      (run) => telemetry.publish?.(given, options?.origin, run) ?? run(),
      () => this.#publish(given),
      (error) => {
        (this.#o.logger ?? consoleLogger).error('Telemetry publish threw; ignored', {
          error: toErrorInfo(error),
        });
      },
    );
  }

  #publish(given: readonly OutgoingMessage[]): Promise<void> {
    const first = given[0];
    if (
      given.length === 1 &&
      first !== undefined &&
      (this.#o.eventLog === undefined || first.kind !== 'event')
    ) {
      // One message that goes to no log (what `send` makes): straight to the broker, without an
      // async function's promise and its ticks around the broker's.
      try {
        return this.#o.broker.publish(this.#withRouteRequirement(first));
      } catch (error) {
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
        return Promise.reject(error);
      }
    }
    return this.#publishAll(given);
  }

  async #publishAll(given: readonly OutgoingMessage[]): Promise<void> {
    let messages = given.map((message) => this.#withRouteRequirement(message));
    const log = this.#o.eventLog;
    if (log !== undefined) {
      // Commands go first, so a command the broker refuses (no-route) leaves no event in the log
      // that projections would apply while the handler's work is being retried or dead-lettered.
      const commands = messages.filter((message) => message.kind === 'command');
      if (commands.length > 0 && commands.length < messages.length) {
        await this.#o.broker.publishBatch(commands);
        messages = messages.filter((message) => message.kind !== 'command');
      }
      for (const message of messages) {
        if (message.kind !== 'event' || message.topic === undefined) continue;
        await log.appendIdempotent(message.topic, message.id, {
          id: message.id,
          key: message.partitionKey ?? message.id,
          type: message.type,
          body: message.body,
        });
      }
    }
    if (messages.length === 1 && messages[0] !== undefined) await this.#o.broker.publish(messages[0]);
    else await this.#o.broker.publishBatch(messages);
  }

  /**
   * `message` as {@link MessagePublisher.publish} hands it to the broker: a command this endpoint
   * handles, or any command when `requireCommandRoute` is false, gets `requireRoute: false` unless it
   * set it (for a unit of work that inserts messages into the broker's storage itself).
   */
  forBroker(message: OutgoingMessage): OutgoingMessage {
    return this.#withRouteRequirement(message);
  }

  /**
   * Whether a command needs a registered route: not when this endpoint handles it, else per option.
   * A message whose `requireRoute` would be the broker's default (true), or whose route is
   * registered already, is passed on as it is: no copy.
   */
  #withRouteRequirement(message: OutgoingMessage): OutgoingMessage {
    if (message.kind !== 'command' || message.requireRoute !== undefined) return message;
    const kind = this.#o.registry?.singleHandler(message.type)?.kind;
    if (kind === 'command' || kind === 'saga') {
      return this.#routed ? message : { ...message, requireRoute: false };
    }
    return this.#o.requireCommandRoute === false ? { ...message, requireRoute: false } : message;
  }
}
