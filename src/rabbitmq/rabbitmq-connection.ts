import type { Channel, ChannelModel, ConfirmChannel, Options } from 'amqplib';
import { systemClock } from '../clock/clock.js';
import { sleep } from '../clock/sleep.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';
import { amqplib } from './rabbitmq-peers.js';

/** Where RabbitMQ is: an `amqp://` URL, or amqplib's connect options. */
export type RabbitMqConnectionOptions = string | Options.Connect;

/** First wait before reconnecting, and the longest, in ms. */
const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 5_000;

/** Where `target` points, for messages: the URL without its password. */
export function describeRabbitMq(target: RabbitMqConnectionOptions): string {
  if (typeof target === 'string') {
    try {
      const url = new URL(target);
      if (url.password !== '') url.password = '***';
      return url.toString();
    } catch {
      return 'the configured RabbitMQ URL';
    }
  }
  return `${target.protocol ?? 'amqp'}://${target.hostname ?? 'localhost'}:${String(target.port ?? 5672)}${target.vhost !== undefined ? `/${target.vhost}` : ''}`;
}

/** The error for a RabbitMQ that cannot be reached (code `rabbitmq-unavailable`), naming the fix. */
export function rabbitMqUnavailable(where: string, doing: string, cause: unknown): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new HarrierError(
    'rabbitmq-unavailable',
    `RabbitMQ could not be reached at ${where} while ${doing} (${reason}): start RabbitMQ there, or point the broker's connection option at a running server`,
    { cause },
  );
}

/** A publish waiting for its confirm until `deadline` (ms since the epoch). */
interface ConfirmWait {
  readonly deadline: number;
  readonly expire: () => void;
  /** RabbitMQ returned it (a `mandatory` publish that reached no queue). */
  returned: boolean;
  /** Rejected for want of a confirm by its deadline. */
  expired: boolean;
}

/** A publish under way: what to publish, until when, and what a return of it does. */
interface Publish {
  readonly exchange: string;
  readonly routingKey: string;
  readonly content: Buffer;
  readonly options: Options.Publish;
  /** When the publish rejects with `rabbitmq-unavailable` if not confirmed yet, ms since the epoch. */
  readonly deadline: number;
  readonly onReturned: (() => Promise<void>) | undefined;
}

/** How long a publish that failed for an outage waits before it tries again, in ms. */
const RETRY_PUBLISH_MS = 100;
/**
 * The least time before its deadline a publish is tried again with, in ms: a try with less would
 * nearly always reject for want of its confirm (a false failure, the message published anyway).
 */
const LEAST_RETRY_MS = 50;

/** The header that tells a returned `mandatory` publish from another of the same message id. */
const PUBLISH_TOKEN_HEADER = 'x-harrier-publish';

/** Options of {@link RabbitMqConnection}. */
export interface RabbitMqConnectionSettings {
  readonly target: RabbitMqConnectionOptions;
  readonly heartbeatSeconds: number;
  readonly logger: Logger;
  /** Runs on each new connection before anyone gets it: declares the fixed topology. */
  readonly setup: (channel: Channel) => Promise<void>;
}

/**
 * One AMQP connection that comes back by itself: when it drops, it reconnects with backoff (1 s
 * doubling to 5 s, jittered ±20%) until closed, and whoever asks for it meanwhile waits (bounded).
 *
 * @remarks
 * Publishes share one confirm channel; receivers open channels of their own ({@link
 * RabbitMqConnection.openChannel}) and open them again after a drop.
 */
export class RabbitMqConnection {
  readonly #settings: RabbitMqConnectionSettings;
  readonly #where: string;
  #model: ChannelModel | undefined;
  #connecting: Promise<ChannelModel> | undefined;
  #confirm: Promise<ConfirmChannel> | undefined;
  /** The confirm channel once open (what `#confirm` resolved to), until it closes. */
  #openConfirm: ConfirmChannel | undefined;
  #lastError: unknown = new Error('not connected yet');
  #closed = false;
  readonly #closing = new AbortController();
  /** Publishes whose message RabbitMQ returned as unroutable, by publish token. */
  readonly #returned = new Set<string>();
  /** The `mandatory` publish of each message id waiting for its confirm without a publish token. */
  readonly #untokened = new Map<string, ConfirmWait>();
  #token = 0;
  /**
   * Publishes waiting for their confirm, with one timer for all of them (a timer per publish costs
   * more CPU than the rest of a publish's own work).
   */
  readonly #confirmWaits = new Set<ConfirmWait>();
  #deadlineTimer: NodeJS.Timeout | undefined;
  #deadlineAt = Number.POSITIVE_INFINITY;

  constructor(settings: RabbitMqConnectionSettings) {
    this.#settings = settings;
    this.#where = describeRabbitMq(settings.target);
  }

  get where(): string {
    return this.#where;
  }

  /** The open connection, waiting for it at most `timeoutMs`. */
  async model(timeoutMs: number, doing: string): Promise<ChannelModel> {
    if (this.#closed) throw closedError();
    if (this.#model !== undefined) return this.#model;
    this.#connecting ??= this.#connectLoop().finally(() => {
      this.#connecting = undefined;
    });
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.#connecting,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            reject(rabbitMqUnavailable(this.#where, doing, this.#lastError));
          }, timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** A new channel of its own (a receiver's), with its errors logged instead of thrown. */
  async openChannel(timeoutMs: number, doing: string): Promise<Channel> {
    const model = await this.model(timeoutMs, doing);
    try {
      const channel = await model.createChannel();
      channel.on('error', () => undefined);
      return channel;
    } catch (error) {
      throw rabbitMqUnavailable(this.#where, doing, error);
    }
  }

  /**
   * Runs `run` on a channel of its own, closed after: for operations whose failure closes the
   * channel (`checkExchange` of a missing exchange answers 404 that way).
   */
  async withChannel<T>(timeoutMs: number, doing: string, run: (channel: Channel) => Promise<T>): Promise<T> {
    const channel = await this.openChannel(timeoutMs, doing);
    try {
      return await run(channel);
    } finally {
      await channel.close().catch(() => undefined);
    }
  }

  /**
   * Publishes one message on the confirm channel; resolves once RabbitMQ confirmed it, or, when it
   * was `mandatory` and reached no queue, to what `onReturned` resolves to (undefined without it).
   * A try that fails because RabbitMQ went away (or nacked it) is made again on the next channel
   * every 100 ms while at least 50 ms of `timeoutMs` are left for it, then rejects with
   * `rabbitmq-unavailable` (at `timeoutMs` at the latest): a message may then arrive twice, never
   * not at all once this resolved. A message amqplib cannot encode rejects with `publish-failed`.
   *
   * @remarks
   * Not async: with the confirm channel open, the message is written before this returns, and the
   * promise returned is the only one. A returned message is told from the others by its message id:
   * a `mandatory` publish carries a publish token header (`x-harrier-publish`) only while another
   * `mandatory` publish of the same id without one waits for its confirm (RabbitMQ returns a
   * message before it confirms it, so a return without a token is that one publish's).
   */
  publish(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: Options.Publish,
    timeoutMs: number,
    onReturned?: () => Promise<void>,
  ): Promise<void> {
    return this.#publishUntil({
      exchange,
      routingKey,
      content,
      options,
      deadline: Date.now() + timeoutMs,
      onReturned,
    });
  }

  /** One try of a publish, and the next ones (on the next channel) after failures that are outages. */
  #publishUntil(publish: Publish): Promise<void> {
    const channel = this.#openConfirm;
    if (channel !== undefined) return this.#publishOn(channel, publish);
    return this.#confirmChannel(Math.max(1, publish.deadline - Date.now())).then(
      (opened) => this.#publishOn(opened, publish),
      (error: unknown) => this.#publishAgain(error, publish),
    );
  }

  /**
   * After a failed try: the next one in 100 ms when the failure is an outage (`rabbitmq-unavailable`)
   * and at least 50 ms are left then before the deadline, else the failure (nothing published again).
   */
  #publishAgain(error: unknown, publish: Publish): Promise<void> {
    if (
      !HarrierError.is(error, 'rabbitmq-unavailable') ||
      publish.deadline - Date.now() < RETRY_PUBLISH_MS + LEAST_RETRY_MS
    )
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    return sleep(systemClock, RETRY_PUBLISH_MS).then(() =>
      publish.deadline - Date.now() < LEAST_RETRY_MS ? Promise.reject(error) : this.#publishUntil(publish),
    );
  }

  #publishOn(channel: ConfirmChannel, publish: Publish): Promise<void> {
    return new Promise((resolve, reject) => {
      const timeoutMs = Math.max(1, publish.deadline - Date.now());
      const waiting: ConfirmWait = {
        deadline: Date.now() + timeoutMs,
        expire: () => {
          waiting.expired = true;
          reject(
            rabbitMqUnavailable(
              this.#where,
              'publishing',
              new Error(`no publisher confirm within ${String(timeoutMs)} ms`),
            ),
          );
        },
        returned: false,
        expired: false,
      };
      let { options } = publish;
      let token: string | undefined;
      const id = options.messageId;
      if (options.mandatory === true) {
        if (id !== undefined && !this.#untokened.has(id)) this.#untokened.set(id, waiting);
        else {
          token = String(++this.#token);
          const headers = options.headers as Record<string, unknown> | undefined;
          options = { ...options, headers: { ...headers, [PUBLISH_TOKEN_HEADER]: token } };
        }
      }
      this.#awaitConfirm(waiting);
      try {
        channel.publish(publish.exchange, publish.routingKey, publish.content, options, (error: unknown) => {
          this.#confirmWaits.delete(waiting);
          if (id !== undefined && this.#untokened.get(id) === waiting) this.#untokened.delete(id);
          // Forgotten whatever the outcome: a nack, or a confirm after the deadline, leaves none.
          const returned = waiting.returned || (token !== undefined && this.#returned.delete(token));
          // Rejected at its deadline already: nothing is tried again, nothing left to settle.
          if (waiting.expired) return;
          if (error !== null && error !== undefined) {
            resolve(this.#publishAgain(rabbitMqUnavailable(this.#where, 'publishing', error), publish));
          } else if (returned) {
            resolve(publish.onReturned?.());
          } else {
            resolve();
          }
        });
      } catch (error) {
        this.#confirmWaits.delete(waiting);
        if (id !== undefined && this.#untokened.get(id) === waiting) this.#untokened.delete(id);
        if (isChannelGone(error))
          resolve(this.#publishAgain(rabbitMqUnavailable(this.#where, 'publishing', error), publish));
        else reject(unpublishable(error));
      }
    });
  }

  /** Files a publish waiting for its confirm; the one deadline timer fires at the earliest deadline. */
  #awaitConfirm(waiting: ConfirmWait): void {
    this.#confirmWaits.add(waiting);
    if (waiting.deadline < this.#deadlineAt) this.#armDeadline(waiting.deadline);
  }

  #armDeadline(at: number): void {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = at;
    this.#deadlineTimer = setTimeout(
      () => {
        this.#expireConfirms();
      },
      Math.max(0, at - Date.now()),
    );
    // A publish waiting keeps its process alive through its socket, not this timer.
    this.#deadlineTimer.unref();
  }

  /** Rejects the publishes past their deadline, and arms the timer for the next deadline. */
  #expireConfirms(): void {
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Number.POSITIVE_INFINITY;
    const now = Date.now();
    let next = Number.POSITIVE_INFINITY;
    for (const waiting of this.#confirmWaits) {
      if (waiting.deadline <= now) {
        this.#confirmWaits.delete(waiting);
        waiting.expire();
      } else if (waiting.deadline < next) {
        next = waiting.deadline;
      }
    }
    if (next !== Number.POSITIVE_INFINITY) this.#armDeadline(next);
  }

  /** How many returns are tracked: publish tokens returned, and publishes waiting without one (tests). */
  returnsTracked(): number {
    return this.#returned.size + this.#untokened.size;
  }

  /** Closes the connection now as a network failure would: it reconnects (tests). */
  async drop(): Promise<void> {
    await this.#model?.close().catch(() => undefined);
  }

  /** Closes the connection for good; waiters reject with `broker-closed`. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    this.#openConfirm = undefined;
    this.#returned.clear();
    this.#untokened.clear();
    const model = this.#model;
    this.#model = undefined;
    await model?.close().catch(() => undefined);
  }

  /** Read through a call: close() flips it while a connect awaits. */
  #isClosed(): boolean {
    return this.#closed;
  }

  #confirmChannel(timeoutMs: number): Promise<ConfirmChannel> {
    this.#confirm ??= (async () => {
      const model = await this.model(timeoutMs, 'publishing');
      const channel = await model.createConfirmChannel();
      channel.on('error', () => undefined);
      channel.on(
        'return',
        (message: { properties: { messageId?: unknown; headers?: Record<string, unknown> } }) => {
          const token = message.properties.headers?.[PUBLISH_TOKEN_HEADER];
          if (typeof token === 'string') this.#returned.add(token);
          else if (typeof message.properties.messageId === 'string') {
            const waiting = this.#untokened.get(message.properties.messageId);
            if (waiting !== undefined) waiting.returned = true;
          }
        },
      );
      channel.on('close', () => {
        this.#confirm = undefined;
        if (this.#openConfirm === channel) this.#openConfirm = undefined;
      });
      this.#openConfirm = channel;
      return channel;
    })().catch((error: unknown) => {
      this.#confirm = undefined;
      throw HarrierError.is(error) ? error : rabbitMqUnavailable(this.#where, 'publishing', error);
    });
    return this.#confirm;
  }

  async #connectLoop(): Promise<ChannelModel> {
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      if (this.#closed) throw closedError();
      try {
        const model = await amqplib.connect(
          withHeartbeat(this.#settings.target, this.#settings.heartbeatSeconds),
          {
            clientProperties: { connection_name: 'harrier' },
          },
        );
        model.on('error', () => undefined);
        try {
          const channel = await model.createChannel();
          channel.on('error', () => undefined);
          await this.#settings.setup(channel);
          await channel.close();
        } catch (error) {
          await model.close().catch(() => undefined);
          throw error;
        }
        if (this.#isClosed()) {
          await model.close().catch(() => undefined);
          throw closedError();
        }
        model.on('close', () => {
          if (this.#model !== model) return;
          this.#model = undefined;
          this.#confirm = undefined;
          this.#openConfirm = undefined;
          if (!this.#closed) {
            this.#settings.logger.warn('The RabbitMQ connection closed; reconnecting', {
              where: this.#where,
            });
            // Reconnect now, not at the next use: receivers wait for it.
            this.#connecting ??= this.#connectLoop().finally(() => {
              this.#connecting = undefined;
            });
            this.#connecting.catch(() => undefined);
          }
        });
        this.#model = model;
        return model;
      } catch (error) {
        if (HarrierError.is(error, 'broker-closed')) throw error;
        this.#lastError = error;
        this.#settings.logger.warn('RabbitMQ could not be reached; trying again', {
          where: this.#where,
          error: error instanceof Error ? error.message : String(error),
          retryInMs: backoff,
        });
        await sleep(systemClock, backoff * (0.8 + Math.random() * 0.4), this.#closing.signal);
        backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
      }
    }
  }
}

/** Whether amqplib refused a send because its channel or connection is closed (an outage). */
function isChannelGone(error: unknown): boolean {
  return error instanceof Error && error.name === 'IllegalOperationError';
}

/**
 * The error for a message amqplib cannot encode (its headers past 64 KiB): no retry makes it
 * publishable, so it is not an outage.
 */
function unpublishable(cause: unknown): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new HarrierError(
    'publish-failed',
    `RabbitMQ's client could not encode the message (${reason}): keep what travels in its AMQP headers (partition key, type, ids, error history) under 64 KiB in all, e.g. a shorter partitionKey`,
    { cause },
  );
}

function closedError(): HarrierError {
  return new HarrierError(
    'broker-closed',
    'The RabbitMQ broker is closed: create a new one to publish again',
  );
}

/** `target` with the heartbeat set, unless it sets one itself (a URL's `heartbeat` query parameter). */
function withHeartbeat(target: RabbitMqConnectionOptions, seconds: number): RabbitMqConnectionOptions {
  if (typeof target !== 'string') return { heartbeat: seconds, ...target };
  if (/[?&]heartbeat=/.test(target)) return target;
  return `${target}${target.includes('?') ? '&' : '?'}heartbeat=${String(seconds)}`;
}
