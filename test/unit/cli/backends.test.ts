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
const RABBIT: CliBackend = {
  name: 'RabbitMQ',
  schemes: ['amqp', 'amqps'],
  example: 'amqp://127.0.0.1:5672',
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
      const error = usageOf(() => backendFor('amqp://guest:guest@127.0.0.1:5672', '--url'));
      expect(error.exitCode).toBe(2);
      expect(error.message).toBe(
        '--url "amqp://***@127.0.0.1:5672" is not a valid URL: unknown scheme "amqp://"; use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), e.g. redis://127.0.0.1:6379',
      );
    });

    it('says so when the URL has no scheme, with the URL written with one', () => {
      expect(usageOf(() => backendFor('localhost:6379', 'REDIS_URL')).message).toBe(
        'REDIS_URL "localhost:6379" is not a valid URL: it has no scheme; use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), e.g. redis://localhost:6379',
      );
    });
  });

  describe('with one more backend in the registry', () => {
    it('picks it by its schemes, and the message lists every backend', () => {
      const registry = [...BACKENDS, RABBIT];
      expect(backendFor('amqps://broker:5671', '--url', registry)).toBe(RABBIT);
      expect(backendFor('redis://127.0.0.1', '--url', registry).name).toBe('Redis');
      expect(usageOf(() => backendFor('http://x', '--url', registry)).message).toContain(
        'use redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), amqp:// or amqps:// (RabbitMQ)',
      );
      expect(describeSchemes(registry)).toBe(
        'redis:// or rediss:// (Redis), postgres:// or postgresql:// (PostgreSQL), amqp:// or amqps:// (RabbitMQ)',
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
});
