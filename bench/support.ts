// Helpers shared by the bench scripts: medians, number formatting, aligned tables, a completion counter,
// and the Redis chores of the Redis benches (prefixes, keys, INFO).

import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { describeRedisUrl } from '../src/redis/index.js';
import { startRedisServer, type LocalRedis } from '../test/helpers/local-redis.js';

/** The median of some samples (the upper one of an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** A rate as a whole number with thousands separators. */
export const fmtRate = (n: number): string => Math.round(n).toLocaleString('en-US');

/** A plain-text table: first column left-aligned, the rest right-aligned. */
export function table(header: readonly string[], body: readonly (readonly string[])[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...body.map((r) => (r[c] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, c) => (c === 0 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

/** Makes `count` calls from `callers` concurrent callers, numbering them from `from`. */
export async function drive(
  from: number,
  count: number,
  callers: number,
  call: (i: number) => Promise<unknown>,
): Promise<void> {
  let next = from;
  const end = from + count;
  const caller = async (): Promise<void> => {
    while (next < end) await call(next++);
  };
  await Promise.all(Array.from({ length: callers }, caller));
}

/** Counts completions and resolves a waiter once the count reaches its target. */
export class Counter {
  count = 0;
  #target = Infinity;
  #resolve: (() => void) | undefined;

  /** @param timeoutMs - how long `until` waits before it rejects, so a run that loses messages fails. */
  constructor(private readonly timeoutMs: number) {}

  hit(): void {
    this.count++;
    if (this.count >= this.#target) {
      const resolve = this.#resolve;
      this.#target = Infinity;
      this.#resolve = undefined;
      resolve?.();
    }
  }

  /** Resolves once `count >= target`. */
  until(target: number): Promise<void> {
    if (this.count >= target) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`Only ${this.count} of ${target} messages done after ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.#target = target;
      this.#resolve = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

/** A key prefix of its own for one run, with a hash tag as Harrier's default has. */
export const benchPrefix = (tag = 'harrier-bench', bytes = 4): string =>
  `{${tag}-${randomBytes(bytes).toString('hex')}}`;

/** Every key under `prefix` (glob characters in it escaped). */
export async function keysOf(client: Redis, prefix: string): Promise<string[]> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`;
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys;
}

/** Deletes every key under `prefix`. */
export async function deleteKeys(client: Redis, prefix: string): Promise<void> {
  const keys = await keysOf(client, prefix);
  for (let i = 0; i < keys.length; i += 1000) await client.unlink(...keys.slice(i, i + 1000));
}

/** A numeric field of INFO (of one section when given); NaN when absent. */
export async function infoField(client: Redis, field: string, section?: string): Promise<number> {
  return numberIn(section === undefined ? await client.info() : await client.info(section), field);
}

/** A numeric field of an INFO reply's text; NaN when absent. */
function numberIn(info: string, field: string): number {
  return Number(new RegExp(`^${field}:(\\S+)`, 'm').exec(info)?.[1] ?? Number.NaN);
}

/**
 * The Redis server's CPU time so far (`used_cpu_user` + `used_cpu_sys`, all its threads), in
 * microseconds, from one `INFO cpu`. A bench and Redis on one machine share its cores, so a rate
 * follows the sum of both CPU figures.
 */
export async function redisCpuUs(client: Redis): Promise<number> {
  const text = await client.info('cpu');
  return (numberIn(text, 'used_cpu_user') + numberIn(text, 'used_cpu_sys')) * 1e6;
}

/** A redis-server of the bench's own on a free loopback port, or the one at REDIS_URL. */
export async function startBenchRedis(): Promise<LocalRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, stop: () => undefined };
  return startRedisServer('harrier-bench-redis-');
}

/** The last error each bench admin client reported (ioredis reports a refused connection there). */
const adminErrors = new WeakMap<Redis, unknown>();

/** A bench's own Redis connection to `url`: lazy, one retry, 3 s to connect; open it with {@link connectAdmin}. */
export function adminClient(url: string): Redis {
  const admin = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 3_000 });
  admin.on('error', (error: unknown) => {
    adminErrors.set(admin, error);
  });
  return admin;
}

/**
 * Connects a bench's admin client. When Redis is not reachable: says so on stderr with the fix, sets
 * exit code 2 and returns false.
 */
export async function connectAdmin(admin: Redis, url: string): Promise<boolean> {
  try {
    await admin.connect();
    return true;
  } catch (error) {
    process.stderr.write(
      `Redis is not reachable at ${describeRedisUrl(url)} (${String(adminErrors.get(admin) ?? error)}): start one (e.g. \`redis-server --port 6379\`) or set REDIS_URL to a running server\n`,
    );
    process.exitCode = 2;
    admin.disconnect();
    return false;
  }
}
