import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startRedisServer } from './helpers/local-redis.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
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
function ensureBuilt(): void {
  const bin = join(root, 'dist', 'cli', 'bin.js');
  if (existsSync(bin) && statSync(bin).mtimeMs >= newestMtime(join(root, 'src'))) return;
  const result = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit', timeout: 300_000 });
  if (!existsSync(bin))
    throw new Error(`npm run build did not produce ${bin} (exit ${String(result.status)})`);
}

/**
 * Provides a real Redis to the tests: REDIS_URL when set, else a redis-server of our own on a free
 * loopback port in a temp dir.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  ensureBuilt();
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    project.provide('redisUrl', fromEnv);
    return async () => {};
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
  return async () => {
    local.stop();
  };
}
