import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { SystemAdmin } from '../../../src/admin/system-admin.js';
import {
  BACKENDS,
  REDIS_SCOPE,
  backendFor,
  describeSchemes,
  type CliBackend,
} from '../../../src/cli/backends.js';
import { contextOf } from '../../../src/cli/cli-context.js';
import { CliExit, ExitCode, type CliIo } from '../../../src/cli/cli-io.js';

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

function io(env: Record<string, string> = {}): CliIo {
  return { stdout: { write: () => true }, stderr: { write: () => true }, stdin: new PassThrough(), env };
}

/** A backend the CLI does not have, added as one entry of a registry. */
const MYSQL: CliBackend = {
  name: 'MySQL',
  schemes: ['mysql'],
  example: 'mysql://127.0.0.1:3306/app',
  check: () => undefined,
  scope: REDIS_SCOPE,
  open: () => Promise.reject<SystemAdmin>(new Error('not in a unit test')),
};

describe('backendFor', () => {
  describe('when the scheme is one of Redis', () => {
    it.each([
      'redis://127.0.0.1:6379',
      'rediss://:secret@redis.example.com:6380/0',
      'REDIS://127.0.0.1',
      '/run/redis/redis.sock',
    ])('picks Redis for %s', (url) => {
      expect(backendFor(url, '--url').name).toBe('Redis');
    });

    it("refuses what Redis's own URL check refuses, naming the source", () => {
      const error = usageOf(() => backendFor('rediss://127.0.0.1:63x9', 'HARRIER_URL'));
      expect(error.exitCode).toBe(ExitCode.usage);
      expect(error.message).toContain('HARRIER_URL "rediss://127.0.0.1:63x9" is not a valid Redis URL: port');
    });
  });

  describe('when no backend takes the scheme', () => {
    it('is a usage error (exit 2) naming the source, the scheme and the schemes that work', () => {
      const error = usageOf(() => backendFor('mongodb://app:secret@127.0.0.1:27017', '--url'));
      expect(error.exitCode).toBe(2);
      expect(error.message).toBe(
        '--url "mongodb://***@127.0.0.1:27017" is not a valid URL: unknown scheme "mongodb://"; use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), e.g. redis://127.0.0.1:6379',
      );
    });

    it('says so when the URL has no scheme, with the URL written with one', () => {
      expect(usageOf(() => backendFor('localhost:6379', 'REDIS_URL')).message).toBe(
        'REDIS_URL "localhost:6379" is not a valid URL: it has no scheme; use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), e.g. redis://localhost:6379',
      );
    });
  });

  describe('when the URL is a RabbitMQ one', () => {
    it.each(['amqp://guest:guest@127.0.0.1:5672', 'AMQPS://rabbit.example.com/prod'])(
      'is a usage error for %s naming --url for the stores and --rabbitmq-url for the broker',
      (url) => {
        const error = usageOf(() => backendFor(url, '--url'));
        expect(error.exitCode).toBe(ExitCode.usage);
        expect(error.message).toContain('is a RabbitMQ URL, and RabbitMQ carries only the messages');
        expect(error.message).toContain("Give the stores' URL with --url (e.g. redis://127.0.0.1:6379");
        expect(error.message).toContain("RabbitMQ's with --rabbitmq-url");
        expect(error.message).not.toContain('guest:guest');
      },
    );
  });

  describe('with one more backend in the registry', () => {
    it('picks it by its schemes, and the message lists every backend', () => {
      const registry = [...BACKENDS, MYSQL];
      expect(backendFor('mysql://db:3306/app', '--url', registry)).toBe(MYSQL);
      expect(backendFor('redis://127.0.0.1', '--url', registry).name).toBe('Redis');
      expect(usageOf(() => backendFor('http://x', '--url', registry)).message).toContain(
        'use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), mysql:// (MySQL)',
      );
      expect(describeSchemes(registry)).toBe(
        'redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), mysql:// (MySQL)',
      );
    });
  });
});

describe('contextOf', () => {
  describe('--url and its alias --redis-url', () => {
    it('name the same system', () => {
      const url = 'redis://127.0.0.1:6379/2';
      for (const values of [{ url }, { 'redis-url': url }]) {
        expect(contextOf(io(), values)).toMatchObject({ backend: 'Redis', where: url, scope: '{harrier}' });
      }
    });

    it('refuse to be given together, as --url and --redis-cluster do', () => {
      const url = 'redis://127.0.0.1:6379';
      expect(usageOf(() => contextOf(io(), { url, 'redis-url': url })).message).toBe(
        'Pass either --url or --redis-url, not both',
      );
      expect(usageOf(() => contextOf(io(), { url, 'redis-cluster': '127.0.0.1:7000' })).message).toBe(
        'Pass either --url or --redis-cluster, not both',
      );
    });
  });

  describe('from the environment', () => {
    it('takes HARRIER_URL first, then REDIS_CLUSTER, then REDIS_URL; a flag wins over all', () => {
      const env = {
        HARRIER_URL: 'rediss://harrier:6380',
        REDIS_CLUSTER: '10.0.0.1:7000',
        REDIS_URL: 'redis://legacy:6379',
      };
      expect(contextOf(io(env), {}).where).toBe('rediss://harrier:6380');
      expect(contextOf(io({ ...env, HARRIER_URL: '' }), {}).where).toBe('cluster 10.0.0.1:7000');
      expect(contextOf(io({ REDIS_URL: env.REDIS_URL }), {}).where).toBe('redis://legacy:6379');
      expect(contextOf(io(env), { 'redis-url': 'redis://flag:6379' }).where).toBe('redis://flag:6379');
    });

    it('names the variable a bad URL came from', () => {
      expect(usageOf(() => contextOf(io({ HARRIER_URL: 'http://x' }), {})).message).toMatch(
        /^HARRIER_URL "http:\/\/x" is not a valid URL: unknown scheme "http:\/\/"/,
      );
    });
  });

  describe('--rabbitmq-url', () => {
    const redis = 'redis://127.0.0.1:6379';

    it('puts the transport on RabbitMQ under prefix harrier, the stores staying at --url', () => {
      const ctx = contextOf(io(), { url: redis, 'rabbitmq-url': 'amqp://guest:guest@127.0.0.1:5672' });
      expect(ctx).toMatchObject({ backend: 'Redis', where: redis, scope: '{harrier}' });
      expect(ctx.transport).toEqual({
        backend: 'RabbitMQ',
        where: 'amqp://guest:guest@127.0.0.1:5672',
        prefix: 'harrier',
        ledger: true,
      });
    });

    it('defaults to RABBITMQ_URL, which an empty --rabbitmq-url turns off; --rabbitmq-prefix names the prefix', () => {
      const env = { RABBITMQ_URL: 'amqps://rabbit.example.com/prod' };
      expect(contextOf(io(env), { url: redis, 'rabbitmq-prefix': 'shop' }).transport).toEqual({
        backend: 'RabbitMQ',
        where: 'amqps://rabbit.example.com/prod',
        prefix: 'shop',
        ledger: true,
      });
      expect(contextOf(io(env), { url: redis, 'rabbitmq-url': '' }).transport).toBeUndefined();
      expect(contextOf(io(), { url: redis }).transport).toBeUndefined();
    });

    it('refuses a URL that is not a RabbitMQ one, naming where it came from', () => {
      expect(usageOf(() => contextOf(io(), { url: redis, 'rabbitmq-url': redis })).message).toBe(
        '--rabbitmq-url "redis://127.0.0.1:6379" is not a valid RabbitMQ URL: unknown scheme "redis://"; start it with amqp:// (or amqps:// for TLS), e.g. amqp://guest:guest@127.0.0.1:5672 or amqps://app:secret@rabbit.example.com/vhost',
      );
      expect(
        usageOf(() => contextOf(io({ RABBITMQ_URL: 'amqp://127.0.0.1:99999' }), { url: redis })).message,
      ).toContain('RABBITMQ_URL "amqp://127.0.0.1:99999" is not a valid RabbitMQ URL: port "99999"');
    });

    it('replays through the stores’ ledger unless --rabbitmq-ledger none, and refuses another value or one without a RabbitMQ URL', () => {
      const rabbit = 'amqp://127.0.0.1';
      expect(
        contextOf(io(), { url: redis, 'rabbitmq-url': rabbit, 'rabbitmq-ledger': 'none' }).transport?.ledger,
      ).toBe(false);
      expect(
        contextOf(io(), { url: redis, 'rabbitmq-url': rabbit, 'rabbitmq-ledger': 'store' }).transport?.ledger,
      ).toBe(true);
      expect(
        usageOf(() => contextOf(io(), { url: redis, 'rabbitmq-url': rabbit, 'rabbitmq-ledger': 'redis' }))
          .message,
      ).toContain('--rabbitmq-ledger "redis" is not one of store');
      expect(usageOf(() => contextOf(io(), { url: redis, 'rabbitmq-ledger': 'none' })).message).toContain(
        '--rabbitmq-ledger says how replays go on RabbitMQ and needs --rabbitmq-url',
      );
    });

    it('refuses --rabbitmq-prefix without a RabbitMQ URL, and an empty one', () => {
      expect(usageOf(() => contextOf(io(), { url: redis, 'rabbitmq-prefix': 'shop' })).message).toContain(
        '--rabbitmq-prefix names the system on RabbitMQ and needs --rabbitmq-url (or RABBITMQ_URL)',
      );
      expect(
        usageOf(() =>
          contextOf(io(), { url: redis, 'rabbitmq-url': 'amqp://127.0.0.1', 'rabbitmq-prefix': '' }),
        ).message,
      ).toContain('--rabbitmq-prefix "" must be 1 to 100 letters, digits');
    });
  });
});
