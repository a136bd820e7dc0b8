/**
 * Damaged bytes inside a FileEventLog segment (bit rot, a bad sector): a log of a few thousand
 * records on real files, closed, one bit flipped at 10 %, 50 % or 90 % of a segment's bytes (or in a
 * frame's length, or in the first frame), then opened again. Every record outside the damaged frame
 * must still be readable at its original offset, the damaged bytes must be in a quarantine file, the
 * repair and the logger must name the lost offset, and appends must continue at the old end.
 * Torn tails (a crash mid-write) are in test/e2e/file-event-log-crash.test.ts.
 */
import { cp, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LogRecord } from '../../src/log/event-log.js';
import { FileEventLog, type FileEventLogOptions } from '../../src/log/file-event-log.js';
import { topicDirectoryName } from '../../src/log/open-partition.js';
import { decodeFrame, encodeFrame, FRAME_HEADER_BYTES } from '../../src/log/segment-file.js';
import type { LogFields, Logger } from '../../src/logging/logger.js';
import { partitionOf } from '../../src/messages/partition.js';
import { crashRecord } from './fixtures/file-log-records.js';

const TOPIC = { name: 'flips', partitions: 2 };
const RECORDS = 4_000;
/** The partition whose segment gets the flipped bits. */
const DAMAGED = 0;

/** One line told to the logger. */
interface Told {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields: LogFields | undefined;
}

function capturingLogger(): { readonly logger: Logger; readonly told: Told[] } {
  const told: Told[] = [];
  const at =
    (level: Told['level']) =>
    (message: string, fields?: LogFields): void => {
      told.push({ level, message, fields });
    };
  return { told, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

/** A frame of a segment: where it starts, how long it is, the offset it holds. */
interface Frame {
  readonly start: number;
  readonly length: number;
  readonly offset: number;
}

/** Every frame of an intact segment, in order. */
function framesOf(segment: Buffer): Frame[] {
  const frames: Frame[] = [];
  for (let at = 0; at < segment.length;) {
    const decoded = decodeFrame(segment, at);
    if (typeof decoded !== 'object') throw new Error(`segment is not intact at byte ${at}`);
    frames.push({ start: at, length: decoded.length, offset: decoded.record.offset });
    at += decoded.length;
  }
  return frames;
}

/** Every record of a partition from offset 0, each batch read from the offset after the last one. */
async function readAll(log: FileEventLog, partition: number): Promise<LogRecord[]> {
  const records: LogRecord[] = [];
  for (;;) {
    const from = (records.at(-1)?.offset ?? -1) + 1;
    const batch = await log.read(TOPIC.name, partition, from, log.capabilities().maxReadBatch);
    if (batch.length === 0) return records;
    records.push(...batch);
  }
}

/** The first key (`key-0`, `key-1`, …) that falls in `partition`. */
function keyIn(partition: number): string {
  for (let i = 0; ; i++) if (partitionOf(`key-${i}`, TOPIC.partitions) === partition) return `key-${i}`;
}

/** Where a test flips a bit: the byte, given the segment and its frames, and which bit. */
interface Flip {
  readonly where: string;
  readonly byte: (segment: Buffer, frames: readonly Frame[]) => number;
  readonly bit: number;
}

const atFraction =
  (fraction: number) =>
  (segment: Buffer): number =>
    Math.floor(segment.length * fraction);

describe('FileEventLog', () => {
  /** A directory holding the intact log, copied for each test. */
  let pristine: string;
  /** The seq of the record acknowledged at each offset, per partition. */
  const seqAt: Map<number, number>[] = [new Map<number, number>(), new Map<number, number>()];
  const directories: string[] = [];
  const logs: FileEventLog[] = [];

  beforeAll(async () => {
    pristine = await mkdtemp(join(tmpdir(), 'harrier-file-log-flips-'));
    const log = await FileEventLog.open({ directory: pristine, topics: [TOPIC], fsync: false });
    for (let seq = 0; seq < RECORDS; seq += 500) {
      const batch = Array.from({ length: 500 }, (_, i) => seq + i);
      const acks = await Promise.all(batch.map((s) => log.append(TOPIC.name, crashRecord(s))));
      acks.forEach((ack, i) => seqAt[ack.partition]?.set(ack.offset, batch[i] ?? -1));
    }
    await log.close();
  });

  afterAll(async () => {
    await rm(pristine, { recursive: true, force: true });
  });

  afterEach(async () => {
    for (const log of logs.splice(0)) await log.close();
    for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
  });

  /** A copy of the intact log; its segment file of `DAMAGED`, and that segment's bytes and frames. */
  async function copyOfLog(): Promise<{
    directory: string;
    topicDir: string;
    file: string;
    segment: Buffer;
    frames: Frame[];
  }> {
    const directory = await mkdtemp(join(tmpdir(), 'harrier-file-log-flips-'));
    directories.push(directory);
    await cp(pristine, directory, { recursive: true });
    const topicDir = join(directory, topicDirectoryName(TOPIC.name));
    const file = join(topicDir, `p${DAMAGED}.log`);
    const segment = await readFile(file);
    return { directory, topicDir, file, segment, frames: framesOf(segment) };
  }

  async function open(options: FileEventLogOptions): Promise<FileEventLog> {
    const log = await FileEventLog.open(options);
    logs.push(log);
    return log;
  }

  async function close(log: FileEventLog): Promise<void> {
    logs.splice(logs.indexOf(log), 1);
    await log.close();
  }

  /** Checks that `records` are exactly the acknowledged records of `partition`, minus `lost`. */
  function expectIntact(records: readonly LogRecord[], partition: number, lost: ReadonlySet<number>): void {
    const acked = seqAt[partition] ?? new Map<number, number>();
    const expected = [...acked.keys()].filter((offset) => !lost.has(offset)).sort((a, b) => a - b);
    expect(records.map((r) => r.offset)).toEqual(expected);
    for (const record of records) {
      const original = crashRecord(acked.get(record.offset) ?? -1);
      expect([record.offset, record.id, record.body]).toEqual([record.offset, original.id, original.body]);
    }
  }

  async function quarantineNames(topicDir: string): Promise<string[]> {
    return (await readdir(topicDir)).filter((name) => name.includes('quarantine')).sort();
  }

  describe('.open', () => {
    describe('when a bit flipped inside a segment', () => {
      const flips: readonly Flip[] = [
        { where: 'at 10 % of the segment', byte: atFraction(0.1), bit: 3 },
        { where: 'at 50 % of the segment', byte: atFraction(0.5), bit: 0 },
        { where: 'at 90 % of the segment', byte: atFraction(0.9), bit: 6 },
        {
          // Length + 2^27: the frame now claims to run past the end of the file, like a torn write.
          where: "in a frame's length at 50 %, so it runs past the end of the file",
          byte: (segment, frames) =>
            (frames.find((f) => f.start + f.length > segment.length / 2)?.start ?? 0) + 3,
          bit: 3,
        },
        { where: 'in the first frame', byte: () => FRAME_HEADER_BYTES + 20, bit: 1 },
      ];

      for (const flip of flips) {
        it(`quarantines the damaged frame, keeps every other record at its offset and continues at the end (${flip.where})`, async () => {
          const { directory, topicDir, file, segment, frames } = await copyOfLog();
          const byte = flip.byte(segment, frames);
          const hit = frames.find((f) => byte >= f.start && byte < f.start + f.length);
          if (hit === undefined) throw new Error(`byte ${byte} is in no frame`);
          const damaged = Buffer.from(segment);
          damaged[byte] = (damaged[byte] ?? 0) ^ (1 << flip.bit);
          await writeFile(file, damaged);
          const end = seqAt[DAMAGED]?.size ?? 0;
          const { logger, told } = capturingLogger();

          const log = await open({ directory, topics: [TOPIC], logger });

          const quarantineFile = join(topicDir, `p${DAMAGED}.${hit.offset}.quarantine`);
          expect(log.repairs).toEqual([
            {
              topic: TOPIC.name,
              partition: DAMAGED,
              file,
              kind: 'corrupt-frames',
              keptBytes: hit.start,
              droppedBytes: hit.length,
              lostOffsets: { from: hit.offset, to: hit.offset },
              quarantineFile,
            },
          ]);
          // The quarantine holds the exact damaged bytes, and says where they came from.
          expect(await readFile(quarantineFile)).toEqual(damaged.subarray(hit.start, hit.start + hit.length));
          expect(JSON.parse(await readFile(`${quarantineFile}.json`, 'utf8'))).toMatchObject({
            topic: TOPIC.name,
            partition: DAMAGED,
            segment: file,
            kind: 'corrupt-frames',
            start: hit.start,
            end: hit.start + hit.length,
            lostOffsets: { from: hit.offset, to: hit.offset },
            nextOffset: hit.offset + 1,
          });
          expect(told.filter((line) => line.level !== 'debug')).toEqual([
            {
              level: 'warn',
              message: expect.stringContaining(`offsets ${hit.offset} to ${hit.offset} are lost`) as unknown,
              fields: expect.objectContaining({
                topic: TOPIC.name,
                partition: DAMAGED,
                lostOffsets: { from: hit.offset, to: hit.offset },
                quarantineFile,
              }) as unknown,
            },
          ]);

          // Every other record, in both partitions, at its original offset, byte for byte.
          const lost = new Set([hit.offset]);
          expectIntact(await readAll(log, DAMAGED), DAMAGED, lost);
          expectIntact(await readAll(log, 1 - DAMAGED), 1 - DAMAGED, new Set());
          expect(await log.endOffset(TOPIC.name, DAMAGED)).toBe(end);
          expect(await log.lostOffsets(TOPIC.name, DAMAGED)).toEqual([
            { from: hit.offset, to: hit.offset, quarantineFile },
          ]);
          // Reading the lost offset skips it; its event id is gone.
          const [after] = await log.read(TOPIC.name, DAMAGED, hit.offset, 1);
          expect(after?.offset).toBe(hit.offset + 1);
          const lostSeq = seqAt[DAMAGED]?.get(hit.offset) ?? -1;
          expect(await log.getEvent(crashRecord(lostSeq).id)).toBeUndefined();
          // A subscription from before the loss passes over it.
          const controller = new AbortController();
          const seen: number[] = [];
          for await (const record of log.subscribe(TOPIC.name, {
            partition: DAMAGED,
            afterOffset: Math.max(-1, hit.offset - 2),
            signal: controller.signal,
          })) {
            seen.push(record.offset);
            if (seen.length === 2) controller.abort();
          }
          expect(seen).toEqual(hit.offset === 0 ? [1, 2] : [hit.offset - 1, hit.offset + 1]);

          // Appends continue at the old end.
          const appended = await log.append(TOPIC.name, { ...crashRecord(RECORDS), key: keyIn(DAMAGED) });
          expect(appended.offset).toBe(end);

          // A second open finds nothing to repair, the same lost offset, the quarantine untouched.
          await close(log);
          const again = await open({ directory, topics: [TOPIC], logger });
          expect(again.repairs).toEqual([]);
          expect(told.filter((line) => line.level === 'warn')).toHaveLength(1);
          seqAt[DAMAGED]?.set(end, RECORDS);
          try {
            expectIntact(await readAll(again, DAMAGED), DAMAGED, lost);
          } finally {
            seqAt[DAMAGED]?.delete(end);
          }
          expect(await again.lostOffsets(TOPIC.name, DAMAGED)).toEqual([
            { from: hit.offset, to: hit.offset, quarantineFile },
          ]);
          expect(await readFile(quarantineFile)).toEqual(damaged.subarray(hit.start, hit.start + hit.length));
          expect(await quarantineNames(topicDir)).toEqual([
            `p${DAMAGED}.${hit.offset}.quarantine`,
            `p${DAMAGED}.${hit.offset}.quarantine.json`,
          ]);
        });
      }
    });

    describe('when bits flipped in two frames and the segment also ends in a torn write', () => {
      it('quarantines each damaged frame, cuts the tail, and keeps every other record', async () => {
        const { directory, topicDir, file, segment, frames } = await copyOfLog();
        const damaged = Buffer.from(segment);
        const hits = [0.1, 0.9].map((fraction) => {
          const byte = Math.floor(segment.length * fraction);
          damaged[byte] = (damaged[byte] ?? 0) ^ 0x10;
          const hit = frames.find((f) => byte >= f.start && byte < f.start + f.length);
          if (hit === undefined) throw new Error(`byte ${byte} is in no frame`);
          return hit;
        });
        const end = seqAt[DAMAGED]?.size ?? 0;
        const torn = encodeFrame({ offset: end, id: 'x', key: 'k', type: 't', body: '{}', appendedAt: 1 });
        await writeFile(file, Buffer.concat([damaged, torn.subarray(0, torn.length - 3)]));
        const { logger, told } = capturingLogger();

        const log = await open({ directory, topics: [TOPIC], logger });

        expect(log.repairs.map((r) => [r.kind, r.lostOffsets, r.quarantineFile])).toEqual([
          ...hits.map((hit) => [
            'corrupt-frames',
            { from: hit.offset, to: hit.offset },
            join(topicDir, `p${DAMAGED}.${hit.offset}.quarantine`),
          ]),
          ['torn-tail', undefined, undefined],
        ]);
        expect(told.map((line) => line.level)).toEqual(['warn', 'warn', 'info']);
        expectIntact(await readAll(log, DAMAGED), DAMAGED, new Set(hits.map((hit) => hit.offset)));
        expect((await log.append(TOPIC.name, { ...crashRecord(RECORDS), key: keyIn(DAMAGED) })).offset).toBe(
          end,
        );
        expect(await quarantineNames(topicDir)).toHaveLength(4);
      });
    });

    describe('when a 4 KiB block in the middle of a segment reads back as zeros (a lost sector)', () => {
      it('loses exactly the frames the block touched and reads straight over the run', async () => {
        const { directory, topicDir, file, segment, frames } = await copyOfLog();
        const blockStart = Math.floor(segment.length / 2 / 4096) * 4096;
        const damaged = Buffer.from(segment);
        damaged.fill(0, blockStart, blockStart + 4096);
        await writeFile(file, damaged);
        const touched = frames.filter((f) => f.start < blockStart + 4096 && f.start + f.length > blockStart);
        const from = touched[0]?.offset ?? -1;
        const to = touched.at(-1)?.offset ?? -1;
        expect(to - from).toBeGreaterThanOrEqual(2);

        const log = await open({ directory, topics: [TOPIC], logger: capturingLogger().logger });

        const quarantineFile = join(topicDir, `p${DAMAGED}.${from}.quarantine`);
        expect(log.repairs).toMatchObject([
          { kind: 'corrupt-frames', lostOffsets: { from, to }, quarantineFile },
        ]);
        const start = touched[0]?.start ?? 0;
        const end = (touched.at(-1)?.start ?? 0) + (touched.at(-1)?.length ?? 0);
        expect(await readFile(quarantineFile)).toEqual(damaged.subarray(start, end));
        expectIntact(await readAll(log, DAMAGED), DAMAGED, new Set(touched.map((f) => f.offset)));
        // From inside the run, `max` counts records: five records after the run.
        expect((await log.read(TOPIC.name, DAMAGED, from + 1, 5)).map((r) => r.offset)).toEqual(
          [1, 2, 3, 4, 5].map((i) => to + i),
        );
        // A read that ends on the run continues past it.
        const before = await log.read(TOPIC.name, DAMAGED, from - 2, 3);
        expect(before.map((r) => r.offset)).toEqual([from - 2, from - 1, to + 1]);
      });
    });

    describe('when an offset already lost is damaged again', () => {
      it('quarantines the new bytes in a file of their own and never overwrites the first', async () => {
        const { directory, topicDir, file, segment, frames } = await copyOfLog();
        const hit = frames[Math.floor(frames.length / 2)];
        if (hit === undefined) throw new Error('no frame');
        const damaged = Buffer.from(segment);
        damaged[hit.start + FRAME_HEADER_BYTES + 5] = (damaged[hit.start + FRAME_HEADER_BYTES + 5] ?? 0) ^ 1;
        await writeFile(file, damaged);
        const first = await open({ directory, topics: [TOPIC], logger: capturingLogger().logger });
        const firstQuarantine = join(topicDir, `p${DAMAGED}.${hit.offset}.quarantine`);
        expect(first.repairs[0]?.quarantineFile).toBe(firstQuarantine);
        await close(first);
        // The lost-offset marker that replaced the frame, damaged in turn.
        const repaired = await readFile(file);
        repaired[hit.start + FRAME_HEADER_BYTES + 5] =
          (repaired[hit.start + FRAME_HEADER_BYTES + 5] ?? 0) ^ 1;
        await writeFile(file, repaired);

        const log = await open({ directory, topics: [TOPIC], logger: capturingLogger().logger });

        expect(log.repairs).toMatchObject([
          {
            kind: 'corrupt-frames',
            lostOffsets: { from: hit.offset, to: hit.offset },
            quarantineFile: join(topicDir, `p${DAMAGED}.${hit.offset}.2.quarantine`),
          },
        ]);
        expect(await readFile(firstQuarantine)).toEqual(damaged.subarray(hit.start, hit.start + hit.length));
        expect(await quarantineNames(topicDir)).toEqual([
          `p${DAMAGED}.${hit.offset}.2.quarantine`,
          `p${DAMAGED}.${hit.offset}.2.quarantine.json`,
          `p${DAMAGED}.${hit.offset}.quarantine`,
          `p${DAMAGED}.${hit.offset}.quarantine.json`,
        ]);
        expectIntact(await readAll(log, DAMAGED), DAMAGED, new Set([hit.offset]));
      });
    });
  });

  describe('.maintenance', () => {
    describe('when retention removes records around a lost offset', () => {
      it('drops the lost offsets it passes and keeps the offsets after them', async () => {
        const { directory, segment, frames, file } = await copyOfLog();
        const hit = frames[100];
        if (hit === undefined) throw new Error('no frame');
        const damaged = Buffer.from(segment);
        damaged[hit.start + 30] = (damaged[hit.start + 30] ?? 0) ^ 4;
        await writeFile(file, damaged);
        const topics = [{ ...TOPIC, retentionMs: 1 }];
        const log = await open({ directory, topics, logger: capturingLogger().logger });
        expect(await log.lostOffsets(TOPIC.name, DAMAGED)).toHaveLength(1);

        // Everything below offset 150 expires: the lost offset 100 goes with it, and is no record.
        const removed = await log.maintenance(Date.now() + 1_000, {
          keepFrom: (_topic, partition) => Promise.resolve(partition === DAMAGED ? 150 : 0),
        });

        expect(removed).toBe(149);
        expect(await log.lostOffsets(TOPIC.name, DAMAGED)).toEqual([]);
        const records = await readAll(log, DAMAGED);
        expect(records[0]?.offset).toBe(150);
        expect(records.map((r) => r.offset)).toEqual(records.map((_, i) => 150 + i));
        expect((await stat(file)).size).toBeLessThan(segment.length);
      });
    });
  });
});
