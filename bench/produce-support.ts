// The produce side of the Redis benches: the same N messages added in chunks by raw BullMQ (with and
// without job ids) and by Harrier, so bench/redis.ts and bench/redis-produce.ts time the same code.
import { randomUUID } from 'node:crypto';
import type { Queue } from 'bullmq';
import type { z } from 'zod';
import { prepareMessage, type OutgoingMessage, type PreparedMessage } from '../src/extend.js';
import type { MessageDefinition, SendOptions } from '../src/index.js';
import { silentLogger } from '../src/index.js';
import { BullMqBroker } from '../src/redis/index.js';
import { jobOptionDefaults, jobOptions, toJobData } from '../src/redis/job-data.js';

/** Messages per `addBulk` / `publishBatch` call. */
export const CHUNK = 1_000;

/** BullMqBroker's default `dedupeWindowMs`: the raw rows with job ids keep ids as long as Harrier. */
export const DEDUPE_TTL_MS = 24 * 60 * 60 * 1000;

/** A command definition whose payload the bench can build for any i. */
export type BenchCommand = MessageDefinition & { readonly schema: z.ZodType };

/** BullMqBroker's default job settings, for the raw rows that store Harrier's job shape. */
export const JOB_DEFAULTS = jobOptionDefaults({
  dedupeWindowMs: DEDUPE_TTL_MS,
  failedRetentionMs: 7 * 24 * 60 * 60 * 1000,
  failedRetentionCount: 10_000,
});

/**
 * Raw BullMQ: `Queue.addBulk` of the bare payload in chunks. With `withIds`, each job gets a fresh
 * UUID as job id and as deduplication id (ttl {@link DEDUPE_TTL_MS}): the dedupe guarantee Harrier
 * gives, bought the plain way. With `harrierOptions` too, the jobs get the BullMQ options Harrier's
 * broker sets (its retry and retention settings besides the ids): what those options cost.
 */
export async function produceRaw(
  queue: Queue,
  type: string,
  payloadOf: (i: number) => unknown,
  n: number,
  withIds: boolean,
  harrierOptions = false,
): Promise<void> {
  await inChunks(n, (from, to) => {
    const jobs = [];
    for (let i = from; i < to; i++) {
      if (withIds) {
        const id = randomUUID();
        jobs.push({
          name: type,
          data: payloadOf(i),
          opts: harrierOptions
            ? jobOptions({ id } as OutgoingMessage, 0, JOB_DEFAULTS)
            : { jobId: id, deduplication: { id, ttl: DEDUPE_TTL_MS }, removeOnComplete: true },
        });
      } else {
        jobs.push({ name: type, data: payloadOf(i), opts: { removeOnComplete: true } });
      }
    }
    return queue.addBulk(jobs);
  });
}

/**
 * Adds N messages in chunks as Harrier does: `prepareMessage` (as `bus.send`, with `options`) +
 * `publishBatch`.
 */
export async function produceWithHarrier(
  broker: BullMqBroker,
  definition: BenchCommand,
  payloadOf: (i: number) => unknown,
  n: number,
  options: SendOptions = {},
): Promise<void> {
  await inChunks(n, (from, to, now) =>
    broker.publishBatch(prepareChunk(definition, payloadOf, from, to, now, options).map((m) => m.outgoing)),
  );
}

/**
 * Raw `addBulk` of Harrier's jobs, built by `prepareMessage` and the broker's own `toJobData` and
 * `jobOptions`, without `publishBatch` (no route check, grouping or result check): Harrier minus its
 * broker code. With `compact`, the job data carries the envelope object instead of its text, so
 * BullMQ's JSON of the data is the only stringify of the envelope and nothing is escaped twice: a job
 * shape readers do not read (measured only, to show what a smaller shape would gain).
 */
export async function produceHarrierShaped(
  queue: Queue,
  definition: BenchCommand,
  payloadOf: (i: number) => unknown,
  n: number,
  compact: boolean,
): Promise<void> {
  await inChunks(n, (from, to, now) =>
    queue.addBulk(
      prepareChunk(definition, payloadOf, from, to, now).map(({ envelope, outgoing }) => ({
        name: definition.type,
        data: compact ? { b: envelope } : toJobData(outgoing),
        opts: jobOptions(outgoing, now, JOB_DEFAULTS),
      })),
    ),
  );
}

/** `prepareMessage` (as `bus.send` calls it) of the messages `from` to `to` (excluded). */
function prepareChunk(
  definition: BenchCommand,
  payloadOf: (i: number) => unknown,
  from: number,
  to: number,
  now: number,
  options: SendOptions = {},
): PreparedMessage[] {
  const prepared: PreparedMessage[] = [];
  for (let i = from; i < to; i++) prepared.push(prepareMessage(definition, payloadOf(i), options, { now }));
  return prepared;
}

/** Calls `add` for each chunk `[from, to)` of `0..n`, one after another, with the time it starts. */
async function inChunks(
  n: number,
  add: (from: number, to: number, now: number) => Promise<unknown>,
): Promise<void> {
  for (let from = 0; from < n; from += CHUNK) await add(from, Math.min(n, from + CHUNK), Date.now());
}

/**
 * Registers PlaceOrder-style `type`'s route as the consuming endpoint's `start()` does, from a broker
 * of its own (an earlier run of the consumer), so a producing broker's `publishBatch` accepts it.
 */
export async function registerRoute(url: string, prefix: string, type: string): Promise<void> {
  const registrar = new BullMqBroker({ connection: url, prefix, logger: silentLogger });
  try {
    await registrar.register('bench', [{ handler: 'PlaceOrderHandler', kind: 'command', types: [type] }]);
  } finally {
    await registrar.close();
  }
}
