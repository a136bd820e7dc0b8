/**
 * What per-key ordering costs on Redis: one endpoint with {@link TYPES} command types, all ordered or
 * none, side by side in one run.
 *
 * Every command type has a queue; an endpoint with ordered command types adds one set of
 * `partitions` partition queues (BullMqBroker option, default 8) that all its ordered types share,
 * and every queue gets a BullMQ Worker with a blocking connection of its own in each process of the
 * endpoint. For each set-up this script measures, on a fresh key prefix:
 *
 * - queues and connections: the BullMQ queues the endpoint works, and the Redis connections whose
 *   name starts with the prefix (`CLIENT LIST`: Harrier's own are `<prefix>:harrier:<role>`, BullMQ's
 *   blocking ones `<prefix>:<queue name in base64>`), counted while the bus runs; beside them, what
 *   a layout with one partition set per ordered type would take (`types * (partitions + 1)` queues,
 *   and a connection each plus two), the cost that sharing the set per endpoint avoids;
 * - consume msg/s: N messages (over the types in turn and {@link KEYS} partition keys) are published
 *   in chunks of {@link CHUNK} once the endpoint has registered and before its bus starts; timed from
 *   `bus.start()` until the `onHandled` hook has counted N (median of {@link ROUNDS} rounds); and how
 *   long `bus.start()` itself took;
 * - Redis CPU per message during the consume (`INFO cpu`, user + sys of the server), and the commands
 *   per second Redis serves while the endpoint is idle for {@link IDLE_MS} ms (`INFO stats`, first
 *   round only): what the extra Workers cost when nothing happens.
 *
 * The handler returns at once and the dispatcher's concurrency is {@link CONCURRENCY}, so the figures
 * are the broker's cost, not the application's.
 *
 * A second table runs the shop app {@link STORY_RUNS} times on each broker: PlaceOrder then at once
 * CancelOrder for three orders, both keyed by order id, their events feeding a status read model,
 * with PlaceOrder's handler returning at once or after {@link SLOW_MS} ms, with and without `ordered`
 * on the two commands. It counts the runs whose read model is wrong (an order left "placed") on
 * Redis, on the in-memory broker in FIFO order, and on the in-memory broker shuffled (seeds 1 to
 * {@link STORY_RUNS}), as `createTestBus` delivers. With `ordered`, every count must be 0.
 *
 * Run: `npm run bench:ordering` (it compiles src/ and bench/ with tsc into .bench/, then runs `node
 * .bench/bench/ordering.js`) against `REDIS_URL` (default redis://127.0.0.1:6379). BENCH_N changes N
 * (default 10000), BENCH_PARTITIONS the partition counts of the ordered rows (default "8,1"). Use a
 * Redis nothing else is using: its CPU and command counters are server-wide.
 */
import 'reflect-metadata';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import {
  CommandHandler,
  InMemoryBroker,
  On,
  Projection,
  createBus,
  defineCommand,
  defineEvent,
  silentLogger,
  type CommandDefinition,
  type DeliveryOrder,
  type HandlerClass,
  type MessageBroker,
  type MessageContext,
  type PayloadOf,
} from '../src/index.js';
import { prepareMessage, type OutgoingMessage, type SubscriptionSpec } from '../src/extend.js';
import { BullMqBroker, describeRedisUrl } from '../src/redis/index.js';
import {
  adminClient,
  benchPrefix,
  connectAdmin,
  Counter,
  deleteKeys,
  fmtRate,
  infoField,
  median,
  redisCpuUs,
  table,
} from './support.js';

const N = Number(process.env.BENCH_N ?? 10_000);
const TYPES = 20;
const KEYS = 200;
const CONCURRENCY = 16;
const CHUNK = 1_000;
const ROUNDS = 5;
const IDLE_MS = 10_000;
const PARTITIONS = (process.env.BENCH_PARTITIONS ?? '8,1').split(',').map(Number);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const STORY_RUNS = 4;
const SLOW_MS = 300;
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 300_000;

if (!Number.isInteger(N) || N < 1) {
  throw new Error(`BENCH_N must be a positive whole number, got "${process.env.BENCH_N ?? ''}"`);
}
if (PARTITIONS.some((p) => !Number.isInteger(p) || p < 1)) {
  throw new Error(
    `BENCH_PARTITIONS must be positive whole numbers separated by commas, got "${process.env.BENCH_PARTITIONS ?? ''}"`,
  );
}

/** One endpoint set-up: all types ordered over `partitions` partitions, or none ordered. */
interface Setup {
  readonly label: string;
  readonly ordered: boolean;
  readonly partitions: number;
}

interface Sample {
  readonly queues: number;
  /** The queues of a layout with one partition set per ordered command type. */
  readonly perTypeQueues: number;
  readonly connections: number;
  readonly consume: number;
  /** How long `bus.start()` took, in ms (registration, and a Worker for every queue). */
  readonly startMs: number;
  /** Redis server CPU (user + sys) per consumed message, in microseconds. */
  readonly redisCpuUs: number;
  /** Commands per second Redis served while the endpoint was idle (first round only). */
  readonly idleCommands: number | undefined;
}

const schema = z.object({ orderId: z.string(), amount: z.number().int().positive() });

/**
 * The definitions and handlers of one set-up: {@link TYPES} command types, each with its handler,
 * and the subscriptions `bus.start()` registers for them.
 */
function application(ordered: boolean): {
  definitions: CommandDefinition<string, typeof schema>[];
  handlers: HandlerClass[];
  subscriptions: SubscriptionSpec[];
} {
  const definitions = Array.from({ length: TYPES }, (_, t) =>
    defineCommand(`bench.Command${t}`, { schema, partitionKey: 'orderId', ordered }),
  );
  const handlers = definitions.map((definition, t) => {
    @CommandHandler(definition, { name: `Command${t}Handler` })
    class Handler {
      handle(): void {}
    }
    return Handler;
  });
  const subscriptions = definitions.map(({ type }, t): SubscriptionSpec => ({
    handler: `Command${t}Handler`,
    kind: 'command',
    types: [type],
    orderedTypes: ordered ? [type] : [],
  }));
  return { definitions, handlers, subscriptions };
}

const newPrefix = (): string => benchPrefix();

/** The bench's own connection: checks Redis, counts connections, reads INFO, deletes each run's keys. */
const admin = adminClient(REDIS_URL);

/** Connections whose client name starts with `prefix`. */
async function connectionsOf(prefix: string): Promise<number> {
  const list = await admin.client('LIST');
  return String(list)
    .split('\n')
    .filter((line) => / name=(\S*)/.exec(line)?.[1]?.startsWith(`${prefix}:`) === true).length;
}

/** A numeric field of an INFO section. */
const info = (section: string, field: string): Promise<number> => infoField(admin, field, section);

/** Publishes N messages over the types in turn and {@link KEYS} keys, as `bus.send` would encode them. */
async function produce(broker: BullMqBroker, definitions: readonly CommandDefinition[]): Promise<void> {
  for (let from = 0; from < N; from += CHUNK) {
    const now = Date.now();
    const messages: OutgoingMessage[] = [];
    for (let i = from; i < Math.min(N, from + CHUNK); i++) {
      const definition = definitions[i % TYPES] as CommandDefinition;
      // Queued before the endpoint's bus starts (to time a full backlog), after it registered: an
      // ordered command goes to the partition queues of the endpoint that registered its type.
      messages.push(
        prepareMessage(definition, { orderId: `o-${i % KEYS}`, amount: 1 + (i % 10) }, {}, { now }).outgoing,
      );
    }
    await broker.publishBatch(messages);
  }
}

async function run(setup: Setup, measureIdle: boolean): Promise<Sample> {
  const prefix = newPrefix();
  const { definitions, handlers, subscriptions } = application(setup.ordered);
  const handled = new Counter(RUN_TIMEOUT_MS);
  const broker = new BullMqBroker({
    connection: REDIS_URL,
    prefix,
    partitions: setup.partitions,
    logger: silentLogger,
  });
  const bus = createBus({
    endpoint: 'bench',
    broker,
    handlers,
    concurrency: CONCURRENCY,
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
  });
  try {
    // What bus.start() registers, registered ahead so that the backlog is queued where it will be.
    await broker.register('bench', subscriptions);
    await produce(broker, definitions);
    const cpuBefore = await redisCpuUs(admin);
    const started = performance.now();
    await bus.start();
    const startMs = performance.now() - started;
    await handled.until(N);
    const consume = N / ((performance.now() - started) / 1000);
    const redisCpuPerMessage = ((await redisCpuUs(admin)) - cpuBefore) / N;
    const queues = broker.queuesOf('bench').length;
    const perTypeQueues = setup.ordered ? TYPES * (setup.partitions + 1) : TYPES;
    const connections = await connectionsOf(prefix);
    let idleCommands: number | undefined;
    if (measureIdle) {
      const before = await info('stats', 'total_commands_processed');
      const idleStarted = performance.now();
      await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
      const after = await info('stats', 'total_commands_processed');
      // Minus the two INFO calls of this measurement.
      idleCommands = (after - before - 2) / ((performance.now() - idleStarted) / 1000);
    }
    return {
      queues,
      perTypeQueues,
      connections,
      consume,
      startMs,
      redisCpuUs: redisCpuPerMessage,
      idleCommands,
    };
  } finally {
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
}

/** PlaceOrder then CancelOrder per order; resolves to whether the status read model came out wrong. */
async function placeThenCancel(
  broker: MessageBroker,
  ordered: boolean,
  slow: boolean,
  cleanup: () => Promise<void>,
): Promise<boolean> {
  const key = z.object({ orderId: z.string() });
  const PlaceOrder = defineCommand('story.PlaceOrder', { schema: key, partitionKey: 'orderId', ordered });
  const CancelOrder = defineCommand('story.CancelOrder', { schema: key, partitionKey: 'orderId', ordered });
  const event = { schema: key, partitionKey: 'orderId', ordered: true } as const;
  const OrderPlaced = defineEvent('story.OrderPlaced', event);
  const OrderCancelled = defineEvent('story.OrderCancelled', event);
  const statuses = new Map<string, string>();

  @CommandHandler(PlaceOrder)
  class PlaceOrderHandler {
    async handle(command: PayloadOf<typeof PlaceOrder>, ctx: MessageContext): Promise<void> {
      if (slow) await new Promise((resolve) => setTimeout(resolve, SLOW_MS));
      ctx.publish(OrderPlaced, command);
    }
  }
  @CommandHandler(CancelOrder)
  class CancelOrderHandler {
    handle(command: PayloadOf<typeof CancelOrder>, ctx: MessageContext): void {
      ctx.publish(OrderCancelled, command);
    }
  }
  @Projection('StoryStatus')
  class StatusProjection {
    @On(OrderPlaced)
    placed(e: PayloadOf<typeof OrderPlaced>): void {
      statuses.set(e.orderId, 'placed');
    }
    @On(OrderCancelled)
    cancelled(e: PayloadOf<typeof OrderCancelled>): void {
      statuses.set(e.orderId, 'cancelled');
    }
  }

  const orders = ['o-1', 'o-2', 'o-3'];
  // Two commands and two events per order.
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = createBus({
    endpoint: 'story',
    broker,
    handlers: [PlaceOrderHandler, CancelOrderHandler, StatusProjection],
    logger: silentLogger,
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
  });
  try {
    await bus.start();
    for (const orderId of orders) {
      await bus.send(PlaceOrder, { orderId });
      await bus.send(CancelOrder, { orderId });
    }
    await handled.until(orders.length * 4);
    return orders.some((orderId) => statuses.get(orderId) !== 'cancelled');
  } finally {
    await bus.stop();
    await cleanup();
  }
}

/** Wrong read models of the PlaceOrder-then-CancelOrder app in {@link STORY_RUNS} runs per broker. */
async function story(): Promise<string[][]> {
  const rows: string[][] = [];
  for (const slow of [false, true]) {
    for (const ordered of [false, true]) {
      const wrong = { redis: 0, fifo: 0, shuffled: 0 };
      for (let run = 1; run <= STORY_RUNS; run++) {
        const prefix = newPrefix();
        const redis = new BullMqBroker({ connection: REDIS_URL, prefix, logger: silentLogger });
        if (await placeThenCancel(redis, ordered, slow, () => deleteKeys(admin, prefix))) wrong.redis++;
        for (const deliveryOrder of ['fifo', 'shuffled'] as const satisfies DeliveryOrder[]) {
          const memory = new InMemoryBroker({ deliveryOrder, seed: run });
          if (await placeThenCancel(memory, ordered, slow, () => Promise.resolve())) wrong[deliveryOrder]++;
        }
      }
      rows.push([
        slow ? `takes ${SLOW_MS} ms` : 'returns at once',
        ordered ? 'ordered' : 'not ordered',
        `${wrong.redis} of ${STORY_RUNS}`,
        `${wrong.fifo} of ${STORY_RUNS}`,
        `${wrong.shuffled} of ${STORY_RUNS}`,
      ]);
    }
  }
  return rows;
}

async function main(): Promise<void> {
  if (!(await connectAdmin(admin, REDIS_URL))) return;
  const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown';
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Harrier ordering benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu}, ${cpus().length} CPUs), Redis ${redisVersion} at ${describeRedisUrl(REDIS_URL)}`,
  );
  console.log(
    `One endpoint, ${TYPES} command types, N = ${N} messages over the types in turn and ${KEYS} keys, concurrency ${CONCURRENCY}, median of ${ROUNDS} rounds\n`,
  );

  const setups: Setup[] = [
    { label: `${TYPES} unordered types`, ordered: false, partitions: 8 },
    ...PARTITIONS.map((partitions) => ({
      label: `${TYPES} ordered types, partitions ${partitions}`,
      ordered: true,
      partitions,
    })),
  ];
  const began = performance.now();
  // Untimed warm-up, so round 1 does not time the JIT.
  for (const setup of setups) await run(setup, false);
  const samples = new Map<Setup, Sample[]>(setups.map((s) => [s, []]));
  // Rounds alternate the set-ups so drift (JIT, Redis memory, other load) spreads over all of them.
  for (let round = 0; round < ROUNDS; round++) {
    for (const setup of setups) samples.get(setup)?.push(await run(setup, round === 0));
  }

  const base = median((samples.get(setups[0] as Setup) ?? []).map((s) => s.consume));
  const body = setups.map((setup) => {
    const list = samples.get(setup) ?? [];
    const consume = median(list.map((s) => s.consume));
    const queues = list[0]?.queues ?? Number.NaN;
    const connections = median(list.map((s) => s.connections));
    const perTypeQueues = list[0]?.perTypeQueues ?? Number.NaN;
    return [
      setup.label,
      String(queues),
      String(perTypeQueues),
      String(connections),
      // One blocking connection per queue, the rest (producer, workers' shared one) the same.
      String(connections - queues + perTypeQueues),
      fmtRate(consume),
      `${(consume / base).toFixed(2)}x`,
      fmtRate(median(list.map((s) => s.startMs))),
      median(list.map((s) => s.redisCpuUs)).toFixed(1),
      fmtRate(Math.max(0, list[0]?.idleCommands ?? Number.NaN)),
    ];
  });
  console.log(
    table(
      [
        'endpoint',
        'queues',
        'one set per type: queues',
        'Redis connections',
        'one set per type: connections',
        'consume msg/s',
        'vs unordered',
        'bus.start() ms',
        'Redis CPU us/msg',
        'idle Redis cmd/s',
      ],
      body,
    ),
  );
  console.log('\nEvery round (consume msg/s):');
  console.log(
    table(
      ['endpoint', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)],
      setups.map((setup) => [setup.label, ...(samples.get(setup) ?? []).map((s) => fmtRate(s.consume))]),
    ),
  );
  console.log(
    '\nConnections are per process of the endpoint; the producer connection is included (the bench publishes through the same broker).',
  );
  console.log(
    "'one set per type' columns: what one partition set per ordered command type would take, instead of one per endpoint.",
  );
  console.log(
    `\nPlaceOrder then at once CancelOrder for 3 orders (one endpoint, both keyed by order id): runs of ${STORY_RUNS} with a wrong read model`,
  );
  console.log(
    table(
      ['PlaceOrder handler', 'commands', 'Redis', 'in-memory fifo', 'in-memory shuffled (createTestBus)'],
      await story(),
    ),
  );
  console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
  await admin.quit();
}

await main();
