import { describe, expect, it } from 'vitest';
import type { TopicSpec } from '../../../src/log/event-log.js';
import { InMemoryEventLog } from '../../../src/log/in-memory-event-log.js';
import { checkpointLags, lagBehind } from '../../../src/projections/projection-lag.js';

describe('lagBehind', () => {
  it('is the records after the last completed offset, never below 0', () => {
    expect(lagBehind(10, 9)).toBe(0);
    expect(lagBehind(10, 4)).toBe(5);
    expect(lagBehind(10, -1)).toBe(10);
    expect(lagBehind(0, -1)).toBe(0);
    expect(lagBehind(3, 7)).toBe(0);
  });
});

describe('checkpointLags', () => {
  it('reports each projection on every partition its topics have, checkpointed or not', async () => {
    let manifest: readonly TopicSpec[] = [];
    const log = new InMemoryEventLog({ topics: [{ name: 'orders', partitions: 4 }] });
    // Offsets 0 to 4 in one partition; nothing in the others.
    const acks = [];
    for (let i = 0; i < 5; i++)
      acks.push(await log.append('orders', { id: `e${i}`, key: 'k', type: 't', body: '{}' }));
    const written = acks[0]?.partition ?? 0;
    const other = (written + 1) % 4;
    const rows = await checkpointLags({
      checkpoints: [
        { projection: 'Totals', topic: 'orders', partition: other, offset: 0, updatedAt: 0 },
        { projection: 'List', topic: 'orders', partition: written, offset: 2, updatedAt: 1_700_000_000_000 },
      ],
      logPartitions: new Map([['orders', [written]]]),
      log: (topics) => {
        manifest = topics;
        return log;
      },
    });
    expect(manifest).toEqual([{ name: 'orders', partitions: Math.max(written, other) + 1 }]);
    // Each projection gets every partition of the topic that the log or any checkpoint names.
    const row = (
      projection: string,
      partition: number,
      checkpoint: number | undefined,
      updatedAt?: number,
    ) => {
      const endOffset = partition === written ? 5 : 0;
      const lag = endOffset - (checkpoint ?? -1) - 1;
      return {
        projection,
        topic: 'orders',
        partition,
        checkpoint,
        endOffset,
        lag: Math.max(0, lag),
        updatedAt,
      };
    };
    const byPartition = (a: { partition: number }, b: { partition: number }) => a.partition - b.partition;
    expect(rows).toEqual([
      ...[row('List', written, 2, 1_700_000_000_000), row('List', other, undefined)].sort(byPartition),
      ...[row('Totals', written, undefined), row('Totals', other, 0)].sort(byPartition),
    ]);
    expect(rows.find((r) => r.projection === 'List' && r.partition === written)?.lag).toBe(2);
  });
});
