import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from '../messages/supported-zod.js';
import type { AppendInput, EventLog, LogRecord, TopicSpec } from '../log/event-log.js';
import { partitionOf } from '../messages/partition.js';
import { uuidv7 } from '../messages/uuid-v7.js';
import { expectCode, failureOf } from './expect-code.js';

/** A log made fresh for one conformance test, and how to tidy up after it. */
export interface EventLogFixture {
  /** The log to test, provisioned with exactly the manifest the suite passed; the suite closes it. */
  readonly log: EventLog;
  /** Runs after the log is closed, e.g. to delete the test's Redis keys or temp directory. */
  readonly cleanup?: () => Promise<void>;
  /**
   * Opens the same storage again with the same manifest, as a restarted process would. The suite
   * closes the current log before it calls this. Leave it out for a log that is not durable.
   */
  readonly reopen?: () => Promise<EventLog>;
}

/**
 * Makes a log for one test over `topics`.
 * @throws when the manifest is invalid (a topic name or partition count breaks a rule).
 */
export type EventLogFactory = (topics: readonly TopicSpec[]) => Promise<EventLogFixture>;

/** How long to wait for a record that should arrive, in ms. */
const ARRIVES_WITHIN_MS = 5_000;
/** How long to watch for a record that must not arrive, in ms. */
const QUIET_MS = 200;
/** Retention of the topics that maintenance tests expire, in ms. */
const RETENTION_MS = 60_000;

/** Independently computed FNV-1a-64 hashes of UTF-8 keys, to pin the partitioning. */
const FNV_VECTORS: readonly { readonly key: string; readonly hash: bigint }[] = [
  { key: '', hash: 0xcbf29ce484222325n },
  { key: 'a', hash: 0xaf63dc4c8601ec8cn },
  { key: 'foobar', hash: 0x85944171f73967e8n },
  { key: 'order-42', hash: 0x7d1deb86a05662d4n },
  { key: 'ünïcödé 🚀', hash: 0x2630e4bae567ffb5n },
];

/** A topic name of its own, so tests never collide on a shared server. */
const topicName = (label: string): string => `conformance.${label}.${randomUUID()}`;

/** A record whose body is an encoded envelope with `payload`. */
function input(key: string, payload: unknown = { n: 1 }): AppendInput {
  const id = uuidv7();
  const type = 'conformance.ThingHappened';
  const body = JSON.stringify({
    v: 1,
    id,
    kind: 'event',
    type,
    payload,
    meta: { correlationId: id, occurredAt: new Date().toISOString(), headers: {}, note: 'ünïcödé 🚀' },
  });
  return { id, key, type, body };
}

/** The first key (`key-0`, `key-1`, …) that falls in `partition` of a topic with `partitions`. */
function keyIn(partition: number, partitions: number): string {
  for (let i = 0; ; i++) {
    const key = `key-${i}`;
    if (partitionOf(key, partitions) === partition) return key;
  }
}

/** Asserts `error` is an UnknownTopicError for `topic`. */
function expectUnknownTopic(error: unknown, topic: string): void {
  expectCode(error, 'unknown-topic');
  expect(error).toHaveProperty('name', 'UnknownTopicError');
  expect(error).toHaveProperty('topic', topic);
}

const offsets = (records: readonly LogRecord[]): number[] => records.map((r) => r.offset);

/**
 * One subscription that tests pull records from, one at a time, with a timeout; a pull that times
 * out stays pending, so a late record is returned by the next pull.
 */
class Follower {
  readonly #controller = new AbortController();
  readonly #iterator: AsyncIterator<LogRecord>;
  #pending: Promise<IteratorResult<LogRecord>> | undefined;

  constructor(log: EventLog, topic: string, partition: number, afterOffset?: number) {
    const options =
      afterOffset === undefined
        ? { partition, signal: this.#controller.signal }
        : { partition, afterOffset, signal: this.#controller.signal };
    this.#iterator = log.subscribe(topic, options)[Symbol.asyncIterator]();
  }

  /** The next record; fails the test if none arrives within `timeoutMs`. */
  async next(timeoutMs = ARRIVES_WITHIN_MS): Promise<LogRecord> {
    const result = await this.#pull(timeoutMs);
    if (result === 'timeout') throw new Error(`No record arrived within ${timeoutMs} ms`);
    if (result.done === true) throw new Error('The subscription ended while a record was expected');
    return result.value;
  }

  /** The next `count` records, in order. */
  async take(count: number): Promise<LogRecord[]> {
    const records: LogRecord[] = [];
    for (let i = 0; i < count; i++) records.push(await this.next());
    return records;
  }

  /** Fails the test if a record arrives within `ms`. */
  async expectNothingWithin(ms = QUIET_MS): Promise<void> {
    const result = await this.#pull(ms);
    if (result !== 'timeout' && result.done !== true) {
      this.#pending = undefined;
      expect.fail(`Unexpected record at offset ${result.value.offset}`);
    }
  }

  /** True once the subscription has ended within `timeoutMs`; false if it is still open then. */
  async ends(timeoutMs = ARRIVES_WITHIN_MS): Promise<boolean> {
    const result = await this.#pull(timeoutMs);
    if (result === 'timeout') return false;
    if (result.done !== true)
      expect.fail(`Got the record at offset ${result.value.offset} instead of the end`);
    return true;
  }

  abort(): void {
    this.#controller.abort();
  }

  /** Aborts the subscription and waits (bounded) for its iterator to finish. */
  async stop(): Promise<void> {
    this.abort();
    if (this.#pending !== undefined) await this.#pull(ARRIVES_WITHIN_MS);
  }

  async #pull(timeoutMs: number): Promise<IteratorResult<LogRecord> | 'timeout'> {
    this.#pending ??= this.#iterator.next();
    const pending = this.#pending;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => {
        resolve('timeout');
      }, timeoutMs);
    });
    try {
      const result = await Promise.race([pending, timeout]);
      if (result !== 'timeout') this.#pending = undefined;
      return result;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Registers the vitest suite that every {@link EventLog} must pass.
 *
 * @remarks
 * Each test calls `factory` with a manifest of its own, under fresh random topic names, so logs on a
 * shared server never see each other's records. The log must stamp `appendedAt` with the wall clock:
 * retention tests call `maintenance` with times relative to `Date.now()`. After each test the suite
 * aborts its subscriptions, closes the log and awaits `cleanup`. Tests of durability run only when
 * the fixture has `reopen` and `capabilities().durable` is true.
 *
 * @param name - names the implementation in the test report.
 * @param factory - makes a log over the given manifest for one test; throws on an invalid manifest.
 *
 * @example
 * ```ts
 * import { describeEventLogConformance } from 'harrier/testing/conformance';
 *
 * describeEventLogConformance('MyEventLog', async (topics) => {
 *   const dir = await mkdtemp(join(tmpdir(), 'log-'));
 *   return {
 *     log: await MyEventLog.open({ dir, topics }),
 *     reopen: () => MyEventLog.open({ dir, topics }),
 *     cleanup: () => rm(dir, { recursive: true, force: true }),
 *   };
 * });
 * ```
 */
export function describeEventLogConformance(name: string, factory: EventLogFactory): void {
  describe(`EventLog conformance: ${name}`, () => {
    const opened: EventLog[] = [];
    const cleanups: (() => Promise<void>)[] = [];
    const followers: Follower[] = [];
    let reopener: (() => Promise<EventLog>) | undefined;

    afterEach(async () => {
      for (const follower of followers.splice(0)) await follower.stop();
      for (const log of opened.splice(0)) await log.close();
      for (const cleanup of cleanups.splice(0)) await cleanup();
      reopener = undefined;
    });

    /** A log over `topics`, closed and cleaned up after the test. */
    async function open(topics: readonly TopicSpec[]): Promise<EventLog> {
      const fixture = await factory(topics);
      opened.push(fixture.log);
      if (fixture.cleanup !== undefined) cleanups.push(fixture.cleanup);
      reopener = fixture.reopen;
      return fixture.log;
    }

    /** A log with one topic of `partitions`, and that topic's name. */
    async function openTopic(
      partitions = 1,
      extra: Omit<TopicSpec, 'name' | 'partitions'> = {},
    ): Promise<{ log: EventLog; topic: string }> {
      const topic = topicName('t');
      return { log: await open([{ name: topic, partitions, ...extra }]), topic };
    }

    /** Closes `log` and opens its storage again; undefined when the log cannot be reopened. */
    async function reopen(log: EventLog): Promise<EventLog | undefined> {
      if (reopener === undefined || !log.capabilities().durable) return undefined;
      await log.close();
      opened.splice(opened.indexOf(log), 1);
      const again = await reopener();
      opened.push(again);
      return again;
    }

    function follow(log: EventLog, topic: string, partition: number, afterOffset?: number): Follower {
      const follower = new Follower(log, topic, partition, afterOffset);
      followers.push(follower);
      return follower;
    }

    async function appendAll(log: EventLog, topic: string, records: readonly AppendInput[]): Promise<void> {
      for (const record of records) await log.append(topic, record);
    }

    describe('construction', () => {
      describe('when the manifest is invalid', () => {
        const cases: readonly { readonly rule: string; readonly spec: () => TopicSpec }[] = [
          { rule: '0 partitions', spec: () => ({ name: topicName('zero'), partitions: 0 }) },
          { rule: '1025 partitions', spec: () => ({ name: topicName('many'), partitions: 1025 }) },
          {
            rule: 'a fractional partition count',
            spec: () => ({ name: topicName('half'), partitions: 1.5 }),
          },
          { rule: 'a name with "*"', spec: () => ({ name: `${topicName('wild')}.*`, partitions: 1 }) },
          { rule: 'a name with whitespace', spec: () => ({ name: `${topicName('ws')} x`, partitions: 1 }) },
          { rule: 'an empty name', spec: () => ({ name: '', partitions: 1 }) },
          {
            rule: 'a 257-byte name',
            spec: () => {
              const prefix = topicName('long');
              return { name: prefix + 'x'.repeat(257 - prefix.length), partitions: 1 };
            },
          },
        ];

        for (const { rule, spec } of cases) {
          it(`refuses a topic with ${rule} (HarrierError invalid-topic)`, async () => {
            const error = await failureOf(() => open([spec()]));
            expectCode(error, 'invalid-topic');
          });
        }

        it('refuses a topic listed twice', async () => {
          const topic = topicName('twice');
          const error = await failureOf(() =>
            open([
              { name: topic, partitions: 1 },
              { name: topic, partitions: 2 },
            ]),
          );
          expectCode(error, 'invalid-topic');
        });
      });

      describe('when the manifest is at the limits', () => {
        it('accepts 1 and 1024 partitions and a 256-byte name', async () => {
          const prefix = topicName('edge');
          const long = prefix + 'x'.repeat(256 - prefix.length);
          const one = topicName('one');
          const log = await open([
            { name: long, partitions: 1024 },
            { name: one, partitions: 1 },
          ]);
          expect(await log.partitions(long)).toBe(1024);
          expect(await log.partitions(one)).toBe(1);
        });
      });
    });

    describe('.append', () => {
      describe('when the topic is unknown', () => {
        it('rejects with UnknownTopicError', async () => {
          const { log } = await openTopic();
          const missing = topicName('missing');
          expectUnknownTopic(await failureOf(() => log.append(missing, input('k'))), missing);
        });
      });

      describe('when records go to one partition', () => {
        it('gives dense offsets from 0', async () => {
          const { log, topic } = await openTopic(4);
          const acks = [];
          for (let i = 0; i < 5; i++) acks.push(await log.append(topic, input('same-key')));
          expect(acks.map((a) => a.offset)).toEqual([0, 1, 2, 3, 4]);
          expect(new Set(acks.map((a) => a.partition)).size).toBe(1);
        });

        it('returns an ack describing where the record landed', async () => {
          const { log, topic } = await openTopic(4);
          const record = input('order-42');
          const before = Date.now();
          const ack = await log.append(topic, record);
          expect(ack).toEqual({
            topic,
            partition: Number(0x7d1deb86a05662d4n % 4n),
            offset: 0,
            id: record.id,
            uid: undefined,
            appendedAt: expect.any(Number) as number,
            duplicate: false,
          });
          expect(ack.appendedAt).toBeGreaterThanOrEqual(before - 1_000);
          expect(ack.appendedAt).toBeLessThanOrEqual(Date.now() + 1_000);
        });

        it('stores the body untouched', async () => {
          const { log, topic } = await openTopic();
          const record = input('k', { text: ' ünïcödé 🚀 "quotes" \\ \n\t ', list: [1, 2.5, null] });
          await log.append(topic, record);
          const [stored] = await log.read(topic, 0, 0, 1);
          expect(stored?.body).toBe(record.body);
        });
      });

      describe('when records go to different partitions', () => {
        it('numbers each partition on its own', async () => {
          const { log, topic } = await openTopic(3);
          const [k0, k1, k2] = [keyIn(0, 3), keyIn(1, 3), keyIn(2, 3)];
          const order = [k0, k1, k0, k0, k2, k1];
          const acks = [];
          for (const key of order) acks.push(await log.append(topic, input(key)));
          expect(acks.map((a) => [a.partition, a.offset])).toEqual([
            [0, 0],
            [1, 0],
            [0, 1],
            [0, 2],
            [2, 0],
            [1, 1],
          ]);
          expect(offsets(await log.read(topic, 0, 0, 100))).toEqual([0, 1, 2]);
          expect(offsets(await log.read(topic, 1, 0, 100))).toEqual([0, 1]);
          expect(offsets(await log.read(topic, 2, 0, 100))).toEqual([0]);
        });

        it('numbers each topic on its own', async () => {
          const a = topicName('a');
          const b = topicName('b');
          const log = await open([
            { name: a, partitions: 1 },
            { name: b, partitions: 1 },
          ]);
          await log.append(a, input('k'));
          await log.append(a, input('k'));
          expect((await log.append(b, input('k'))).offset).toBe(0);
        });
      });

      describe('when the partition is computed from the key', () => {
        for (const partitions of [16, 7, 1024]) {
          it(`uses FNV-1a-64(utf8(key)) mod ${partitions}`, async () => {
            const { log, topic } = await openTopic(partitions);
            for (const { key, hash } of FNV_VECTORS) {
              const ack = await log.append(topic, input(key));
              expect(ack.partition, `key ${JSON.stringify(key)}`).toBe(Number(hash % BigInt(partitions)));
            }
          });
        }

        it("puts 'foobar' in partition 8 of 16", async () => {
          const { log, topic } = await openTopic(16);
          expect((await log.append(topic, input('foobar'))).partition).toBe(
            Number(0x85944171f73967e8n % 16n),
          );
        });
      });

      describe('when the topic has a schema', () => {
        const schemaTopic = (): Promise<{ log: EventLog; topic: string }> =>
          openTopic(1, { schema: z.object({ n: z.number() }) });

        it('appends a record whose payload matches', async () => {
          const { log, topic } = await schemaTopic();
          expect((await log.append(topic, input('k', { n: 7 }))).offset).toBe(0);
        });

        it('rejects a payload that does not match with HarrierError validation-failed', async () => {
          const { log, topic } = await schemaTopic();
          expectCode(
            await failureOf(() => log.append(topic, input('k', { n: 'seven' }))),
            'validation-failed',
          );
          expect(await log.endOffset(topic, 0)).toBe(0);
        });

        it('rejects a body that is not JSON with HarrierError validation-failed', async () => {
          const { log, topic } = await schemaTopic();
          const record = { ...input('k'), body: 'not json' };
          expectCode(await failureOf(() => log.append(topic, record)), 'validation-failed');
          expect(await log.read(topic, 0, 0, 10)).toEqual([]);
        });
      });
    });

    describe('.appendIdempotent', () => {
      describe('when the uid is new', () => {
        it('appends the record and returns its ack with the uid', async () => {
          const { log, topic } = await openTopic();
          const record = input('k');
          const ack = await log.appendIdempotent(topic, `uid-${randomUUID()}`, record);
          expect(ack).toMatchObject({ topic, partition: 0, offset: 0, id: record.id, duplicate: false });
          const [stored] = await log.read(topic, 0, 0, 10);
          expect(stored?.uid).toBe(ack.uid);
          expect(stored?.id).toBe(record.id);
        });
      });

      describe('when the uid was appended before', () => {
        it('returns the first ack with duplicate true and appends nothing', async () => {
          const { log, topic } = await openTopic(4);
          const uid = `uid-${randomUUID()}`;
          const first = await log.appendIdempotent(topic, uid, input('order-42'));
          const again = await log.appendIdempotent(topic, uid, input('another-key'));
          expect(again).toEqual({ ...first, duplicate: true });
          expect(first.uid).toBe(uid);
          let total = 0;
          for (let p = 0; p < 4; p++) total += await log.endOffset(topic, p);
          expect(total).toBe(1);
        });

        it('returns the first ack when the uid was used on another topic', async () => {
          const a = topicName('a');
          const b = topicName('b');
          const log = await open([
            { name: a, partitions: 1 },
            { name: b, partitions: 1 },
          ]);
          const uid = `uid-${randomUUID()}`;
          const first = await log.appendIdempotent(a, uid, input('k'));
          expect(await log.appendIdempotent(b, uid, input('k'))).toEqual({ ...first, duplicate: true });
          expect(await log.endOffset(b, 0)).toBe(0);
        });
      });

      describe('when the log was reopened', () => {
        it('still returns the first ack with duplicate true', async ({ skip }) => {
          const { log, topic } = await openTopic();
          const uid = `uid-${randomUUID()}`;
          const first = await log.appendIdempotent(topic, uid, input('k'));
          const again = await reopen(log);
          if (again === undefined) {
            skip('the log is not durable or has no reopen');
            return;
          }
          expect(await again.appendIdempotent(topic, uid, input('k'))).toEqual({ ...first, duplicate: true });
          expect(await again.endOffset(topic, 0)).toBe(1);
        });
      });

      describe('when the topic is unknown', () => {
        it('rejects with UnknownTopicError', async () => {
          const { log } = await openTopic();
          const missing = topicName('missing');
          expectUnknownTopic(
            await failureOf(() => log.appendIdempotent(missing, `uid-${randomUUID()}`, input('k'))),
            missing,
          );
        });
      });
    });

    describe('.findByUid', () => {
      describe('when the uid was appended', () => {
        it('returns its ack', async () => {
          const { log, topic } = await openTopic(2);
          const uid = `uid-${randomUUID()}`;
          const ack = await log.appendIdempotent(topic, uid, input('k'));
          const { duplicate: _ignored, ...where } = ack;
          expect(await log.findByUid(uid)).toMatchObject(where);
        });
      });

      describe('when the uid is unknown', () => {
        it('returns undefined', async () => {
          const { log, topic } = await openTopic();
          await log.append(topic, input('k'));
          expect(await log.findByUid(`uid-${randomUUID()}`)).toBeUndefined();
        });
      });
    });

    describe('.getEvent', () => {
      describe('when the id was appended', () => {
        it('returns the stored record', async () => {
          const { log, topic } = await openTopic(4);
          const record = input('foobar');
          const ack = await log.append(topic, record);
          await log.append(topic, input('foobar'));
          expect(await log.getEvent(record.id)).toEqual({
            topic,
            partition: ack.partition,
            offset: 0,
            id: record.id,
            key: 'foobar',
            type: record.type,
            body: record.body,
            uid: undefined,
            appendedAt: ack.appendedAt,
          });
        });
      });

      describe('when the id is unknown', () => {
        it('returns undefined', async () => {
          const { log, topic } = await openTopic();
          await log.append(topic, input('k'));
          expect(await log.getEvent(uuidv7())).toBeUndefined();
        });
      });
    });

    describe('.read', () => {
      describe('when the partition holds records', () => {
        it('returns up to max records from fromOffset, in order', async () => {
          const { log, topic } = await openTopic();
          await appendAll(
            log,
            topic,
            Array.from({ length: 6 }, () => input('k')),
          );
          expect(offsets(await log.read(topic, 0, 0, 3))).toEqual([0, 1, 2]);
          expect(offsets(await log.read(topic, 0, 2, 3))).toEqual([2, 3, 4]);
          expect(offsets(await log.read(topic, 0, 4, 100))).toEqual([4, 5]);
        });

        it('returns every field of each record', async () => {
          const { log, topic } = await openTopic();
          const record = input('k');
          const uid = `uid-${randomUUID()}`;
          const ack = await log.appendIdempotent(topic, uid, record);
          expect(await log.read(topic, 0, 0, 1)).toEqual([
            {
              topic,
              partition: 0,
              offset: 0,
              id: record.id,
              key: 'k',
              type: record.type,
              body: record.body,
              uid,
              appendedAt: ack.appendedAt,
            },
          ]);
        });
      });

      describe('when fromOffset is at or past the end', () => {
        it('returns no records', async () => {
          const { log, topic } = await openTopic();
          await appendAll(log, topic, [input('k'), input('k')]);
          expect(await log.read(topic, 0, 2, 10)).toEqual([]);
          expect(await log.read(topic, 0, 50, 10)).toEqual([]);
        });
      });

      describe('when the partition is empty', () => {
        it('returns no records', async () => {
          const { log, topic } = await openTopic(2);
          await log.append(topic, input(keyIn(0, 2)));
          expect(await log.read(topic, 1, 0, 10)).toEqual([]);
        });
      });

      describe('when the topic is unknown', () => {
        it('rejects with UnknownTopicError', async () => {
          const { log } = await openTopic();
          const missing = topicName('missing');
          expectUnknownTopic(await failureOf(() => log.read(missing, 0, 0, 10)), missing);
        });
      });

      describe('when the partition does not exist', () => {
        it('rejects with HarrierError invalid-partition', async () => {
          const { log, topic } = await openTopic(2);
          expectCode(await failureOf(() => log.read(topic, 2, 0, 10)), 'invalid-partition');
          expectCode(await failureOf(() => log.read(topic, -1, 0, 10)), 'invalid-partition');
        });
      });
    });

    describe('.subscribe', () => {
      describe('when afterOffset is -1 (the default)', () => {
        it('yields the history, then live appends in order', async () => {
          const { log, topic } = await openTopic();
          const history = [input('k'), input('k')];
          await appendAll(log, topic, history);
          const follower = follow(log, topic, 0);
          expect((await follower.take(2)).map((r) => r.id)).toEqual(history.map((r) => r.id));
          const live = [input('k'), input('k')];
          const waiting = follower.take(2);
          await appendAll(log, topic, live);
          const records = await waiting;
          expect(records.map((r) => r.id)).toEqual(live.map((r) => r.id));
          expect(offsets(records)).toEqual([2, 3]);
        });

        it('yields a live append to an empty partition', async () => {
          const { log, topic } = await openTopic();
          const follower = follow(log, topic, 0, -1);
          const waiting = follower.next();
          const record = input('k');
          await log.append(topic, record);
          expect(await waiting).toMatchObject({ offset: 0, id: record.id, body: record.body });
        });
      });

      describe('when afterOffset is given', () => {
        it('skips the records at and below it', async () => {
          const { log, topic } = await openTopic();
          await appendAll(
            log,
            topic,
            Array.from({ length: 4 }, () => input('k')),
          );
          const follower = follow(log, topic, 0, 1);
          expect(offsets(await follower.take(2))).toEqual([2, 3]);
          await follower.expectNothingWithin();
        });
      });

      describe('when other partitions get appends', () => {
        it('yields only its own partition', async () => {
          const { log, topic } = await openTopic(2);
          const follower = follow(log, topic, 1);
          await log.append(topic, input(keyIn(0, 2)));
          const mine = input(keyIn(1, 2));
          await log.append(topic, mine);
          expect((await follower.next()).id).toBe(mine.id);
          await follower.expectNothingWithin();
        });
      });

      describe('when the signal aborts', () => {
        it('ends a subscription that is waiting for records', async () => {
          const { log, topic } = await openTopic();
          await log.append(topic, input('k'));
          const follower = follow(log, topic, 0);
          await follower.next();
          expect(await follower.ends(50)).toBe(false);
          follower.abort();
          expect(await follower.ends()).toBe(true);
        });
      });

      describe('when the topic is unknown', () => {
        it('fails with UnknownTopicError', async () => {
          const { log } = await openTopic();
          const missing = topicName('missing');
          const controller = new AbortController();
          const error = await failureOf(async () => {
            const subscription = log.subscribe(missing, { partition: 0, signal: controller.signal });
            await subscription[Symbol.asyncIterator]().next();
          });
          controller.abort();
          expectUnknownTopic(error, missing);
        });
      });
    });

    describe('.endOffset', () => {
      it('is 0 for an empty partition and counts appends', async () => {
        const { log, topic } = await openTopic(2);
        expect(await log.endOffset(topic, 0)).toBe(0);
        await appendAll(log, topic, [input(keyIn(1, 2)), input(keyIn(1, 2))]);
        expect(await log.endOffset(topic, 1)).toBe(2);
        expect(await log.endOffset(topic, 0)).toBe(0);
      });
    });

    describe('.maintenance', () => {
      const expired = (): number => Date.now() + RETENTION_MS + 1_000;

      describe('when records are past retention', () => {
        it('removes them and returns how many', async () => {
          const { log, topic } = await openTopic(2, { retentionMs: RETENTION_MS });
          await appendAll(log, topic, [input(keyIn(0, 2)), input(keyIn(0, 2)), input(keyIn(1, 2))]);
          expect(await log.maintenance(expired())).toBe(3);
          expect(await log.read(topic, 0, 0, 10)).toEqual([]);
          expect(await log.read(topic, 1, 0, 10)).toEqual([]);
        });

        it('keeps offsets stable: the next append continues the sequence', async () => {
          const { log, topic } = await openTopic(1, { retentionMs: RETENTION_MS });
          await appendAll(log, topic, [input('k'), input('k'), input('k')]);
          await log.maintenance(expired());
          expect(await log.endOffset(topic, 0)).toBe(3);
          expect((await log.append(topic, input('k'))).offset).toBe(3);
          expect(offsets(await log.read(topic, 0, 0, 10))).toEqual([3]);
        });
      });

      describe('when records are within retention', () => {
        it('keeps them and returns 0', async () => {
          const { log, topic } = await openTopic(1, { retentionMs: RETENTION_MS });
          await appendAll(log, topic, [input('k'), input('k')]);
          expect(await log.maintenance(Date.now())).toBe(0);
          expect(offsets(await log.read(topic, 0, 0, 10))).toEqual([0, 1]);
        });
      });

      describe('when the topic has no retention', () => {
        it('keeps every record', async () => {
          const { log, topic } = await openTopic();
          await appendAll(log, topic, [input('k'), input('k')]);
          expect(await log.maintenance(expired())).toBe(0);
          expect(offsets(await log.read(topic, 0, 0, 10))).toEqual([0, 1]);
        });
      });

      describe('when keepFrom protects a partition', () => {
        it('never removes a record at or after keepFrom', async () => {
          const { log, topic } = await openTopic(2, { retentionMs: RETENTION_MS });
          const [k0, k1] = [keyIn(0, 2), keyIn(1, 2)];
          await appendAll(log, topic, [input(k0), input(k0), input(k0), input(k0), input(k1), input(k1)]);
          const asked: [string, number][] = [];
          const removed = await log.maintenance(expired(), {
            keepFrom: (t, partition) => {
              asked.push([t, partition]);
              return Promise.resolve(t === topic && partition === 0 ? 2 : undefined);
            },
          });
          expect(removed).toBe(4);
          expect(offsets(await log.read(topic, 0, 0, 10))).toEqual([2, 3]);
          expect(await log.read(topic, 1, 0, 10)).toEqual([]);
          expect(asked).toContainEqual([topic, 0]);
        });

        it('removes nothing when keepFrom is 0', async () => {
          const { log, topic } = await openTopic(1, { retentionMs: RETENTION_MS });
          await appendAll(log, topic, [input('k'), input('k')]);
          expect(await log.maintenance(expired(), { keepFrom: () => Promise.resolve(0) })).toBe(0);
          expect(offsets(await log.read(topic, 0, 0, 10))).toEqual([0, 1]);
        });
      });
    });

    describe('.topics', () => {
      it('lists every provisioned topic with its shape', async () => {
        const a = topicName('a');
        const b = topicName('b');
        const log = await open([
          { name: a, partitions: 3, retentionMs: RETENTION_MS },
          { name: b, partitions: 1 },
        ]);
        expect(await log.topics()).toEqual(
          expect.arrayContaining([
            { name: a, partitions: 3, retentionMs: RETENTION_MS },
            { name: b, partitions: 1, retentionMs: undefined },
          ]),
        );
      });
    });

    describe('.partitions', () => {
      describe('when the topic is provisioned', () => {
        it('returns its partition count', async () => {
          const { log, topic } = await openTopic(12);
          expect(await log.partitions(topic)).toBe(12);
        });
      });

      describe('when the topic is unknown', () => {
        it('rejects with UnknownTopicError', async () => {
          const { log } = await openTopic();
          const missing = topicName('missing');
          expectUnknownTopic(await failureOf(() => log.partitions(missing)), missing);
        });
      });
    });

    describe('.close', () => {
      describe('when the log is used afterwards', () => {
        it('rejects append with HarrierError log-closed', async () => {
          const { log, topic } = await openTopic();
          await log.close();
          expectCode(await failureOf(() => log.append(topic, input('k'))), 'log-closed');
        });
      });

      describe('when called twice', () => {
        it('resolves', async () => {
          const { log } = await openTopic();
          await log.close();
          await expect(log.close()).resolves.toBeUndefined();
        });
      });
    });

    describe('.capabilities', () => {
      it('describes the log with booleans and a positive maxReadBatch', async () => {
        const { log } = await openTopic();
        const capabilities = log.capabilities();
        expect(capabilities).toEqual({
          durable: expect.any(Boolean) as boolean,
          fsync: expect.any(Boolean) as boolean,
          shared: expect.any(Boolean) as boolean,
          livePush: expect.any(Boolean) as boolean,
          maxReadBatch: expect.any(Number) as number,
        });
        expect(Number.isInteger(capabilities.maxReadBatch)).toBe(true);
        expect(capabilities.maxReadBatch).toBeGreaterThan(0);
        if (capabilities.fsync) expect(capabilities.durable).toBe(true);
      });
    });

    describe('durability', () => {
      describe('when the log is reopened', () => {
        it('keeps records and offsets, and continues the sequence', async ({ skip }) => {
          const { log, topic } = await openTopic(2);
          const [k0, k1] = [keyIn(0, 2), keyIn(1, 2)];
          const records = [input(k0), input(k0), input(k1)];
          await appendAll(log, topic, records);
          const again = await reopen(log);
          if (again === undefined) {
            skip('the log is not durable or has no reopen');
            return;
          }
          expect((await again.read(topic, 0, 0, 10)).map((r) => [r.offset, r.id])).toEqual([
            [0, records[0]?.id],
            [1, records[1]?.id],
          ]);
          expect((await again.getEvent(records[2]?.id ?? ''))?.partition).toBe(1);
          expect(await again.endOffset(topic, 0)).toBe(2);
          expect((await again.append(topic, input(k0))).offset).toBe(2);
        });

        it('keeps offsets after retention removed records', async ({ skip }) => {
          const { log, topic } = await openTopic(1, { retentionMs: RETENTION_MS });
          await appendAll(log, topic, [input('k'), input('k')]);
          await log.maintenance(Date.now() + RETENTION_MS + 1_000);
          const again = await reopen(log);
          if (again === undefined) {
            skip('the log is not durable or has no reopen');
            return;
          }
          expect(await again.endOffset(topic, 0)).toBe(2);
          expect((await again.append(topic, input('k'))).offset).toBe(2);
        });
      });
    });
  });
}
