/**
 * The EventLog conformance suite against FileEventLog (a fresh temp directory per test; `reopen`
 * closes the log and opens the same directory again, as a restarted process would), then what only
 * a file-backed log has: the directory lock, the topic manifest on disk, retention rewrites and their
 * sidecar files, group commit under concurrent appends. Crash recovery is in
 * test/e2e/file-event-log-crash.test.ts.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/clock/manual-clock.js';
import type { AppendInput, LogRecord, TopicSpec } from '../../src/log/event-log.js';
import { FileEventLog, type FileEventLogOptions } from '../../src/log/file-event-log.js';
import { topicDirectoryName } from '../../src/log/open-partition.js';
import { partitionOf } from '../../src/messages/partition.js';
import { describeEventLogConformance } from '../../src/testing/event-log-conformance.js';
import { expectCode, failureOf } from '../../src/testing/expect-code.js';

describeEventLogConformance('FileEventLog', async (topics) => {
  const directory = await mkdtemp(join(tmpdir(), 'harrier-file-log-'));
  try {
    return {
      log: await FileEventLog.open({ directory, topics }),
      reopen: () => FileEventLog.open({ directory, topics }),
      cleanup: () => rm(directory, { recursive: true, force: true }),
    };
  } catch (error) {
    await rm(directory, { recursive: true, force: true });
    throw error;
  }
});

const RETENTION_MS = 60_000;
const TOPIC = 'orders';

let seq = 0;
function record(key = 'k'): AppendInput {
  const id = `event-${++seq}`;
  return { id, key, type: 'orders.OrderPlaced', body: JSON.stringify({ v: 1, id, payload: { seq } }) };
}

/** The first key (`key-0`, `key-1`, …) that falls in `partition`. */
function keyIn(partition: number, partitions: number): string {
  for (let i = 0; ; i++) if (partitionOf(`key-${i}`, partitions) === partition) return `key-${i}`;
}

const offsets = (records: readonly LogRecord[]): number[] => records.map((r) => r.offset);

describe('FileEventLog', () => {
  const directories: string[] = [];
  const logs: FileEventLog[] = [];

  afterEach(async () => {
    for (const log of logs.splice(0)) await log.close();
    for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
  });

  async function tempDirectory(): Promise<string> {
    const directory = await mkdtemp(join(tmpdir(), 'harrier-file-log-'));
    directories.push(directory);
    return directory;
  }

  async function open(options: FileEventLogOptions): Promise<FileEventLog> {
    const log = await FileEventLog.open(options);
    logs.push(log);
    return log;
  }

  /** Closes `log` and opens its directory again with `options`. */
  async function reopen(log: FileEventLog, options: FileEventLogOptions): Promise<FileEventLog> {
    await log.close();
    logs.splice(logs.indexOf(log), 1);
    return open(options);
  }

  describe('.open', () => {
    describe('when the directory is open in this process', () => {
      it('refuses with HarrierError log-locked', async () => {
        const directory = await tempDirectory();
        const topics = [{ name: TOPIC, partitions: 1 }];
        await open({ directory, topics });
        const error = await failureOf(() => open({ directory, topics }));
        expectCode(error, 'log-locked');
        expect((error as Error).message).toContain(String(process.pid));
      });
    });

    describe('when another live process holds the lock', () => {
      it('refuses with HarrierError log-locked naming that process', async () => {
        const directory = await tempDirectory();
        await writeFile(join(directory, '.lock'), JSON.stringify({ pid: process.ppid, host: hostname() }));
        const error = await failureOf(() => open({ directory, topics: [{ name: TOPIC, partitions: 1 }] }));
        expectCode(error, 'log-locked');
        expect((error as Error).message).toContain(`process ${process.ppid}`);
      });
    });

    describe('when the lock was left by a process that is gone', () => {
      it('takes the lock over', async () => {
        const directory = await tempDirectory();
        const dead = spawn(process.execPath, ['-e', '']);
        const pid = dead.pid;
        await new Promise((resolve) => dead.once('exit', resolve));
        await writeFile(join(directory, '.lock'), JSON.stringify({ pid, host: hostname() }));
        const log = await open({ directory, topics: [{ name: TOPIC, partitions: 1 }] });
        expect((await log.append(TOPIC, record())).offset).toBe(0);
        expect(JSON.parse(await readFile(join(directory, '.lock'), 'utf8'))).toMatchObject({
          pid: process.pid,
        });
      });
    });

    describe('when a topic partition count differs from the one on disk', () => {
      it('refuses with HarrierError invalid-topic', async () => {
        const directory = await tempDirectory();
        const first = await open({ directory, topics: [{ name: TOPIC, partitions: 4 }] });
        await first.close();
        const error = await failureOf(() => open({ directory, topics: [{ name: TOPIC, partitions: 8 }] }));
        expectCode(error, 'invalid-topic');
        expect((error as Error).message).toContain('4 partitions');
        // The refused open released the lock.
        expect(existsSync(join(directory, '.lock'))).toBe(false);
      });
    });

    describe('when topic names are not plain file names', () => {
      it('keeps each topic in a directory of its own', async () => {
        const directory = await tempDirectory();
        const names = ['..', '.', 'a/b', 'a%2Fb', 'ünï', 'x'.repeat(256)];
        const topics = names.map((name) => ({ name, partitions: 1 }));
        const log = await open({ directory, topics });
        for (const name of names) await log.append(name, record());
        const again = await reopen(log, { directory, topics });
        for (const name of names) expect(await again.endOffset(name, 0)).toBe(1);
        expect(new Set(names.map(topicDirectoryName)).size).toBe(names.length);
        for (const name of names) expect(topicDirectoryName(name).length).toBeLessThanOrEqual(200);
      });
    });

    describe('when a file of the log is not what the log wrote', () => {
      it.each([
        ['topic.json is not JSON', 'topic.json', '{"name":'],
        ['p0.base holds no offset', 'p0.base', 'three\n'],
      ])('rejects with HarrierError log-corrupt when %s', async (_, file, content) => {
        const directory = await tempDirectory();
        const topics = [{ name: TOPIC, partitions: 1 }];
        const log = await open({ directory, topics });
        await log.append(TOPIC, record());
        await log.close();
        logs.splice(logs.indexOf(log), 1);
        await writeFile(join(directory, topicDirectoryName(TOPIC), file), content);

        const error = await failureOf(() => open({ directory, topics }));

        expectCode(error, 'log-corrupt');
        expect((error as Error).message).toContain(file);
      });
    });

    describe('when a retention rewrite was cut short by a crash', () => {
      it('keeps the old segment, removes the temp file, and continues the sequence', async () => {
        const directory = await tempDirectory();
        const topics: TopicSpec[] = [{ name: TOPIC, partitions: 1, retentionMs: RETENTION_MS }];
        const log = await open({ directory, topics });
        for (let i = 0; i < 5; i++) await log.append(TOPIC, record());
        await log.close();
        logs.splice(logs.indexOf(log), 1);
        // The new base was written, the rewritten segment never renamed into place.
        const topicDir = join(directory, topicDirectoryName(TOPIC));
        await writeFile(join(topicDir, 'p0.base'), '3\n');
        await writeFile(join(topicDir, 'p0.log.tmp'), 'half a rewrite');

        const again = await open({ directory, topics });

        expect(offsets(await again.read(TOPIC, 0, 0, 10))).toEqual([0, 1, 2, 3, 4]);
        expect(existsSync(join(topicDir, 'p0.log.tmp'))).toBe(false);
        expect((await again.append(TOPIC, record())).offset).toBe(5);
        expect(await again.maintenance(Date.now() + 2 * RETENTION_MS)).toBe(6);
        expect((await again.append(TOPIC, record())).offset).toBe(6);
      });
    });
  });

  describe('.append', () => {
    describe('when many appends run at once', () => {
      it('gives each partition dense offsets in one order, on disk as in memory', async () => {
        const directory = await tempDirectory();
        const topics = [{ name: TOPIC, partitions: 2 }];
        const log = await open({ directory, topics });
        const records = Array.from({ length: 300 }, (_, i) => record(`key-${i % 7}`));
        const acks = await Promise.all(records.map((r) => log.append(TOPIC, r)));
        for (const partition of [0, 1]) {
          const mine = acks.filter((a) => a.partition === partition).sort((a, b) => a.offset - b.offset);
          expect(mine.map((a) => a.offset)).toEqual(mine.map((_, i) => i));
        }
        const again = await reopen(log, { directory, topics });
        for (const ack of acks) {
          const [stored] = await again.read(TOPIC, ack.partition, ack.offset, 1);
          expect(stored?.id).toBe(ack.id);
        }
      });
    });

    describe('when the log is closed', () => {
      it('rejects with HarrierError log-closed and has released the lock', async () => {
        const directory = await tempDirectory();
        const log = await open({ directory, topics: [{ name: TOPIC, partitions: 1 }] });
        await log.close();
        expectCode(await failureOf(() => log.append(TOPIC, record())), 'log-closed');
        expect(existsSync(join(directory, '.lock'))).toBe(false);
      });
    });
  });

  describe('.appendIdempotent', () => {
    describe('when one uid is appended many times at once', () => {
      it('appends one record and gives every caller its ack', async () => {
        const directory = await tempDirectory();
        const log = await open({ directory, topics: [{ name: TOPIC, partitions: 1 }] });
        const acks = await Promise.all(
          Array.from({ length: 10 }, () => log.appendIdempotent(TOPIC, 'uid-1', record())),
        );
        expect(acks.filter((a) => !a.duplicate)).toHaveLength(1);
        expect(new Set(acks.map((a) => `${a.offset}/${a.id}`)).size).toBe(1);
        expect(await log.endOffset(TOPIC, 0)).toBe(1);
      });
    });

    describe('when retention removed the record of a uid', () => {
      it('still returns the first ack, also after a reopen', async () => {
        const directory = await tempDirectory();
        const clock = new ManualClock();
        const options: FileEventLogOptions = {
          directory,
          clock,
          topics: [{ name: TOPIC, partitions: 1, retentionMs: RETENTION_MS }],
        };
        const log = await open(options);
        const first = await log.appendIdempotent(TOPIC, 'uid-old', record());
        clock.advance(RETENTION_MS);
        await log.append(TOPIC, record());
        expect(await log.maintenance(clock.now())).toBe(1);
        expect(await log.getEvent(first.id)).toBeUndefined();
        expect(await log.appendIdempotent(TOPIC, 'uid-old', record())).toEqual({ ...first, duplicate: true });

        const again = await reopen(log, options);
        expect(await again.findByUid('uid-old')).toEqual(first);
        expect(await again.appendIdempotent(TOPIC, 'uid-old', record())).toEqual({
          ...first,
          duplicate: true,
        });
        expect(await again.endOffset(TOPIC, 0)).toBe(2);
        // A second expiry appends no uid twice to the sidecar.
        clock.advance(RETENTION_MS);
        expect(await again.maintenance(clock.now())).toBe(1);
        const sidecar = await readFile(join(directory, topicDirectoryName(TOPIC), 'p0.uids'), 'utf8');
        expect(sidecar.trim().split('\n')).toHaveLength(1);
      });
    });
  });

  describe('.maintenance', () => {
    describe('when a subscription is behind the records it removes', () => {
      it('continues the subscription at the first retained record', async () => {
        const directory = await tempDirectory();
        const clock = new ManualClock();
        const log = await open({
          directory,
          clock,
          topics: [{ name: TOPIC, partitions: 1, retentionMs: RETENTION_MS }],
        });
        for (let i = 0; i < 3; i++) await log.append(TOPIC, record());
        clock.advance(RETENTION_MS);
        const kept = record();
        await log.append(TOPIC, kept);
        const controller = new AbortController();
        const subscription = log.subscribe(TOPIC, { partition: 0, signal: controller.signal });
        const iterator = subscription[Symbol.asyncIterator]();
        expect((await iterator.next()).value).toMatchObject({ offset: 0 });
        expect(await log.maintenance(clock.now())).toBe(3);
        const next = await iterator.next();
        expect(next.value).toMatchObject({ offset: 3, id: kept.id, body: kept.body });
        const live = iterator.next();
        const appended = await log.append(TOPIC, record());
        expect((await live).value).toMatchObject({ offset: 4, id: appended.id });
        controller.abort();
        expect((await iterator.next()).done).toBe(true);
      });
    });

    describe('when reads run during the rewrite', () => {
      it('serves every read from the old segment or the new one', async () => {
        const directory = await tempDirectory();
        const clock = new ManualClock();
        const log = await open({
          directory,
          clock,
          topics: [{ name: TOPIC, partitions: 1, retentionMs: RETENTION_MS }],
        });
        const appended = [];
        for (let i = 0; i < 50; i++) appended.push(await log.append(TOPIC, record()));
        clock.advance(RETENTION_MS);
        for (let i = 0; i < 50; i++) appended.push(await log.append(TOPIC, record()));
        const idAt = new Map(appended.map((a) => [a.offset, a.id]));
        const reads = Array.from({ length: 40 }, (_, i) => log.read(TOPIC, 0, i * 2, 30));
        const [removed, ...results] = await Promise.all([log.maintenance(clock.now()), ...reads]);
        expect(removed).toBe(50);
        for (const result of results) {
          for (const r of result) expect(r.id).toBe(idAt.get(r.offset));
        }
        expect(offsets(await log.read(TOPIC, 0, 0, 1_000))).toEqual(
          Array.from({ length: 50 }, (_, i) => 50 + i),
        );
      });
    });
  });

  describe('.close', () => {
    it('finishes the appends it accepted before it', async () => {
      const directory = await tempDirectory();
      const topics = [{ name: TOPIC, partitions: 2 }];
      const log = await open({ directory, topics });
      const pending = Array.from({ length: 50 }, (_, i) => log.append(TOPIC, record(`key-${i}`)));
      await log.close();
      const acks = await Promise.all(pending);
      const again = await open({ directory, topics });
      expect((await again.endOffset(TOPIC, 0)) + (await again.endOffset(TOPIC, 1))).toBe(50);
      for (const ack of acks) expect((await again.getEvent(ack.id))?.offset).toBe(ack.offset);
    });

    it('ends subscriptions that wait for records', async () => {
      const directory = await tempDirectory();
      const log = await open({ directory, topics: [{ name: TOPIC, partitions: 2 }] });
      const iterator = log.subscribe(TOPIC, { partition: 1 })[Symbol.asyncIterator]();
      const waiting = iterator.next();
      await log.append(TOPIC, record(keyIn(0, 2)));
      await log.close();
      expect((await waiting).done).toBe(true);
    });
  });

  describe('.capabilities', () => {
    it('reports a durable single-process log whose fsync follows the option', async () => {
      const directory = await tempDirectory();
      const withSync = await open({ directory, topics: [] });
      expect(withSync.capabilities()).toMatchObject({
        durable: true,
        fsync: true,
        shared: false,
        livePush: true,
      });
      const without = await reopen(withSync, { directory, topics: [], fsync: false });
      expect(without.capabilities()).toMatchObject({ durable: true, fsync: false });
    });
  });
});
