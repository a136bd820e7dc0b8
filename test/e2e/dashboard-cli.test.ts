import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { RedisDeadLetterStore } from '../../src/redis/index.js';
import { DASHBOARD_BIN as bin, startDashboardCli as start } from '../helpers/dashboard-cli.js';
import { deadLetter } from '../helpers/dashboard.js';
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
      HARRIER_DASHBOARD_TOKEN: 'from-env',
    });
    const { url } = JSON.parse(await run.firstLine) as { url: string };
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { 'x-harrier-token': 'from-env' } })).status).toBe(200);
    run.child.kill('SIGINT');
    expect(await run.exit).toBe(0);
  });

  it('refuses a non-loopback host without a token (usage, exit 2), naming the fix', async () => {
    const run = start(['dashboard', '--host', '0.0.0.0', '--port', '0', '--redis-url', redisUrl]);
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('pass --token <secret>');
  });

  it('refuses a bad port (usage, exit 2)', async () => {
    const run = start(['dashboard', '--port', '70000', '--redis-url', redisUrl]);
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('--port "70000"');
  });
});
