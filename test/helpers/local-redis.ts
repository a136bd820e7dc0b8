/**
 * What starting redis-server processes of our own needs: a free loopback port, a PING probe, and a
 * deadline-bound wait for a condition. Used by the global setup, the fault harness and the cluster
 * helper.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const POLL_MS = 50;

/** Waits for `condition` to hold, checking every 50 ms; throws with `explain()` after `timeoutMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  options: { readonly timeoutMs: number; readonly explain?: () => string | Promise<string> },
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) {
      const detail = options.explain === undefined ? '' : `: ${await options.explain()}`;
      throw new Error(`Timed out after ${options.timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Binds `port` on loopback (0: any free one) and releases it; resolves to the port bound. */
export function listenOnce(port = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      const bound = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => {
        resolve(bound);
      });
    });
  });
}

/** A loopback port that is free now. */
export function freePort(): Promise<number> {
  return listenOnce(0);
}

/** True when a Redis on `port` answers PING with PONG (a server still loading its AOF does not). */
export function pingRedis(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => {
      done(false);
    });
    socket.once('error', () => {
      done(false);
    });
    socket.once('data', (data) => {
      done(data.toString().startsWith('+PONG'));
    });
    socket.connect(port, '127.0.0.1', () => {
      socket.write('PING\r\n');
    });
  });
}

/** A redis-server of our own, and how to stop it (which also deletes its temp dir). */
export interface LocalRedis {
  readonly url: string;
  stop(): void;
}

/**
 * Starts a redis-server on a free loopback port with no persistence, its dir a new temp dir, and
 * waits until it answers PING.
 * @throws Error naming how to install redis-server when it cannot be started.
 */
export async function startRedisServer(dirPrefix = 'harrier-redis-'): Promise<LocalRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  const server = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: 'ignore' },
  );
  const stop = (): void => {
    server.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  };
  const failed = new Promise<never>((_, reject) => {
    server.once('error', (error) => {
      reject(
        new Error(
          `Could not start redis-server (${error.message}): install it (apt-get install redis-server, brew install redis) or set REDIS_URL to a running server`,
        ),
      );
    });
  });
  try {
    await Promise.race([
      failed,
      waitFor(`redis-server on port ${port} to answer PING`, () => pingRedis(port), { timeoutMs: 10_000 }),
    ]);
  } catch (error) {
    stop();
    throw error;
  }
  return { url: `redis://127.0.0.1:${port}`, stop };
}
