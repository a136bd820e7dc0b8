import type pg from 'pg';
import type { EndpointTopology, SubscriptionTopology, Topology } from '../admin/topology.js';
import type { QueueDepth, SubscriptionSpec } from '../broker/message-broker.js';
import { commandQueue, subscriptionQueue } from '../broker/queue-names.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import type { PostgresTables } from './postgres-schema.js';

/** One row of the broker's `routes` table. */
interface RouteRow {
  readonly endpoint: string;
  readonly kind: 'command' | 'event';
  readonly handler: string;
  readonly type: string;
  readonly ordered: boolean;
  readonly registered_at: string;
}

/** The queues a subscription is delivered from, as `DeliveryFacts.queue` names them. */
function queuesOf(endpoint: string, spec: SubscriptionSpec): string[] {
  return spec.kind === 'event' ? [subscriptionQueue(endpoint, spec.handler)] : spec.types.map(commandQueue);
}

/** A subscription being read from its routes rows. */
interface SpecBuilder {
  readonly handler: string;
  readonly kind: 'command' | 'event';
  readonly types: string[];
  readonly ordered: string[];
}

/** An endpoint's registered subscriptions and when it last registered, from its routes rows. */
interface RegisteredEndpoint {
  readonly specs: SubscriptionSpec[];
  readonly registeredAt: number;
}

/** The registered subscriptions of each endpoint, from the routes rows (ordered by endpoint). */
function endpointsOf(rows: readonly RouteRow[]): Map<string, RegisteredEndpoint> {
  const builders = new Map<string, { at: number; specs: Map<string, SpecBuilder> }>();
  for (const row of rows) {
    let endpoint = builders.get(row.endpoint);
    if (endpoint === undefined) {
      endpoint = { at: 0, specs: new Map() };
      builders.set(row.endpoint, endpoint);
    }
    endpoint.at = Math.max(endpoint.at, Number(row.registered_at));
    const key = `${row.kind}\u0000${row.handler}`;
    let spec = endpoint.specs.get(key);
    if (spec === undefined) {
      spec = { handler: row.handler, kind: row.kind, types: [], ordered: [] };
      endpoint.specs.set(key, spec);
    }
    spec.types.push(row.type);
    if (row.ordered) spec.ordered.push(row.type);
  }
  const endpoints = new Map<string, RegisteredEndpoint>();
  for (const [name, { at, specs }] of builders) {
    endpoints.set(name, {
      registeredAt: at,
      specs: [...specs.values()].map(({ handler, kind, types, ordered }) => ({
        handler,
        kind,
        types,
        ...(ordered.length > 0 ? { orderedTypes: ordered } : {}),
      })),
    });
  }
  return endpoints;
}

/**
 * The topology of the Harrier system in `tables.schema`: the endpoints PostgresBroker registered in
 * its `routes` table and the depths of their queues in its `queue` table (`waiting` due by `nowMs`,
 * `active` held by a receiver, `delayed` due later), in two statements.
 *
 * @remarks
 * Reads the broker's tables only when they exist (`to_regclass`). A schema whose broker tables are
 * empty belongs to a system whose broker is elsewhere (Redis) or has not started: its topology is
 * empty, with a note saying where to look instead.
 */
export async function postgresTopology(
  pool: pg.Pool,
  tables: PostgresTables,
  nowMs: number,
): Promise<Topology> {
  const found = await pool.query<{ routes: boolean; queue: boolean }>(
    `SELECT to_regclass($1) IS NOT NULL AS routes, to_regclass($2) IS NOT NULL AS queue`,
    [`${tables.quotedSchema}.routes`, `${tables.quotedSchema}.queue`],
  );
  const present = found.rows[0];
  const elsewhere = `its endpoints are registered where its broker is (for Redis, run \`harrier topology --url redis://...\`)`;
  if (present?.routes !== true || !present.queue) {
    return {
      endpoints: [],
      note: `schema "${tables.schema}" has no PostgreSQL broker tables (routes, queue): ${elsewhere}`,
    };
  }
  const routes = await pool.query<RouteRow>(
    `SELECT endpoint, kind, handler, type, ordered, registered_at FROM ${tables.routes}
      ORDER BY endpoint COLLATE "C", kind, handler COLLATE "C", type COLLATE "C"`,
  );
  if (routes.rows.length === 0) {
    return {
      endpoints: [],
      note: `no endpoint registered with a PostgresBroker in schema "${tables.schema}": ${elsewhere}`,
    };
  }
  const byEndpoint = endpointsOf(routes.rows);
  const queues = [...byEndpoint].flatMap(([endpoint, { specs }]) =>
    specs.flatMap((spec) => queuesOf(endpoint, spec)),
  );
  const counted = await pool.query<{ queue: string; waiting: number; active: number; delayed: number }>(
    `SELECT queue,
            count(*) FILTER (WHERE delivery IS NULL AND run_at <= $2)::int AS waiting,
            count(*) FILTER (WHERE delivery IS NOT NULL)::int AS active,
            count(*) FILTER (WHERE delivery IS NULL AND run_at > $2)::int AS delayed
       FROM ${tables.queue} WHERE queue = ANY($1::text[]) GROUP BY queue`,
    [queues, nowMs],
  );
  const depths = new Map(counted.rows.map((row) => [row.queue, row]));
  const depthOf = (queue: string): QueueDepth => {
    const row = depths.get(queue);
    return { queue, waiting: row?.waiting ?? 0, active: row?.active ?? 0, delayed: row?.delayed ?? 0 };
  };
  const endpoints: EndpointTopology[] = [...byEndpoint].map(([endpoint, { specs, registeredAt }]) => ({
    endpoint,
    registeredAt,
    subscriptions: specs.map((subscription): SubscriptionTopology => {
      const own = queuesOf(endpoint, subscription).map(depthOf);
      return { subscription, queues: own, total: sumQueueDepths(own[0]?.queue ?? '', own) };
    }),
  }));
  return { endpoints };
}
