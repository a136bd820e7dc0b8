/**
 * How fast the dead-letter views answer from PostgreSQL with many records: a
 * `PostgresDeadLetterStore` is filled with N records (default 100,000; the records of
 * bench/dead-letters.ts: 50 fingerprints, 5 endpoints, 10 message types, a stack and a small payload
 * each), then the same rows are copied into a second schema whose trigram index is dropped, as a
 * migration leaves it where pg_trgm cannot be created. Both are vacuumed and analyzed (as
 * autovacuum would), then each query runs 5 times per schema and its median is printed: list pages
 * (limit 50), counts, failure groups and text searches.
 *
 * Without the trigram index a text search page reads at most `textScanBudget` (20,000) rows of
 * insertion sequence, then ends with a cursor ("+" after the count).
 *
 * Run: `npm run bench:postgres-dead-letters` against DATABASE_URL (default
 * postgres://postgres@127.0.0.1:5432/postgres); two schemas `harrier_bench_<random>` are created
 * and dropped (kept when BENCH_KEEP is set, to look at query plans). Set BENCH_N to change N.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { DeadLetterFilter, DeadLetterRecord } from '../src/index.js';
import { benchDeadLetter, fillDeadLetters, BENCH_FINGERPRINTS } from './dead-letter-fixtures.js';
import { describePostgresUrl, migratePostgres, PostgresDeadLetterStore } from '../src/postgres/index.js';
import { fmtRate, median, table } from './support.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const N = Number(process.env.BENCH_N ?? 100_000);
const RUNS = 5;
const PAGE = 50;
/** Adds in flight at once while filling. */
const FILL_CONCURRENCY = 16;

function recordOf(n: number): DeadLetterRecord {
  return benchDeadLetter(n, { spacingMs: 1000, reasons: ['handler-failed'] });
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

/** The queries of the table, on `store`. */
function queriesOf(store: PostgresDeadLetterStore): [string, () => Promise<number | string>][] {
  const list = (filter: DeadLetterFilter) => async () => {
    const page = await store.list(filter, { limit: PAGE });
    return `${page.records.length}${page.next === undefined ? '' : '+'}`;
  };
  const fingerprint = recordOf(7).fingerprint;
  return [
    ['list, first page', list({})],
    [
      'list, page after record 50,000 (cursor)',
      async () => (await store.list({}, { limit: PAGE, cursor: cursorAt(50_000) })).records.length,
    ],
    ['list, endpoint filter (1 in 5), first page', list({ endpoint: 'endpoint-3' })],
    ['list, fingerprint filter (1 in 50), first page', list({ fingerprint })],
    ['list, type + endpoint (no match)', list({ type: 'orders.Event1', endpoint: 'endpoint-2' })],
    ['count, dead', () => store.count()],
    ['count, one fingerprint', () => store.count({ fingerprint })],
    ['count, endpoint filter', () => store.count({ endpoint: 'endpoint-3' })],
    ['groups, first page', async () => (await store.groups({}, { limit: PAGE })).groups.length],
    [
      'groups, endpoint filter',
      async () => (await store.groups({ endpoint: 'endpoint-3' }, { limit: PAGE })).groups.length,
    ],
    ['text "gateway 7 refused" (1 in 50), first page', list({ text: 'GATEWAY 7 REFUSED' })],
    ['text "sku-42" in payload (1 in 997), first page', list({ text: 'sku-42"' })],
    ['text, no match, first page', list({ text: 'no such text anywhere' })],
    ['count, text "sku-42" (1 in 997)', () => store.count({ text: 'sku-42"' })],
  ];
}

/** A list cursor after insertion sequence `seq` (the store's own format). */
function cursorAt(seq: number): string {
  return Buffer.from(`pdl1:${seq}`, 'utf8').toString('base64url');
}

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: FILL_CONCURRENCY + 2 });
  const tag = randomBytes(4).toString('hex');
  const indexed = `harrier_bench_${tag}_trgm`;
  const plain = `harrier_bench_${tag}_plain`;
  const stores: PostgresDeadLetterStore[] = [];
  try {
    const version =
      (await pool.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '?';
    await migratePostgres(pool, { schema: indexed });
    await migratePostgres(pool, { schema: plain });
    await pool.query(`DROP INDEX "${plain}".dead_letters_search_trgm`);
    const withIndex = new PostgresDeadLetterStore({ connection: pool, schema: indexed });
    const without = new PostgresDeadLetterStore({ connection: pool, schema: plain });
    stores.push(withIndex, without);
    const fillMs = await fillDeadLetters(withIndex, N, recordOf, FILL_CONCURRENCY);
    await pool.query(
      `INSERT INTO "${plain}".dead_letters OVERRIDING SYSTEM VALUE SELECT * FROM "${indexed}".dead_letters`,
    );
    for (const schema of [indexed, plain]) await pool.query(`VACUUM ANALYZE "${schema}".dead_letters`);
    const size = await pool.query<{ table: string; indexes: string; trgm: string }>(
      `SELECT pg_size_pretty(pg_table_size($1::regclass)) AS table,
         pg_size_pretty(pg_indexes_size($1::regclass)) AS indexes,
         pg_size_pretty(pg_relation_size($2::regclass)) AS trgm`,
      [`"${indexed}".dead_letters`, `"${indexed}".dead_letters_search_trgm`],
    );
    const body: string[][] = [];
    const a = queriesOf(withIndex);
    const b = queriesOf(without);
    for (const [i, [name, query]] of a.entries()) {
      const first = await time(query);
      const second = await time(b[i]?.[1] ?? query);
      body.push([
        name,
        String(first.result),
        first.ms.toFixed(1),
        String(second.result),
        second.ms.toFixed(1),
      ]);
    }
    const sizes = size.rows[0];
    console.log(
      `Harrier dead letters on PostgreSQL at ${N.toLocaleString('en-US')} — Node ${process.version}, PostgreSQL ${version} at ${describePostgresUrl(DATABASE_URL)}`,
    );
    console.log(
      `filled in ${(fillMs / 1000).toFixed(1)} s (${fmtRate((N / fillMs) * 1000)} adds/s, ${FILL_CONCURRENCY} in flight); ${BENCH_FINGERPRINTS} fingerprints; table ${sizes?.table}, indexes ${sizes?.indexes} (trigram ${sizes?.trgm}); median of ${RUNS} runs\n`,
    );
    console.log(
      table(
        ['query', 'result (pg_trgm)', 'ms (pg_trgm)', 'result (no trigram index)', 'ms (no trigram index)'],
        body,
      ),
    );
  } finally {
    for (const store of stores) await store.close();
    if (process.env.BENCH_KEEP === undefined) {
      for (const schema of [indexed, plain]) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    } else {
      console.log(`kept schemas ${indexed} and ${plain} (BENCH_KEEP is set): drop them when done`);
    }
    await pool.end();
  }
}

await main();
