import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import {
  migratePostgres,
  PostgresCheckpointStore,
  PostgresBroker,
  PostgresDeadLetterStore,
  PostgresSagaStore,
} from '../../src/postgres/index.js';
import { startDashboardCli } from '../helpers/dashboard-cli.js';
import { assertHarrierBuilt, countDeadLetter, harrier, jsonLines } from '../helpers/harrier-cli.js';
import { freePort } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';

const databaseUrl = inject('databaseUrl');
const { pool } = useSharedPostgres(databaseUrl);

/** A dead letter of a `cli.Count` command in endpoint `counter`. */
function deadLetter(n: number): DeadLetterRecord {
  return countDeadLetter({ n, note: n === 2 ? 'needle in the payload' : 'hay' }, { retried: false });
}

describe('harrier CLI on PostgreSQL', () => {
  const schema = freshSchema();
  const records = [deadLetter(0), deadLetter(1), deadLetter(2)];
  const at = Date.UTC(2026, 0, 1);
  /** The flags that name the test's system. */
  const p = ['--database-url', databaseUrl, '--schema', schema, '--json'];

  beforeAll(async () => {
    assertHarrierBuilt();
    await migratePostgres(pool, { schema });
    const store = new PostgresDeadLetterStore({ connection: pool, schema });
    for (const record of records) await store.add(record);
    await store.close();
    const checkpoints = new PostgresCheckpointStore({ connection: pool, schema });
    await checkpoints.commit('totals', 'orders', 0, 41, at);
    await checkpoints.close();
    const sagas = new PostgresSagaStore({ connection: pool, schema });
    const timeout = { id: 't-1', type: 'orders.PaymentTimedOut', dueAt: at + 60_000 };
    await sagas.save(
      {
        saga: 'fulfilment',
        id: 'o-1',
        state: { paid: false },
        status: 'active',
        timeouts: [timeout],
        now: at,
      },
      0,
    );
    await sagas.save(
      { saga: 'fulfilment', id: 'o-2', state: { paid: true }, status: 'active', timeouts: [], now: at },
      0,
    );
    await sagas.close();
  }, 200_000);

  afterAll(async () => {
    await dropSchema(pool, schema);
  });

  describe('dlq', () => {
    it('lists, pages, shows and groups the dead letters of the schema', async () => {
      const list = await harrier(['dlq', 'list', '--limit', '2', ...p]);
      expect(list.stderr).toBe('');
      expect(list.code).toBe(0);
      const listed = jsonLines(list.stdout);
      expect(listed.slice(0, 2).map((l) => l.id)).toEqual(records.slice(0, 2).map((r) => r.id));
      const next = String(listed[2]?.next);
      const page2 = jsonLines((await harrier(['dlq', 'list', '--cursor', next, ...p])).stdout);
      expect(page2.map((l) => l.id)).toEqual([records[2]?.id]);

      const show = await harrier(['dlq', 'show', records[0]?.id ?? '', ...p]);
      expect(show.code).toBe(0);
      expect(jsonLines(show.stdout)).toEqual([{ ...JSON.parse(JSON.stringify(records[0])), version: 1 }]);

      const groups = jsonLines((await harrier(['dlq', 'groups', ...p])).stdout);
      expect(groups).toEqual([
        expect.objectContaining({ fingerprint: records[0]?.fingerprint, count: 3, handler: 'CountHandler' }),
      ]);

      const missing = await harrier(['dlq', 'show', 'no-such-id', ...p]);
      expect(missing.code).toBe(4);
    });

    it('takes the URL from DATABASE_URL and the schema from HARRIER_SCHEMA', async () => {
      const list = await harrier(['dlq', 'list', '--json'], {
        DATABASE_URL: databaseUrl,
        HARRIER_SCHEMA: schema,
      });
      expect(list.code).toBe(0);
      expect(jsonLines(list.stdout).map((l) => l.id)).toEqual(records.map((r) => r.id));
    });

    it('takes a postgres:// URL from --url and HARRIER_URL too', async () => {
      for (const [args, env] of [
        [['--url', databaseUrl], {}],
        [[], { HARRIER_URL: databaseUrl }],
      ] as const) {
        const list = await harrier(['dlq', 'list', '--schema', schema, '--json', ...args], env);
        expect(list.code).toBe(0);
        expect(jsonLines(list.stdout)).toHaveLength(3);
      }
    });

    it('refuses a replay with exit 2 while no endpoint registered with a PostgresBroker, and replays nothing', async () => {
      const result = await harrier(['dlq', 'replay', records[0]?.id ?? '', ...p]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('no endpoint registered with a PostgresBroker');
      expect(result.stderr).toContain('replayDeadLetters');
      const store = new PostgresDeadLetterStore({ connection: pool, schema });
      try {
        expect(await store.count()).toBe(3);
      } finally {
        await store.close();
      }
    });
  });

  describe('sagas', () => {
    it('lists the instances and shows one', async () => {
      const list = await harrier(['sagas', 'list', 'fulfilment', ...p]);
      expect(list.code).toBe(0);
      expect(jsonLines(list.stdout).map((l) => [l.saga, l.id, l.status])).toEqual([
        ['fulfilment', 'o-1', 'active'],
        ['fulfilment', 'o-2', 'active'],
      ]);
      const show = await harrier(['sagas', 'show', 'fulfilment', 'o-1', ...p]);
      expect(show.code).toBe(0);
      expect(jsonLines(show.stdout)).toEqual([
        expect.objectContaining({ saga: 'fulfilment', id: 'o-1', state: { paid: false }, version: 1 }),
      ]);
      const missing = await harrier(['sagas', 'show', 'fulfilment', 'o-9', ...p]);
      expect(missing.code).toBe(4);
      expect(missing.stderr).toContain(`under schema ${schema}`);
    });
  });

  describe('projections status', () => {
    it('shows the stored checkpoints without a log end, and says where the lag is', async () => {
      const status = await harrier(['projections', 'status', ...p]);
      expect(status.code).toBe(0);
      expect(jsonLines(status.stdout)).toEqual([
        {
          projection: 'totals',
          topic: 'orders',
          partition: 0,
          checkpoint: 41,
          endOffset: null,
          lag: null,
          updatedAt: new Date(at).toISOString(),
          generation: 0,
          rebuilding: null,
        },
      ]);
      expect(status.stderr).toContain('PostgreSQL keeps no event log');
    });
  });

  describe('topology', () => {
    it('lists no endpoints while none registered with a PostgresBroker, and says where to look', async () => {
      const topology = await harrier(['topology', ...p]);
      expect(topology.code).toBe(0);
      expect(topology.stdout).toBe('');
      expect(topology.stderr).toContain(`no endpoint registered with a PostgresBroker in schema "${schema}"`);
    });
  });

  describe('dashboard', () => {
    it('serves the dead letters of the schema, searches them, and exits 0 on SIGTERM', async () => {
      const run = startDashboardCli(['dashboard', '--port', '0', ...p]);
      const { url } = JSON.parse(await run.firstLine) as { url: string };
      const page = await (await fetch(url)).text();
      expect(page).toContain('cli.Count');
      expect(page).toContain('gateway down');
      const record = await (await fetch(`${url}records/${records[1]?.id ?? ''}`)).text();
      expect(record).toContain('CountHandler');
      const search = await (await fetch(`${url}?text=NEEDLE`)).text();
      expect(search).toContain(records[2]?.id.slice(0, 8) ?? '');
      expect(search).not.toContain(records[1]?.id.slice(0, 8) ?? '');
      run.child.kill('SIGTERM');
      expect(await run.exit).toBe(0);
    });

    it('refuses --allow-actions with exit 2 while no endpoint registered with a PostgresBroker', async () => {
      const result = await harrier(['dashboard', '--port', '0', '--allow-actions', ...p]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('no endpoint registered with a PostgresBroker');
    });
  });

  describe('with a PostgresBroker', () => {
    /** The queue rows of a message, by queue. */
    const queued = async (messageId: string): Promise<string[]> =>
      (
        await pool.query<{ queue: string }>(`SELECT queue FROM "${schema}".queue WHERE message_id = $1`, [
          messageId,
        ])
      ).rows.map((row) => row.queue);

    beforeAll(async () => {
      const broker = new PostgresBroker({ connection: pool, schema });
      try {
        await broker.register('counter', [
          { handler: 'CountHandler', kind: 'command', types: ['cli.Count'] },
        ]);
        await broker.register('audit', [{ handler: 'AuditCount', kind: 'event', types: ['cli.Counted'] }]);
        // One command due later: a delayed row in the topology.
        await broker.publish({
          id: uuidv7(),
          kind: 'command',
          type: 'cli.Count',
          body: '{}',
          deliverAt: Date.now() + 3_600_000,
        });
      } finally {
        await broker.close();
      }
    });

    it('shows the registered endpoints, their subscriptions and queue depths in topology', async () => {
      const topology = await harrier(['topology', ...p]);
      expect(topology.code).toBe(0);
      const lines = jsonLines(topology.stdout);
      expect(lines).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ endpoint: 'audit', handler: 'AuditCount', kind: 'event' }),
          expect.objectContaining({ endpoint: 'counter', handler: 'CountHandler', kind: 'command' }),
        ]),
      );
      expect(JSON.stringify(lines)).toContain('"delayed":1');
      expect(topology.stderr).not.toContain('no endpoint registered');
    });

    it('replays a dead letter into its queue through the PostgresBroker', async () => {
      const record = records[0];
      if (record === undefined) throw new Error('no record');
      const result = await harrier(['dlq', 'replay', record.id, ...p]);
      expect(result.code).toBe(0);
      expect(await queued(record.messageId ?? '')).toEqual(['cmd~cli.Count']);
    });
  });

  describe('postgres migrate', () => {
    it('takes the schema from HARRIER_SCHEMA', async () => {
      const own = freshSchema();
      try {
        const result = await harrier(['postgres', 'migrate', '--json'], {
          DATABASE_URL: databaseUrl,
          HARRIER_SCHEMA: own,
        });
        expect(result.code).toBe(0);
        expect(jsonLines(result.stdout)).toEqual([expect.objectContaining({ schema: own, from: 0 })]);
      } finally {
        await dropSchema(pool, own);
      }
    });
  });

  describe('connection', () => {
    it('exits 3 naming the URL, without its password, when PostgreSQL is unreachable', async () => {
      const port = await freePort();
      const result = await harrier([
        'dlq',
        'list',
        '--database-url',
        `postgres://app:s3cret@127.0.0.1:${port}/app`,
        '--json',
      ]);
      expect(result.code).toBe(3);
      expect(result.stderr).toContain(
        `Could not reach PostgreSQL at postgres://app:***@127.0.0.1:${port}/app`,
      );
      expect(result.stderr).not.toContain('s3cret');
    });

    it('exits 1 naming the migrate command when the schema is not migrated', async () => {
      const result = await harrier(['dlq', 'list', '--database-url', databaseUrl, '--schema', freshSchema()]);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('harrier postgres migrate --schema');
    });

    it('exits 2 for a schema name Harrier cannot use', async () => {
      const result = await harrier(['dlq', 'list', '--database-url', databaseUrl, '--schema', 'Bad-Name']);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('"Bad-Name" is not a plain identifier');
    });

    it('exits 2 when both REDIS_URL and DATABASE_URL are set and nothing says which', async () => {
      const result = await harrier(['dlq', 'list'], {
        REDIS_URL: 'redis://127.0.0.1:6379',
        DATABASE_URL: databaseUrl,
      });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('Both REDIS_URL and DATABASE_URL are set');
    });
  });
});
