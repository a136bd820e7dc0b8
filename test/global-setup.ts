import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { startPostgresServer } from './helpers/local-postgres.js';
import { launchRabbitMqServer, rabbitmqServerPath } from './helpers/local-rabbitmq.js';
import { startRedisServer } from './helpers/local-redis.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    databaseUrl: string;
    /**
     * RABBITMQ_URL, or the URL of a server of our own that may still be booting: tests take it from
     * `rabbitmqUrl()` of test/helpers/rabbitmq.ts, which waits until it accepts connections.
     */
    rabbitmqUrl: string;
    /** The console output of our own RabbitMQ, for a test to show when it never comes up ('' with RABBITMQ_URL). */
    rabbitmqLogFile: string;
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
async function provideRedis(project: TestProject): Promise<() => void | Promise<void>> {
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
async function providePostgres(project: TestProject): Promise<() => void | Promise<void>> {
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
 * A real RabbitMQ: RABBITMQ_URL when set, else a rabbitmq-server of our own; returns how to stop it.
 *
 * @remarks
 * Our own server boots in about 5 s (2 vCPUs), longer than Redis and PostgreSQL together, so the
 * setup does not wait for it: the tests that need RabbitMQ wait in `rabbitmqUrl()`
 * (test/helpers/rabbitmq.ts), and the others never do.
 */
async function provideRabbitMq(project: TestProject): Promise<() => Promise<void>> {
  const fromEnv = process.env.RABBITMQ_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    project.provide('rabbitmqUrl', fromEnv);
    project.provide('rabbitmqLogFile', '');
    return async () => {};
  }
  if (rabbitmqServerPath() === undefined) {
    throw new Error(
      'The tests need RabbitMQ: set RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672, or install rabbitmq-server (apt-get install rabbitmq-server, brew install rabbitmq) so the tests can start their own',
    );
  }
  const { server, ready } = await launchRabbitMqServer();
  // A server that cannot start fails the tests that wait for it, with its log (rabbitmqUrl()).
  ready.catch(() => {});
  process.env.RABBITMQ_URL = server.url;
  project.provide('rabbitmqUrl', server.url);
  project.provide('rabbitmqLogFile', server.logFile);
  return () => server.dispose();
}

/**
 * Provides a real Redis, a real PostgreSQL and a real RabbitMQ to the tests: REDIS_URL /
 * DATABASE_URL / RABBITMQ_URL when set, else servers of our own on free loopback ports in temp dirs.
 * Builds dist/ meanwhile, when it is stale.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const [built, redis, postgres, rabbitmq] = await Promise.allSettled([
    ensureBuilt(),
    provideRedis(project),
    providePostgres(project),
    provideRabbitMq(project),
  ]);
  const stops = [redis, postgres, rabbitmq].flatMap((result) =>
    result.status === 'fulfilled' ? [result.value] : [],
  );
  const stopAll = async (): Promise<void> => {
    for (const stop of stops.reverse()) await stop();
  };
  for (const result of [built, redis, postgres, rabbitmq]) {
    if (result.status === 'rejected') {
      await stopAll();
      throw result.reason;
    }
  }
  return stopAll;
}
