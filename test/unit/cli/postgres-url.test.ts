import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { backendFor } from '../../../src/cli/backends.js';
import { contextOf, type ConnectionValues } from '../../../src/cli/cli-context.js';
import { CliExit, ExitCode, type CliIo } from '../../../src/cli/cli-io.js';
import { checkPostgresUrl } from '../../../src/cli/postgres-url.js';

/** The usage error `body` throws. */
function usageOf(body: () => unknown): CliExit {
  try {
    body();
  } catch (error) {
    if (error instanceof CliExit) return error;
    throw error;
  }
  throw new Error('no usage error');
}

/** The usage error `checkPostgresUrl` throws for `url`, or undefined when it accepts it. */
function problemOf(url: string): CliExit | undefined {
  try {
    checkPostgresUrl(url, '--database-url');
    return undefined;
  } catch (error) {
    if (error instanceof CliExit) return error;
    throw error;
  }
}

function io(env: Record<string, string> = {}): CliIo {
  return { stdout: { write: () => true }, stderr: { write: () => true }, stdin: new PassThrough(), env };
}

const context = (env: Record<string, string>, values: ConnectionValues = {}) => contextOf(io(env), values);

describe('checkPostgresUrl', () => {
  describe('when the URL is one pg connects with', () => {
    it.each([
      'postgres://127.0.0.1:5432/app',
      'postgresql://app:s%40cret@db.example.com/app?sslmode=require',
      'postgres://postgres@localhost',
      'postgres://[::1]:5432/app',
      'POSTGRES://127.0.0.1/app',
      'postgres:///app?host=/run/postgresql',
    ])('accepts %s', (url) => {
      expect(problemOf(url)).toBeUndefined();
    });
  });

  describe('when the URL is malformed', () => {
    it.each([
      ['postgres://app:%zz@localhost/app', 'the password has a bad percent escape'],
      ['postgres://localhost:99999/app', 'port "99999" is not a number from 1 to 65535'],
      ['postgres:///app', 'it has no host'],
      ['mysql://localhost/app', 'unknown scheme "mysql://"'],
      ['localhost:5432', 'it has no scheme'],
    ])('refuses %s: %s', (url, problem) => {
      const error = problemOf(url);
      expect(error?.exitCode).toBe(ExitCode.usage);
      expect(error?.message).toContain(problem);
      expect(error?.message).toMatch(/^--database-url "/);
    });

    it('hides the password in the message', () => {
      expect(problemOf('postgres://app:s3cret@localhost:0/app')?.message).not.toContain('s3cret');
    });
  });
});

describe('backendFor', () => {
  it.each(['postgres://127.0.0.1/app', 'postgresql://127.0.0.1/app'])('picks PostgreSQL for %s', (url) => {
    expect(backendFor(url, '--url').name).toBe('PostgreSQL');
  });
});

describe('contextOf on PostgreSQL', () => {
  const pgUrl = 'postgres://app@db:5432/app';
  const redisUrl = 'redis://cache:6379';

  describe('where the system is', () => {
    it('takes --database-url, or --url, with the schema from --schema, else HARRIER_SCHEMA, else harrier', () => {
      expect(context({}, { 'database-url': pgUrl })).toMatchObject({
        backend: 'PostgreSQL',
        where: pgUrl,
        scope: 'harrier',
        scopeLabel: 'schema harrier',
      });
      expect(context({ HARRIER_SCHEMA: 'billing' }, { url: pgUrl }).scope).toBe('billing');
      expect(context({ HARRIER_SCHEMA: 'billing' }, { url: pgUrl, schema: 'orders' }).scope).toBe('orders');
    });

    it('takes a flag over every variable, and HARRIER_URL over DATABASE_URL and REDIS_URL', () => {
      const env = { HARRIER_URL: pgUrl, DATABASE_URL: 'postgres://other/db', REDIS_URL: redisUrl };
      expect(context(env, { 'redis-url': redisUrl }).backend).toBe('Redis');
      expect(context(env, { 'database-url': 'postgres://flag/db' }).where).toBe('postgres://flag/db');
      expect(context(env).where).toBe(pgUrl);
      expect(context({ DATABASE_URL: pgUrl }).where).toBe(pgUrl);
    });

    it('refuses two connection flags', () => {
      expect(usageOf(() => context({}, { url: pgUrl, 'database-url': pgUrl })).message).toBe(
        'Pass either --url or --database-url, not both',
      );
      expect(usageOf(() => context({}, { 'redis-url': redisUrl, 'database-url': pgUrl })).message).toBe(
        'Pass either --redis-url or --database-url, not both',
      );
    });

    it('refuses REDIS_URL or REDIS_CLUSTER beside DATABASE_URL when no flag nor HARRIER_URL says which', () => {
      for (const redis of [{ REDIS_URL: redisUrl }, { REDIS_CLUSTER: '10.0.0.1:7000' }]) {
        const error = usageOf(() => context({ ...redis, DATABASE_URL: pgUrl }));
        expect(error.exitCode).toBe(ExitCode.usage);
        expect(error.message).toContain('and DATABASE_URL are set');
        expect(error.message).toContain('--url (or HARRIER_URL), --redis-url or --database-url');
      }
    });

    it('refuses a URL of another backend in --database-url or DATABASE_URL', () => {
      expect(usageOf(() => context({}, { 'database-url': redisUrl })).message).toContain(
        '--database-url takes a PostgreSQL URL',
      );
      expect(usageOf(() => context({ DATABASE_URL: redisUrl })).message).toMatch(/^DATABASE_URL takes/);
    });
  });

  describe('the scope', () => {
    it('refuses --prefix on PostgreSQL and --schema on Redis, naming the option that applies', () => {
      expect(usageOf(() => context({}, { url: pgUrl, prefix: '{x}' })).message).toBe(
        '--prefix does not apply to PostgreSQL: it names the system with --schema (a PostgreSQL schema)',
      );
      expect(usageOf(() => context({}, { url: redisUrl, schema: 'x' })).message).toBe(
        '--schema does not apply to Redis: it names the system with --prefix (a Redis key prefix)',
      );
    });

    it('leaves HARRIER_SCHEMA out of a Redis system', () => {
      expect(context({ HARRIER_SCHEMA: 'billing' }, { url: redisUrl }).scope).toBe('{harrier}');
    });
  });
});
