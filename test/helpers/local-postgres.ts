/**
 * A PostgreSQL server of our own for the tests: initdb + pg_ctl from Debian's postgresql package
 * (or any PostgreSQL whose initdb is on PATH), on a free loopback port, its data in a temp dir.
 * Used by the global setup when DATABASE_URL is not set, and by fault tests that need a server
 * they may stop.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './local-redis.js';

/** A PostgreSQL server of our own, and how to stop it (which also deletes its temp dir). */
export interface LocalPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust auth on loopback). */
  readonly url: string;
  readonly port: number;
  /** Stops the server for good and deletes its temp dir. */
  stop(): void;
  /**
   * Stops the server (`pg_ctl stop -m fast`: sessions are ended, as in a routine restart) and keeps
   * its data, so {@link LocalPostgres.start} can bring it back on the same port.
   */
  halt(): void;
  /** Starts a halted server again on the same port and data, and waits until it accepts connections. */
  start(): void;
}

const INSTALL_HINT =
  'install PostgreSQL (apt-get install postgresql, brew install postgresql) so the tests can start their own, or set DATABASE_URL to a running server (e.g. postgres://postgres@127.0.0.1:5432/test)';

/** The directory holding initdb and pg_ctl: Debian's newest /usr/lib/postgresql/<n>/bin, else PATH. */
export function postgresBinDir(): string | undefined {
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((name) => existsSync(join(debian, name, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions[0] !== undefined) return join(debian, versions[0], 'bin');
  }
  const which = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' });
  const found = which.stdout.trim();
  return which.status === 0 && found !== '' ? join(found, '..') : undefined;
}

/** PostgreSQL refuses to run as root: run its programs as the `postgres` user then. */
function asServerUser(dir: string): {
  readonly prefix: string[];
  readonly uid?: number;
  readonly gid?: number;
} {
  if (process.getuid?.() !== 0) return { prefix: [] };
  const user = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const group = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (user.status !== 0) {
    throw new Error(
      `The tests run as root and PostgreSQL refuses root: there is no postgres user; ${INSTALL_HINT}`,
    );
  }
  const uid = Number(user.stdout.trim());
  const gid = Number(group.stdout.trim());
  chownSync(dir, uid, gid);
  return { prefix: ['runuser', '-u', 'postgres', '--'], uid, gid };
}

/**
 * Starts a PostgreSQL server on a free loopback port (trust auth, fsync off: the tests never kill
 * this server) and waits until it accepts connections.
 * @throws Error naming how to install PostgreSQL when initdb cannot be found or fails.
 */
export async function startPostgresServer(dirPrefix = 'harrier-pg-'): Promise<LocalPostgres> {
  const bin = postgresBinDir();
  if (bin === undefined) throw new Error(`initdb not found: ${INSTALL_HINT}`);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  chmodSync(dir, 0o700);
  const data = join(dir, 'data');
  const user = asServerUser(dir);
  const run = (program: string, args: readonly string[]): void => {
    const [command, ...rest] = [...user.prefix, join(bin, program), ...args];
    execFileSync(command!, rest, { stdio: 'pipe', timeout: 60_000 });
  };
  const stop = (): void => {
    try {
      run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    } catch {
      // already stopped
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const settings = [
    `-p ${port}`,
    `-k ${dir}`,
    `-c listen_addresses=127.0.0.1`,
    '-c fsync=off',
    '-c full_page_writes=off',
    '-c max_connections=300',
  ].join(' ');
  const start = (): void => {
    run('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-o', settings, '-w', '-t', '60', 'start']);
  };
  const halt = (): void => {
    run('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop']);
  };
  try {
    run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--locale=C']);
    start();
  } catch (error) {
    const failed = error as { stderr?: Buffer; message: string };
    stop();
    throw new Error(
      `Could not start PostgreSQL from ${bin} (${failed.stderr?.toString().trim() || failed.message}): ${INSTALL_HINT}`,
      { cause: error },
    );
  }
  return { url: `postgres://postgres@127.0.0.1:${port}/postgres`, port, stop, halt, start };
}
