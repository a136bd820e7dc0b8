import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type MessageBus,
  type PayloadOf,
} from '../../src/index.js';
import { runCli } from '../helpers/cli-in-process.js';
import { CSRF_COOKIE } from '../../src/dashboard/index.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { serveDashboard, tableRows, unescape } from '../helpers/dashboard.js';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { migratePostgres } from '../../src/postgres/migrate-postgres.js';
import { MIGRATIONS } from '../../src/postgres/migrations.js';
import { postgresTables } from '../../src/postgres/postgres-schema.js';
import {
  startOutboxRelay,
  type OutboxPublisher,
  type OutboxRelay,
  type OutboxRelayOptions,
} from '../../src/postgres/outbox-relay.js';
import { PostgresOutbox } from '../../src/postgres/postgres-outbox.js';
import { PostgresOutboxAdmin } from '../../src/postgres/postgres-outbox-admin.js';
import { BullMqBroker } from '../../src/redis/index.js';
import { freePort, pingRedis, waitFor } from '../helpers/local-redis.js';
import { dropSchema, freshSchema, useSharedPostgres } from '../helpers/postgres.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const databaseUrl = inject('databaseUrl');
const redisUrl = inject('redisUrl');
const { pool } = useSharedPostgres(databaseUrl);
const WAIT = { timeoutMs: 15_000 };

const Post = defineCommand('pk.Post', {
  schema: z.object({ account: z.string(), n: z.number() }),
  partitionKey: 'account',
  ordered: true,
});
/** Handled by no endpoint until a test starts the shipping bus: publishing it fails with no-route. */
const Ship = defineCommand('pk.Ship', {
  schema: z.object({ account: z.string() }),
  partitionKey: 'account',
  ordered: true,
});

interface Setup {
  readonly schema: string;
  readonly prefix: string;
  readonly bus: MessageBus;
  readonly outbox: PostgresOutbox;
  readonly posts: { account: string; n: number; at: number }[];
  readonly shipped: string[];
  relay(options?: Partial<OutboxRelayOptions>): Promise<OutboxRelay>;
  /** Starts an endpoint that handles pk.Ship, so the command gets a route. */
  startShipping(): Promise<void>;
  admin(): PostgresOutboxAdmin;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setUp(): Promise<Setup> {
  const schema = freshSchema();
  await migratePostgres(pool, { schema });
  const prefix = freshPrefix();
  const posts: { account: string; n: number; at: number }[] = [];
  const shipped: string[] = [];
  @CommandHandler(Post)
  class Ledger {
    handle(payload: PayloadOf<typeof Post>) {
      posts.push({ ...payload, at: Date.now() });
    }
  }
  @CommandHandler(Ship)
  class Shipping {
    handle(payload: PayloadOf<typeof Ship>) {
      shipped.push(payload.account);
    }
  }
  const busOf = (endpoint: string, handlers: (new () => object)[]): MessageBus =>
    createBus({
      endpoint,
      broker: new BullMqBroker({ connection: redisUrl, prefix, partitions: 4, logger: silentLogger }),
      handlers,
      logger: silentLogger,
    });
  const bus = busOf('shop', [Ledger]);
  await bus.start();
  const buses: MessageBus[] = [bus];
  const relays: OutboxRelay[] = [];
  const admins: PostgresOutboxAdmin[] = [];
  cleanups.push(async () => {
    await Promise.all(relays.map((r) => r.stop()));
    await Promise.all(admins.map((a) => a.close()));
    await Promise.all(buses.map((b) => b.stop({ gracePeriodMs: 200 })));
    const redis = new Redis(redisUrl);
    await deleteKeys(redis, prefix);
    redis.disconnect();
    await dropSchema(pool, schema);
  });
  return {
    schema,
    prefix,
    bus,
    outbox: new PostgresOutbox(bus, { schema }),
    posts,
    shipped,
    relay: async (options = {}) => {
      const relay = await startOutboxRelay({
        connection: pool,
        publisher: bus.publisher,
        schema,
        logger: silentLogger,
        pollIntervalMs: 50,
        retryDelayMs: 10,
        ...options,
      });
      relays.push(relay);
      return relay;
    },
    startShipping: async () => {
      const shipping = busOf('shipping', [Shipping]);
      buses.push(shipping);
      await shipping.start();
    },
    admin: () => {
      const admin = new PostgresOutboxAdmin({ connection: pool, schema });
      admins.push(admin);
      return admin;
    },
  };
}

async function inTransaction(work: (client: pg.PoolClient) => Promise<void>): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await work(client);
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}

/** One Ship of `account` then three Posts of the same key: one lane, the Ship first. */
async function shipThenPosts(s: Setup, account: string): Promise<string> {
  let shipId = '';
  await inTransaction(async (client) => {
    shipId = await s.outbox.send(client, Ship, { account });
    for (const n of [1, 2, 3]) await s.outbox.send(client, Post, { account, n });
  });
  return shipId;
}

async function parkedRows(schema: string) {
  const result = await pool.query<{
    id: string;
    message_id: string;
    attempts: number;
    reason: string;
    error_code: string | null;
    error: string;
    first_failed_at: string;
    last_failed_at: string;
    parked_at: string;
  }>(`SELECT * FROM "${schema}".outbox_parked ORDER BY id`);
  return result.rows;
}

async function outboxAttempts(schema: string): Promise<{ message_id: string; attempts: number }[]> {
  const result = await pool.query<{ message_id: string; attempts: number }>(
    `SELECT message_id, attempts FROM "${schema}".outbox ORDER BY seq`,
  );
  return result.rows;
}

/** Runs the CLI in this process with captured output (stderr a terminal with `stderrTty`). */
const cli = (argv: readonly string[], stderrTty = false) =>
  runCli(argv, { stderrTty, env: { DATABASE_URL: databaseUrl } });

const jsonLines = (text: string): unknown[] =>
  text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as unknown);

describe('OutboxRelay parking', () => {
  describe('when a command has no route', () => {
    it('parks it after maxAttempts tries, and the rows behind it in its lane are relayed', async () => {
      const s = await setUp();
      const shipId = await shipThenPosts(s, 'acct-1');
      const relay = await s.relay({ maxAttempts: 3 });
      await waitFor('the posts behind it', () => s.posts.length === 3, WAIT);
      const [parked, ...more] = await parkedRows(s.schema);
      expect(more).toEqual([]);
      expect(parked).toMatchObject({
        message_id: shipId,
        attempts: 3,
        reason: 'failed',
        error_code: 'no-route',
      });
      expect(parked!.error).toMatch(/route/i);
      expect(Number(parked!.first_failed_at)).toBeLessThan(Number(parked!.last_failed_at));
      expect(Number(parked!.parked_at)).toBe(Number(parked!.last_failed_at));
      // Order per lane held until the row was parked: tries at 0, 10 and 30 ms (retryDelayMs 10).
      for (const post of s.posts) {
        expect(post.at).toBeGreaterThanOrEqual(Number(parked!.first_failed_at) + 30);
      }
      expect(s.posts.map((p) => p.n)).toEqual([1, 2, 3]);
      expect(await outboxAttempts(s.schema)).toEqual([]);
      expect(relay.stats().parked).toBe(1);
    });
  });

  describe('when a row that fails is malformed (its body is no envelope)', () => {
    it('parks it at its first failure with reason malformed', async () => {
      const s = await setUp();
      await pool.query(
        `INSERT INTO "${s.schema}".outbox (message_id, kind, type, body, lane, created_at)
         VALUES ('m-1', 'command', 'pk.Nowhere', 'not json', 0, 0)`,
      );
      await s.relay({ maxAttempts: 5 });
      await waitFor('the row to be parked', async () => (await parkedRows(s.schema)).length === 1, WAIT);
      expect((await parkedRows(s.schema))[0]).toMatchObject({
        message_id: 'm-1',
        attempts: 1,
        reason: 'malformed',
        error_code: null,
      });
    });
  });

  describe('when the publisher reports an outage', () => {
    it('never counts a try nor parks a row, and relays once the broker is back', async () => {
      const s = await setUp();
      let down = true;
      let calls = 0;
      const publisher: OutboxPublisher = {
        publish: async (messages, options) => {
          calls += 1;
          if (down) throw new HarrierError('redis-unavailable', 'Redis at 127.0.0.1:1 is unreachable');
          await s.bus.publisher.publish(messages, options);
        },
      };
      await inTransaction(async (client) => {
        for (const n of [1, 2]) await s.outbox.send(client, Post, { account: 'acct-2', n });
      });
      await s.relay({ publisher, maxAttempts: 2 });
      await waitFor('many failed publishes', () => calls >= 8, WAIT);
      expect(await parkedRows(s.schema)).toEqual([]);
      expect((await outboxAttempts(s.schema)).map((row) => row.attempts)).toEqual([0, 0]);
      down = false;
      await waitFor('the posts', () => s.posts.length === 2, WAIT);
      expect(await parkedRows(s.schema)).toEqual([]);
    });
  });

  describe("when the broker's Redis is stopped and started again", () => {
    it('counts no try and parks nothing while it is down, and relays once it is back', async () => {
      // A Redis of this test's own, with AOF on, so the routes the bus registered survive its restart.
      const port = await freePort();
      const dir = mkdtempSync(join(tmpdir(), 'harrier-park-redis-'));
      let server: ChildProcess | undefined;
      const startServer = async (): Promise<void> => {
        server = spawn(
          'redis-server',
          ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--dir', dir],
          { stdio: 'ignore' },
        );
        await waitFor('redis-server to answer', () => pingRedis(port), WAIT);
      };
      const stopServer = async (): Promise<void> => {
        const running = server;
        server = undefined;
        if (running === undefined || running.exitCode !== null) return;
        const exited = new Promise((resolve) => running.once('exit', resolve));
        running.kill('SIGTERM');
        await exited;
      };
      await startServer();
      cleanups.push(async () => {
        await stopServer();
        rmSync(dir, { recursive: true, force: true });
      });
      const schema = freshSchema();
      await migratePostgres(pool, { schema });
      cleanups.push(() => dropSchema(pool, schema));
      const posts: number[] = [];
      @CommandHandler(Post)
      class Ledger {
        handle(payload: PayloadOf<typeof Post>) {
          posts.push(payload.n);
        }
      }
      const url = `redis://127.0.0.1:${port}`;
      const bus = createBus({
        endpoint: 'shop',
        broker: new BullMqBroker({
          connection: url,
          prefix: freshPrefix(),
          partitions: 4,
          logger: silentLogger,
        }),
        handlers: [Ledger],
        logger: silentLogger,
      });
      await bus.start();
      const outbox = new PostgresOutbox(bus, { schema });
      let heldBack = 0;
      const relay = await startOutboxRelay({
        connection: pool,
        publisher: bus.publisher,
        schema,
        pollIntervalMs: 50,
        maxAttempts: 2,
        retryDelayMs: 10,
        logger: {
          ...silentLogger,
          warn: (message: string) => {
            if (message.includes('could not publish lane')) heldBack += 1;
          },
        },
      });
      cleanups.push(async () => {
        await relay.stop();
        await bus.stop({ gracePeriodMs: 200 });
      });
      const send = (n: number) =>
        inTransaction(async (client) => {
          await outbox.send(client, Post, { account: 'acct-r', n });
        });
      await send(1);
      await waitFor('the first post', () => posts.length === 1, WAIT);
      await stopServer();
      await send(2);
      await send(3);
      await waitFor('the relay to fail on the outage several times', () => heldBack >= 4, {
        timeoutMs: 60_000,
      });
      expect(await parkedRows(schema)).toEqual([]);
      expect((await outboxAttempts(schema)).map((row) => row.attempts)).toEqual([0, 0]);
      await startServer();
      await waitFor('the posts after the outage', () => posts.length === 3, { timeoutMs: 60_000 });
      expect(posts).toEqual([1, 2, 3]);
      expect(await parkedRows(schema)).toEqual([]);
      expect(relay.stats().parked).toBe(0);
    }, 150_000);
  });

  describe('when the relay restarts', () => {
    it('keeps the tries counted before', async () => {
      const s = await setUp();
      const shipId = await shipThenPosts(s, 'acct-3');
      const first = await s.relay({ maxAttempts: 1000 });
      await waitFor(
        'two counted tries',
        async () => ((await outboxAttempts(s.schema))[0]?.attempts ?? 0) >= 2,
        WAIT,
      );
      await first.stop();
      const counted = (await outboxAttempts(s.schema))[0]!.attempts;
      expect(await parkedRows(s.schema)).toEqual([]);
      await s.relay({ maxAttempts: counted + 1 });
      await waitFor('the row to be parked', async () => (await parkedRows(s.schema)).length === 1, WAIT);
      expect((await parkedRows(s.schema))[0]).toMatchObject({ message_id: shipId, attempts: counted + 1 });
    });
  });
});

describe('PostgresOutboxAdmin', () => {
  describe('.replayParked', () => {
    it('puts the row back at the end of its lane, and it is relayed once a route exists', async () => {
      const s = await setUp();
      await shipThenPosts(s, 'acct-4');
      const relay = await s.relay({ maxAttempts: 2 });
      await waitFor('the posts', () => s.posts.length === 3, WAIT);
      const admin = s.admin();
      const { rows, next } = await admin.listParked();
      expect(next).toBeUndefined();
      expect(rows).toHaveLength(1);
      const row = rows[0]!;
      expect(row).toMatchObject({ type: 'pk.Ship', kind: 'command', attempts: 2, errorCode: 'no-route' });
      expect(await admin.getParked(row.id)).toEqual(row);
      await s.startShipping();
      expect(await admin.replayParked(row.id)).toBe(true);
      await waitFor('the shipment', () => s.shipped.length === 1, WAIT);
      expect(s.shipped).toEqual(['acct-4']);
      expect(await admin.countParked()).toBe(0);
      expect(await admin.getParked(row.id)).toBeUndefined();
      expect(await admin.replayParked(row.id)).toBe(false);
      expect(relay.stats().parked).toBe(1);
    });
  });

  describe('.listParked', () => {
    it('pages by cursor, oldest parked first', async () => {
      const s = await setUp();
      const ids: string[] = [];
      for (const account of ['a', 'b', 'c']) ids.push(await shipThenPosts(s, `acct-5${account}`));
      await s.relay({ maxAttempts: 1 });
      await waitFor('three parked rows', async () => (await parkedRows(s.schema)).length === 3, WAIT);
      const admin = s.admin();
      const first = await admin.listParked({ limit: 2 });
      expect(first.rows).toHaveLength(2);
      const second = await admin.listParked({ limit: 2, cursor: first.next! });
      expect(second.next).toBeUndefined();
      expect([...first.rows, ...second.rows].map((r) => r.messageId).sort()).toEqual([...ids].sort());
      await expect(admin.listParked({ cursor: 'nope' })).rejects.toMatchObject({ code: 'invalid-cursor' });
    });
  });
});

describe('harrier postgres outbox', () => {
  it('lists, shows, replays (one and --all) and deletes parked rows, in JSON', async () => {
    const s = await setUp();
    for (const account of ['a', 'b', 'c']) await shipThenPosts(s, `acct-6${account}`);
    await s.relay({ maxAttempts: 1 });
    await waitFor('three parked rows', async () => (await parkedRows(s.schema)).length === 3, WAIT);
    const at = ['--schema', s.schema, '--json'];

    const listed = await cli(['postgres', 'outbox', 'parked', ...at]);
    expect(listed).toMatchObject({ code: 0, stderr: '' });
    const rows = jsonLines(listed.stdout) as { id: string; type: string; errorCode: string }[];
    expect(rows).toHaveLength(3);
    expect(rows[0]).toMatchObject({ type: 'pk.Ship', errorCode: 'no-route', attempts: 1 });
    const [one, two, three] = rows.map((r) => r.id);

    const shown = await cli(['postgres', 'outbox', 'show', one!, ...at]);
    expect(shown.code).toBe(0);
    const [detail, ...extra] = jsonLines(shown.stdout) as Record<string, unknown>[];
    expect(extra).toEqual([]);
    expect(detail).toMatchObject({ ...rows[0], ordered: true, topic: null });
    expect(JSON.parse(detail!['body'] as string)).toMatchObject({
      type: 'pk.Ship',
      payload: { account: 'acct-6a' },
    });

    const missing = await cli(['postgres', 'outbox', 'show', '999999', ...at]);
    expect(missing.code).toBe(4);
    expect(jsonLines(missing.stdout)).toEqual([
      {
        id: '999999',
        error: {
          code: 'not-parked',
          message: expect.stringMatching(/No parked outbox row "999999"/) as unknown,
        },
      },
    ]);
    expect(missing.stderr).toMatch(/No parked outbox row "999999"/);

    const deleted = await cli(['postgres', 'outbox', 'delete', three!, ...at]);
    expect(deleted.code).toBe(0);
    expect(jsonLines(deleted.stdout)).toEqual([{ id: three, deleted: true }]);

    await s.startShipping();
    const replayed = await cli(['postgres', 'outbox', 'replay', one!, ...at]);
    expect(replayed.code).toBe(0);
    expect(jsonLines(replayed.stdout)).toEqual([{ id: one, replayed: true }]);
    await waitFor('the first shipment', () => s.shipped.length === 1, WAIT);

    const all = await cli(['postgres', 'outbox', 'replay', '--all', ...at]);
    expect(all.code).toBe(0);
    expect(jsonLines(all.stdout)).toEqual([{ replayed: 1 }]);
    await waitFor('the second shipment', () => s.shipped.length === 2, WAIT);
    expect(s.shipped.sort()).toEqual(['acct-6a', 'acct-6b']);
    expect(two).toBeDefined();

    const empty = await cli(['postgres', 'outbox', 'parked', ...at]);
    expect(empty).toMatchObject({ code: 0, stdout: '' });
    const usage = await cli(['postgres', 'outbox', 'replay', ...at]);
    expect(usage.code).toBe(2);
  });
});

describe("migration 4 ('parked outbox rows')", () => {
  it('upgrades a version-1 schema with rows in its outbox: they keep their place with 0 tries', async () => {
    const schema = freshSchema();
    cleanups.push(() => dropSchema(pool, schema));
    const tables = postgresTables(schema);
    await pool.query(`CREATE SCHEMA "${schema}"`);
    await pool.query(
      `CREATE TABLE ${tables.migrations} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    await pool.query(MIGRATIONS[0]!.sql(tables));
    await pool.query(`INSERT INTO ${tables.migrations} (version, name) VALUES (1, 'step 1')`);
    await pool.query(
      `INSERT INTO ${tables.outbox} (message_id, kind, type, body, lane, created_at) VALUES ('m-old', 'event', 'x.Y', '{}', 3, 7)`,
    );
    const report = await migratePostgres(pool, { schema });
    expect(report.from).toBe(1);
    expect(report.applied.map((step) => step.name)).toContain('parked outbox rows');
    const rows = await pool.query(
      `SELECT message_id, attempts, first_failed_at, last_failed_at, last_error FROM ${tables.outbox}`,
    );
    expect(rows.rows).toEqual([
      { message_id: 'm-old', attempts: 0, first_failed_at: null, last_failed_at: null, last_error: null },
    ]);
    const parked = await pool.query(`SELECT count(*)::int AS n FROM ${tables.outboxParked}`);
    expect(parked.rows).toEqual([{ n: 0 }]);
  });
});

describe('createDashboard with an outbox', () => {
  it('lists the parked rows at /outbox, linked from the header, and its Replay button puts one back', async () => {
    const s = await setUp();
    await shipThenPosts(s, 'acct-7');
    await s.relay({ maxAttempts: 1 });
    await waitFor('the parked row', async () => (await parkedRows(s.schema)).length === 1, WAIT);
    const [parked] = await parkedRows(s.schema);
    const served = await serveDashboard({
      deadLetters: new InMemoryDeadLetterStore(),
      allowActions: true,
      outbox: s.admin(),
    });
    cleanups.push(() => served.close());
    const page = await fetch(`${served.url}/outbox`);
    const text = await page.text();
    expect(page.status).toBe(200);
    expect(text).toContain('<strong aria-current="page">Outbox</strong>');
    const [row, ...more] = tableRows(text, 'parked-outbox');
    expect(more).toEqual([]);
    expect(row!.slice(0, 7)).toEqual([
      parked!.id,
      new Date(Number(parked!.parked_at)).toISOString(),
      'pk.Ship',
      'acct-7',
      expect.stringMatching(/^\d+$/) as unknown,
      '1',
      expect.stringMatching(/^no-route: /) as unknown,
    ]);
    const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    expect(cookie.startsWith(`${CSRF_COOKIE}=`)).toBe(true);
    const csrf = unescape(/name="csrf" value="([^"]+)"/.exec(text)?.[1] ?? '');
    await s.startShipping();
    const posted = await fetch(`${served.url}/actions/outbox-replay`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: served.url, cookie },
      body: new URLSearchParams([
        ['csrf', csrf],
        ['id', parked!.id],
      ]).toString(),
    });
    expect(posted.status).toBe(303);
    expect(posted.headers.get('location')).toBe('/outbox?replayed=1');
    await waitFor('the shipment', () => s.shipped.length === 1, WAIT);
    const after = await (await fetch(`${served.url}/outbox?replayed=1`)).text();
    expect(after).toContain('data-testid="outbox-replayed"');
    expect(after).toContain('data-testid="outbox-empty"');
  });
});

describe('harrier postgres outbox replay --all', () => {
  it('moves 250 parked rows back in transactions of 100, oldest parked first, drawing progress on a terminal', async () => {
    const schema = freshSchema();
    await migratePostgres(pool, { schema });
    cleanups.push(() => dropSchema(pool, schema));
    await pool.query(
      `INSERT INTO "${schema}".outbox_parked (message_id, kind, type, body, ordered, lane, created_at, attempts,
         reason, error_code, error, first_failed_at, last_failed_at, parked_at)
       SELECT 'm-' || n, 'command', 'pk.Ship', '{}', true, 5, n, 10, 'failed', 'no-route', 'no route', n, n, n
         FROM generate_series(1, 250) AS n`,
    );
    const replayed = await cli(['postgres', 'outbox', 'replay', '--all', '--schema', schema, '--json'], true);
    expect(replayed.code).toBe(0);
    expect(jsonLines(replayed.stdout)).toEqual([{ replayed: 250 }]);
    expect(replayed.stderr).toContain('replaying [');
    expect(replayed.stderr).toContain('250/250 100%');
    const back = await pool.query<{ message_id: string; attempts: number }>(
      `SELECT message_id, attempts FROM "${schema}".outbox ORDER BY seq`,
    );
    expect(back.rows.map((row) => row.message_id)).toEqual(
      Array.from({ length: 250 }, (_, i) => `m-${i + 1}`),
    );
    expect(back.rows.every((row) => row.attempts === 0)).toBe(true);
    expect(await parkedRows(schema)).toEqual([]);
  });
});
