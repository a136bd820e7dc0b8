/**
 * "One parse per delivery instead of two", measured before anything is built: what a job
 * that stores the envelope as an object would save on consume, next to today's job that stores its
 * text.
 *
 * Both systems are a bare BullMQ `Worker` (concurrency 16) whose processor does the receive side's
 * decode, so only the job shape and the parse differ:
 *
 * - `text` (today): job data `{ b: <envelope text> }`, as `BullMqBroker.publishBatch` writes it.
 *   BullMQ's `JSON.parse` of the job data unescapes the text; the processor runs `decodeEnvelope`
 *   (size check, `JSON.parse` of the envelope, frame check, payload schema): two parses.
 * - `object`: job data `{ e: <envelope object> }`. BullMQ's `JSON.parse` of the job data gives the
 *   envelope; the processor runs the same steps without the parse (frame check, type lookup, payload
 *   schema): one parse. No reader reads this shape: measured only.
 * - `none`: today's jobs, a processor that returns at once (the floor: BullMQ's own cost).
 *
 * Jobs are added by raw `addBulk` with Harrier's job options (untimed); each round consumes N jobs of
 * each system in alternating order, and prints msg/s and this process's CPU µs per message.
 *
 * Run: `npm run bench:redis-job-shape` (BENCH_N, default 20000;
 * BENCH_ROUNDS, default 5) against `REDIS_URL` (default redis://127.0.0.1:6379).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { decodeEnvelope, prepareMessage, type PreparedMessage } from '../src/extend.js';
import { isEnvelopeFrame } from '../src/messages/envelope.js';
import type { MessageDefinition } from '../src/index.js';
import { jobOptions, toJobData } from '../src/redis/job-data.js';
import { PlaceOrder, payloadOf } from './place-order.js';
import { Counter, benchPrefix, deleteKeys, fmtRate, median, table } from './support.js';
import { JOB_DEFAULTS } from './produce-support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const CONCURRENCY = 16;
const QUEUE = `cmd~${PlaceOrder.type}`;

type Shape = 'text' | 'object' | 'none';

const lookup = (type: string): MessageDefinition | undefined =>
  type === PlaceOrder.type ? PlaceOrder : undefined;

/** `decodeEnvelope` minus its `JSON.parse`: what the receive side would run on an envelope object. */
function decodeParsed(raw: unknown): boolean {
  if (!isEnvelopeFrame(raw)) return false;
  const definition = lookup(raw.type);
  if (definition === undefined || definition.kind !== raw.kind) return false;
  const payload = definition.schema.safeParse(raw.payload);
  if (!payload.success) return false;
  (raw as { payload: unknown }).payload = payload.data;
  return true;
}

const processors: Record<Shape, (job: Job) => Promise<void>> = {
  text: (job) => {
    const decoded = decodeEnvelope((job.data as { b: string }).b, lookup);
    return decoded.ok ? Promise.resolve() : Promise.reject(new Error(decoded.message));
  },
  object: (job) =>
    decodeParsed((job.data as { e: unknown }).e)
      ? Promise.resolve()
      : Promise.reject(new Error('not an envelope')),
  none: () => Promise.resolve(),
};

const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });

/** Adds `n` jobs of `shape` to a fresh prefix, then consumes them with a bare Worker. */
async function run(shape: Shape, n: number): Promise<{ rate: number; cpuUs: number; bytes: number }> {
  const prefix = benchPrefix();
  const producer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const consumer = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(QUEUE, { connection: producer, prefix });
  let worker: Worker | undefined;
  try {
    for (let from = 0; from < n; from += 1000) {
      const now = Date.now();
      const prepared: PreparedMessage[] = [];
      for (let i = from; i < Math.min(n, from + 1000); i++) {
        prepared.push(prepareMessage(PlaceOrder, payloadOf(i), {}, { now }));
      }
      await queue.addBulk(
        prepared.map(({ envelope, outgoing }) => ({
          name: PlaceOrder.type,
          data: shape === 'object' ? { e: envelope } : toJobData(outgoing),
          opts: jobOptions(outgoing, now, JOB_DEFAULTS),
        })),
      );
    }
    const first = await admin.hget(
      `${prefix}:${QUEUE}:${(await queue.getJobs(['wait'], 0, 0))[0]?.id ?? ''}`,
      'data',
    );
    const done = new Counter(180_000);
    const cpu = process.cpuUsage();
    const started = performance.now();
    worker = new Worker(QUEUE, processors[shape], { connection: consumer, prefix, concurrency: CONCURRENCY });
    worker.on('completed', () => {
      done.hit();
    });
    worker.on('failed', (_job, error) => {
      throw error;
    });
    await done.until(n);
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    return { rate: n / seconds, cpuUs: (used.user + used.system) / n, bytes: Buffer.byteLength(first ?? '') };
  } finally {
    await worker?.close();
    await queue.close();
    producer.disconnect();
    consumer.disconnect();
    await deleteKeys(admin, prefix);
  }
}

const shapes: Shape[] = ['text', 'object', 'none'];
for (const shape of shapes) await run(shape, Math.min(N, 2_000));
const results = new Map<Shape, { rate: number; cpuUs: number; bytes: number }[]>(shapes.map((s) => [s, []]));
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? shapes : [...shapes].reverse();
  for (const shape of order) results.get(shape)?.push(await run(shape, N));
}
const of = (shape: Shape): { rate: number; cpuUs: number; bytes: number }[] => results.get(shape) ?? [];
const textRate = median(of('text').map((r) => r.rate));
const textCpu = median(of('text').map((r) => r.cpuUs));
console.log(
  `Job shape on consume: bare Worker, concurrency ${CONCURRENCY}, N = ${N}, ${ROUNDS} rounds alternating, Node ${process.version}\n`,
);
console.log(
  table(
    [
      'shape',
      'job data bytes',
      'msg/s (median)',
      'vs text',
      'CPU µs/msg (median)',
      'vs text',
      'every round msg/s',
    ],
    shapes.map((shape) => {
      const rate = median(of(shape).map((r) => r.rate));
      const cpu = median(of(shape).map((r) => r.cpuUs));
      return [
        shape,
        String(of(shape)[0]?.bytes ?? Number.NaN),
        fmtRate(rate),
        `${(rate / textRate).toFixed(3)}x`,
        cpu.toFixed(1),
        `${(cpu / textCpu).toFixed(3)}x`,
        of(shape)
          .map((r) => fmtRate(r.rate))
          .join(' '),
      ];
    }),
  ),
);
admin.disconnect();
