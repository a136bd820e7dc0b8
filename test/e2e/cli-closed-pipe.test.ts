import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RedisDeadLetterStore, RedisSagaStore } from '../../src/redis/index.js';
import { deadLetter } from '../helpers/dashboard.js';
import { deleteKeys, freshPrefix, useSharedRedis } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const redis = useSharedRedis(redisUrl);
const bin = join(import.meta.dirname, '..', '..', 'dist', 'cli', 'bin.js');

/**
 * Runs the built `harrier` with its stdout a pipe whose reading end is closed before it writes, as
 * `harrier ... | head -1` is once `head` has its line; resolves with the exit code and stderr.
 */
function harrierIntoClosedPipe(args: readonly string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], {
      env: { PATH: process.env.PATH ?? '', REDIS_URL: redisUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => {
      resolve({ code, stderr });
    });
  });
}

describe('harrier (the bin)', () => {
  const prefix = freshPrefix();

  beforeAll(async () => {
    if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build`);
    const sagas = new RedisSagaStore({ connection: redis.client, prefix });
    for (let n = 0; n < 200; n++) {
      await sagas.save(
        {
          saga: 'fulfilment',
          id: `o-${n}`,
          state: { n },
          status: 'active',
          timeouts: [],
          now: Date.UTC(2026, 0, 1),
          applied: [],
        },
        0,
      );
    }
    const deadLetters = new RedisDeadLetterStore({ connection: redis.client, prefix });
    for (let n = 0; n < 200; n++) await deadLetters.add(deadLetter(n));
  });

  afterAll(async () => {
    await deleteKeys(redis.client, prefix);
  });

  describe('when the reader of its output goes away', () => {
    it.each([
      [['sagas', 'list', '--json', '--limit', '200']],
      [['dlq', 'list', '--json', '--limit', '200']],
      [['dlq', 'export', '--all']],
      [['--help']],
    ])('exits 0 without a stack trace: harrier %s', async (args) => {
      const { code, stderr } = await harrierIntoClosedPipe([...args, '--prefix', prefix]);
      expect(stderr).not.toContain('EPIPE');
      expect(stderr).not.toMatch(/\n\s+at /);
      expect(code).toBe(0);
    });
  });
});
