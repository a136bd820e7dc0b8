/**
 * How fast the dead-letter views answer with many records: a `RedisDeadLetterStore` is filled with N
 * records (default 100,000) in 50 fingerprints, 5 endpoints and 10 message types, each with a stack
 * and a small payload, one failure a second apart. Then each query below runs 5 times and its median
 * is printed: the first page of the list (limit 50), filtered pages, counts, the first page of the
 * failure groups, and text searches (first page of 50).
 *
 * Queries answered from the group aggregates (counts and groups by status or fingerprint) do not
 * depend on N; the others walk the index in chunks until a page is full, so their time grows with
 * how many records they must read to find 50 matches (all of them when there are fewer), except a
 * text search, whose page stops after reading 10,000 records (then it ends with a cursor: "+").
 *
 * Run: `npm run bench:dead-letters` (it compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/dead-letters.js`). It starts a redis-server of its own on a free loopback port
 * unless REDIS_URL is set. Set BENCH_N to change N.
 */
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import type { DeadLetterFilter, DeadLetterRecord } from '../src/index.js';
import {
  BENCH_FINGERPRINTS as FINGERPRINTS,
  benchDeadLetter,
  fillDeadLetters,
} from './dead-letter-fixtures.js';
import { describeRedisUrl, RedisDeadLetterStore } from '../src/redis/index.js';
import { benchPrefix, deleteKeys, fmtRate, median, startBenchRedis, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 100_000);
const RUNS = 5;
const PAGE = 50;
/** Adds in flight at once while filling. */
const FILL_CONCURRENCY = 64;

function recordOf(n: number): DeadLetterRecord {
  return benchDeadLetter(n, { spacingMs: 1000, reasons: ['handler-failed'] });
}

async function fill(store: RedisDeadLetterStore): Promise<number> {
  return fillDeadLetters(store, N, recordOf, FILL_CONCURRENCY);
}

/** Median ms of `RUNS` runs of `query`, and what its last run returned. */
async function time<T>(query: () => Promise<T>): Promise<{ ms: number; result: T }> {
  const samples: number[] = [];
  let result: T | undefined;
  for (let i = 0; i < RUNS; i++) {
    const started = performance.now();
    result = await query();
    samples.push(performance.now() - started);
  }
  return { ms: median(samples), result: result as T };
}

async function main(): Promise<void> {
  const redis = await startBenchRedis();
  const client = new Redis(redis.url);
  const prefix = benchPrefix('harrier-bench-dlq');
  const store = new RedisDeadLetterStore({ connection: client, prefix, maxRecords: Math.max(N, 100_000) });
  try {
    const version = (await client.info('server')).match(/redis_version:(\S+)/)?.[1] ?? '?';
    const fillMs = await fill(store);
    // A page that ends with a cursor shows "+": a text search stops after reading 10,000 records.
    const list = (filter: DeadLetterFilter) => async () => {
      const page = await store.list(filter, { limit: PAGE });
      return `${page.records.length}${page.next === undefined ? '' : '+'}`;
    };
    const rows: [string, () => Promise<number | string>][] = [
      ['list, first page', list({})],
      ['list, endpoint filter (1 in 5), first page', list({ endpoint: 'endpoint-3' })],
      ['list, fingerprint filter (1 in 50), first page', list({ fingerprint: recordOf(7).fingerprint })],
      [
        'list, type + endpoint (no match), full walk',
        list({ type: 'orders.Event1', endpoint: 'endpoint-2' }),
      ],
      ['count, dead (aggregates)', () => store.count()],
      ['count, one fingerprint (aggregates)', () => store.count({ fingerprint: recordOf(7).fingerprint })],
      ['count, endpoint filter (full walk)', () => store.count({ endpoint: 'endpoint-3' })],
      [
        'groups, first page (aggregates)',
        async () => (await store.groups({}, { limit: PAGE })).groups.length,
      ],
      [
        'groups, endpoint filter (full walk)',
        async () => (await store.groups({ endpoint: 'endpoint-3' }, { limit: PAGE })).groups.length,
      ],
      ['text "gateway 7 refused" (1 in 50), first page', list({ text: 'GATEWAY 7 REFUSED' })],
      ['text "sku-42" in payload (1 in 997), first page', list({ text: 'sku-42"' })],
      ['text, no match, first page (10,000 read)', list({ text: 'no such text anywhere' })],
    ];
    const body: string[][] = [];
    for (const [name, query] of rows) {
      const { ms, result } = await time(query);
      body.push([name, String(result), ms.toFixed(1)]);
    }
    console.log(
      `Harrier dead letters at ${N.toLocaleString('en-US')} — Node ${process.version}, Redis ${version} at ${describeRedisUrl(redis.url)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
    );
    console.log(
      `filled in ${(fillMs / 1000).toFixed(1)} s (${fmtRate((N / fillMs) * 1000)} adds/s, ${FILL_CONCURRENCY} in flight); ${FINGERPRINTS} fingerprints; median of ${RUNS} runs\n`,
    );
    console.log(table(['query', 'result', 'median ms'], body));
  } finally {
    await store.close();
    await deleteKeys(client, prefix);
    await client.quit();
    redis.stop();
  }
}

await main();
