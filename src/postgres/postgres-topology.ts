import type pg from 'pg';
import type { Topology } from '../admin/topology.js';
import type { PostgresTables } from './postgres-schema.js';

/**
 * The topology of the Harrier system in `tables.schema`: the endpoints PostgresBroker registered in
 * its `routes` table and the depths of their queues in its `queue` table.
 *
 * @remarks
 * Reads the broker's tables only when they exist (`to_regclass`): a schema migrated before the
 * PostgreSQL broker, or a system whose broker is Redis or RabbitMQ, has none, and its topology is
 * empty, with a note saying where to look instead.
 */
export async function postgresTopology(pool: pg.Pool, tables: PostgresTables): Promise<Topology> {
  const found = await pool.query<{ routes: boolean; queue: boolean }>(
    `SELECT to_regclass($1) IS NOT NULL AS routes, to_regclass($2) IS NOT NULL AS queue`,
    [`${tables.quotedSchema}.routes`, `${tables.quotedSchema}.queue`],
  );
  const present = found.rows[0];
  if (present?.routes !== true || !present.queue) {
    return {
      endpoints: [],
      note: `schema "${tables.schema}" has no PostgreSQL broker tables (routes, queue): its endpoints are registered where its broker is (for Redis, run \`harrier topology --url redis://...\`)`,
    };
  }
  return {
    endpoints: [],
    note: `schema "${tables.schema}" has PostgreSQL broker tables, which this version of the harrier CLI cannot read yet`,
  };
}
