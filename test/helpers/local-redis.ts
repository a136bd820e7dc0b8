/**
 * What starting redis-server processes of our own needs: a free loopback port, a PING probe, and a
 * deadline-bound wait for a condition. Used by the global setup, the fault harness and the cluster
 * helper.
 */
import { createServer, Socket } from 'node:net';

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
