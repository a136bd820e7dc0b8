/**
 * A Redis Cluster of the test's own: three redis-server processes in cluster mode on free loopback
 * ports, joined by `redis-cli --cluster create` (no replicas), for the tests that prove Harrier runs
 * on a cluster. Never the shared server of the global setup.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { listenOnce, pingRedis, waitFor } from './local-redis.js';

const START_TIMEOUT_MS = 20_000;

/** A port that is free, and whose cluster bus port (port + 10000) is free too. */
async function freeClusterPort(taken: ReadonlySet<number>): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const port = await listenOnce(0);
    if (port > 55_000 || taken.has(port) || taken.has(port + 10_000)) continue;
    if ((await listenOnce(port + 10_000).catch(() => 0)) !== 0) return port;
  }
  throw new Error('Found no free port pair (port and port + 10000) for a cluster node');
}

/** Waits for `condition` (a failing probe counts as not yet) until the start-up deadline. */
function until(what: string, condition: () => Promise<boolean>, explain: () => string): Promise<void> {
  return waitFor(what, () => condition().catch(() => false), { timeoutMs: START_TIMEOUT_MS, explain });
}

/** Three cluster-mode redis-servers sharing the 16384 slots. */
export class RedisCluster {
  readonly #children: ChildProcess[];
  readonly #dirs: string[];
  #output = '';

  private constructor(
    readonly ports: readonly number[],
    children: ChildProcess[],
    dirs: string[],
  ) {
    this.#children = children;
    this.#dirs = dirs;
  }

  /** Starts the nodes, joins them into one cluster, and waits until every node reports it ok. */
  static async start(nodeCount = 3): Promise<RedisCluster> {
    const ports: number[] = [];
    for (let i = 0; i < nodeCount; i++) ports.push(await freeClusterPort(new Set(ports)));
    const dirs = ports.map(() => mkdtempSync(join(tmpdir(), 'harrier-cluster-')));
    const children = ports.map((port, i) =>
      spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--dir',
          dirs[i] ?? tmpdir(),
          '--save',
          '',
          '--appendonly',
          'no',
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-node-timeout',
          '2000',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    );
    const cluster = new RedisCluster(ports, children, dirs);
    for (const child of children) {
      const keep = (chunk: Buffer): void => {
        cluster.#output = (cluster.#output + chunk.toString()).slice(-8_000);
      };
      child.stdout.on('data', keep);
      child.stderr.on('data', keep);
    }
    try {
      for (const port of ports) {
        await until(
          `cluster node ${port} to answer PING`,
          () => pingRedis(port),
          () => cluster.#output,
        );
      }
      const create = spawnSync(
        'redis-cli',
        [
          '--cluster',
          'create',
          ...ports.map((p) => `127.0.0.1:${p}`),
          '--cluster-replicas',
          '0',
          '--cluster-yes',
        ],
        { encoding: 'utf8', timeout: START_TIMEOUT_MS },
      );
      if (create.status !== 0) {
        throw new Error(
          `redis-cli --cluster create failed (${create.status ?? create.signal}): ${create.stdout}${create.stderr}`,
        );
      }
      for (const port of ports) {
        await until(
          `cluster node ${port} to report cluster_state:ok`,
          async () => String(await cluster.#ask(port, ['CLUSTER', 'INFO'])).includes('cluster_state:ok'),
          () => cluster.#output,
        );
      }
    } catch (error) {
      await cluster.destroy();
      throw error;
    }
    return cluster;
  }

  /** The nodes, as ioredis cluster seeds. */
  get nodes(): { host: string; port: number }[] {
    return this.ports.map((port) => ({ host: '127.0.0.1', port }));
  }

  /** Kills every node and deletes their directories. */
  async destroy(): Promise<void> {
    await Promise.all(
      this.#children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) {
              resolve();
              return;
            }
            child.once('exit', () => {
              resolve();
            });
            child.kill('SIGKILL');
          }),
      ),
    );
    for (const dir of this.#dirs) rmSync(dir, { recursive: true, force: true });
  }

  async #ask(port: number, command: readonly [string, ...string[]]): Promise<unknown> {
    const client = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const [name, ...args] = command;
      return await client.call(name, ...args);
    } finally {
      client.disconnect();
    }
  }
}
