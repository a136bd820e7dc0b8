import { afterEach, describe, expect, inject, it } from 'vitest';
import { runCli } from '../helpers/cli-in-process.js';
import { RedisCheckpointStore } from '../../src/redis/redis-checkpoint-store.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);
const T0 = Date.UTC(2026, 0, 1);

/** The CLI in this process; `tty` makes it print tables instead of JSON lines. */
const harrier = (args: readonly string[], tty = false) => runCli(args, { tty, env: { REDIS_URL: redisUrl } });

const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

describe('harrier projections', () => {
  let prefix = freshPrefix();
  let store: RedisCheckpointStore;

  afterEach(async () => {
    await store.close();
    await deleteKeys(redis.client, prefix);
    prefix = freshPrefix();
  });

  async function seed(): Promise<void> {
    store = new RedisCheckpointStore({ connection: redis.client, prefix });
    await store.commit('totals', 'orders', 0, 4, T0);
    await store.commit('totals', 'orders', 1, 2, T0);
  }

  describe('status', () => {
    it('shows generation 0 and no rebuild for a projection never rebuilt', async () => {
      await seed();
      const { code, stdout } = await harrier(['projections', 'status', '--prefix', prefix]);
      expect(code).toBe(0);
      const rows = jsonLines(stdout);
      expect(rows.map((r) => [r.projection, r.partition, r.checkpoint, r.generation, r.rebuilding])).toEqual([
        ['totals', 0, 4, 0, null],
        ['totals', 1, 2, 0, null],
      ]);
    });

    it('shows a projection mid-rebuild (its marker set) and its generation, as JSON and as a table', async () => {
      await seed();
      const rebuilt = await harrier(['projections', 'rebuild', 'totals', '--prefix', prefix]);
      expect(rebuilt.code).toBe(0);
      const asked = JSON.parse(rebuilt.stdout) as Record<string, unknown>;
      expect(asked).toMatchObject({ projection: 'totals', reset: 2, generation: 1 });
      const marker = await store.generation('totals');
      expect(asked.rebuildId).toBe(marker.rebuild?.id);

      const json = await harrier(['projections', 'status', 'totals', '--prefix', prefix]);
      expect(json.code).toBe(0);
      expect(jsonLines(json.stdout)).toEqual([
        {
          projection: 'totals',
          topic: null,
          partition: null,
          checkpoint: null,
          endOffset: null,
          lag: null,
          updatedAt: null,
          generation: 1,
          rebuilding: {
            id: marker.rebuild?.id,
            startedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown,
          },
        },
      ]);

      const table = await harrier(['projections', 'status', '--prefix', prefix], true);
      expect(table.stdout.split('\n')[0]).toMatch(/\bGEN\s+REBUILDING$/);
      expect(table.stdout.split('\n')[1]).toMatch(/^totals\s.*\s1\s+since \d{4}-/);

      // A runner completes it: the marker goes, the generation stays.
      await store.endRebuild('totals', marker.rebuild?.id ?? '');
      await store.commit('totals', 'orders', 0, 0, T0, { generation: 1 });
      const after = jsonLines((await harrier(['projections', 'status', '--prefix', prefix])).stdout);
      expect(after.map((r) => [r.partition, r.checkpoint, r.generation, r.rebuilding])).toEqual([
        [0, 0, 1, null],
      ]);
    });
  });
});
