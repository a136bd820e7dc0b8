import type pg from 'pg';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { SendOptions } from '../handlers/message-context.js';
import type { CommandDefinition, EventDefinition, InputOf } from '../messages/definition.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';
import { writeOutboxRows } from './outbox-rows.js';
import { postgresTables, type PostgresTables } from './postgres-schema.js';

/**
 * What prepares a message for the outbox: validates its payload, builds, encodes and signs its
 * envelope. A `MessageBus` is one (`bus.prepare`), so outbox rows are exactly what `bus.send` and
 * `bus.publish` would hand the broker.
 */
export interface OutboxMessagePreparer {
  prepare(
    definition: CommandDefinition | EventDefinition,
    payload: never,
    options?: SendOptions & { readonly at?: Date },
  ): OutgoingMessage;
}

/** Options of a message recorded in the outbox: those of `bus.send`, and when to deliver it. */
export interface OutboxSendOptions extends SendOptions {
  /**
   * Deliver no sooner than this time (a Date or ms since the epoch), instead of `delayMs`. The relay
   * publishes the row at once and the broker holds the message until then.
   * @defaultValue now (or `delayMs` from now)
   */
  readonly deliverAt?: Date | number;
}

/** Options of {@link PostgresOutbox}. */
export interface PostgresOutboxOptions {
  /**
   * The schema of Harrier's tables (migrated with `harrier postgres migrate`).
   * @defaultValue 'harrier'
   */
  readonly schema?: string;
  /**
   * The clock of the rows' `created_at`.
   * @defaultValue systemClock
   */
  readonly clock?: Clock;
}

/**
 * Records messages in the outbox table inside the application's own PostgreSQL transaction, from
 * plain application code (an HTTP handler, a script): the messages are published by an
 * {@link OutboxRelay} if and only if that transaction commits.
 *
 * @remarks
 * Messages are prepared by the bus (`bus.prepare`), so they are validated, encoded and signed as
 * `bus.send` / `bus.publish` do; only the publish is deferred to the relay. Inside a handler, use
 * `postgresUnitOfWork` instead: what the handler records goes to the same table.
 *
 * @example
 * ```ts
 * const outbox = new PostgresOutbox(bus);
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await client.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
 * await outbox.publish(client, OrderPlaced, { orderId });
 * await client.query('COMMIT');
 * ```
 */
export class PostgresOutbox {
  /** The tables rows go to. */
  readonly tables: PostgresTables;
  readonly #preparer: OutboxMessagePreparer;
  readonly #clock: Clock;

  /**
   * @param preparer - the bus (or anything with its `prepare`).
   * @throws HarrierError `invalid-option` for a bad schema name.
   */
  constructor(preparer: OutboxMessagePreparer, options: PostgresOutboxOptions = {}) {
    if (typeof (preparer as Partial<OutboxMessagePreparer> | undefined)?.prepare !== 'function') {
      throw new HarrierError(
        'invalid-option',
        'PostgresOutbox needs something that prepares messages: pass the bus (new PostgresOutbox(bus, { schema }))',
      );
    }
    this.#preparer = preparer;
    this.tables = postgresTables(options.schema);
    this.#clock = options.clock ?? systemClock;
  }

  /**
   * Records a command for its handler, in the transaction `client` is in; resolves to its id.
   * @param client - a pg client between the application's `BEGIN` and `COMMIT`.
   * @throws what `bus.send` throws for a bad payload or option; nothing is written then.
   */
  send<D extends CommandDefinition>(
    client: pg.ClientBase,
    definition: D,
    payload: InputOf<D>,
    options?: OutboxSendOptions,
  ): Promise<string> {
    return this.#record('send', client, definition, payload, options);
  }

  /**
   * Records an event for every subscription, in the transaction `client` is in; resolves to its id.
   * @param client - a pg client between the application's `BEGIN` and `COMMIT`.
   * @throws what `bus.publish` throws for a bad payload or option; nothing is written then.
   */
  publish<D extends EventDefinition>(
    client: pg.ClientBase,
    definition: D,
    payload: InputOf<D>,
    options?: OutboxSendOptions,
  ): Promise<string> {
    return this.#record('publish', client, definition, payload, options);
  }

  /** Records messages already prepared with `bus.prepare`, in one statement. */
  async record(client: pg.ClientBase, messages: readonly OutgoingMessage[]): Promise<void> {
    await writeOutboxRows(client, this.tables, messages, this.#clock.now());
  }

  async #record(
    verb: 'send' | 'publish',
    client: pg.ClientBase,
    definition: CommandDefinition | EventDefinition,
    payload: unknown,
    options: OutboxSendOptions = {},
  ): Promise<string> {
    const expected = verb === 'send' ? 'command' : 'event';
    if (definition.kind !== expected) {
      throw new HarrierError(
        'wrong-kind',
        `outbox.${verb} takes ${verb === 'send' ? 'a command' : 'an event'}, but "${definition.type}" is not one: use outbox.${verb === 'send' ? 'publish' : 'send'}`,
      );
    }
    const { deliverAt, ...rest } = options;
    const message = this.#preparer.prepare(
      definition,
      payload as never,
      deliverAt === undefined ? rest : { ...rest, at: new Date(deliverAt) },
    );
    await this.record(client, [message]);
    return message.id;
  }
}
