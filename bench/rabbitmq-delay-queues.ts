/**
 * Quorum against classic delay queues, side by side on one RabbitMQ: N commands published through a
 * RabbitMqBroker, each with a `deliverAt` 2.1 s ahead (the delay queue of 2048 ms, then the one of
 * 64 ms for the rest), `--concurrency` publishes in flight, while a receiver takes them. Prints the
 * confirmed publish rate, how late each message was handed out after its `deliverAt` (p50, p99,
 * max), and, when `rabbitmqctl` reaches the server, the memory RabbitMQ reports for a delay queue
 * holding N more (1 KB bodies). Deletes what it declared.
 *
 * Run: `npm run bench:rabbitmq-delay-queues -- --n 5000 --concurrency 64 --rounds 2` (RABBITMQ_URL,
 * default amqp://guest:guest@127.0.0.1:5672).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { silentLogger } from '../src/index.js';
import { uuidv7 } from '../src/messages/uuid-v7.js';
import { RabbitMqBroker, type RabbitMqQueueType } from '../src/rabbitmq/index.js';
import { table } from './support.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '2' },
  },
});
const N = Number(args.n);
const CONCURRENCY = Number(args.concurrency);
const ROUNDS = Number(args.rounds);
const URL_ = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const DELAY_MS = 2_100;
const BODY = JSON.stringify({ pad: 'x'.repeat(1_000) });

/** The memory RabbitMQ reports for `queue`, in bytes, or undefined without rabbitmqctl. */
function queueMemory(queue: string): number | undefined {
  try {
    const out = execFileSync('rabbitmqctl', ['list_queues', '-q', '-s', 'name', 'memory'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const line = out.split('\n').find((l) => l.startsWith(`${queue}\t`));
    return line === undefined ? undefined : Number(line.split('\t')[1]);
  } catch {
    return undefined;
  }
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? Number.NaN;
}

async function run(queueType: RabbitMqQueueType): Promise<string[]> {
  const prefix = `bench-delay-${randomBytes(4).toString('hex')}`;
  const broker = new RabbitMqBroker({ connection: URL_, prefix, queueType, logger: silentLogger });
  const bucket = queueType === 'quorum' ? 'q' : '';
  try {
    await broker.register('bench', [{ handler: 'wake', kind: 'command', types: ['bench.Wake'] }]);
    const due = new Map<string, number>();
    const late: number[] = [];
    const controller = new AbortController();
    const timeout = setTimeout(() => {
      controller.abort();
    }, 120_000);
    // The receiver runs while they are published: lateness is the delay queues', not a backlog's.
    const received = (async () => {
      for await (const delivery of broker.receiver({
        endpoint: 'bench',
        signal: controller.signal,
        prefetch: 64,
      })) {
        const at = due.get(delivery.facts.messageId ?? '');
        if (at !== undefined) late.push(Date.now() - at);
        await broker.ack(delivery.id);
        if (late.length >= N) break;
      }
    })();
    let next = 0;
    const publish = async (delayMs: number): Promise<number> => {
      next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < N) {
            next++;
            const id = uuidv7();
            const deliverAt = Date.now() + delayMs;
            if (delayMs === DELAY_MS) due.set(id, deliverAt);
            await broker.publish({ id, kind: 'command', type: 'bench.Wake', body: BODY, deliverAt });
          }
        }),
      );
      return performance.now() - started;
    };
    // 2.1 s: the delay queue of 2048 ms, then the one of 64 for the last 52 ms.
    const publishMs = await publish(DELAY_MS);
    await received;
    clearTimeout(timeout);
    // N more for 70 s (the delay queue of 65536 ms) to weigh the queue, then it is deleted.
    await publish(70_000);
    const memory = queueMemory(`${prefix}.delay.${bucket}65536`);
    const connection = await amqp.connect(URL_);
    try {
      const channel = await connection.createChannel();
      for (const ms of [64, 2048, 65_536])
        await channel.deleteQueue(`${prefix}.delay.${bucket}${String(ms)}`);
      await channel.deleteQueue(`${prefix}.cmd.bench.Wake`);
      if (queueType === 'quorum') await channel.deleteQueue(`${prefix}.unrouted`);
    } finally {
      await connection.close();
    }
    late.sort((a, b) => a - b);
    return [
      queueType,
      String(Math.round((N / publishMs) * 1000)),
      String(percentile(late, 0.5)),
      String(percentile(late, 0.99)),
      String(late.at(-1) ?? Number.NaN),
      memory === undefined ? '-' : (memory / 1e6).toFixed(1),
      `${late.length}/${N}`,
    ];
  } finally {
    await broker.close();
  }
}

const rows: string[][] = [];
for (let round = 0; round < ROUNDS; round++) {
  for (const queueType of ['classic', 'quorum'] as const) rows.push(await run(queueType));
}
console.log(
  `${N} delayed commands (1 KB) each 2.1 s ahead, ${CONCURRENCY} publishes in flight, a receiver (prefetch 64) running; queue MB: ${N} more in the delay queue of 65536 ms; RabbitMQ at ${URL_}`,
);
console.log(
  table(
    ['delay queues', 'publish msg/s', 'late p50 ms', 'late p99 ms', 'late max ms', 'queue MB', 'received'],
    rows,
  ),
);
