/**
 * A CPU profile of Harrier's RabbitMQ consume alone: N commands published through the broker, then a
 * bus of concurrency C drains them while the inspector's profiler runs. With `--raw`, the raw amqplib
 * consumer of bench/rabbitmq.ts drains the same queue instead; with `--raw-batched`, that consumer
 * sends the acks of one event-loop turn as one `multiple` ack when they are contiguous; with
 * `--coalesce-acks`, every channel of the process does so (Harrier's too: an experiment that shows
 * what coalescing acks in its receiver would save). Prints msg/s, CPU and socket writes per message,
 * the self time by file and by function, and writes the .cpuprofile (`--out`; open it in Chrome
 * DevTools). Rates are lower than bench/rabbitmq.ts's: the profiler costs CPU too.
 *
 * Run: `npm run bench:rabbitmq-consume-profile -- --n 20000 --concurrency 16 [--raw | --raw-batched]
 * [--coalesce-acks]`.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { Session, type Profiler } from 'node:inspector';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { prepareMessage } from '../src/extend.js';
import {
  CommandHandler,
  createBus,
  silentLogger,
  type HandlesCommand,
  type PayloadOf,
} from '../src/index.js';
import { RabbitMqBroker } from '../src/rabbitmq/index.js';
import { harrierTopology, payloadOf, PlaceOrder } from './rabbitmq-support.js';
import { table } from './support.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '16' },
    out: { type: 'string', default: 'rabbitmq-consume.cpuprofile' },
    raw: { type: 'boolean', default: false },
    'raw-batched': { type: 'boolean', default: false },
    'coalesce-acks': { type: 'boolean', default: false },
  },
});
const N = Number(args.n);
const C = Number(args.concurrency);
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (payload.amount <= 0) throw new Error('unreachable');
  }
}

function post<T>(session: Session, method: string): Promise<T> {
  return new Promise((resolve, reject) => {
    session.post(method, (error, result) => {
      if (error) reject(error);
      else resolve(result as T);
    });
  });
}

/**
 * An experiment, not a fix: makes every amqplib channel of this process (the prototype of
 * `channel`'s class, Harrier's included) send the acks of one event-loop turn as one `multiple` ack
 * when their delivery tags follow on from the last one acked, else one by one. Sound only here,
 * where nothing is nacked or requeued; it shows what coalescing acks in the receiver would save.
 */
function coalesceAcks(channel: amqp.Channel): void {
  type Ack = (this: amqp.Channel, message: amqp.Message, allUpTo?: boolean) => void;
  const proto = Object.getPrototypeOf(channel) as { ack: Ack };
  const ack = proto.ack;
  const state = new WeakMap<amqp.Channel, { pending: amqp.Message[]; last: number }>();
  proto.ack = function (message, allUpTo) {
    if (allUpTo === true) {
      ack.call(this, message, true);
      return;
    }
    let own = state.get(this);
    if (own === undefined) {
      own = { pending: [], last: 0 };
      state.set(this, own);
    }
    const s = own;
    if (s.pending.length === 0) {
      setImmediate(() => {
        const batch = s.pending.sort((a, b) => a.fields.deliveryTag - b.fields.deliveryTag);
        s.pending = [];
        const last = batch.at(-1);
        if (last === undefined) return;
        if (last.fields.deliveryTag - s.last === batch.length) ack.call(this, last, true);
        else for (const m of batch) ack.call(this, m);
        s.last = Math.max(s.last, last.fields.deliveryTag);
      });
    }
    s.pending.push(message);
  };
}

/** Socket writes (write and writev calls that reach the socket) of this process. */
let socketWrites = 0;
const socket = Socket.prototype as unknown as { _writeGeneric: (...a: unknown[]) => unknown };
const writeGeneric = socket._writeGeneric;
socket._writeGeneric = function (this: unknown, ...a: unknown[]) {
  socketWrites++;
  return writeGeneric.apply(this, a);
};

async function main(): Promise<void> {
  const prefix = `harrier-prof-${randomBytes(4).toString('hex')}`;
  const broker = new RabbitMqBroker({ connection: RABBITMQ_URL, prefix, logger: silentLogger });
  let count = 0;
  let done: () => void = () => undefined;
  const all = new Promise<void>((resolve) => {
    done = resolve;
  });
  const bus = createBus({
    endpoint: 'bench',
    broker,
    handlers: [PlaceOrderHandler],
    concurrency: C,
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        if (++count === N) done();
      },
    },
  });
  await broker.register('bench', [
    { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
  ]);
  for (let from = 0; from < N; from += 1000) {
    const now = Date.now();
    const chunk = [];
    for (let i = from; i < Math.min(N, from + 1000); i++)
      chunk.push(prepareMessage(PlaceOrder, payloadOf(i), {}, { now }).outgoing);
    await broker.publishBatch(chunk);
  }
  const session = new Session();
  session.connect();
  await post(session, 'Profiler.enable');
  const connection = await amqp.connect(RABBITMQ_URL);
  const channel = await connection.createChannel();
  await channel.prefetch(C);
  if (args['coalesce-acks']) coalesceAcks(channel);
  await post(session, 'Profiler.start');
  const cpu = process.cpuUsage();
  const writes = socketWrites;
  const started = performance.now();
  if (args['raw-batched']) {
    // The same, its acks of one event-loop turn sent as one `multiple` ack when they are contiguous.
    let pending: amqp.ConsumeMessage[] = [];
    let lastAcked = 0;
    const flush = (): void => {
      const batch = pending.sort((a, b) => a.fields.deliveryTag - b.fields.deliveryTag);
      pending = [];
      const last = batch.at(-1);
      if (last === undefined) return;
      if (last.fields.deliveryTag - lastAcked === batch.length) channel.ack(last, true);
      else for (const m of batch) channel.ack(m);
      lastAcked = Math.max(lastAcked, last.fields.deliveryTag);
    };
    await channel.consume(`${prefix}.cmd.${PlaceOrder.type}`, (message) => {
      if (message === null) return;
      const envelope = JSON.parse(message.content.toString()) as { payload: { amount: number } };
      if (envelope.payload.amount <= 0) throw new Error('unreachable');
      if (pending.length === 0) setImmediate(flush);
      pending.push(message);
      if (++count === N) setImmediate(done);
    });
  } else if (args.raw) {
    // The raw consumer of bench/rabbitmq.ts, on Harrier's queue.
    await channel.consume(`${prefix}.cmd.${PlaceOrder.type}`, (message) => {
      if (message === null) return;
      const envelope = JSON.parse(message.content.toString()) as { payload: { amount: number } };
      if (envelope.payload.amount <= 0) throw new Error('unreachable');
      channel.ack(message);
      if (++count === N) done();
    });
  } else {
    await bus.start();
  }
  await all;
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  const writesPerMessage = (socketWrites - writes) / N;
  const { profile } = await post<{ profile: Profiler.Profile }>(session, 'Profiler.stop');
  session.disconnect();
  writeFileSync(args.out, JSON.stringify(profile));
  await bus.stop();
  const cleaner = await connection.createChannel();
  const topology = harrierTopology(prefix);
  for (const q of topology.queues) await cleaner.deleteQueue(q);
  for (const e of topology.exchanges) await cleaner.deleteExchange(e);
  await connection.close();
  // Self time by function and by file.
  const dt = new Map<number, number>();
  const { samples = [], timeDeltas = [] } = profile;
  samples.forEach((id, i) => dt.set(id, (dt.get(id) ?? 0) + (timeDeltas[i] ?? 0)));
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  for (const node of profile.nodes) {
    const self = dt.get(node.id) ?? 0;
    total += self;
    const url = node.callFrame.url.replace(/^.*\/(node_modules\/[^/]+|\.bench\/src\/[^/]+|node:[^/]+)/, '$1');
    const where = url === '' ? '(native)' : url.replace(/^file:\/\/.*\.bench\//, '');
    byFn.set(
      `${node.callFrame.functionName || '(anon)'} ${where}:${node.callFrame.lineNumber + 1}`,
      (byFn.get(`${node.callFrame.functionName || '(anon)'} ${where}:${node.callFrame.lineNumber + 1}`) ??
        0) + self,
    );
    const file = where.split('/').slice(0, 3).join('/');
    byFile.set(file, (byFile.get(file) ?? 0) + self);
  }
  console.log(
    `N=${N} C=${C}: ${((N / ms) * 1000).toFixed(0)} msg/s, ${((used.user + used.system) / N).toFixed(1)} us CPU/msg, ${writesPerMessage.toFixed(2)} socket writes/msg`,
  );
  const top = (m: Map<string, number>, k: number): string[][] =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, us]) => [name, `${((us / total) * 100).toFixed(1)}%`, (us / N).toFixed(2)]);
  console.log(table(['file', 'self', 'us/msg'], top(byFile, 25)));
  console.log(table(['function', 'self', 'us/msg'], top(byFn, 40)));
}

await main();
