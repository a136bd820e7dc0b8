import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Cluster, Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type MessageBus,
  type MessageContext,
} from '../../src/index.js';
import { createEnvelopeSigner } from '../../src/messages/signing.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import {
  BullMqBroker,
  RedisCheckpointStore,
  RedisDeadLetterStore,
  RedisEventLog,
  RedisSagaStore,
} from '../../src/redis/index.js';
import {
  assertHarrierBuilt,
  cliFailure,
  countDeadLetter,
  harrier,
  jsonLines,
} from '../helpers/harrier-cli.js';
import { deleteKeys } from '../helpers/redis.js';
import { RedisCluster } from '../helpers/redis-cluster.js';

const redisUrl = inject('redisUrl');

const Count = defineCommand('cli.Count', { schema: z.object({ n: z.number() }) });

/** A dead letter of a `cli.Count` command whose envelope is `body` (valid unless changed). */
function deadLetter(n: number, encode: (envelope: object) => string = JSON.stringify): DeadLetterRecord {
  return countDeadLetter({ n }, { encode });
}

/** Dead letter `n` as a projection fed from the event log leaves it: at `offset` of orders/2. */
function projectionDeadLetter(n: number, offset: number): DeadLetterRecord {
  return {
    ...deadLetter(n),
    reason: 'projection-failed',
    logPosition: { topic: 'orders', partition: 2, offset },
  };
}

function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = async (): Promise<void> => {
      if (await condition()) resolve();
      else if (Date.now() > deadline) reject(new Error('condition not met in time'));
      else setTimeout(() => void tick(), 50);
    };
    void tick();
  });
}

describe('harrier CLI', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  let env: Record<string, string>;
  const buses: MessageBus[] = [];

  beforeAll(() => {
    assertHarrierBuilt();
    admin = new Redis(redisUrl);
  }, 200_000);

  afterAll(async () => {
    await admin.quit();
  });

  beforeEach(() => {
    prefix = `{cli-${randomUUID().slice(0, 8)}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    env = { REDIS_URL: redisUrl };
  });

  afterEach(async () => {
    await Promise.all(buses.splice(0).map((bus) => bus.stop({ gracePeriodMs: 500 })));
    await store.close();
    await deleteKeys(admin, prefix);
  });

  async function seed(records: readonly DeadLetterRecord[]): Promise<void> {
    for (let i = 0; i < records.length; i += 1000) {
      await Promise.all(records.slice(i, i + 1000).map((record) => store.add(record)));
    }
  }

  describe('dlq replay', () => {
    describe('when 10,000 dead letters are replayed with --all', () => {
      it('re-dispatches each through the broker so the worker handles every message id exactly once', async () => {
        const records = Array.from({ length: 10_000 }, (_, n) => deadLetter(n));
        await seed(records);
        const handled = new Map<string, number>();
        @CommandHandler(Count)
        class CountHandler {
          handle(_: unknown, ctx: MessageContext): void {
            handled.set(ctx.messageId, (handled.get(ctx.messageId) ?? 0) + 1);
          }
        }
        const bus = createBus({
          endpoint: 'counter',
          handlers: [CountHandler],
          broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
          deadLetters: new RedisDeadLetterStore({ connection: redisUrl, prefix }),
          logger: silentLogger,
          concurrency: 64,
        });
        buses.push(bus);
        await bus.start();

        const result = await harrier(['dlq', 'replay', '--all', '--json', '--prefix', prefix], env);

        expect(result.stderr).toBe('');
        expect(result.code).toBe(0);
        const lines = jsonLines(result.stdout);
        expect(lines.at(-1)).toEqual({
          summary: { replayed: 10_000, failed: 0, skipped: 0, total: 10_000, dryRun: false },
        });
        await waitFor(() => handled.size === 10_000, 45_000);
        const queue = new Queue(`cmd~${Count.type}`, { connection: admin, prefix });
        await waitFor(async () => {
          const counts = await queue.getJobCounts('wait', 'active', 'delayed');
          return (counts.wait ?? 0) + (counts.active ?? 0) + (counts.delayed ?? 0) === 0;
        }, 10_000);
        await queue.close();
        expect(new Set(handled.keys())).toEqual(new Set(records.map((r) => r.messageId)));
        expect([...handled.values()].filter((n) => n !== 1)).toEqual([]);
        expect(await store.count({ status: 'replayed' })).toBe(10_000);
        const sample = await store.get(records[0]?.id ?? '');
        expect(sample?.replays.map((r) => r.by)).toEqual(['cli:tester']);
        // The worker records each outcome, though the CLI, another process, marked the records.
        let handledReplays = 0;
        let cursor: string | undefined;
        do {
          const page = await store.list(
            { status: 'replayed' },
            { limit: 1000, ...(cursor ? { cursor } : {}) },
          );
          handledReplays += page.records.filter((r) => r.replays.at(-1)?.handledAt !== undefined).length;
          cursor = page.next;
        } while (cursor !== undefined);
        expect(handledReplays).toBe(10_000);
      }, 90_000);
    });

    describe('when a signed envelope was changed after it was dead-lettered', () => {
      it('refuses that record with signature-invalid, replays the good one, and exits 1', async () => {
        const key = randomBytes(32).toString('hex');
        const signer = createEnvelopeSigner({ keys: [key] });
        const sign = (envelope: object): string =>
          signer.encode(envelope as Parameters<typeof signer.encode>[0]);
        const good = deadLetter(1, sign);
        const signed = deadLetter(2, sign);
        const tampered = { ...signed, envelope: signed.envelope.replace('"n":2', '"n":200') };
        expect(tampered.envelope).not.toBe(signed.envelope);
        await seed([good, tampered]);

        const result = await harrier(
          ['dlq', 'replay', tampered.id, good.id, '--json', '--signing-keys', key, '--prefix', prefix],
          env,
        );

        expect(result.code).toBe(1);
        const lines = jsonLines(result.stdout);
        expect(lines.find((l) => l.id === tampered.id)).toMatchObject({
          ok: false,
          error: 'signature-invalid',
        });
        expect(lines.find((l) => l.id === good.id)).toMatchObject({ ok: true });
        expect(lines.at(-1)).toMatchObject({ summary: { replayed: 1, failed: 1, skipped: 0 } });
        expect((await store.get(tampered.id))?.status).toBe('dead');
        expect((await store.get(good.id))?.status).toBe('replayed');
      });
    });

    describe('when a record died in a projection fed from the event log', () => {
      it('refuses it with projection-replay-needs-app, leaves it dead, and exits 1', async () => {
        const record = projectionDeadLetter(3, 41);
        await seed([record]);

        const result = await harrier(['dlq', 'replay', record.id, '--json', '--prefix', prefix], env);

        expect(result.code).toBe(1);
        expect(jsonLines(result.stdout).find((l) => l.id === record.id)).toMatchObject({
          ok: false,
          error: 'projection-replay-needs-app',
          message: expect.stringMatching(/offset 41.*bus\.replayDeadLetters/) as unknown,
        });
        expect(await store.get(record.id)).toMatchObject({ status: 'dead', replays: [] });
      });
    });

    describe('when the selector matches nothing', () => {
      it('exits 4 with a message', async () => {
        const result = await harrier(['dlq', 'replay', '--all', '--prefix', prefix], env);
        expect(result.code).toBe(4);
        expect(result.stderr).toContain('No dead letters match');
      });
    });
  });

  describe('dlq show --json', () => {
    it('includes when each replay was handled', async () => {
      const record = deadLetter(1);
      await seed([record]);
      const replayAt = Date.UTC(2026, 0, 2, 10, 0, 0);
      await store.markReplayed(record.id, { at: replayAt, by: 'ops' });
      await store.markReplayHandled(record.id, replayAt + 1500);

      const show = await harrier(['dlq', 'show', record.id, '--prefix', prefix, '--json'], env);

      expect(show.code).toBe(0);
      expect(jsonLines(show.stdout)[0]?.replays).toEqual([
        { at: replayAt, by: 'ops', handledAt: replayAt + 1500 },
      ]);
    });
  });

  describe('dlq list and show --json: the message version', () => {
    it("gives the envelope's ver, 1 when it has none, and null when the envelope is not JSON", async () => {
      const v1 = deadLetter(1);
      const v3 = deadLetter(2, (envelope) => JSON.stringify({ ...envelope, ver: 3 }));
      const garbled = deadLetter(3, () => '{"v":1,');
      await seed([v1, v3, garbled]);
      const p = ['--prefix', prefix, '--json'];

      const list = await harrier(['dlq', 'list', ...p], env);
      const shown = await Promise.all(
        [v1, v3, garbled].map(async (r) =>
          jsonLines((await harrier(['dlq', 'show', r.id, ...p], env)).stdout),
        ),
      );

      expect(list.code).toBe(0);
      expect(jsonLines(list.stdout).map((l) => [l.id, l.version])).toEqual([
        [v1.id, 1],
        [v3.id, 3],
        [garbled.id, null],
      ]);
      expect(shown.map((lines) => lines[0]?.version)).toEqual([1, 3, null]);
      expect(shown[1]?.[0]?.envelope).toBe(v3.envelope);
    });
  });

  describe('--json output', () => {
    it('is one JSON document per line for list, show, groups, topology and projections status', async () => {
      const records = [deadLetter(1), deadLetter(2), deadLetter(3)];
      await seed(records);
      const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
      await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: [Count.type] }]);
      await broker.close();
      const log = new RedisEventLog({
        connection: redisUrl,
        prefix,
        topics: [{ name: 'orders', partitions: 2 }],
      });
      for (let i = 0; i < 5; i++) {
        await log.append('orders', { id: uuidv7(), key: `k${i}`, type: 'orders.Placed', body: '{}' });
      }
      await log.close();
      const checkpoints = new RedisCheckpointStore({ connection: redisUrl, prefix });
      await checkpoints.commit('totals', 'orders', 0, 0, Date.now());
      await checkpoints.close();
      const p = ['--prefix', prefix, '--json'];

      const list = await harrier(['dlq', 'list', '--limit', '2', ...p], env);
      expect(list.code).toBe(0);
      const listed = jsonLines(list.stdout);
      expect(listed.slice(0, 2).map((l) => l.id)).toEqual(records.slice(0, 2).map((r) => r.id));
      const next = listed[2]?.next;
      expect(typeof next).toBe('string');
      const page2 = jsonLines((await harrier(['dlq', 'list', '--cursor', String(next), ...p], env)).stdout);
      expect(page2.map((l) => l.id)).toEqual([records[2]?.id]);

      const show = await harrier(['dlq', 'show', records[0]?.id ?? '', ...p], env);
      expect(show.code).toBe(0);
      expect(jsonLines(show.stdout)).toEqual([{ ...JSON.parse(JSON.stringify(records[0])), version: 1 }]);

      const groups = jsonLines((await harrier(['dlq', 'groups', ...p], env)).stdout);
      expect(groups).toEqual([
        expect.objectContaining({ fingerprint: records[0]?.fingerprint, count: 3, handler: 'CountHandler' }),
      ]);

      const topology = jsonLines((await harrier(['topology', ...p], env)).stdout);
      expect(topology).toEqual([
        expect.objectContaining({
          endpoint: 'counter',
          handler: 'CountHandler',
          kind: 'command',
          deadLetters: 3,
        }),
      ]);

      const status = await harrier(['projections', 'status', ...p], env);
      expect(status.code).toBe(0);
      const rows = jsonLines(status.stdout);
      expect(rows.map((r) => [r.projection, r.topic, r.partition, r.checkpoint])).toEqual([
        ['totals', 'orders', 0, 0],
        ['totals', 'orders', 1, null],
      ]);
      const total = rows.reduce((sum, r) => sum + Number(r.endOffset), 0);
      expect(total).toBe(5);

      const missing = await harrier(['dlq', 'show', 'no-such-id', ...p], env);
      expect(missing.code).toBe(4);
    }, 60_000);
  });

  describe('sagas list and show', () => {
    it('lists instances with their pending timeouts, pages, filters, shows one in full, and exits 4 for none', async () => {
      const sagas = new RedisSagaStore({ connection: redisUrl, prefix });
      const at = Date.UTC(2026, 0, 1);
      const timeout = { id: 't-1', type: 'orders.PaymentTimedOut', dueAt: at + 60_000 };
      try {
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
        await sagas.save(
          {
            saga: 'fulfilment',
            id: 'o-2',
            state: { paid: true },
            status: 'completed',
            timeouts: [],
            now: at + 5,
          },
          1,
        );
        await sagas.save(
          { saga: 'returns', id: 'r-1', state: {}, status: 'active', timeouts: [], now: at },
          0,
        );
      } finally {
        await sagas.close();
      }
      const p = ['--prefix', prefix, '--json'];

      const first = await harrier(['sagas', 'list', '--limit', '2', ...p], env);
      expect(first.code).toBe(0);
      const lines = jsonLines(first.stdout);
      expect(lines.slice(0, 2)).toEqual([
        {
          saga: 'fulfilment',
          id: 'o-1',
          status: 'active',
          version: 1,
          stateVersion: 1,
          startedAt: new Date(at).toISOString(),
          updatedAt: new Date(at).toISOString(),
          completedAt: null,
          timeouts: [
            { id: 't-1', type: 'orders.PaymentTimedOut', dueAt: new Date(at + 60_000).toISOString() },
          ],
        },
        expect.objectContaining({ saga: 'fulfilment', id: 'o-2', status: 'completed', version: 2 }),
      ]);
      const next = String(lines[2]?.next);
      const second = jsonLines(
        (await harrier(['sagas', 'list', '--limit', '2', '--cursor', next, ...p], env)).stdout,
      );
      expect(second.map((l) => `${String(l.saga)}/${String(l.id)}`)).toEqual(['returns/r-1']);

      const active = jsonLines(
        (await harrier(['sagas', 'list', 'fulfilment', '--status', 'active', ...p], env)).stdout,
      );
      expect(active.map((l) => l.id)).toEqual(['o-1']);

      const show = await harrier(['sagas', 'show', 'fulfilment', 'o-1', ...p], env);
      expect(show.code).toBe(0);
      expect(jsonLines(show.stdout)).toEqual([
        expect.objectContaining({ version: 1, state: { paid: false } }),
      ]);

      expect((await harrier(['sagas', 'show', 'fulfilment', 'nope', ...p], env)).code).toBe(4);
      expect((await harrier(['sagas', 'list', '--status', 'done', ...p], env)).code).toBe(2);
      expect((await harrier(['sagas', 'list', '--cursor', 'bogus', ...p], env)).code).toBe(2);
    }, 60_000);
  });

  describe('dlq purge, export and import', () => {
    it('needs --yes without a terminal, purges with it, and export then import round-trips', async () => {
      const records = [deadLetter(1), deadLetter(2), deadLetter(3)];
      await seed(records);
      const dir = mkdtempSync(join(tmpdir(), 'harrier-cli-'));
      const file = join(dir, 'dlq.jsonl');
      try {
        const refused = await harrier(['dlq', 'purge', '--all', '--prefix', prefix], env);
        expect(refused.code).toBe(2);
        expect(refused.stderr).toContain('--yes');
        expect(await store.count()).toBe(3);

        const exported = await harrier(['dlq', 'export', '--out', file, '--json', '--prefix', prefix], env);
        expect(exported.code).toBe(0);
        expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(3);

        const purged = await harrier(['dlq', 'purge', '--all', '--yes', '--json', '--prefix', prefix], env);
        expect(purged.code).toBe(0);
        expect(jsonLines(purged.stdout)).toEqual([{ purged: 3 }]);
        expect(await store.count({ status: 'any' })).toBe(0);

        const again = await harrier(['dlq', 'purge', '--all', '--yes', '--prefix', prefix], env);
        expect(again.code).toBe(4);

        const imported = await harrier(['dlq', 'import', '--in', file, '--json', '--prefix', prefix], env);
        expect(imported.code).toBe(0);
        expect(jsonLines(imported.stdout)).toEqual([{ summary: { imported: 3, invalid: 0 } }]);
        for (const record of records) expect(await store.get(record.id)).toEqual(record);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('keeps the event-log position of a projection record through export and import', async () => {
      const record = projectionDeadLetter(4, 7);
      await seed([record]);
      const dir = mkdtempSync(join(tmpdir(), 'harrier-cli-'));
      const file = join(dir, 'dlq.jsonl');
      try {
        expect((await harrier(['dlq', 'export', '--out', file, '--prefix', prefix], env)).code).toBe(0);
        await store.remove([record.id]);
        expect((await harrier(['dlq', 'import', '--in', file, '--prefix', prefix], env)).code).toBe(0);
        expect(await store.get(record.id)).toEqual(record);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('reports invalid import lines with their numbers and exits 1', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'harrier-cli-'));
      const file = join(dir, 'bad.jsonl');
      try {
        const good = deadLetter(1);
        writeFileSync(file, `${JSON.stringify(good)}\nnot json\n{"id":"x"}\n`);
        const result = await harrier(['dlq', 'import', '--in', file, '--prefix', prefix], env);
        // stdout is a pipe, so the output is JSON lines without --json.
        expect(result.code).toBe(1);
        const lines = jsonLines(result.stdout);
        expect(lines).toEqual([
          { line: 2, ok: false, error: expect.stringContaining('not JSON') as unknown },
          { line: 3, ok: false, error: expect.stringContaining('not a dead-letter record') as unknown },
          { summary: { imported: 1, invalid: 2 } },
        ]);
        expect(await store.get(good.id)).toEqual(good);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  describe('connection', () => {
    it('exits 3 with the redis-unavailable message when Redis is unreachable', async () => {
      const result = await harrier(['dlq', 'list', '--redis-url', 'redis://127.0.0.1:1', '--json'], {});
      expect(result.code).toBe(3);
      expect(result.stderr).toContain('Redis could not be reached at redis://127.0.0.1:1');
    });

    it('exits 2 naming HARRIER_URL, --url and the schemes that work when no system is given', async () => {
      const result = await harrier(['topology'], {});
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        'set HARRIER_URL or pass --url with a URL of redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL)',
      );
      expect(result.stderr).toContain('REDIS_URL and --redis-url work too');
    });

    it('exits 3 naming --redis-cluster when the cluster is unreachable', async () => {
      const result = await harrier(['dlq', 'list', '--redis-cluster', '127.0.0.1:1', '--json'], {});
      expect(result.code).toBe(3);
      expect(result.stderr).toContain('Redis could not be reached at the Redis Cluster at 127.0.0.1:1');
      expect(result.stderr).toContain('--redis-cluster');
    });

    it('exits 2 naming the entry when --redis-cluster is not host:port, and when both kinds are given', async () => {
      const bad = await harrier(['topology', '--redis-cluster', '10.0.0.1:7000,nonsense'], {});
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--redis-cluster entry "nonsense" is not host:port');
      const both = await harrier(
        ['topology', '--redis-url', 'redis://127.0.0.1:1', '--redis-cluster', '127.0.0.1:1'],
        {},
      );
      expect(both.code).toBe(2);
      expect(both.stderr).toContain('either --redis-url or --redis-cluster');
    });
  });

  describe('choosing the backend by URL scheme', () => {
    it.each([
      ['--url', ['--url', 'http://127.0.0.1:6379'], {}],
      ['HARRIER_URL', [], { HARRIER_URL: 'http://127.0.0.1:6379' }],
      ['--redis-url', ['--redis-url', 'http://127.0.0.1:6379'], {}],
    ] as const)(
      'exits 2 for an unknown scheme from %s, naming it and the schemes that work',
      async (source, args, fromEnv) => {
        for (const json of [['--json'], []]) {
          const result = await harrier(['topology', ...args, ...json], fromEnv);
          expect(result.code).toBe(2);
          expect(result.stdout).toBe('');
          expect(result.stderr).toBe(
            `harrier: ${source} "http://127.0.0.1:6379" is not a valid URL: unknown scheme "http://"; use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), e.g. redis://127.0.0.1:6379\n`,
          );
        }
      },
    );

    it('opens Redis for redis:// from --url or HARRIER_URL, as from the --redis-url and REDIS_URL aliases', async () => {
      const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
      await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: [Count.type] }]);
      await broker.close();
      const p = ['topology', '--prefix', prefix, '--json'];
      const outputs = [];
      for (const [args, fromEnv] of [
        [['--url', redisUrl], {}],
        [[], { HARRIER_URL: redisUrl }],
        [['--redis-url', redisUrl], {}],
        [[], { REDIS_URL: redisUrl }],
        // HARRIER_URL comes first among the environment's.
        [[], { HARRIER_URL: redisUrl, REDIS_URL: 'redis://127.0.0.1:1' }],
      ] as const) {
        const result = await harrier([...p, ...args], fromEnv);
        expect(result.stderr).toBe('');
        expect(result.code).toBe(0);
        outputs.push(jsonLines(result.stdout));
      }
      expect(outputs[0]).toEqual([expect.objectContaining({ endpoint: 'counter', handler: 'CountHandler' })]);
      for (const output of outputs) expect(output).toEqual(outputs[0]);
    });

    it('opens Redis over TLS for rediss://: an unreachable one exits 3 with the Redis message', async () => {
      const result = await harrier(['dlq', 'list', '--url', 'rediss://:s3cret@127.0.0.1:1', '--json'], {});
      expect(result.code).toBe(3);
      expect(result.stderr).toContain('Redis could not be reached at rediss://:***@127.0.0.1:1');
      expect(result.stderr).not.toContain('s3cret');
    });

    it('exits 2 when both --url and its alias --redis-url are given', async () => {
      const result = await harrier(['topology', '--url', redisUrl, '--redis-url', redisUrl], {});
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('Pass either --url or --redis-url, not both');
    });
  });

  describe('topology --json', () => {
    /** Publishes a command to `cmd~cli.Count` and dead-letters it in BullMQ only: a failed job, no record. */
    async function failJobWithoutRecord(broker: BullMqBroker): Promise<void> {
      await broker.publish({ id: uuidv7(), kind: 'command', type: Count.type, body: '{}' });
      const stop = new AbortController();
      const receiving = broker.receiver({ endpoint: 'counter', signal: stop.signal })[Symbol.asyncIterator]();
      const delivery = await receiving.next();
      if (delivery.done === true) throw new Error('the counter receiver ended');
      await broker.nack(delivery.value.id, { deadLetter: 'handler-failed', error: cliFailure });
      stop.abort();
      await receiving.return?.();
    }

    it("counts each subscription's dead letters in the dead-letter store, not in BullMQ's failed jobs", async () => {
      const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
      await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: [Count.type] }]);
      await failJobWithoutRecord(broker);
      const queue = new Queue(`cmd~${Count.type}`, { connection: admin, prefix });
      expect(await queue.getJobCounts('failed')).toEqual({ failed: 1 });
      await queue.close();
      await broker.close();
      const p = ['topology', '--prefix', prefix, '--json'];
      expect(jsonLines((await harrier(p, env)).stdout)).toEqual([
        expect.objectContaining({ handler: 'CountHandler', deadLetters: 0 }),
      ]);

      // Two dead of counter's CountHandler, one replayed, one of a CountHandler in another endpoint.
      const replayed = deadLetter(3);
      await seed([deadLetter(1), deadLetter(2), replayed, { ...deadLetter(4), endpoint: 'elsewhere' }]);
      await store.markReplayed(replayed.id, { at: Date.now(), by: 'test' });
      expect(jsonLines((await harrier(p, env)).stdout)).toEqual([
        expect.objectContaining({ handler: 'CountHandler', deadLetters: 2 }),
      ]);
    });

    it("gives every queue and each subscription's total in the broker's one QueueDepth shape", async () => {
      const broker = new BullMqBroker({ connection: redisUrl, prefix, partitions: 2, logger: silentLogger });
      const subscription = {
        handler: 'CountHandler',
        kind: 'command',
        types: [Count.type],
        orderedTypes: [Count.type],
      } as const;
      await broker.register('counter', [subscription]);
      for (const key of ['a', 'b', 'c']) {
        await broker.publish({
          id: uuidv7(),
          kind: 'command',
          type: Count.type,
          body: '{}',
          partitionKey: key,
          ordered: true,
        });
      }
      await broker.publish({
        id: uuidv7(),
        kind: 'command',
        type: Count.type,
        body: '{}',
        deliverAt: Date.now() + 3_600_000,
      });
      const fromBroker = await broker.queueDepths('counter');
      await broker.close();

      const result = await harrier(['topology', '--prefix', prefix, '--json'], env);
      expect(result.code).toBe(0);
      const lines = jsonLines(result.stdout);
      // The endpoint's ordered command types share their partition queues: one more line, after its subscriptions.
      expect(lines.map((l) => l.handler)).toEqual(['CountHandler', '(ordered commands)']);
      const [line, ordered] = lines;
      const queues = line?.queues as Record<string, unknown>[];
      const partitions = ordered?.queues as Record<string, unknown>[];
      expect(queues.map((q) => q.queue)).toEqual([`cmd~${Count.type}`]);
      expect(partitions.map((q) => q.queue)).toEqual(['cmd~counter~ordered~p0', 'cmd~counter~ordered~p1']);
      for (const depth of [...queues, line?.total, ...partitions, ordered?.total]) {
        expect(Object.keys(depth ?? {}).sort()).toEqual(['active', 'delayed', 'queue', 'waiting']);
      }
      // Each total is the row the broker's own queueDepths gives for it.
      expect(fromBroker).toEqual([line?.total, ordered?.total]);
      expect(line?.total).toEqual({ queue: `cmd~${Count.type}`, waiting: 0, active: 0, delayed: 1 });
      expect(ordered?.total).toEqual({ queue: 'cmd~counter~ordered', waiting: 3, active: 0, delayed: 0 });
    });
  });

  describe('when the Redis URL is malformed', () => {
    const malformed = [
      [
        'a bad percent escape in the password',
        'redis://:s3cret%zz@127.0.0.1:6379',
        'the password has a bad percent escape',
        'write % as %25',
      ],
      ['an unknown scheme', 'http://127.0.0.1:6379', 'unknown scheme "http://"', 'use redis://'],
      [
        'a port that is not a number',
        'redis://127.0.0.1:63x9',
        'port "63x9" is not a number from 1 to 65535',
        'write the port in digits',
      ],
    ] as const;

    describe.each([
      ['JSON output (--json)', ['--json']],
      ['default output (stdout not a terminal)', []],
    ] as const)('with %s', (_mode, flags) => {
      it.each(malformed)(
        'exits 2 naming --redis-url, the problem and the fix, for %s',
        async (_what, url, problem, fix) => {
          const result = await harrier(['dlq', 'list', '--redis-url', url, ...flags], env);
          expect(result.code).toBe(2);
          expect(result.stdout).toBe('');
          expect(result.stderr).toContain(`harrier: --redis-url "`);
          expect(result.stderr).toContain(problem);
          expect(result.stderr).toContain(fix);
          expect(result.stderr).not.toContain('s3cret');
        },
      );
    });

    it('names REDIS_URL when the bad URL came from the environment', async () => {
      const result = await harrier(['topology', '--json'], {
        REDIS_URL: 'redis://:s3cret%zz@127.0.0.1:6379',
      });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        'harrier: REDIS_URL "redis://***@127.0.0.1:6379" is not a valid Redis URL',
      );
      expect(result.stderr).not.toContain('s3cret');
    });

    it('names --redis-cluster or REDIS_CLUSTER when a node is not a host name', async () => {
      const flag = await harrier(['topology', '--redis-cluster', '10.0.0.1:7000,bad%zz:7000'], {});
      expect(flag.code).toBe(2);
      expect(flag.stderr).toContain('--redis-cluster entry "bad%zz:7000" is not host:port');
      const fromEnv = await harrier(['topology'], { REDIS_CLUSTER: 'bad%zz:7000' });
      expect(fromEnv.code).toBe(2);
      expect(fromEnv.stderr).toContain('REDIS_CLUSTER entry "bad%zz:7000" is not host:port');
    });
  });

  describe('on a Redis Cluster (--redis-cluster)', () => {
    let cluster: RedisCluster;
    let client: Cluster;

    beforeAll(async () => {
      cluster = await RedisCluster.start();
      client = new Cluster(cluster.nodes);
    }, 60_000);

    afterAll(async () => {
      client.disconnect();
      await cluster.destroy();
    });

    it('lists, shows, replays, and reports topology and projection status', async () => {
      const p = `{cli-cluster-${randomUUID().slice(0, 8)}}`;
      const seeds = cluster.ports.map((port) => `127.0.0.1:${port}`).join(',');
      const args = ['--prefix', p, '--json'];
      const clusterEnv = { REDIS_CLUSTER: seeds };
      const onCluster = new RedisDeadLetterStore({ connection: client, prefix: p });
      const records = [deadLetter(1), deadLetter(2)];
      for (const record of records) await onCluster.add(record);
      const broker = new BullMqBroker({
        connection: { cluster: cluster.nodes },
        prefix: p,
        logger: silentLogger,
      });
      await broker.register('counter', [{ handler: 'CountHandler', kind: 'command', types: [Count.type] }]);
      await broker.close();
      const log = new RedisEventLog({
        connection: client,
        prefix: p,
        topics: [{ name: 'orders', partitions: 2 }],
      });
      for (let i = 0; i < 3; i++) {
        await log.append('orders', { id: uuidv7(), key: `k${i}`, type: 'orders.Placed', body: '{}' });
      }
      await log.close();
      await new RedisCheckpointStore({ connection: client, prefix: p }).commit(
        'totals',
        'orders',
        0,
        0,
        Date.now(),
      );

      // --redis-cluster on the command line, and REDIS_CLUSTER from the environment.
      const list = await harrier(['dlq', 'list', '--redis-cluster', seeds, ...args], {});
      expect(list.stderr).toBe('');
      expect(list.code).toBe(0);
      expect(jsonLines(list.stdout).map((l) => l.id)).toEqual(records.map((r) => r.id));
      const show = await harrier(['dlq', 'show', records[0]?.id ?? '', ...args], clusterEnv);
      expect(jsonLines(show.stdout)).toEqual([{ ...JSON.parse(JSON.stringify(records[0])), version: 1 }]);
      const topology = jsonLines((await harrier(['topology', ...args], clusterEnv)).stdout);
      expect(topology).toEqual([expect.objectContaining({ endpoint: 'counter', handler: 'CountHandler' })]);
      const status = jsonLines((await harrier(['projections', 'status', ...args], clusterEnv)).stdout);
      expect(status.map((r) => [r.projection, r.topic, r.partition, r.checkpoint])).toEqual([
        ['totals', 'orders', 0, 0],
        ['totals', 'orders', 1, null],
      ]);
      expect(status.reduce((sum, r) => sum + Number(r.endOffset), 0)).toBe(3);

      const replay = await harrier(['dlq', 'replay', records[0]?.id ?? '', ...args], clusterEnv);
      expect(replay.code).toBe(0);
      expect(jsonLines(replay.stdout).at(-1)).toEqual({
        summary: { replayed: 1, failed: 0, skipped: 0, total: 1, dryRun: false },
      });
      const queue = new Queue(`cmd~${Count.type}`, { connection: client, prefix: p });
      expect(await queue.getJob(records[0]?.messageId ?? '')).toBeDefined();
      await queue.close();
      expect((await onCluster.get(records[0]?.id ?? ''))?.status).toBe('replayed');
      await onCluster.close();
    }, 90_000);
  });
});
