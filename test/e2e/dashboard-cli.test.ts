import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RedisDeadLetterStore } from '../../src/redis/index.js';
import { DASHBOARD_BIN as bin, startDashboardCli as start } from '../helpers/dashboard-cli.js';
import { deadLetter } from '../helpers/dashboard.js';
import { waitFor } from '../helpers/local-redis.js';
import { deleteKeys, freshPrefix } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');

describe('harrier dashboard', () => {
  const prefix = freshPrefix();
  let client: Redis;

  beforeAll(async () => {
    if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build`);
    client = new Redis(redisUrl);
    const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    await store.add(
      deadLetter(1, { type: 'cli.Dashboard', error: { name: 'Error', message: 'seen over http' } }),
    );
    await store.close();
  });

  afterAll(async () => {
    await deleteKeys(client, prefix);
    client.disconnect();
  });

  it('serves the system’s dead letters on a free port, prints {url}, and exits 0 on SIGTERM', async () => {
    const run = start(['dashboard', '--port', '0', '--json', '--redis-url', redisUrl, '--prefix', prefix]);
    const { url } = JSON.parse(await run.firstLine) as { url: string };
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    const list = await (await fetch(url)).text();
    expect(list).toContain('cli.Dashboard');
    expect(list).toContain('seen over http');
    expect(list).toContain('read-only');
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
  });

  it('exits 0 on SIGINT, and with a token, refuses a browser without it', async () => {
    const run = start(['dashboard', '--port', '0', '--json', '--redis-url', redisUrl, '--prefix', prefix], {
      HARRIER_DASHBOARD_TOKEN: 'from-the-environment',
    });
    const { url } = JSON.parse(await run.firstLine) as { url: string };
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { 'x-harrier-token': 'from-the-environment' } })).status).toBe(200);
    run.child.kill('SIGINT');
    expect(await run.exit).toBe(0);
  });

  /** Runs `harrier dashboard --allow-actions`, replays `id` from its page, returns the finished job page. */
  async function replayFromDashboard(id: string, env: Record<string, string> = {}): Promise<string> {
    const args = [
      'dashboard',
      '--port',
      '0',
      '--json',
      '--allow-actions',
      '--redis-url',
      redisUrl,
      '--prefix',
      prefix,
    ];
    const run = start(args, env);
    try {
      const { url } = JSON.parse(await run.firstLine) as { url: string };
      const page = await fetch(`${url}records/${id}`);
      const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
      const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
      const started = await fetch(`${url}actions/replay`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url.slice(0, -1), cookie },
        body: new URLSearchParams([
          ['csrf', csrf],
          ['id', id],
        ]).toString(),
      });
      expect(started.status).toBe(303);
      const job = new URL(started.headers.get('location') ?? '', url).href;
      let text = '';
      await waitFor(
        'the replay to finish',
        async () => (text = await (await fetch(job)).text()).includes('; finished.'),
        { timeoutMs: 10_000 },
      );
      expect(text).toContain('<span data-testid="progress">1/1</span>');
      return text;
    } finally {
      run.child.kill('SIGTERM');
      await run.exit;
    }
  }

  it('with --allow-actions replays through the broker as harrier dlq replay does, by dashboard', async () => {
    const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    try {
      await store.add(deadLetter(2, { id: 'dl-actions', type: 'cli.Replayed' }));
      await replayFromDashboard('dl-actions');
      const record = await store.get('dl-actions');
      expect(record?.status).toBe('replayed');
      expect(record?.replays.map((r) => r.by)).toEqual(['dashboard']);
    } finally {
      await store.close();
    }
  });

  it('with signing keys refuses a record whose envelope does not verify, as harrier dlq replay does', async () => {
    const store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    try {
      await store.add(deadLetter(3, { id: 'dl-unsigned', type: 'cli.Unsigned' }));
      const page = await replayFromDashboard('dl-unsigned', {
        HARRIER_SIGNING_KEYS: 'a3f1c2d4e5b60718293a4b5c6d7e8f90112233445566778899aabbccddeeff00',
      });
      expect(page).toMatch(/<code>signature-invalid<\/code><\/td><td>[^<]*the envelope is not signed/);
      expect((await store.get('dl-unsigned'))?.status).toBe('dead');
    } finally {
      await store.close();
    }
  });

  it('refuses a non-loopback host without a token (usage, exit 2), naming the fix', async () => {
    const run = start(['dashboard', '--host', '0.0.0.0', '--port', '0', '--redis-url', redisUrl]);
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('pass --token <secret>');
  });

  it('refuses a token under 16 characters (usage, exit 2), naming the fix', async () => {
    /** The exit code, or 'listening' (then stopped) when the command started the server instead. */
    const outcome = async (run: ReturnType<typeof start>) => {
      try {
        return await Promise.race([run.exit, run.firstLine.then(() => 'listening' as const)]);
      } finally {
        run.child.kill('SIGTERM');
      }
    };
    const given = start([
      'dashboard',
      '--host',
      '0.0.0.0',
      '--port',
      '0',
      '--token',
      'a',
      '--redis-url',
      redisUrl,
    ]);
    expect(await outcome(given)).toBe(2);
    expect(given.stderr()).toContain('The token (--token) has 1 character,');
    expect(given.stderr()).toContain('at least 16');
    const fromEnv = start(['dashboard', '--port', '0', '--redis-url', redisUrl], {
      HARRIER_DASHBOARD_TOKEN: 'short',
    });
    expect(await outcome(fromEnv)).toBe(2);
    expect(fromEnv.stderr()).toContain('HARRIER_DASHBOARD_TOKEN');
  });

  it('refuses a bad port (usage, exit 2)', async () => {
    const run = start(['dashboard', '--port', '70000', '--redis-url', redisUrl]);
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('--port "70000"');
  });
});
