import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { run } from '../../src/cli/index.js';
import type { CliIo } from '../../src/cli/cli-io.js';
import { RedisSagaStore } from '../../src/redis/redis-saga-store.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);
const T0 = Date.UTC(2026, 0, 1);

/** The CLI in this process, on a terminal (so tables, not JSON lines). */
async function harrier(args: readonly string[]): Promise<{ code: number; stdout: string }> {
  let stdout = '';
  const io: CliIo = {
    stdout: { write: (text: string) => (stdout += text), isTTY: true },
    stderr: { write: () => true },
    stdin: new PassThrough(),
    env: { REDIS_URL: redisUrl },
  };
  const code = await run(args, io);
  return { code, stdout };
}

describe('harrier sagas (on a terminal)', () => {
  let prefix = freshPrefix();

  afterEach(async () => {
    await deleteKeys(redis.client, prefix);
    prefix = freshPrefix();
  });

  async function seed(): Promise<void> {
    const store = new RedisSagaStore({ connection: redis.client, prefix });
    const timeouts = [
      { id: 't-2', type: 'orders.ShipmentLate', dueAt: T0 + 120_000 },
      { id: 't-1', type: 'orders.PaymentTimedOut', dueAt: T0 + 60_000 },
    ];
    await store.save(
      {
        saga: 'fulfilment',
        id: 'o-1',
        state: { paid: false },
        stateVersion: 2,
        status: 'active',
        timeouts,
        now: T0,
        applied,
      },
      0,
    );
  }

  /** What a message recorded: its body must never be printed. */
  const outgoing = (id: string, type: string) => ({
    id,
    kind: 'event' as const,
    type,
    body: JSON.stringify({ secret: `body of ${id}` }),
  });
  /** 12 steps, oldest first: m-01 recorded nothing, m-12 three messages of two types. */
  const applied = Array.from({ length: 12 }, (_, i) => {
    const n = String(i + 1).padStart(2, '0');
    return {
      message: `m-${n}`,
      outgoing:
        i === 0
          ? []
          : i === 11
            ? [
                outgoing('x-1', 'orders.StockRequested'),
                outgoing('x-2', 'orders.StockRequested'),
                outgoing('x-3', 'orders.PaymentRequested'),
              ]
            : [outgoing(`y-${n}`, 'orders.StockRequested')],
    };
  });

  describe('list', () => {
    it('prints a table with the next pending timeout of each instance', async () => {
      await seed();
      const { code, stdout } = await harrier(['sagas', 'list', '--prefix', prefix]);
      expect(code).toBe(0);
      expect(stdout.split('\n')[0]).toMatch(/^SAGA\s+ID\s+STATUS\s+VERSION\s+UPDATED\s+NEXT TIMEOUT$/);
      expect(stdout).toContain('orders.PaymentTimedOut at 2026-01-01T00:01:00Z (+1)');
    });

    it('says when nothing matches', async () => {
      const { code, stdout } = await harrier(['sagas', 'list', '--prefix', prefix]);
      expect(code).toBe(0);
      expect(stdout).toContain('No saga instances match');
    });
  });

  describe('show', () => {
    it('prints the version, the pending timeouts in due order and the state with its state version', async () => {
      await seed();
      const { code, stdout } = await harrier(['sagas', 'show', 'fulfilment', 'o-1', '--prefix', prefix]);
      expect(code).toBe(0);
      expect(stdout).toContain('Saga fulfilment instance o-1 (active)');
      expect(stdout).toContain('Pending timeouts (2):');
      expect(stdout.indexOf('orders.PaymentTimedOut')).toBeLessThan(stdout.indexOf('orders.ShipmentLate'));
      expect(stdout).toContain('"paid": false');
      expect(stdout).toContain("State (version 2 of the saga's state shape):");
    });

    it('prints the state alone as state, then the latest 10 applied steps newest first, without bodies', async () => {
      await seed();
      const { code, stdout } = await harrier(['sagas', 'show', 'fulfilment', 'o-1', '--prefix', prefix]);
      expect(code).toBe(0);
      const [, shown = ''] = stdout.split("\nState (version 2 of the saga's state shape):\n");
      const [state = '', appliedPart = ''] = shown.split(
        '\nApplied steps, newest first (12 remembered for redeliveries):\n',
      );
      expect(JSON.parse(state)).toEqual({ paid: false });
      const lines = appliedPart.trimEnd().split('\n');
      expect(lines.map((line) => line.trim())).toEqual([
        'm-12  3 messages: orders.StockRequested x2, orders.PaymentRequested',
        ...['11', '10', '09', '08', '07', '06', '05', '04', '03'].map(
          (n) => `m-${n}  1 message: orders.StockRequested`,
        ),
        '... 2 older (--json lists them all)',
      ]);
      expect(stdout).not.toContain('body of');
    });

    it('gives the state and every applied step as separate JSON fields, without bodies', async () => {
      await seed();
      const { code, stdout } = await harrier([
        'sagas',
        'show',
        'fulfilment',
        'o-1',
        '--prefix',
        prefix,
        '--json',
      ]);
      expect(code).toBe(0);
      const shown = JSON.parse(stdout) as {
        stateVersion: number;
        state: unknown;
        applied: { message: string; outgoing: unknown[] }[];
      };
      expect(shown.state).toEqual({ paid: false });
      expect(shown.stateVersion).toBe(2);
      expect(shown.applied.map((a) => a.message)).toEqual(applied.map((a) => a.message));
      expect(shown.applied[0]).toEqual({ message: 'm-01', outgoing: [] });
      expect(shown.applied[11]?.outgoing[2]).toEqual({
        id: 'x-3',
        kind: 'event',
        type: 'orders.PaymentRequested',
      });
      expect(stdout).not.toContain('body of');
    });

    it('exits 2 without a saga name and an id', async () => {
      expect((await harrier(['sagas', 'show', 'fulfilment', '--prefix', prefix])).code).toBe(2);
    });
  });
});
