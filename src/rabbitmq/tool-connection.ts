import type { ChannelModel } from 'amqplib';
import { HarrierError } from '../errors/harrier-error.js';
import { describeRabbitMq, type RabbitMqConnectionOptions } from './rabbitmq-connection.js';
import { amqplib } from './rabbitmq-peers.js';
import type { RegistryConnection } from './rabbitmq-registry.js';

/** The error of a tool for a RabbitMQ that cannot be reached, naming the CLI's fix. */
export function toolUnavailable(where: string, doing: string, cause: unknown): HarrierError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new HarrierError(
    'rabbitmq-unavailable',
    `RabbitMQ could not be reached at ${where} while ${doing} (${reason}): start RabbitMQ there, or point RABBITMQ_URL / --rabbitmq-url at a running server`,
    { cause },
  );
}

/**
 * A tool's connection to RabbitMQ (`RabbitMqAdmin`'s): one AMQP connection, opened again on the
 * next use after it dropped, so a dashboard that runs for days outlives a RabbitMQ restart.
 *
 * @remarks
 * Unlike a broker's, it does not retry in the background: a tool reports an unreachable RabbitMQ
 * to its user at once (`rabbitmq-unavailable`) and tries again when asked again.
 */
export class ToolConnection implements RegistryConnection {
  readonly #target: RabbitMqConnectionOptions;
  readonly #connectTimeoutMs: number;
  readonly #where: string;
  #model: Promise<ChannelModel> | undefined;
  #closed = false;

  constructor(target: RabbitMqConnectionOptions, connectTimeoutMs: number) {
    this.#target = target;
    this.#connectTimeoutMs = connectTimeoutMs;
    this.#where = describeRabbitMq(target);
  }

  /** Where RabbitMQ is, for messages (never a password). */
  get where(): string {
    return this.#where;
  }

  /**
   * The open connection, connecting when there is none.
   * @throws HarrierError `rabbitmq-unavailable` when RabbitMQ cannot be reached.
   */
  model(): Promise<ChannelModel> {
    if (this.#closed) {
      return Promise.reject(new HarrierError('admin-closed', 'The RabbitMqAdmin is closed: open a new one'));
    }
    if (this.#model === undefined) {
      const forget = (): void => {
        if (this.#model === opening) this.#model = undefined;
      };
      const opening = this.#connect(forget);
      this.#model = opening;
      opening.catch(forget);
    }
    return this.#model;
  }

  async createChannel(): ReturnType<ChannelModel['createChannel']> {
    return (await this.model()).createChannel();
  }

  async createConfirmChannel(): ReturnType<ChannelModel['createConfirmChannel']> {
    return (await this.model()).createConfirmChannel();
  }

  /** Closes the connection as a network failure would; the next use connects again (tests). */
  async drop(): Promise<void> {
    const model = this.#model;
    if (model !== undefined) await (await model).close().catch(() => undefined);
  }

  /** Closes the connection for good. */
  async close(): Promise<void> {
    this.#closed = true;
    const model = this.#model;
    this.#model = undefined;
    if (model !== undefined) await (await model.catch(() => undefined))?.close().catch(() => undefined);
  }

  /** Connects; `onClose` runs when the connection closes, whatever closed it. */
  async #connect(onClose: () => void): Promise<ChannelModel> {
    let model: ChannelModel;
    try {
      model = await amqplib.connect(this.#target, { timeout: this.#connectTimeoutMs });
    } catch (error) {
      throw toolUnavailable(this.#where, 'connecting', error);
    }
    // A connection that drops shows as the failure of the operation in progress.
    model.on('error', () => undefined);
    model.on('close', onClose);
    return model;
  }
}
