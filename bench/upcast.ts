/**
 * What one upcast step costs a projection replay: N event-log records of version 1, replayed into a
 * version-2 definition that raises each payload with one step, beside N records already of the
 * current version replayed into a definition with no steps, in one run.
 *
 * Measured, in events per second (median of {@link ROUNDS} rounds, the two rows taking turns to go first): a bus
 * with one projection fed from an `InMemoryEventLog` of {@link PARTITIONS} partitions holding the N
 * records, timed from `start()` to `projections.whenCaughtUp()`. Each record goes through the receive
 * path a live delivery takes (JSON parse, envelope check, the raise, the schema, the handler, the
 * checkpoint). The two logs hold the same events; only the stored shape differs. Each row first runs
 * an untimed warm-up of {@link WARM_UP} records.
 *
 * Run: `npm run bench:upcast` (compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/upcast.js`). Set BENCH_N to change N (default 1,000,000).
 */
import 'reflect-metadata';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import { On, Projection, createBus, defineEvent, silentLogger, upcasters } from '../src/index.js';
import { prepareMessage } from '../src/messages/prepare-message.js';
import { InMemoryCheckpointStore, InMemoryEventLog } from '../src/log/index.js';
import type { EventDefinition } from '../src/messages/definition.js';
import { fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 1_000_000);
const WARM_UP = Math.min(N, 20_000);
const ROUNDS = 5;
const PARTITIONS = 4;
const TOPIC = 'bench';

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}

const current = z.object({ orderId: z.string(), amount: z.number(), currency: z.string() });
type V1 = { orderId: string; cents: number };

/** Version 1 as it was published: cents, no currency. */
const PlacedV1 = defineEvent('bench.OrderPlaced', {
  schema: z.object({ orderId: z.string(), cents: z.number().int() }),
  partitionKey: 'orderId',
});
/** Version 2 with one step from version 1. */
const PlacedV2 = defineEvent('bench.OrderPlaced', {
  version: 2,
  schema: current,
  partitionKey: 'orderId',
  upcast: upcasters<V1>().step((v1) => ({ orderId: v1.orderId, amount: v1.cents / 100, currency: 'EUR' })),
});
/** The same shape as version 2, never changed: no steps. */
const PlacedPlain = defineEvent('bench.OrderPlaced', { schema: current, partitionKey: 'orderId' });

async function makeLog(n: number, stored: 'v1' | 'current'): Promise<InMemoryEventLog> {
  const log = new InMemoryEventLog({ topics: [{ name: TOPIC, partitions: PARTITIONS }] });
  const now = Date.now();
  for (let i = 0; i < n; i++) {
    const orderId = `order-${i % 9973}`;
    const { envelope, outgoing } =
      stored === 'v1'
        ? prepareMessage(PlacedV1, { orderId, cents: i }, {}, { now })
        : prepareMessage(PlacedPlain, { orderId, amount: i / 100, currency: 'EUR' }, {}, { now });
    await log.append(TOPIC, { id: envelope.id, key: orderId, type: envelope.type, body: outgoing.body });
  }
  return log;
}

/** Replays a whole log into a projection of `definition`; returns events per second. */
async function replay(
  log: InMemoryEventLog,
  definition: EventDefinition<'bench.OrderPlaced', typeof current>,
  n: number,
): Promise<number> {
  let total = 0;
  @Projection('totals')
  class Totals {
    @On(definition)
    on(event: z.output<typeof current>) {
      total += event.amount;
    }
    reset() {
      total = 0;
    }
  }
  const bus = createBus({
    endpoint: 'bench',
    handlers: [Totals],
    eventLog: log,
    checkpoints: new InMemoryCheckpointStore(),
    logger: silentLogger,
  });
  const started = performance.now();
  await bus.start();
  await bus.projections.whenCaughtUp();
  const seconds = (performance.now() - started) / 1000;
  await bus.stop();
  if (Math.abs(total - ((n - 1) * n) / 2 / 100) > 1e-3 * n) throw new Error(`replay summed ${total}`);
  return n / seconds;
}

async function main(): Promise<void> {
  const rows = [
    { label: 'one upcast step (v1 records, v2 definition)', stored: 'v1' as const, definition: PlacedV2 },
    { label: 'no upcast (current records, no steps)', stored: 'current' as const, definition: PlacedPlain },
  ];
  const logs = new Map<string, InMemoryEventLog>();
  for (const row of rows) {
    await replay(await makeLog(WARM_UP, row.stored), row.definition, WARM_UP);
    logs.set(row.label, await makeLog(N, row.stored));
  }
  const rates = new Map<string, number[]>(rows.map((r) => [r.label, []]));
  for (let round = 0; round < ROUNDS; round++) {
    // The rows take turns going first, so neither always runs on the heap the other left.
    for (const row of round % 2 === 0 ? rows : [...rows].reverse()) {
      rates.get(row.label)?.push(await replay(logs.get(row.label) as InMemoryEventLog, row.definition, N));
    }
  }
  const upcast = median(rates.get(rows[0]?.label ?? '') ?? []);
  const plain = median(rates.get(rows[1]?.label ?? '') ?? []);
  console.log(
    `Projection replay of ${fmtRate(N)} event-log records (${PARTITIONS} partitions, InMemoryEventLog), median of ${ROUNDS}; ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} CPUs, Node ${process.version}\n`,
  );
  console.log(
    table(
      ['replay', 'events/s', 'vs no upcast'],
      [
        [rows[0]?.label ?? '', fmtRate(upcast), `${(upcast / plain).toFixed(2)}x`],
        [rows[1]?.label ?? '', fmtRate(plain), '1.00x'],
      ],
    ),
  );
}

await main();
