// The CPU time a PostgreSQL server on this machine spends for one bench run, read from /proc: the
// backends of the run's own connections (by application_name) and the server's background
// processes (postmaster, WAL writer, checkpointer, autovacuum...), apart from other clients' backends.

import { readdirSync, readFileSync } from 'node:fs';
import type pg from 'pg';

/** CPU time (utime + stime) of each process, in microseconds, by pid. */
type Times = ReadonlyMap<number, number>;

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ: 100 on Linux). */
const TICK_US = 1e6 / 100;

/** Parent pid and CPU time (µs) of a process, or undefined when it is gone or not readable. */
function statOf(pid: number): { readonly ppid: number; readonly cpuUs: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces: the fields after its closing parenthesis are fixed.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const ppid = Number(fields[1]);
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return { ppid, cpuUs: (utime + stime) * TICK_US };
}

/** CPU of one run on the server, split by who spent it, in microseconds. */
export interface ServerCpu {
  /** The backends of connections whose application_name is the run's. */
  readonly own: number;
  /** The postmaster and the server's background processes (not client backends). */
  readonly background: number;
  /** Client backends of other applications (not the bench's own admin connection): load that is not the run's. */
  readonly others: number;
}

/**
 * Reads the CPU time of a local PostgreSQL server's processes before and after a run. `open` returns
 * undefined when the server is not on this machine (its backend pid is not a postgres process here).
 */
export class PostgresCpu {
  private constructor(
    private readonly admin: pg.Pool,
    private readonly postmaster: number,
  ) {}

  /** A sampler of the server `admin` is connected to, or undefined when it is not local. */
  static async open(admin: pg.Pool): Promise<PostgresCpu | undefined> {
    const { rows } = await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const pid = rows[0]?.pid;
    if (pid === undefined) return undefined;
    let comm: string;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      return undefined;
    }
    const stat = statOf(pid);
    if (comm !== 'postgres' || stat === undefined) return undefined;
    return new PostgresCpu(admin, stat.ppid);
  }

  /** The CPU time so far of the postmaster and of each of its children. */
  times(): Times {
    const times = new Map<number, number>();
    const postmaster = statOf(this.postmaster);
    if (postmaster !== undefined) times.set(this.postmaster, postmaster.cpuUs);
    for (const entry of readdirSync('/proc')) {
      const pid = Number(entry);
      if (!Number.isInteger(pid)) continue;
      const stat = statOf(pid);
      if (stat?.ppid === this.postmaster) times.set(pid, stat.cpuUs);
    }
    return times;
  }

  /**
   * What the server spent since `before` (from {@link times}), split by who spent it. Call it while
   * the run's connections are still open: a backend that has exited takes its CPU time with it.
   */
  async since(before: Times, applicationName: string, adminName: string): Promise<ServerCpu> {
    const after = this.times();
    const { rows } = await this.admin.query<{ pid: number; backend_type: string; application_name: string }>(
      'SELECT pid, backend_type, application_name FROM pg_stat_activity',
    );
    const kindOf = (r: (typeof rows)[number]): string => {
      if (r.backend_type !== 'client backend') return 'background';
      if (r.application_name === applicationName) return 'own';
      return r.application_name === adminName ? 'admin' : 'others';
    };
    const kind = new Map(rows.map((r) => [r.pid, kindOf(r)]));
    let own = 0;
    let background = 0;
    let others = 0;
    for (const [pid, cpuUs] of after) {
      const spent = cpuUs - (before.get(pid) ?? 0);
      // Not in pg_stat_activity: the postmaster, or a process that forked or ended just now.
      const k = kind.get(pid) ?? 'background';
      if (k === 'own') own += spent;
      else if (k === 'others') others += spent;
      else if (k === 'background') background += spent;
    }
    return { own, background, others };
  }
}
