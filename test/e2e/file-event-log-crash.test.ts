/**
 * Crash tests of FileEventLog: a writer process killed with SIGKILL in the middle of its appends, a
 * segment that ends in a torn write, and an append whose write fails halfway (a real EFBIG from a
 * file size limit). After each, the log must open with every acknowledged record intact, dense
 * offsets, and nothing of the failed or torn write left behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { appendFile, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { LogRecord } from '../../src/log/event-log.js';
import { silentLogger, type Logger } from '../../src/logging/logger.js';
import { FileEventLog } from '../../src/log/file-event-log.js';
import { topicDirectoryName } from '../../src/log/open-partition.js';
import { encodeFrame, FRAME_HEADER_BYTES } from '../../src/log/segment-file.js';
import { partitionOf } from '../../src/messages/partition.js';
import {
  CRASH_TOPIC,
  crashRecord,
  parseAcks,
  seqOfIntact,
  type AckLine,
} from './fixtures/file-log-records.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WRITER = fileURLToPath(new URL('./fixtures/file-log-writer.ts', import.meta.url));
const LIMITED_WRITER = fileURLToPath(new URL('./fixtures/file-log-limited-writer.ts', import.meta.url));
/** Acknowledged appends to wait for before the kill. */
const ACKS_BEFORE_KILL = 200;
const CHILD_TIMEOUT_MS = 20_000;

const directories: string[] = [];
const children = new Set<ChildProcess>();
const logs: FileEventLog[] = [];

afterEach(async () => {
  for (const child of children) child.kill('SIGKILL');
  children.clear();
  for (const log of logs.splice(0)) await log.close();
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

async function tempDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'harrier-file-log-crash-'));
  directories.push(directory);
  return directory;
}

async function openLog(options: Parameters<typeof FileEventLog.open>[0]): Promise<FileEventLog> {
  const log = await FileEventLog.open(options);
  logs.push(log);
  return log;
}

/** A running child process and everything it wrote to stdout and stderr so far. */
interface Child {
  readonly process: ChildProcess;
  stdout: string;
  stderr: string;
  /** Resolves with the exit code or signal once the process is gone. */
  readonly exited: Promise<string>;
}

function start(command: string, args: readonly string[], env: NodeJS.ProcessEnv): Child {
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env } });
  children.add(child);
  const handle: Child = {
    process: child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        children.delete(child);
        resolve(signal ?? String(code));
      });
    }),
  };
  child.stdout.on('data', (chunk: Buffer) => {
    handle.stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    handle.stderr += chunk.toString();
  });
  return handle;
}

/** Resolves once the child has printed `count` ack lines; rejects if it exits or times out first. */
function acksReached(child: Child, count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      done(new Error(`Timed out waiting for ${count} acks; stderr: ${child.stderr}`));
    }, CHILD_TIMEOUT_MS);
    const check = (): void => {
      if (parseAcks(child.stdout).length >= count) done();
    };
    const done = (error?: Error): void => {
      clearTimeout(timer);
      child.process.stdout?.off('data', check);
      if (error === undefined) resolve();
      else reject(error);
    };
    child.process.stdout?.on('data', check);
    void child.exited.then((how) => {
      done(new Error(`The writer exited (${how}) before ${count} acks; stderr: ${child.stderr}`));
    });
    check();
  });
}

/** Every record of a partition, read from offset 0 in batches. */
async function readAll(log: FileEventLog, topic: string, partition: number): Promise<LogRecord[]> {
  const records: LogRecord[] = [];
  for (;;) {
    const batch = await log.read(topic, partition, records.length, log.capabilities().maxReadBatch);
    if (batch.length === 0) return records;
    records.push(...batch);
  }
}

/** The first key (`key-0`, `key-1`, …) that falls in `partition`. */
function keyIn(partition: number, partitions: number): string {
  for (let i = 0; ; i++) if (partitionOf(`key-${i}`, partitions) === partition) return `key-${i}`;
}

describe('FileEventLog', () => {
  describe('.open', () => {
    describe('when the writing process was killed with SIGKILL in the middle of its appends', () => {
      for (const fsync of [true, false]) {
        it(`keeps every acknowledged record intact with dense offsets, and continues at the end (fsync ${fsync})`, async () => {
          const directory = await tempDirectory();
          const writer = start(process.execPath, ['--import', 'tsx', WRITER], {
            LOG_DIR: directory,
            FSYNC: String(fsync),
          });
          await acksReached(writer, ACKS_BEFORE_KILL);
          writer.process.kill('SIGKILL');
          expect(await writer.exited).toBe('SIGKILL');
          const acks: AckLine[] = parseAcks(writer.stdout);
          expect(acks.length).toBeGreaterThanOrEqual(ACKS_BEFORE_KILL);
          // The dead writer's lock is still there; open must take it over.
          expect(existsSync(join(directory, '.lock'))).toBe(true);

          const log = await openLog({ directory, topics: [CRASH_TOPIC] });

          const stored = new Map<string, LogRecord>();
          for (let partition = 0; partition < CRASH_TOPIC.partitions; partition++) {
            const records = await readAll(log, CRASH_TOPIC.name, partition);
            expect(records.map((r) => r.offset)).toEqual(records.map((_, i) => i));
            expect(await log.endOffset(CRASH_TOPIC.name, partition)).toBe(records.length);
            for (const record of records) {
              expect(seqOfIntact(record.body), `body of ${record.id}`).toBeDefined();
              expect(record.id).toBe(`record-${String(seqOfIntact(record.body))}`);
              stored.set(`${partition}/${record.offset}`, record);
            }
          }
          for (const ack of acks) {
            const record = stored.get(`${ack.partition}/${ack.offset}`);
            expect(record?.id, `acked seq ${ack.seq} at ${ack.partition}/${ack.offset}`).toBe(
              `record-${ack.seq}`,
            );
            expect(record?.body).toBe(crashRecord(ack.seq).body);
          }

          for (let partition = 0; partition < CRASH_TOPIC.partitions; partition++) {
            const end = await log.endOffset(CRASH_TOPIC.name, partition);
            const next = await log.append(CRASH_TOPIC.name, {
              ...crashRecord(1_000_000 + partition),
              key: keyIn(partition, CRASH_TOPIC.partitions),
            });
            expect(next).toMatchObject({ partition, offset: end });
          }
        });
      }
    });

    describe('when a segment ends in a torn write', () => {
      const validFrame = (offset: number): Buffer =>
        encodeFrame({ offset, id: 'torn', key: 'k', type: 't', body: '{}', appendedAt: Date.now() });
      /** `quarantined`: a copy is kept, unless the tail is what a crash mid-write leaves. */
      const cases: readonly {
        readonly tail: string;
        readonly bytes: () => Buffer;
        readonly quarantined: boolean;
      }[] = [
        {
          tail: 'a frame cut off in its header',
          bytes: () => validFrame(10).subarray(0, 5),
          quarantined: false,
        },
        {
          tail: 'a frame cut off in its payload',
          bytes: () => validFrame(10).subarray(0, FRAME_HEADER_BYTES + 7),
          quarantined: false,
        },
        {
          tail: 'a whole frame whose payload fails its crc',
          bytes: () => {
            const frame = Buffer.from(validFrame(10));
            frame[FRAME_HEADER_BYTES + 3] = (frame[FRAME_HEADER_BYTES + 3] ?? 0) ^ 0xff;
            return frame;
          },
          quarantined: true,
        },
        { tail: 'a whole frame out of sequence', bytes: () => validFrame(42), quarantined: true },
        {
          // 60 bytes cannot have held offsets 10 to 41: no resynchronising on that frame.
          tail: 'garbage followed by a valid frame further ahead than the garbage could hold',
          bytes: () => Buffer.concat([Buffer.alloc(60, 0xee), validFrame(42)]),
          quarantined: true,
        },
        {
          tail: 'zeros (a block allocated but never written)',
          bytes: () => Buffer.alloc(4096),
          quarantined: false,
        },
        {
          tail: 'random garbage (with an impossible frame length)',
          bytes: () => {
            const garbage = randomBytes(37);
            garbage[3] = (garbage[3] ?? 0) | 0x80;
            return garbage;
          },
          quarantined: true,
        },
      ];

      for (const { tail, bytes, quarantined } of cases) {
        it(`cuts ${tail} off${quarantined ? ' into a quarantine file' : ''} and keeps every whole record`, async () => {
          const directory = await tempDirectory();
          const topics = [{ name: 'torn', partitions: 1 }];
          const first = await FileEventLog.open({ directory, topics });
          const written = Array.from({ length: 10 }, (_, seq) => crashRecord(seq));
          for (const record of written) await first.append('torn', { ...record, key: 'k' });
          await first.close();
          const file = join(directory, topicDirectoryName('torn'), 'p0.log');
          const whole = (await stat(file)).size;
          const garbage = bytes();
          await appendFile(file, garbage);

          const told: string[] = [];
          const logger: Logger = {
            ...silentLogger,
            info: (message) => told.push(`info ${message}`),
            warn: (message) => told.push(`warn ${message}`),
          };
          const log = await openLog({ directory, topics, logger });

          expect(told).toEqual([
            expect.stringMatching(quarantined ? /^warn .*copied to/ : /^info .*torn write/),
          ]);
          const quarantineFile = quarantined
            ? join(directory, topicDirectoryName('torn'), 'p0.10.quarantine')
            : undefined;
          expect(log.repairs).toEqual([
            {
              topic: 'torn',
              partition: 0,
              file,
              kind: 'torn-tail',
              keptBytes: whole,
              droppedBytes: garbage.length,
              lostOffsets: undefined,
              quarantineFile,
            },
          ]);
          if (quarantineFile !== undefined) expect(await readFile(quarantineFile)).toEqual(garbage);
          const kept = (await readdir(join(directory, topicDirectoryName('torn')))).filter((name) =>
            name.includes('quarantine'),
          );
          expect(kept.sort()).toEqual(quarantined ? ['p0.10.quarantine', 'p0.10.quarantine.json'] : []);
          expect((await stat(file)).size).toBe(whole);
          const records = await readAll(log, 'torn', 0);
          expect(records.map((r) => [r.offset, r.id, r.body])).toEqual(
            written.map((r, offset) => [offset, r.id, r.body]),
          );
          expect((await log.append('torn', { ...crashRecord(10), key: 'k' })).offset).toBe(10);
        });
      }

      it('reports no repairs after a clean close', async () => {
        const directory = await tempDirectory();
        const topics = [{ name: 'clean', partitions: 2 }];
        const first = await FileEventLog.open({ directory, topics });
        await first.append('clean', crashRecord(0));
        await first.close();
        expect((await openLog({ directory, topics })).repairs).toEqual([]);
      });
    });
  });

  describe('.append', () => {
    describe('when the write fails halfway (EFBIG under a file size limit)', () => {
      it.skipIf(process.platform === 'win32')(
        'truncates the partial record away, rejects with append-failed, and appends the next record at the same offset',
        async () => {
          const directory = await tempDirectory();
          // 64 blocks: 32 KiB where sh counts 512-byte blocks (dash), 64 KiB where it counts 1 KiB.
          const child = start(
            '/bin/sh',
            ['-c', 'ulimit -f 64 && exec "$0" "$@"', process.execPath, '--import', 'tsx', LIMITED_WRITER],
            { LOG_DIR: directory },
          );
          const how = await child.exited;
          expect(how, child.stderr).toBe('0');
          const result = JSON.parse(child.stdout.trim()) as {
            failure?: { code: string; message: string };
            sizeBefore: number;
            sizeAfterFailure: number;
            endOffsetAfterFailure: number;
            nextOffset: number;
          };
          expect(result.failure?.code).toBe('append-failed');
          expect(result.failure?.message).toContain('EFBIG');
          expect(result.sizeAfterFailure).toBe(result.sizeBefore);
          expect(result.endOffsetAfterFailure).toBe(10);
          expect(result.nextOffset).toBe(10);

          const log = await openLog({ directory, topics: [{ name: 'limited', partitions: 1 }] });
          expect(log.repairs).toEqual([]);
          const records = await readAll(log, 'limited', 0);
          expect(records.map((r) => r.offset)).toEqual(Array.from({ length: 11 }, (_, i) => i));
          expect(records.map((r) => seqOfIntact(r.body))).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
          const segment = await readFile(join(directory, topicDirectoryName('limited'), 'p0.log'));
          expect(segment.includes('xxxxxxxx')).toBe(false);
        },
      );
    });
  });
});
