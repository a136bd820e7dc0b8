/**
 * How fast the dashboard's pages answer with many dead letters: a `RedisDeadLetterStore` is filled
 * with N records (default 100,000) in 50 fingerprints, 5 endpoints, 10 message types, 4 reasons and
 * 50 handlers, one failure every 25 s (about 29 days), and `createDashboard` serves it on `node:http`.
 * Each page below is fetched once to warm up, then 5 times; the median is printed. Then each is
 * fetched once more with Redis's SLOWLOG logging every script over 1 ms, to print the time the
 * page's scripts took inside Redis (the rest is round trips, decoding and rendering in Node), the
 * longest of them (how long the page blocked Redis at once) and how many there were.
 *
 * With `BENCH_LEGACY=1` (the default runs both) the same pages are timed again after the store's
 * per-record filter fields are deleted, as records written by a Harrier from before them have none:
 * those records are filtered in Node, as every filter but status and fingerprint was before, so the
 * second column is the old path on the same data.
 *
 * Run: `npm run bench:dashboard` (it compiles src/ and bench/ with tsc into .bench/, then runs
 * `node .bench/bench/dashboard.js`). It starts a redis-server of its own on a free loopback port
 * unless REDIS_URL is set. Set BENCH_N to change N, BENCH_LEGACY=0 to skip the legacy column.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import type { DeadLetterRecord } from '../src/index.js';
import {
  BENCH_FINGERPRINTS as FINGERPRINTS,
  BENCH_T0 as T0,
  benchDeadLetter,
  fillDeadLetters,
} from './dead-letter-fixtures.js';
import { createDashboard } from '../src/dashboard/create-dashboard.js';
import { describeRedisUrl, RedisDeadLetterStore } from '../src/redis/index.js';
import { benchPrefix, deleteKeys, fmtRate, keysOf, median, startBenchRedis, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 100_000);
const LEGACY = process.env.BENCH_LEGACY !== '0';
const REASONS = ['handler-failed', 'validation-failed', 'projection-failed', 'no-handler'] as const;
const RUNS = 5;
const FILL_CONCURRENCY = 64;
const SPACING_MS = 25_000;
/** The dashboard's clock: just after the last failure, so `since=1h` selects the newest 143. */
const NOW = T0 + N * SPACING_MS + 1000;

function recordOf(n: number): DeadLetterRecord {
  return benchDeadLetter(n, { spacingMs: SPACING_MS, reasons: REASONS });
}

async function fill(store: RedisDeadLetterStore): Promise<number> {
  return fillDeadLetters(store, N, recordOf, FILL_CONCURRENCY);
}

/** GETs `url`, returns its status, how long it took, and the page's "N matching" or row count. */
async function get(url: string): Promise<{ ms: number; status: number; what: string }> {
  const started = performance.now();
  const res = await fetch(url);
  const body = await res.text();
  const ms = performance.now() - started;
  const total = /data-testid="total">([^<]*)</.exec(body)?.[1];
  const rows = (body.match(/<tr><td/g) ?? []).length;
  return { ms, status: res.status, what: total === undefined ? `${rows} rows` : `${rows} rows, ${total}` };
}

/**
 * Where one GET of `url` spends its time in Redis: SLOWLOG set to log what takes over 1 ms, then
 * the sum and the longest of the scripts it logged while the page was served, and how many.
 */
async function redisTime(
  client: Redis,
  url: string,
): Promise<{ totalMs: number; longestMs: number; scripts: number }> {
  // Over 1 ms: the page's scripts, not the commands they call, which SLOWLOG logs too.
  await client.config('SET', 'slowlog-log-slower-than', '1000');
  await client.config('SET', 'slowlog-max-len', '100000');
  await client.slowlog('RESET');
  await get(url);
  const entries = (await client.slowlog('GET', '-1')) as [number, number, number, string[]][];
  await client.config('SET', 'slowlog-log-slower-than', '10000');
  const page = entries.filter(([, , , args]) => ['evalsha', 'eval'].includes(String(args[0]).toLowerCase()));
  const micros = page.map(([, , duration]) => duration);
  return {
    totalMs: micros.reduce((a, b) => a + b, 0) / 1000,
    longestMs: Math.max(0, ...micros) / 1000,
    scripts: page.length,
  };
}

async function timePage(url: string): Promise<{ ms: number; status: number; what: string }> {
  await get(url);
  const samples: number[] = [];
  let last = { ms: 0, status: 0, what: '' };
  for (let i = 0; i < RUNS; i++) {
    last = await get(url);
    samples.push(last.ms);
  }
  return { ...last, ms: median(samples) };
}

/** The `next` cursor after `pages` pages of the unfiltered list. */
async function deepCursor(store: RedisDeadLetterStore, pages: number): Promise<string> {
  let cursor: string | undefined;
  for (let i = 0; i < pages; i++) {
    const page = await store.list({}, cursor === undefined ? { limit: 50 } : { limit: 50, cursor });
    cursor = page.next;
  }
  if (cursor === undefined) throw new Error(`fewer than ${pages} pages of 50`);
  return cursor;
}

/** Deletes the per-record filter fields, as records written before them lack them. */
async function stripFilterFields(client: Redis, prefix: string): Promise<number> {
  const keys = (await keysOf(client, `${prefix}:dlq:record:`)).filter((key) => key.includes(':record:'));
  for (let i = 0; i < keys.length; i += 1000) {
    const pipeline = client.pipeline();
    for (const key of keys.slice(i, i + 1000)) pipeline.hdel(key, 'x', 'x:ep', 'x:type', 'x:hd', 'x:rs');
    await pipeline.exec();
  }
  return keys.length;
}

async function main(): Promise<void> {
  const redis = await startBenchRedis();
  const client = new Redis(redis.url);
  const prefix = benchPrefix('harrier-bench-dashboard');
  const store = new RedisDeadLetterStore({ connection: client, prefix, maxRecords: Math.max(N, 100_000) });
  const server = createServer(createDashboard({ deadLetters: store, now: () => NOW }));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const version = (await client.info('server')).match(/redis_version:(\S+)/)?.[1] ?? '?';
    const fillMs = await fill(store);
    const sample = recordOf(7);
    const deep = await deepCursor(store, 10);
    const pages: [string, string][] = [
      ['/', '/'],
      ['/?type=X (1 in 10)', '/?type=orders.Event3'],
      ['/?endpoint=X (1 in 5)', '/?endpoint=endpoint-2'],
      ['/?since=1h (newest 143)', '/?since=1h'],
      ['/?reason=X&handler=Y (1 in 100)', '/?reason=validation-failed&handler=Handler9'],
      ['/?text=word (1 in 50)', `/?text=${encodeURIComponent('gateway 7 refused')}`],
      ['/?text=word (every record)', '/?text=refused'],
      ['/?text=word (none)', `/?text=${encodeURIComponent('no such text')}`],
      ['/?fingerprint=F (1 in 50)', `/?fingerprint=${sample.fingerprint}`],
      ['/groups', '/groups'],
      ['/groups?type=X', '/groups?type=orders.Event3'],
      ['/groups?since=1h', '/groups?since=1h'],
      ['/groups?text=word (1 in 50)', `/groups?text=${encodeURIComponent('gateway 7 refused')}`],
      ['/records/:id', `/records/${sample.id}`],
      ['/?cursor= after 10 pages', `/?cursor=${deep}`],
    ];
    const results: { ms: number; status: number; what: string }[][] = [];
    for (const [, path] of pages) results.push([await timePage(`${base}${path}`)]);
    const inRedis: Awaited<ReturnType<typeof redisTime>>[] = [];
    for (const [, path] of pages) inRedis.push(await redisTime(client, `${base}${path}`));
    if (LEGACY) {
      await stripFilterFields(client, prefix);
      for (const [i, [, path]] of pages.entries()) results[i]?.push(await timePage(`${base}${path}`));
    }
    console.log(
      `Harrier dashboard at ${N.toLocaleString('en-US')} dead letters — Node ${process.version}, Redis ${version} at ${describeRedisUrl(redis.url)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
    );
    console.log(
      `filled in ${(fillMs / 1000).toFixed(1)} s (${fmtRate((N / fillMs) * 1000)} adds/s, ${FILL_CONCURRENCY} in flight); ${FINGERPRINTS} fingerprints; GET over node:http, median of ${RUNS} after a warm-up\n`,
    );
    const header = ['page', 'answer', 'ms', 'scripts > 1 ms', 'their ms', 'longest ms'];
    if (LEGACY) header.push('ms, legacy records');
    const body = pages.map(([name], i) => {
      const [now, legacy] = results[i] ?? [];
      const redisSide = inRedis[i];
      const row = [
        name,
        `${now?.status} ${now?.what}`,
        now?.ms.toFixed(1) ?? '-',
        String(redisSide?.scripts ?? '-'),
        redisSide?.totalMs.toFixed(1) ?? '-',
        redisSide?.longestMs.toFixed(1) ?? '-',
      ];
      if (LEGACY) row.push(legacy?.ms.toFixed(1) ?? '-');
      return row;
    });
    console.log(table(header, body));
  } finally {
    server.close();
    await store.close();
    await deleteKeys(client, prefix);
    await client.quit();
    redis.stop();
  }
}

await main();
