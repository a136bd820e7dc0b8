/**
 * Where the time of Harrier's RabbitMQ produce goes: raw amqplib publishes into the topology Harrier's
 * broker declares, adding one of Harrier's choices at a time, beside the broker and `bus.send`.
 *
 * Every row publishes N persistent messages from C concurrent callers, each awaiting its confirm,
 * into the queue of a command type that `RabbitMqBroker.register` declared under a fresh prefix (a
 * quorum queue unless `--queue-type classic`); the body is the envelope Harrier encodes, built
 * before the timing for the raw rows:
 *
 * - raw, to the queue: the default exchange, routing key = the queue (what bench/rabbitmq.ts's raw
 *   side does).
 * - raw, to the queue + Harrier's properties + mandatory: the same with the `messageId`, `type` and
 *   `timestamp` properties and `mandatory`, no header: what the broker sends for a command now.
 * - raw, to the queue + the previous headers + mandatory: the same with the `x-harrier-*` headers
 *   and the publish token header every message carried before (id, kind, type).
 * - raw, through Harrier's exchanges: into `<prefix>.route` under the command's routing key, which
 *   goes on through `<prefix>.commands` and the type's exchange to the queue; no headers.
 * - raw, through Harrier's exchanges + headers + mandatory: all the previous version put on the wire
 *   (the route a retry or a delay expiry still takes, with its headers).
 * - raw, into `<prefix>.commands` / into the type's exchange `<prefix>.cmd.<type>`, + headers +
 *   mandatory: the same key one or two exchanges further on (what skipping hops would save); and
 *   into a `direct` exchange bound to the queue by the same key (what a topic match costs).
 * - Harrier `broker.publish`: the broker's publish of messages prepared before the timing.
 * - Harrier `bus.send`: validation, id, encoding and the broker's publish, as an application calls it.
 *
 * Besides msg/s: CPU per message of this process and of the RabbitMQ server (when on this machine),
 * and the channels this process opened per 1,000 messages. Rows alternate within each round.
 *
 * Run: `npm run bench:rabbitmq-produce-parts -- --n 20000 --rounds 3 --concurrency 64`; `--only`
 * takes a comma-separated list of rows (queue, queue+props, queue+headers, exchanges, ...).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { prepareMessage, type OutgoingMessage } from '../src/extend.js';
import { createBus, silentLogger } from '../src/index.js';
import { RabbitMqBroker } from '../src/rabbitmq/index.js';
import { headersOf } from '../src/rabbitmq/message-headers.js';
import { RabbitMqNames } from '../src/rabbitmq/rabbitmq-names.js';
import { payloadOf, PlaceOrder, serverCpuUs, serverPid } from './rabbitmq-support.js';
import { drive, fmtRate, median, table } from './support.js';

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
    'queue-type': { type: 'string', default: 'quorum' },
    only: { type: 'string', default: '' },
  },
  strict: true,
});
const N = Number(args.n);
const ROUNDS = Number(args.rounds);
const C = Number(args.concurrency);
const QUEUE_TYPE = args['queue-type'] === 'classic' ? 'classic' : 'quorum';
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const RUN_PREFIX = `harrier-parts-${randomBytes(4).toString('hex')}`;

const SERVER_PID = serverPid(RABBITMQ_URL);

/** Channels opened by any amqplib connection of this process (the prototype is patched below). */
let channelsOpened = 0;

interface Sample {
  readonly rate: number;
  readonly cpuUs: number;
  readonly serverUs: number;
  readonly channelsPer1000: number;
}

type Variant =
  | 'queue'
  | 'queue+mandatory'
  | 'queue+ids'
  | 'queue+props'
  | 'queue+headers'
  | 'exchanges'
  | 'exchanges+headers'
  | 'commands+headers'
  | 'type+headers'
  | 'direct+headers'
  | 'broker.publish'
  | 'bus.send';
const ALL_VARIANTS: readonly Variant[] = [
  'queue',
  'queue+mandatory',
  'queue+ids',
  'queue+props',
  'queue+headers',
  'exchanges',
  'exchanges+headers',
  'commands+headers',
  'type+headers',
  'direct+headers',
  'broker.publish',
  'bus.send',
];
const VARIANTS: readonly Variant[] =
  args.only === '' ? ALL_VARIANTS : ALL_VARIANTS.filter((variant) => args.only.split(',').includes(variant));
const LABELS: Record<Variant, string> = {
  queue: 'raw, to the queue',
  'queue+mandatory': 'raw, to the queue + mandatory',
  'queue+ids': 'raw, to the queue + messageId and type (what the raw side of bench:rabbitmq sends)',
  'queue+props': "raw, to the queue + Harrier's properties (id, type, timestamp) + mandatory",
  'queue+headers': 'raw, to the queue + the previous headers + mandatory',
  exchanges: "raw, through Harrier's exchanges",
  'exchanges+headers': "raw, through Harrier's exchanges + headers + mandatory",
  'commands+headers': 'raw, into <prefix>.commands (2 hops) + headers + mandatory',
  'type+headers': "raw, into the type's exchange (1 hop) + headers + mandatory",
  'direct+headers': 'raw, into a direct exchange bound to the queue by the key (1 hop) + headers + mandatory',
  'broker.publish': 'Harrier broker.publish (prepared before)',
  'bus.send': 'Harrier bus.send',
};

let admin: amqp.ChannelModel;

async function run(variant: Variant, n: number, tag: string): Promise<Sample> {
  const prefix = `${RUN_PREFIX}-${tag}`;
  const names = new RabbitMqNames(prefix);
  const queue = names.commandType(PlaceOrder.type);
  const broker = new RabbitMqBroker({
    connection: RABBITMQ_URL,
    prefix,
    queueType: QUEUE_TYPE,
    logger: silentLogger,
  });
  const bus = createBus({ endpoint: 'bench-sender', broker, logger: silentLogger });
  const connection = await amqp.connect(RABBITMQ_URL);
  connection.on('error', () => undefined);
  try {
    await broker.register('bench', [
      { handler: 'PlaceOrderHandler', kind: 'command', types: [PlaceOrder.type] },
    ]);
    const now = Date.now();
    const prepared: OutgoingMessage[] = [];
    for (let i = 0; i < n; i++) prepared.push(prepareMessage(PlaceOrder, payloadOf(i), {}, { now }).outgoing);
    const bodies = prepared.map((m) => Buffer.from(m.body, 'utf8'));
    const channel = await connection.createConfirmChannel();
    const direct = `${prefix}.bench-direct`;
    if (variant === 'direct+headers') {
      await channel.assertExchange(direct, 'direct', { durable: true });
      await channel.bindQueue(queue, direct, names.commandKey(PlaceOrder.type, undefined));
    }
    let token = 0;
    const publishRaw = (
      i: number,
      exchange: string,
      key: string,
      harrierHeaders: boolean,
      properties = false,
      extra: amqp.Options.Publish = {},
    ): Promise<void> => {
      const m = prepared[i];
      const body = bodies[i];
      if (m === undefined || body === undefined) throw new Error('no message');
      const options: amqp.Options.Publish = properties
        ? {
            persistent: true,
            messageId: m.id,
            type: m.type,
            timestamp: Math.floor(now / 1000),
            mandatory: true,
          }
        : harrierHeaders
          ? {
              persistent: true,
              messageId: m.id,
              timestamp: Math.floor(now / 1000),
              mandatory: true,
              headers: {
                'x-harrier-id': m.id,
                'x-harrier-kind': m.kind,
                'x-harrier-type': m.type,
                ...headersOf({
                  messageId: m.id,
                  kind: m.kind,
                  type: m.type,
                  partitionKey: undefined,
                  ordered: false,
                  failures: 0,
                  ends: 0,
                  history: [],
                  pendingDeadLetter: undefined,
                  replayOf: undefined,
                  notBefore: undefined,
                }),
                'x-harrier-publish': String(++token),
              },
            }
          : { persistent: true, ...extra };
      return new Promise<void>((resolve, reject) => {
        channel.publish(exchange, key, body, options, (error: unknown) => {
          if (error === null || error === undefined) resolve();
          else reject(new Error('nacked'));
        });
      });
    };
    const call: (i: number) => Promise<unknown> = {
      queue: (i: number) => publishRaw(i, '', queue, false),
      'queue+mandatory': (i: number) => publishRaw(i, '', queue, false, false, { mandatory: true }),
      'queue+ids': (i: number) =>
        publishRaw(i, '', queue, false, false, {
          messageId: prepared[i]?.id ?? '',
          type: PlaceOrder.type,
          contentType: 'application/json',
        }),
      'queue+props': (i: number) => publishRaw(i, '', queue, false, true),
      'queue+headers': (i: number) => publishRaw(i, '', queue, true),
      exchanges: (i: number) =>
        publishRaw(i, names.route, names.commandKey(PlaceOrder.type, undefined), false),
      'exchanges+headers': (i: number) =>
        publishRaw(i, names.route, names.commandKey(PlaceOrder.type, undefined), true),
      'commands+headers': (i: number) =>
        publishRaw(i, names.commands, names.commandKey(PlaceOrder.type, undefined), true),
      'type+headers': (i: number) => publishRaw(i, queue, names.commandKey(PlaceOrder.type, undefined), true),
      'direct+headers': (i: number) =>
        publishRaw(i, direct, names.commandKey(PlaceOrder.type, undefined), true),
      'broker.publish': (i: number) => broker.publish(prepared[i] as OutgoingMessage),
      'bus.send': (i: number) => bus.send(PlaceOrder, payloadOf(i)),
    }[variant];
    // The broker's connection and confirm channel opened before the timing, as the raw channel is.
    if (variant === 'broker.publish' || variant === 'bus.send') await call(0);
    const from = variant === 'broker.publish' || variant === 'bus.send' ? 1 : 0;
    const channels = channelsOpened;
    const cpu = process.cpuUsage();
    const server = serverCpuUs(SERVER_PID);
    const started = performance.now();
    await drive(from, n - from, C, call);
    const ms = performance.now() - started;
    const used = process.cpuUsage(cpu);
    const count = n - from;
    return {
      rate: count / (ms / 1000),
      cpuUs: (used.user + used.system) / count,
      serverUs: (serverCpuUs(SERVER_PID) - server) / count,
      channelsPer1000: ((channelsOpened - channels) / count) * 1000,
    };
  } finally {
    await bus.stop({ closeBroker: false });
    await broker.close();
    await connection.close();
    const remove = async (what: (ch: amqp.Channel) => Promise<unknown>): Promise<void> => {
      const ch = await admin.createChannel();
      ch.on('error', () => undefined);
      await what(ch)
        .then(() => ch.close())
        .catch(() => undefined);
    };
    for (const q of [queue, `${prefix}.registry.bench`, `${prefix}.registry`])
      await remove((ch) => ch.deleteQueue(q));
    for (const e of [names.route, names.commands, names.events, names.delay, queue, `${prefix}.bench-direct`])
      await remove((ch) => ch.deleteExchange(e));
  }
}

async function main(): Promise<void> {
  admin = await amqp.connect(RABBITMQ_URL);
  admin.on('error', () => undefined);
  const model = Object.getPrototypeOf(admin) as {
    createChannel: (...a: unknown[]) => Promise<unknown>;
    createConfirmChannel: (...a: unknown[]) => Promise<unknown>;
  };
  for (const method of ['createChannel', 'createConfirmChannel'] as const) {
    const original = model[method];
    model[method] = function (this: unknown, ...a: unknown[]) {
      channelsOpened++;
      return original.apply(this, a);
    };
  }
  const version = admin.connection.serverProperties.version;
  console.log(
    `RabbitMQ produce parts — ${new Date().toISOString()}, Node ${process.version}, ${cpus()[0]?.model ?? '?'}, ${cpus().length} vCPUs, RabbitMQ ${version}; N = ${N}, C = ${C}, ${QUEUE_TYPE} queues, ${ROUNDS} rounds`,
  );
  for (const v of VARIANTS) await run(v, Math.min(N, 2000), `warm-${v.replace(/[^a-z]/g, '')}`);
  const samples = new Map<Variant, Sample[]>(VARIANTS.map((v) => [v, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
    for (const v of order) samples.get(v)?.push(await run(v, N, `r${round}-${v.replace(/[^a-z]/g, '')}`));
  }
  await admin.close();
  const base = median((samples.get('queue') ?? []).map((s) => s.rate));
  console.log(
    table(
      [
        'publish',
        'msg/s',
        'rounds',
        'x raw to queue',
        'Node CPU us/msg',
        'server CPU us/msg',
        'channels/1000 msg',
      ],
      VARIANTS.map((v) => {
        const s = samples.get(v) ?? [];
        const rate = median(s.map((x) => x.rate));
        return [
          LABELS[v],
          fmtRate(rate),
          s.map((x) => fmtRate(x.rate)).join(' / '),
          `${(rate / base).toFixed(3)}x`,
          median(s.map((x) => x.cpuUs)).toFixed(1),
          median(s.map((x) => x.serverUs)).toFixed(1),
          median(s.map((x) => x.channelsPer1000)).toFixed(2),
        ];
      }),
    ),
  );
}

await main();
