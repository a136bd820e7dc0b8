import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startPostgresServer } from './helpers/local-postgres.js';
import { startRedisServer } from './helpers/local-redis.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    databaseUrl: string;
  }
}

const root = dirname(dirname(fileURLToPath(import.meta.url)));

/** Newest modification time of any file under `dir`. */
function newestMtime(dir: string): number {
  return Math.max(
    0,
    ...readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => statSync(join(entry.parentPath, entry.name)).mtimeMs),
  );
}

/**
 * Builds dist/ once, before any test, when it is missing or older than src/: the CLI tests run the
 * built bin, and building here (not in each test file) means no test runs it while it is rewritten.
 */
async function ensureBuilt(): Promise<void> {
  const bin = join(root, 'dist', 'cli', 'bin.js');
  if (existsSync(bin) && statSync(bin).mtimeMs >= newestMtime(join(root, 'src'))) return;
  const status = await new Promise<number | null>((resolve, reject) => {
    const build = spawn('npm', ['run', 'build'], { cwd: root, stdio: 'inherit', timeout: 300_000 });
    build.once('error', reject);
    build.once('exit', resolve);
  });
  if (!existsSync(bin)) throw new Error(`npm run build did not produce ${bin} (exit ${String(status)})`);
}

/** A real Redis: REDIS_URL when set, else a redis-server of our own; returns how to stop it. */
async function provideRedis(project: TestProject): Promise<() => void> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    project.provide('redisUrl', fromEnv);
    return () => {};
  }
  const which = spawnSync('redis-server', ['--version']);
  if (which.error !== undefined || which.status !== 0) {
    throw new Error(
      'The tests need Redis: set REDIS_URL=redis://127.0.0.1:6379, or install redis-server (apt-get install redis-server, brew install redis) so the tests can start their own',
    );
  }
  const local = await startRedisServer();
  process.env.REDIS_URL = local.url;
  project.provide('redisUrl', local.url);
  return () => {
    local.stop();
  };
}

/** A real PostgreSQL: DATABASE_URL when set, else initdb + pg_ctl of our own; returns how to stop it. */
async function providePostgres(project: TestProject): Promise<() => void> {
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    project.provide('databaseUrl', fromEnv);
    return () => {};
  }
  const local = await startPostgresServer();
  process.env.DATABASE_URL = local.url;
  project.provide('databaseUrl', local.url);
  return () => {
    local.stop();
  };
}

/**
 * Provides a real Redis and a real PostgreSQL to the tests: REDIS_URL / DATABASE_URL when set, else
 * servers of our own on free loopback ports in temp dirs. Builds dist/ meanwhile, when it is stale.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const [built, redis, postgres] = await Promise.allSettled([
    ensureBuilt(),
    provideRedis(project),
    providePostgres(project),
  ]);
  const stops = [redis, postgres].flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  for (const result of [built, redis, postgres]) {
    if (result.status === 'rejected') {
      for (const stop of stops) stop();
      throw result.reason;
    }
  }
  return async () => {
    for (const stop of stops.reverse()) stop();
  };
}
