/**
 * Harrier's RabbitMqBroker next to raw amqplib, on the same RabbitMQ, with the same queue type, the
 * same concurrency and messages of the same size, in one run.
 *
 * For each concurrency C (`--concurrency`, default 16 and 64), each round runs both sides, one after
 * the other (the order flips every round, so drift in a shared host hits both), and each side does:
 *
 * 1. produce: N persistent messages to an empty queue from C concurrent callers, each awaiting its
 *    publisher confirm before its next publish; timed from the first publish until the last confirm.
 *    - raw amqplib: one `ConfirmChannel`; each message a JSON envelope built the plain way (a
 *      `randomUUID` id, the type, the payload, a timestamp: the fields of Harrier's envelope) published to the default exchange with
 *      `persistent`, `messageId`, `type` and `contentType`, awaited through `publish`'s callback.
 *    - Harrier: `bus.send(PlaceOrder, payload)` on a bus of a sending endpoint (zod validation, UUIDv7,
 *      envelope encoding, then the broker's publish and its confirm), the route registered by the
 *      consuming endpoint beforehand, as its `start()` does.
 * 2. consume: the N messages each side produced, drained by its consumer; timed from the first
 *    delivery until the N-th ack.
 *    - raw amqplib: one channel, `prefetch(C)`, manual ack; the callback parses the JSON, reads the
 *      payload and acks.
 *    - Harrier: `createBus` on the broker with one `@CommandHandler` that reads the payload and
 *      returns, concurrency C (which the dispatcher passes to the broker as its prefetch), the real
 *      dispatcher (decoding, validation, the ack); from the handler's first call until the
 *      `onHandled` hook (which fires after the ack) has counted N.
 *
 * Both sides use quorum queues (`--queue-type classic` for classic ones); the message is a command
 * whose encoded envelope is about 300 bytes (the sizes are printed). Besides msg/s, the CPU time per
 * message of this process (`process.cpuUsage`) and of the RabbitMQ server when it runs on this
 * machine (the `beam.smp` listening on the URL's port, read from /proc; other clients of the server
 * count too), and "by CPU": raw's CPU per message (this process + server) over Harrier's, which
 * moves less than the rates on a shared host. Each
 * side first runs an untimed warm-up of `--warm-up` messages. Every round and side gets queues of its
 * own under a prefix unique to the run, deleted afterwards.
 *
 * Run: `npm run bench:rabbitmq` (compiles with tsc into .bench/, then runs the JavaScript) against
 * RABBITMQ_URL, else amqp://guest:guest@127.0.0.1:5672. Options after `--`: `--n` (default 20000),
 * `--rounds` (3), `--concurrency` (a comma-separated list, 16,64), `--queue-type` (quorum | classic),
 * `--warm-up` (2000).
 */
import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import {
  CommandHandler,
  createBus,
  silentLogger,
  type HandlesCommand,
  type MessageBus,
  type PayloadOf,
} from '../src/index.js';
import { prepareMessage } from '../src/extend.js';
import { RabbitMqBroker } from '../src/rabbitmq/index.js';
import { harrierTopology, payloadOf, PlaceOrder, serverCpuUs, serverPid } from './rabbitmq-support.js';
import { drive, fmtRate, median, table } from './support.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '16,64' },
    'queue-type': { type: 'string', default: 'quorum' },
    'warm-up': { type: 'string', default: '2000' },
  },
  strict: true,
});

/** A positive whole number from option `name`. */
function whole(name: string, text: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`--${name} takes a positive whole number, got "${text}"`);
  }
  return value;
}

const N = whole('n', args.n);
const ROUNDS = whole('rounds', args.rounds);
const WARM_UP = Math.min(N, whole('warm-up', args['warm-up']));
const CONCURRENCIES = args.concurrency.split(',').map((c) => whole('concurrency', c.trim()));
const QUEUE_TYPE = args['queue-type'];
if (QUEUE_TYPE !== 'quorum' && QUEUE_TYPE !== 'classic') {
  throw new Error(`--queue-type takes quorum or classic, got "${QUEUE_TYPE}"`);
}
const RUN_TIMEOUT_MS = 300_000;
const FROM_ENV = process.env.RABBITMQ_URL !== undefined && process.env.RABBITMQ_URL !== '';
const RABBITMQ_URL = FROM_ENV ? (process.env.RABBITMQ_URL ?? '') : 'amqp://guest:guest@127.0.0.1:5672';
/** Queue and broker prefix of the whole run; each side and round adds its own part. */
const RUN_PREFIX = `harrier-bench-${randomBytes(4).toString('hex')}`;

/** When the Harrier handler of the current run was first called (performance.now()). */
let firstHandled = Number.NaN;

/** Reads the payload and returns, noting its first call. */
@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (Number.isNaN(firstHandled)) firstHandled = performance.now();
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

/**
 * The raw side's message `i`: an envelope of the same fields and size as Harrier's, built the plain
 * way (no validation, a random UUID).
 */
function rawBody(i: number): { id: string; body: Buffer } {
  const id = randomUUID();
  const envelope = {
    v: 1,
    id,
    kind: 'command',
    type: PlaceOrder.type,
    payload: payloadOf(i),
    meta: { correlationId: id, occurredAt: new Date().toISOString(), headers: {} },
  };
  return { id, body: Buffer.from(JSON.stringify(envelope)) };
}

/** The queue arguments of the run's queue type. */
const queueArguments = { 'x-queue-type': QUEUE_TYPE };

/** One side's timed figures in one round. */
interface Sample {
  /** msg/s from the first publish until the last confirm. */
  readonly produce: number;
  /** msg/s from the first delivery until the N-th ack. */
  readonly consume: number;
  /** CPU of this process per message, µs. */
  readonly produceCpuUs: number;
  readonly consumeCpuUs: number;
  /** CPU of the RabbitMQ server per message, µs (NaN when it is not on this machine). */
  readonly produceServerUs: number;
  readonly consumeServerUs: number;
  /** Bytes of one message body. */
  readonly bodyBytes: number;
}

/** CPU time (µs) of this process and the server since a mark. */
interface CpuMark {
  readonly process: NodeJS.CpuUsage;
  readonly server: number;
}

const SERVER_PID = serverPid(RABBITMQ_URL);

const mark = (): CpuMark => ({ process: process.cpuUsage(), server: serverCpuUs(SERVER_PID) });

/** µs per message of this process and of the server since `from`. */
function cpuSince(from: CpuMark, n: number): { readonly cpuUs: number; readonly serverUs: number } {
  const used = process.cpuUsage(from.process);
  return { cpuUs: (used.user + used.system) / n, serverUs: (serverCpuUs(SERVER_PID) - from.server) / n };
}

/** Resolves after `ms`, rejecting with what `what` says is missing. */
function deadline(ms: number, what: () => string): { promise: Promise<never>; cancel: () => void } {
  let timer: NodeJS.Timeout | undefined;
  const promise = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(what()));
    }, ms);
  });
  return {
    promise,
    cancel: () => {
      clearTimeout(timer);
    },
  };
}

/** The bench's own connection: server version, queue clean-up. */
let admin: amqp.ChannelModel;

/** Deletes queues and exchanges by name, each on a channel of its own (a missing one is fine). */
async function deleteTopology(queues: readonly string[], exchanges: readonly string[] = []): Promise<void> {
  const each = async (remove: (channel: amqp.Channel) => Promise<unknown>): Promise<void> => {
    const channel = await admin.createChannel();
    channel.on('error', () => undefined);
    try {
      await remove(channel);
      await channel.close();
    } catch {
      // The channel closed with the error: nothing to delete.
    }
  };
  for (const queue of queues) await each((channel) => channel.deleteQueue(queue));
  for (const exchange of exchanges) await each((channel) => channel.deleteExchange(exchange));
}

/** Raw amqplib: produce N with confirms from `concurrency` callers, then drain them with prefetch. */
async function rawAmqp(n: number, concurrency: number, tag: string): Promise<Sample> {
  const queue = `${RUN_PREFIX}-raw-${tag}`;
  const connection = await amqp.connect(RABBITMQ_URL);
  connection.on('error', () => undefined);
  try {
    const publisher = await connection.createConfirmChannel();
    await publisher.assertQueue(queue, { durable: true, arguments: queueArguments });
    let bodyBytes = 0;

    let cpu = mark();
    const started = performance.now();
    await drive(0, n, concurrency, (i) => {
      const { id, body } = rawBody(i);
      bodyBytes = body.length;
      return new Promise<void>((resolve, reject) => {
        publisher.publish(
          '',
          queue,
          body,
          { persistent: true, messageId: id, type: PlaceOrder.type, contentType: 'application/json' },
          (error: unknown) => {
            if (error === null || error === undefined) resolve();
            else reject(error instanceof Error ? error : new Error('publish was nacked'));
          },
        );
      });
    });
    const produced = performance.now();
    const produceCpu = cpuSince(cpu, n);
    await publisher.close();

    const consumer = await connection.createChannel();
    await consumer.prefetch(concurrency);
    let count = 0;
    let first = Number.NaN;
    let last = Number.NaN;
    let done: () => void = () => undefined;
    const all = new Promise<void>((resolve) => {
      done = resolve;
    });
    cpu = mark();
    const { consumerTag } = await consumer.consume(
      queue,
      (message) => {
        if (message === null) return;
        if (count === 0) first = performance.now();
        const envelope = JSON.parse(message.content.toString()) as { payload: { amount: number } };
        if (envelope.payload.amount <= 0) throw new Error('unreachable');
        consumer.ack(message);
        if (++count === n) {
          last = performance.now();
          done();
        }
      },
      { noAck: false },
    );
    const timeout = deadline(RUN_TIMEOUT_MS, () => `raw amqplib consumed only ${count} of ${n} messages`);
    try {
      await Promise.race([all, timeout.promise]);
    } finally {
      timeout.cancel();
    }
    const consumeCpu = cpuSince(cpu, n);
    await consumer.cancel(consumerTag);
    await consumer.close();
    return {
      produce: n / ((produced - started) / 1000),
      consume: n / ((last - first) / 1000),
      produceCpuUs: produceCpu.cpuUs,
      consumeCpuUs: consumeCpu.cpuUs,
      produceServerUs: produceCpu.serverUs,
      consumeServerUs: consumeCpu.serverUs,
      bodyBytes,
    };
  } finally {
    await connection.close();
    await deleteTopology([queue]);
  }
}

/** Harrier: `bus.send` N from `concurrency` callers, then a bus of concurrency C drains them. */
async function harrier(n: number, concurrency: number, tag: string): Promise<Sample> {
  const prefix = `${RUN_PREFIX}-harrier-${tag}`;
  const broker = new RabbitMqBroker({
    connection: RABBITMQ_URL,
    prefix,
    queueType: QUEUE_TYPE as 'quorum' | 'classic',
    logger: silentLogger,
  });
  let count = 0;
  let last = Number.NaN;
  let done: () => void = () => undefined;
  const all = new Promise<void>((resolve) => {
    done = resolve;
  });
  const consumer = createBus({
    endpoint: 'bench',
    broker,
    handlers: [PlaceOrderHandler],
    concurrency,
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        if (++count === n) {
          last = performance.now();
          done();
        }
      },
    },
  });
  const sender: MessageBus = createBus({ endpoint: 'bench-sender', broker, logger: silentLogger });
  try {
    // The route, as the consuming endpoint's start() registers it, so the sends are accepted.
    await broker.register('bench', [
      { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
    ]);
    const bodyBytes = Buffer.byteLength(
      prepareMessage(PlaceOrder, payloadOf(n - 1), {}, { now: Date.now() }).outgoing.body,
    );

    let cpu = mark();
    const started = performance.now();
    await drive(0, n, concurrency, (i) => sender.send(PlaceOrder, payloadOf(i)));
    const produced = performance.now();
    const produceCpu = cpuSince(cpu, n);

    firstHandled = Number.NaN;
    cpu = mark();
    await consumer.start();
    const timeout = deadline(RUN_TIMEOUT_MS, () => `Harrier handled only ${count} of ${n} messages`);
    try {
      await Promise.race([all, timeout.promise]);
    } finally {
      timeout.cancel();
    }
    const consumeCpu = cpuSince(cpu, n);
    return {
      produce: n / ((produced - started) / 1000),
      consume: n / ((last - firstHandled) / 1000),
      produceCpuUs: produceCpu.cpuUs,
      consumeCpuUs: consumeCpu.cpuUs,
      produceServerUs: produceCpu.serverUs,
      consumeServerUs: consumeCpu.serverUs,
      bodyBytes,
    };
  } finally {
    await consumer.stop({ closeBroker: false });
    await sender.stop({ closeBroker: false });
    await broker.close();
    const { queues, exchanges } = harrierTopology(prefix);
    await deleteTopology(queues, exchanges);
  }
}

/** Where the bench connects, without credentials. */
function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname === '' ? '/' : parsed.pathname}`;
  } catch {
    return 'an unparsable RABBITMQ_URL';
  }
}

const loadAverage = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const us = (value: number): string => (Number.isNaN(value) ? 'n/a' : value.toFixed(0));
/** Half the range of some samples, as a percentage of their median. */
const spread = (values: readonly number[]): string =>
  `±${(((Math.max(...values) - Math.min(...values)) / 2 / median(values)) * 100).toFixed(1)}%`;

/** One concurrency's samples over all rounds. */
interface Series {
  readonly concurrency: number;
  readonly raw: Sample[];
  readonly ours: Sample[];
}

async function main(): Promise<void> {
  try {
    admin = await amqp.connect(RABBITMQ_URL);
  } catch (error) {
    process.stderr.write(
      `RabbitMQ is not reachable at ${describeUrl(RABBITMQ_URL)} (${String(error)}): start one (e.g. \`rabbitmq-server\`) or set RABBITMQ_URL to a running server\n`,
    );
    process.exitCode = 2;
    return;
  }
  admin.on('error', () => undefined);
  const server = admin.connection.serverProperties;
  console.log(
    `Harrier RabbitMqBroker vs raw amqplib — ${new Date().toISOString()}, Node ${process.version} (${process.platform}/${process.arch}, ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} vCPUs), ${server.product} ${server.version} at ${describeUrl(RABBITMQ_URL)} (${FROM_ENV ? 'RABBITMQ_URL' : 'the local default; set RABBITMQ_URL for another'})`,
  );
  console.log(
    `N = ${N} messages per side and round after a ${WARM_UP}-message warm-up, ${QUEUE_TYPE} queues, persistent messages, concurrency (senders / prefetch) ${CONCURRENCIES.join(', ')}, ${ROUNDS} rounds alternating the sides`,
  );
  console.log(
    SERVER_PID === undefined
      ? 'Server CPU: n/a (the server is not on this machine, or /proc does not show it)'
      : `Server CPU: /proc of the server's beam.smp (pid ${SERVER_PID}); other clients of the server count too`,
  );
  console.log(`Load average at start: ${loadAverage()}\n`);

  const began = performance.now();
  const series: Series[] = [];
  try {
    await rawAmqp(WARM_UP, CONCURRENCIES[0] ?? 16, 'warm-up');
    await harrier(WARM_UP, CONCURRENCIES[0] ?? 16, 'warm-up');
    for (const concurrency of CONCURRENCIES) {
      const s: Series = { concurrency, raw: [], ours: [] };
      series.push(s);
      for (let round = 1; round <= ROUNDS; round++) {
        const tag = `c${concurrency}-r${round}`;
        if (round % 2 === 1) {
          s.raw.push(await rawAmqp(N, concurrency, tag));
          s.ours.push(await harrier(N, concurrency, tag));
        } else {
          s.ours.push(await harrier(N, concurrency, tag));
          s.raw.push(await rawAmqp(N, concurrency, tag));
        }
        const r = s.raw.at(-1);
        const h = s.ours.at(-1);
        if (r !== undefined && h !== undefined) {
          console.log(
            `  C=${concurrency} round ${round}: produce raw ${fmtRate(r.produce)} / Harrier ${fmtRate(h.produce)} msg/s, consume raw ${fmtRate(r.consume)} / Harrier ${fmtRate(h.consume)} msg/s`,
          );
        }
      }
    }
  } finally {
    await admin.close();
  }

  const ratios = (s: Series, pick: (x: Sample) => number): number[] =>
    s.ours.map((h, i) => pick(h) / pick(s.raw[i] ?? h));
  /** Raw's CPU per message (this process + server, or this process alone) over Harrier's, medians. */
  const byCpu = (s: Series, cpuPick: (x: Sample) => number, serverPick: (x: Sample) => number): string => {
    const both = (x: Sample): number => cpuPick(x) + serverPick(x);
    const pick = Number.isNaN(median(s.raw.map(serverPick))) ? cpuPick : both;
    return `${(median(s.raw.map(pick)) / median(s.ours.map(pick))).toFixed(3)}x`;
  };
  for (const [label, pick, cpuPick, serverPick] of [
    [
      'produce (publish + confirm)',
      (x: Sample) => x.produce,
      (x: Sample) => x.produceCpuUs,
      (x: Sample) => x.produceServerUs,
    ],
    [
      'consume (first delivery -> last ack)',
      (x: Sample) => x.consume,
      (x: Sample) => x.consumeCpuUs,
      (x: Sample) => x.consumeServerUs,
    ],
  ] as const) {
    console.log(`\n${label}, msg/s, median of ${ROUNDS} rounds:`);
    console.log(
      table(
        [
          'C',
          'raw amqplib',
          'spread',
          'Harrier',
          'spread',
          'Harrier/raw',
          'by round',
          'Node CPU us/msg raw / Harrier',
          'server CPU us/msg raw / Harrier',
          'by CPU',
        ],
        series.map((s) => {
          const raw = s.raw.map(pick);
          const ours = s.ours.map(pick);
          return [
            String(s.concurrency),
            fmtRate(median(raw)),
            spread(raw),
            fmtRate(median(ours)),
            spread(ours),
            `${(median(ours) / median(raw)).toFixed(3)}x`,
            ratios(s, pick)
              .map((r) => r.toFixed(2))
              .join(' '),
            `${us(median(s.raw.map(cpuPick)))} / ${us(median(s.ours.map(cpuPick)))}`,
            `${us(median(s.raw.map(serverPick)))} / ${us(median(s.ours.map(serverPick)))}`,
            byCpu(s, cpuPick, serverPick),
          ];
        }),
      ),
    );
    console.log(
      table(
        ['every round', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
        series.flatMap((s) => [
          [`C=${s.concurrency} raw`, ...s.raw.map((x) => fmtRate(pick(x)))],
          [`C=${s.concurrency} Harrier`, ...s.ours.map((x) => fmtRate(pick(x)))],
        ]),
      ),
    );
  }
  const first = series[0];
  console.log(
    `\nMessage body: raw ${first?.raw[0]?.bodyBytes ?? Number.NaN} bytes, Harrier ${first?.ours[0]?.bodyBytes ?? Number.NaN} bytes (the encoded envelope)`,
  );
  for (const s of series) {
    const produce = median(s.ours.map((x) => x.produce)) / median(s.raw.map((x) => x.produce));
    const consume = median(s.ours.map((x) => x.consume)) / median(s.raw.map((x) => x.consume));
    console.log(
      `Target Harrier >= 0.85x raw at C=${s.concurrency}: produce ${produce >= 0.85 ? 'met' : 'NOT met'} (${produce.toFixed(3)}x), consume ${consume >= 0.85 ? 'met' : 'NOT met'} (${consume.toFixed(3)}x)`,
    );
  }
  console.log(`Load average at the end: ${loadAverage()}`);
  console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
}

await main();
