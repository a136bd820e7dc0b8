/**
 * A RabbitMQ server of our own for the tests: `rabbitmq-server` (Debian's rabbitmq-server package, or
 * any RabbitMQ whose `rabbitmq-server` is on PATH) on a free loopback port, its node name, data, logs
 * and Erlang cookie in a temp dir. Used by the global setup when RABBITMQ_URL is not set, and by
 * fault tests that stop, kill and restart a broker.
 *
 * @remarks
 * Nothing of a system RabbitMQ is used: not its port (5672), config (/etc/rabbitmq), data
 * (/var/lib/rabbitmq) or cookie, so the tests run the same whether the system service runs or not.
 * Only epmd (the Erlang port mapper on 4369) is shared: the server registers its unique node name
 * there, and starts epmd itself when none runs.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqplib from 'amqplib';
import { freePort, listenOnce, waitFor } from './local-redis.js';

/** A RabbitMQ server of our own, with the faults a test may inflict on it. */
export interface LocalRabbitMq {
  /** `amqp://guest:guest@127.0.0.1:<port>` (guest may connect from loopback). */
  readonly url: string;
  readonly port: number;
  /** The Erlang node name, `harrier-test-<random>@localhost`: `rabbitmqctl -n <nodeName>`. */
  readonly nodeName: string;
  /** The environment under which `rabbitmqctl -n <nodeName> …` reaches this node (HOME holds its cookie). */
  readonly env: Readonly<Record<string, string>>;
  /** The temp dir holding data (mnesia/), logs (log/), config and cookie. */
  readonly dir: string;
  /** The server's console output (why it failed to start, when it did). */
  readonly logFile: string;
  /**
   * Stops the server gracefully (SIGTERM: connections are closed with a connection.close, queues are
   * stopped cleanly) and keeps its data; resolves when the process has exited.
   */
  stop(): Promise<void>;
  /** SIGKILLs the Erlang VM (no clean-up of any kind, as a crashed host) and keeps its data. */
  kill(): Promise<void>;
  /**
   * Starts the server again on the same port, node name and data, stopping it gracefully first when
   * it runs; resolves when it accepts AMQP connections. Durable queues and their persistent messages
   * are back (quorum queues keep every confirmed message, even across {@link LocalRabbitMq.kill}).
   */
  restart(): Promise<void>;
  /** Kills the server if it runs and deletes its temp dir. */
  dispose(): Promise<void>;
}

/** Settings of the server beyond the defaults. */
export interface RabbitMqServerSettings {
  /**
   * Settings of the `rabbit` application, written to advanced.config (whole numbers, in its units):
   * e.g. `{ consumer_timeout: 3000, channel_tick_interval: 500 }` (a channel checks its consumer
   * timeout on each tick, every 60 s by default).
   */
  readonly rabbit?: Readonly<Record<string, number>>;
}

const INSTALL_HINT =
  'install RabbitMQ (apt-get install rabbitmq-server, brew install rabbitmq) so the tests can start their own, or set RABBITMQ_URL to a running server (e.g. amqp://guest:guest@127.0.0.1:5672)';

/** How long a start may take: about 5 s on a 2-vCPU host, more while the suite loads the CPUs. */
const START_TIMEOUT_MS = 60_000;

/**
 * The `rabbitmq-server` script to run, or undefined when there is none.
 *
 * @remarks
 * On Debian and Ubuntu, /usr/sbin/rabbitmq-server is a wrapper that switches to the `rabbitmq` user
 * and to /var/lib/rabbitmq (and refuses any other user): the script it wraps,
 * /usr/lib/rabbitmq/bin/rabbitmq-server, runs as whoever starts it, with the paths we give it.
 */
export function rabbitmqServerPath(): string | undefined {
  const debian = '/usr/lib/rabbitmq/bin/rabbitmq-server';
  if (existsSync(debian)) return debian;
  const which = spawnSync('sh', ['-c', 'command -v rabbitmq-server'], { encoding: 'utf8' });
  const found = which.stdout.trim();
  return which.status === 0 && found !== '' ? found : undefined;
}

/** True when an AMQP connection to `url` opens (the broker has booted and listens). */
export async function amqpAnswers(url: string): Promise<boolean> {
  try {
    const connection = await amqplib.connect(url, { timeout: 2_000 });
    connection.on('error', () => {});
    await connection.close();
    return true;
  } catch {
    return false;
  }
}

/** True when nothing listens on loopback `port`. */
function portFree(port: number): Promise<boolean> {
  return listenOnce(port).then(
    () => true,
    () => false,
  );
}

/** The last `lines` lines of a file, or '' when it cannot be read. */
export function tail(path: string, lines = 20): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Starts a RabbitMQ server on a free loopback port in a new temp dir and waits until it accepts an
 * AMQP connection.
 * @throws Error naming how to install RabbitMQ when `rabbitmq-server` cannot be found or exits.
 */
export async function startRabbitMqServer(
  dirPrefix = 'harrier-rabbitmq-',
  settings: RabbitMqServerSettings = {},
): Promise<LocalRabbitMq> {
  const { server, ready } = await launchRabbitMqServer(dirPrefix, settings);
  try {
    await ready;
  } catch (error) {
    await server.dispose();
    throw error;
  }
  return server;
}

/**
 * Starts a RabbitMQ server as {@link startRabbitMqServer} does, without waiting for it: `ready`
 * resolves when it accepts an AMQP connection, or rejects when it cannot start (the server killed,
 * its dir and log kept until {@link LocalRabbitMq.dispose}). The global setup uses it so that the tests that need no RabbitMQ never wait for its boot.
 * @throws Error naming how to install RabbitMQ when `rabbitmq-server` cannot be found.
 */
export async function launchRabbitMqServer(
  dirPrefix = 'harrier-rabbitmq-',
  settings: RabbitMqServerSettings = {},
): Promise<{ readonly server: LocalRabbitMq; readonly ready: Promise<void> }> {
  const server = rabbitmqServerPath();
  if (server === undefined) throw new Error(`rabbitmq-server not found: ${INSTALL_HINT}`);
  const [port, distPort] = await Promise.all([freePort(), freePort()]);
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  const nodeName = `harrier-test-${randomBytes(6).toString('hex')}@localhost`;
  const url = `amqp://guest:guest@127.0.0.1:${port}`;
  const logFile = join(dir, 'server.log');
  mkdirSync(join(dir, 'mnesia'));
  mkdirSync(join(dir, 'log'));
  // Our own files for every file RabbitMQ would read from /etc/rabbitmq: the system's config sets
  // the system node's name and port 5672.
  writeFileSync(join(dir, 'rabbitmq-env.conf'), '');
  writeFileSync(
    join(dir, 'rabbitmq.conf'),
    [
      `listeners.tcp.default = 127.0.0.1:${port}`,
      // Tests on a busy CI disk must not block publishers with a disk alarm.
      'disk_free_limit.absolute = 1MB',
      '',
    ].join('\n'),
  );
  writeFileSync(join(dir, 'enabled_plugins'), '[].\n');
  const rabbit = Object.entries(settings.rabbit ?? {});
  if (rabbit.length > 0) {
    const terms = rabbit.map(([name, value]) => `{${name}, ${String(value)}}`).join(', ');
    writeFileSync(join(dir, 'advanced.config'), `[{rabbit, [${terms}]}].\n`);
  }
  const env: Record<string, string> = {
    // The Erlang cookie is created in, and read by rabbitmqctl from, $HOME/.erlang.cookie.
    HOME: dir,
    RABBITMQ_NODENAME: nodeName,
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_CONF_ENV_FILE: join(dir, 'rabbitmq-env.conf'),
    RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq.conf'),
    RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, 'advanced.config'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
    RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
    RABBITMQ_LOG_BASE: join(dir, 'log'),
    // Distribution (rabbitmqctl's way in) on loopback only, and so is the epmd the VM starts when
    // none runs (it outlives the server, as epmd does).
    // No busy-waiting schedulers: on a 2-vCPU runner they would take CPU from the other tests.
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS:
      '-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none',
    ERL_EPMD_ADDRESS: '127.0.0.1',
  };
  // Whatever the environment says about another RabbitMQ must not leak into ours.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('RABBITMQ_') && name !== 'ERL_FLAGS'),
  );

  let running: { readonly child: ChildProcess; readonly exited: Promise<void> } | undefined;

  const launch = async (): Promise<void> => {
    const out = openSync(logFile, 'a');
    // Detached: the script and the Erlang VM it starts form a process group that kill() ends at once.
    const child = spawn(server, [], {
      cwd: dir,
      env: { ...inherited, ...env },
      stdio: ['ignore', out, out],
      detached: true,
    });
    closeSync(out);
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => {
        resolve();
      });
      child.once('error', () => {
        resolve();
      });
    });
    running = { child, exited };
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (error) => {
        reject(new Error(`Could not start ${server} (${error.message}): ${INSTALL_HINT}`));
      });
      child.once('exit', (code, signal) => {
        reject(
          new Error(
            `${server} exited (${String(code ?? signal)}) before accepting connections on port ${port}; its output:\n${tail(logFile)}`,
          ),
        );
      });
    });
    try {
      await Promise.race([
        failed,
        waitFor(`RabbitMQ on port ${port} to accept an AMQP connection`, () => amqpAnswers(url), {
          timeoutMs: START_TIMEOUT_MS,
          explain: () => tail(logFile),
        }),
      ]);
    } finally {
      failed.catch(() => {});
    }
  };

  const signal = async (name: NodeJS.Signals): Promise<void> => {
    const current = running;
    if (current === undefined) return;
    running = undefined;
    const pid = current.child.pid;
    try {
      // The script traps SIGTERM and stops the VM gracefully, then exits; SIGKILL goes to its group.
      if (pid !== undefined) process.kill(name === 'SIGKILL' ? -pid : pid, name);
    } catch {
      // already exited
    }
    await current.exited;
    // The script may exit a moment before the VM is gone; until then the kernel still accepts
    // connections on its ports, which the dying VM resets.
    await waitFor(
      `RabbitMQ node ${nodeName} to release ports ${port} and ${distPort}`,
      async () => (await Promise.all([portFree(port), portFree(distPort)])).every(Boolean),
      { timeoutMs: 10_000 },
    );
  };

  const stop = (): Promise<void> => signal('SIGTERM');
  const kill = (): Promise<void> => signal('SIGKILL');
  const restart = async (): Promise<void> => {
    await stop();
    await launch();
  };
  const dispose = async (): Promise<void> => {
    await kill();
    rmSync(dir, { recursive: true, force: true });
  };

  // A server that failed to start is killed but keeps its dir (and log) until disposed of.
  const ready = launch().catch(async (error: unknown) => {
    await kill();
    throw error;
  });
  return { server: { url, port, nodeName, env, dir, logFile, stop, kill, restart, dispose }, ready };
}
