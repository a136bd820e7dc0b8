import { describe, expect, it } from 'vitest';
import { CliExit, ExitCode } from '../../../src/cli/cli-io.js';
import { checkRedisUrl } from '../../../src/cli/redis-url.js';

/** The usage error `checkRedisUrl` throws for `url`, or undefined when it accepts it. */
function problemOf(url: string): CliExit | undefined {
  try {
    checkRedisUrl(url, '--redis-url');
    return undefined;
  } catch (error) {
    if (error instanceof CliExit) return error;
    throw error;
  }
}

describe('checkRedisUrl', () => {
  describe('when the URL is one ioredis connects with', () => {
    it.each([
      'redis://127.0.0.1:6379',
      'redis://localhost',
      'rediss://:p%40ss%25word@redis.example.com:6380/0',
      'redis://user:secret@10.0.0.1:6379/15',
      'redis://[::1]:6379',
      'REDIS://127.0.0.1',
      'redis://127.0.0.1:6379?db=2',
      '/run/redis/redis.sock',
      '/run/redis/redis.sock?db=3',
    ])('accepts %s', (url) => {
      expect(problemOf(url)).toBeUndefined();
    });
  });

  describe('when the URL is malformed', () => {
    it.each([
      ['redis://:%zz@localhost:6379', 'the password has a bad percent escape'],
      ['redis://%E0%A4%A@localhost', 'the user name has a bad percent escape'],
      ['http://localhost:6379', 'unknown scheme "http://"'],
      ['unix:///run/redis.sock', 'unknown scheme "unix://"'],
      ['localhost:6379', 'it has no scheme; write redis://localhost:6379'],
      ['garbage', 'it has no scheme'],
      ['redis://localhost:abc', 'port "abc" is not a number from 1 to 65535'],
      ['redis://localhost:99999', 'port "99999" is not a number from 1 to 65535'],
      ['redis://localhost:0', 'port "0" is not a number from 1 to 65535'],
      ['redis://', 'it has no host'],
      ['redis://bad%host:6379', 'host "bad%host" is not a host name or IP address'],
      ['redis://[::1', 'it cannot be parsed as a URL'],
      ['redis://localhost:6379/abc', 'database "abc" is not a number'],
      ['redis://localhost:6379?db=-1', 'database "-1" is not a number'],
      ['/run/redis.sock?db=x', 'database "x" is not a number'],
    ])('refuses %s as a usage error: %s', (url, problem) => {
      const error = problemOf(url);
      expect(error?.exitCode).toBe(ExitCode.usage);
      expect(error?.message).toContain('--redis-url "');
      expect(error?.message).toContain(`is not a valid Redis URL: ${problem}`);
    });

    it('never shows the user name or password', () => {
      const error = problemOf('redis://admin:hunter2%zz@localhost:6379');
      expect(error?.message).toContain('"redis://***@localhost:6379"');
      expect(error?.message).not.toMatch(/admin|hunter2/);
    });
  });
});
