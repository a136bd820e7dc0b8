/**
 * The lock that lets one process at a time own a `FileEventLog` directory.
 *
 * @remarks
 * Internal to src/log: nothing here is exported from an index.
 *
 * @packageDocumentation
 */
import { randomUUID } from 'node:crypto';
import { link, readFile, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { HarrierError } from '../errors/harrier-error.js';
import { writeNewFile } from './segment-file.js';

/** A lock taken by {@link acquireLock}: the lock file and what this process wrote into it. */
export interface PidLock {
  /** The lock file, `<directory>/.lock`. */
  readonly file: string;
  /** The content this process wrote, so {@link releaseLock} removes only its own lock. */
  readonly content: string;
}

/** What the lock file of a directory holds: the owner's pid and host. */
interface LockOwner {
  readonly pid: number;
  readonly host: string;
}

/**
 * Takes `<directory>/.lock` for this process.
 *
 * @remarks
 * The lock is written to a file of its own and hard-linked to `.lock`, which fails when `.lock`
 * exists (like `O_EXCL`), so the lock never exists without its pid. A lock whose pid is dead on this
 * host is taken over.
 */
export async function acquireLock(directory: string): Promise<PidLock> {
  const file = join(directory, '.lock');
  const owner: LockOwner = { pid: process.pid, host: hostname() };
  const content = `${JSON.stringify(owner)}\n`;
  const draft = join(directory, `.lock.${process.pid}.${randomUUID()}`);
  await writeNewFile(draft, content);
  try {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await link(draft, file);
        return { file, content };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = await readLockOwner(file);
      if (holder !== undefined && (holder.host !== owner.host || isAlive(holder.pid))) {
        throw new HarrierError(
          'log-locked',
          `The file event log in ${directory} is open in process ${holder.pid} on ${holder.host} (${file}): one process owns a FileEventLog directory; close it there first, or use a shared log such as RedisEventLog`,
        );
      }
      await rm(file, { force: true });
    }
    throw new HarrierError(
      'log-locked',
      `The file event log in ${directory} was locked again while its stale lock ${file} was being replaced: another process is opening it; close it there first`,
    );
  } finally {
    await rm(draft, { force: true });
  }
}

async function readLockOwner(file: string): Promise<LockOwner | undefined> {
  try {
    const parsed = JSON.parse(await readFile(file, 'utf8')) as Partial<LockOwner>;
    if (typeof parsed.pid === 'number' && typeof parsed.host === 'string') {
      return { pid: parsed.pid, host: parsed.host };
    }
  } catch {
    // Unreadable or vanished: nobody holds it.
  }
  return undefined;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes the lock when it is still ours. */
export async function releaseLock(file: string, content: string): Promise<void> {
  try {
    if ((await readFile(file, 'utf8')) === content) await rm(file, { force: true });
  } catch {
    // Already gone.
  }
}
