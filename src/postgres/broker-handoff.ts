import type pg from 'pg';
import type { MessageBroker, OutgoingMessage } from '../broker/message-broker.js';
import type { UnitOfWorkBus } from '../dispatch/transactional-unit-of-work.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { PostgresBroker } from './broker/postgres-broker.js';
import { holdClient } from './held-client.js';
import type { PostgresTables } from './postgres-schema.js';

/**
 * What the unit of work's hand-off needs of a broker that keeps its queues in PostgreSQL: the
 * broker (to match the bus's), where its tables are, and its own insert, run in the unit's
 * transaction.
 */
export interface HandoffTarget {
  /** The broker instance the bus must publish through and receive from. */
  readonly broker: MessageBroker;
  /** The broker's tables. */
  readonly tables: PostgresTables;
  /** The broker's pool, asked which database it is on. */
  readonly pool: pg.Pool;
  /**
   * Inserts `messages` into the broker's queue with `client`, in its open transaction, exactly as
   * the broker's `publishBatch` would (routes, `no-route`, dedupe, `deliverAt`, fan-out, times of
   * the broker's clock).
   */
  insert(client: pg.ClientBase, messages: readonly OutgoingMessage[]): Promise<unknown>;
}

/** Which database a pool reaches: the server's system identifier and the database's name. */
interface DatabaseIdentity {
  readonly database: string;
  /** `pg_control_system().system_identifier`; null where the server does not let the user read it. */
  readonly system: string | null;
  /** The server's address and port as the session sees them (null on a Unix socket). */
  readonly address: string | null;
}

async function identityOf(pool: pg.Pool): Promise<DatabaseIdentity> {
  const held = await holdClient(pool);
  const { client } = held;
  try {
    const { rows } = await client.query<{ database: string; address: string | null }>(
      `SELECT current_database() AS database, inet_server_addr()::text || ':' || inet_server_port() AS address`,
    );
    let system: string | null = null;
    try {
      const found = await client.query<{ system: string }>(
        'SELECT system_identifier::text AS system FROM pg_control_system()',
      );
      system = found.rows[0]?.system ?? null;
    } catch {
      // Some hosted servers refuse it; the database name and address then decide.
    }
    return { database: rows[0]?.database ?? '', system, address: rows[0]?.address ?? null };
  } finally {
    held.release();
  }
}

function sameDatabase(a: DatabaseIdentity, b: DatabaseIdentity): boolean {
  if (a.database !== b.database) return false;
  if (a.system !== null && b.system !== null) return a.system === b.system;
  return a.address === b.address;
}

/**
 * The hand-off of a `postgresUnitOfWork` given a `broker`: what a handler records is inserted into
 * the broker's queue in the handler's own transaction (no outbox, no relay).
 *
 * @remarks
 * It works only when the bus receives from that broker, appends nothing to an event log, and the
 * broker's tables are in the unit's database: {@link BrokerHandoff.attach} checks all three when
 * the bus starts, and fails the start with HarrierError `invalid-option` naming the fix otherwise.
 */
export class BrokerHandoff {
  readonly #target: HandoffTarget;
  /** The bus of each endpoint the unit serves, as it attached. */
  readonly #buses = new Map<string, UnitOfWorkBus>();
  #checked: Promise<void> | undefined;

  constructor(target: HandoffTarget) {
    this.#target = target;
  }

  /** The schema of the broker's tables. */
  get schema(): string {
    return this.#target.tables.schema;
  }

  /**
   * Checks that `bus` can use the hand-off, then remembers it for its endpoint's calls.
   * @param unitPool - the unit's pool, whose database must be the broker's.
   * @throws HarrierError `invalid-option` naming the fix.
   */
  async attach(bus: UnitOfWorkBus, unitPool: pg.Pool): Promise<void> {
    if (bus.broker !== this.#target.broker) {
      throw new HarrierError(
        'invalid-option',
        `postgresUnitOfWork's broker is not the broker of the bus of endpoint "${bus.endpoint}": the unit inserts what handlers send into its broker's queue, which this bus does not receive from. Give createBus and postgresUnitOfWork the same PostgresBroker instance, or leave out the unit's broker option (the outbox and its relay then publish through the bus)`,
      );
    }
    if (bus.eventLog) {
      throw new HarrierError(
        'invalid-option',
        `postgresUnitOfWork({ broker }) inserts what handlers publish straight into the broker's queue, so the events would never reach the event log of the bus of endpoint "${bus.endpoint}": remove eventLog from the bus (its projections are then fed by the broker, in the handler's transaction), or leave out the unit's broker option and run the outbox relay`,
      );
    }
    await this.#checkDatabase(unitPool);
    this.#buses.set(bus.endpoint, bus);
  }

  /**
   * Inserts what a call of `endpoint` recorded into the broker's queue with `client`, in the call's
   * transaction.
   * @throws HarrierError `invalid-option` when the endpoint's bus never started (never attached);
   *   `no-route` as the broker's publish.
   */
  async store(client: pg.ClientBase, endpoint: string, messages: readonly OutgoingMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const bus = this.#buses.get(endpoint);
    if (bus === undefined) {
      throw new HarrierError(
        'invalid-option',
        `postgresUnitOfWork({ broker }) hands messages to the broker only for a bus that started: call bus.start() of endpoint "${endpoint}" before its handlers run (execute included)`,
      );
    }
    await this.#target.insert(
      client,
      messages.map((message) => bus.forBroker(message)),
    );
  }

  #checkDatabase(unitPool: pg.Pool): Promise<void> {
    this.#checked ??= (async () => {
      const [unit, broker] = await Promise.all([identityOf(unitPool), identityOf(this.#target.pool)]);
      if (!sameDatabase(unit, broker)) {
        throw new HarrierError(
          'invalid-option',
          `postgresUnitOfWork's connection reaches database "${unit.database}"${unit.address !== null ? ` at ${unit.address}` : ''}, and its broker's reaches "${broker.database}"${broker.address !== null ? ` at ${broker.address}` : ''}: the hand-off inserts messages into the broker's tables in the handler's transaction, so both must be one database. Give the unit the broker's database (the same pool or URL), or leave out the unit's broker option to use the outbox and its relay`,
        );
      }
    })().catch((error: unknown) => {
      // Checked again on the next start: the server may be back, or the configuration changed.
      this.#checked = undefined;
      throw error;
    });
    return this.#checked;
  }
}

/** The hand-off target of each PostgresBroker, registered by its constructor. */
const targets = new WeakMap<object, HandoffTarget>();

/**
 * Makes `target.broker` usable as `postgresUnitOfWork({ broker })`: PostgresBroker's constructor
 * calls it, so the unit reaches the broker's tables, pool, clock and dedupe window without them
 * being public.
 */
export function registerHandoffTarget(target: HandoffTarget): void {
  targets.set(target.broker, target);
}

/**
 * The {@link HandoffTarget} of a broker given as `postgresUnitOfWork({ broker })`.
 * @throws HarrierError `invalid-option` for a broker that is not a PostgresBroker.
 */
export function handoffTargetOf(broker: PostgresBroker): HandoffTarget {
  const target = targets.get(broker);
  if (target === undefined) {
    throw new HarrierError(
      'invalid-option',
      'postgresUnitOfWork: broker must be a PostgresBroker (harrier/postgres), whose queue the unit inserts recorded messages into. With another broker, leave the option out: the outbox and its relay publish what handlers record',
    );
  }
  return target;
}
