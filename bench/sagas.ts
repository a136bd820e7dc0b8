/**
 * Saga steps per second on Redis next to a plain `@EventHandler` on the same messages, in one run.
 *
 * Both sides consume the same N `bench.ItemAdded` events (same type, same payloads, same order), on a
 * BullMqBroker with dispatcher concurrency {@link CONCURRENCY}; each run gets a fresh key prefix,
 * deleted afterwards. The events go round-robin over `instances` orders (event i is for order
 * `i mod instances`), so each order gets N / instances of them:
 *
 * - saga: `@StartedBy(ItemAdded, { correlate: 'orderId' })` on a RedisSagaStore. The step adds the
 *   item to its state (`items`, `total`), publishes `bench.OrderUpdated` for one event in
 *   {@link PUBLISH_EVERY}, and completes the instance on the order's last item. Every step is one
 *   load (HMGET) and one compare-and-set save (EVALSHA) of the store, besides the broker's calls.
 * - plain: an `@EventHandler(ItemAdded)` doing the same in process memory: it adds the item to a
 *   Map entry of the order and publishes `bench.OrderUpdated` for the same events.
 *
 * Nothing subscribes to OrderUpdated, on either side: its publish is the unit of work's (envelope,
 * route lookup), not a delivery.
 *
 * Each run: register the endpoint's subscription (a bus started and stopped, untimed), pre-fill the
 * queue with N events (`prepareMessage` + `publishBatch` in chunks of {@link CHUNK}, untimed), then
 * time from `bus.start()` until the `onHandled` hook has counted N. Rows alternate plain, saga, plain,
 * saga... for {@link ROUNDS} rounds after an untimed warm-up of each, so drift spreads over both.
 * Besides the ratio of the medians, the table shows the median of the paired ratios (each saga run
 * over the plain run just before it), which drift between rounds moves less.
 *
 * Every run is validated, so the bench cannot silently measure nothing: the saga run must leave every
 * instance completed with all its items and the right total at version N / instances; the plain run
 * must have seen every order's items; both must have published N / {@link PUBLISH_EVERY} OrderUpdated.
 *
 * Besides msg/s, the table shows the Redis commands this process sent per message in the timed part
 * (every ioredis client, BullMQ's included, counted in `Redis.prototype.sendCommand`: a Lua script
 * call counts once, a pipeline counts each of its commands), by name for the last round, the saga
 * store's calls per step (counted around the store), and CPU time per message of this process and of
 * the Redis server (`INFO cpu`, which only this bench should be using: hence a server of its own).
 * On a shared machine the CPU figures vary less than the rates.
 *
 * Run: `npm run bench:sagas` (compiles src/ and bench/ with tsc into .bench/, then runs `node
 * .bench/bench/sagas.js`). It starts a redis-server of its own on a free loopback port (no
 * persistence, in a temp dir) unless REDIS_URL is set. BENCH_N changes N (default 10000), BENCH_ROUNDS
 * the rounds (default 5). BENCH_ONLY=saga (or plain) runs one side alone, e.g. under `node --cpu-prof`.
 */
import 'reflect-metadata';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { z } from 'zod';
import {
  EventHandler,
  Saga,
  StartedBy,
  createBus,
  defineEvent,
  sagaStateOf,
  silentLogger,
  type HandlesEvent,
  type MessageContext,
  type PayloadOf,
  type SagaContext,
  type SagaInstance,
  type SagaListFilter,
  type SagaPage,
  type SagaPageOptions,
  type SagaStore,
  type SagaWrite,
} from '../src/index.js';
import { prepareMessage, type OutgoingMessage } from '../src/extend.js';
import { BullMqBroker, RedisSagaStore, describeRedisUrl } from '../src/redis/index.js';
import { startRedisServer, type LocalRedis } from '../test/helpers/local-redis.js';
import { Counter, benchPrefix, deleteKeys, fmtRate, infoField, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONCURRENCY = 16;
const CHUNK = 1_000;
/** Events of the untimed warm-up run of each side. */
const WARM_UP = Math.min(N, 2_000);
/** A run that has not finished by then has lost messages: fail loudly instead of hanging. */
const RUN_TIMEOUT_MS = 300_000;
const SAGA = 'bench.OrderSaga';
/** BENCH_ONLY=saga or plain runs that side alone, to profile it. */
const ONLY = ((): 'plain' | 'saga' | undefined => {
  const only = process.env.BENCH_ONLY;
  if (only === undefined || only === '') return undefined;
  if (only === 'plain' || only === 'saga') return only;
  throw new Error(`BENCH_ONLY must be "plain" or "saga", got "${only}"`);
})();
/** One event in this many makes its handler publish an OrderUpdated. */
const PUBLISH_EVERY = 10;
const ENDPOINT = 'bench';

/** The workloads: events per instance (N / events = instances). */
const SHAPES = [
  { label: '10 events per instance', eventsPerInstance: 10 },
  { label: '1 event per instance (create only)', eventsPerInstance: 1 },
] as const;

for (const [name, value] of [
  ['BENCH_N', N],
  ['BENCH_ROUNDS', ROUNDS],
] as const) {
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${name} must be a positive whole number, got "${process.env[name] ?? ''}"`);
  }
}

const ItemAdded = defineEvent('bench.ItemAdded', {
  schema: z.object({
    orderId: z.string(),
    seq: z.number().int(),
    amount: z.number().int().positive(),
    last: z.boolean(),
  }),
});
const OrderUpdated = defineEvent('bench.OrderUpdated', {
  schema: z.object({ orderId: z.string(), items: z.number().int(), total: z.number().int() }),
});
type Item = PayloadOf<typeof ItemAdded>;

/** Event `i` of a run over `instances` orders (N events in all). */
function itemOf(i: number, instances: number, n: number): Item {
  return { orderId: `o-${i % instances}`, seq: i, amount: 1 + (i % 7), last: i + instances >= n };
}

/** Whether the step for event `seq` publishes: one event in {@link PUBLISH_EVERY}, on both sides. */
function publishes(item: Item): boolean {
  return item.seq % PUBLISH_EVERY === PUBLISH_EVERY - 1;
}

const OrderState = z.object({ items: z.number().int().default(0), total: z.number().int().default(0) });
type OrderState = z.output<typeof OrderState>;

@Saga(SAGA, { state: OrderState })
class OrderSaga {
  @StartedBy(ItemAdded, { correlate: 'orderId' })
  add(payload: Item, ctx: SagaContext<OrderState>): void {
    ctx.state.items += 1;
    ctx.state.total += payload.amount;
    if (publishes(payload)) {
      ctx.publish(OrderUpdated, { orderId: payload.orderId, ...ctx.state });
      sagaPublished++;
    }
    if (payload.last) ctx.complete();
  }
}

/** What the plain handler keeps, per run. */
const plainOrders = new Map<string, OrderState>();
let plainPublished = 0;
/** Steps of the saga that published (a step re-run on a conflict would count twice: none expected). */
let sagaPublished = 0;

@EventHandler(ItemAdded)
class PlainItemHandler implements HandlesEvent<typeof ItemAdded> {
  handle(payload: Item, ctx: MessageContext<Item>): void {
    const state = plainOrders.get(payload.orderId) ?? { items: 0, total: 0 };
    state.items += 1;
    state.total += payload.amount;
    plainOrders.set(payload.orderId, state);
    if (publishes(payload)) {
      ctx.publish(OrderUpdated, { orderId: payload.orderId, ...state });
      plainPublished++;
    }
  }
}

/** The Redis saga store with a count of its calls (each one Redis round trip). */
class CountingSagaStore implements SagaStore {
  gets = 0;
  saves = 0;
  constructor(readonly inner: SagaStore) {}
  get(saga: string, id: string): Promise<SagaInstance | undefined> {
    this.gets++;
    return this.inner.get(saga, id);
  }
  save(write: SagaWrite, expectedVersion: number): Promise<SagaInstance> {
    this.saves++;
    return this.inner.save(write, expectedVersion);
  }
  list(filter?: SagaListFilter, page?: SagaPageOptions): Promise<SagaPage> {
    return this.inner.list(filter, page);
  }
  remove(saga: string, id: string): Promise<boolean> {
    return this.inner.remove(saga, id);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

type Side = 'plain' | 'saga';

interface Sample {
  readonly rate: number;
  /** Redis commands sent (all clients of this process) per handled message, timed part. */
  readonly commandsPerMessage: number;
  /** The same by command name. */
  readonly commands: ReadonlyMap<string, number>;
  /** Saga store calls per step (gets, saves); 0 for the plain side. */
  readonly getsPerStep: number;
  readonly savesPerStep: number;
  /** CPU time of this process per message, in microseconds. */
  readonly cpuUs: number;
  /** CPU time of the Redis server (user + sys) per message, in microseconds. */
  readonly redisCpuUs: number;
}

let redisUrl = '';
let admin: Redis;

/**
 * Commands sent by every ioredis client of this process (BullMQ's included), by name: counted in
 * `Redis.prototype.sendCommand`, so a command inside a Lua script is not counted, a script call is one.
 */
const sent = new Map<string, number>();
// Called below with the instance as `this`, as ioredis calls it.
// eslint-disable-next-line @typescript-eslint/unbound-method
const sendCommand = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function (this: Redis, ...args: Parameters<Redis['sendCommand']>) {
  const name = (args[0] as { name?: string }).name ?? '?';
  sent.set(name, (sent.get(name) ?? 0) + 1);
  return sendCommand.apply(this, args);
};
/** CPU seconds the Redis server has used (user + sys). */
async function redisCpuSeconds(): Promise<number> {
  return (await infoField(admin, 'used_cpu_user', 'cpu')) + (await infoField(admin, 'used_cpu_sys', 'cpu'));
}

const sentNow = (): Map<string, number> => new Map(sent);
function sentSince(before: Map<string, number>): Map<string, number> {
  const delta = new Map<string, number>();
  for (const [name, count] of sent) {
    const d = count - (before.get(name) ?? 0);
    if (d > 0) delta.set(name, d);
  }
  return delta;
}

function busFor(side: Side, prefix: string, store: SagaStore | undefined, onHandled?: () => void) {
  return createBus({
    endpoint: ENDPOINT,
    broker: new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger }),
    ...(side === 'plain' ? { handlers: [PlainItemHandler] } : { sagas: [OrderSaga] }),
    ...(store === undefined ? {} : { sagaStore: store }),
    concurrency: CONCURRENCY,
    logger: silentLogger,
    ...(onHandled === undefined ? {} : { hooks: { onHandled } }),
  });
}

/** Registers the endpoint's subscription as its `start()` does, from a bus started and stopped. */
async function register(side: Side, prefix: string): Promise<void> {
  const bus = busFor(
    side,
    prefix,
    side === 'saga' ? new RedisSagaStore({ connection: redisUrl, prefix }) : undefined,
  );
  await bus.start();
  await bus.stop();
}

async function prefill(prefix: string, n: number, instances: number): Promise<void> {
  const broker = new BullMqBroker({ connection: redisUrl, prefix, logger: silentLogger });
  try {
    for (let from = 0; from < n; from += CHUNK) {
      const now = Date.now();
      const messages: OutgoingMessage[] = [];
      for (let i = from; i < Math.min(n, from + CHUNK); i++) {
        messages.push(prepareMessage(ItemAdded, itemOf(i, instances, n), {}, { now }).outgoing);
      }
      await broker.publishBatch(messages);
    }
  } finally {
    await broker.close();
  }
}

/** The state every order must end in. */
function expectedOf(n: number, instances: number): Map<string, OrderState> {
  const expected = new Map<string, OrderState>();
  for (let i = 0; i < n; i++) {
    const item = itemOf(i, instances, n);
    const state = expected.get(item.orderId) ?? { items: 0, total: 0 };
    state.items += 1;
    state.total += item.amount;
    expected.set(item.orderId, state);
  }
  return expected;
}

async function validateSaga(store: SagaStore, expected: Map<string, OrderState>, n: number): Promise<void> {
  if (sagaPublished !== expectedPublishes(n)) {
    throw new Error(`Saga steps published ${sagaPublished} OrderUpdated, expected ${expectedPublishes(n)}`);
  }
  let seen = 0;
  let cursor: string | undefined;
  do {
    const page = await store.list(
      { saga: SAGA },
      { limit: 500, ...(cursor === undefined ? {} : { cursor }) },
    );
    for (const instance of page.instances) {
      seen++;
      const want = expected.get(instance.id);
      const got = sagaStateOf<OrderState>(instance);
      if (
        want === undefined ||
        instance.status !== 'completed' ||
        got.items !== want.items ||
        got.total !== want.total ||
        instance.version !== want.items
      ) {
        throw new Error(
          `Saga instance ${instance.id} ended as ${JSON.stringify({ status: instance.status, version: instance.version, ...got })}, expected completed with ${JSON.stringify(want)}`,
        );
      }
    }
    cursor = page.next;
  } while (cursor !== undefined);
  if (seen !== expected.size)
    throw new Error(`${seen} saga instances in the store, expected ${expected.size}`);
}

const expectedPublishes = (n: number): number => Math.floor(n / PUBLISH_EVERY);

function validatePlain(expected: Map<string, OrderState>, n: number): void {
  for (const [id, want] of expected) {
    const got = plainOrders.get(id);
    if (got?.items !== want.items || got.total !== want.total) {
      throw new Error(
        `Plain handler saw order ${id} as ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`,
      );
    }
  }
  if (plainOrders.size !== expected.size || plainPublished !== expectedPublishes(n)) {
    throw new Error(
      `Plain handler saw ${plainOrders.size} orders and published ${plainPublished} OrderUpdated, expected ${expected.size} and ${expectedPublishes(n)}`,
    );
  }
}

async function run(side: Side, n: number, eventsPerInstance: number): Promise<Sample> {
  const instances = Math.max(1, Math.floor(n / eventsPerInstance));
  const prefix = benchPrefix();
  const handled = new Counter(RUN_TIMEOUT_MS);
  const store =
    side === 'saga' ? new CountingSagaStore(new RedisSagaStore({ connection: redisUrl, prefix })) : undefined;
  plainOrders.clear();
  plainPublished = 0;
  sagaPublished = 0;
  const bus = busFor(side, prefix, store, () => {
    handled.hit();
  });
  try {
    await register(side, prefix);
    await prefill(prefix, n, instances);
    const commandsBefore = sentNow();
    const redisCpuBefore = await redisCpuSeconds();
    const cpu = process.cpuUsage();
    const started = performance.now();
    await bus.start();
    await handled.until(n);
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const redisCpu = (await redisCpuSeconds()) - redisCpuBefore;
    const commands = sentSince(commandsBefore);
    const expected = expectedOf(n, instances);
    if (store === undefined) validatePlain(expected, n);
    else await validateSaga(store.inner, expected, n);
    return {
      rate: n / seconds,
      commandsPerMessage: [...commands.values()].reduce((a, b) => a + b, 0) / n,
      commands: new Map([...commands].map(([name, count]) => [name, count / n])),
      getsPerStep: store === undefined ? 0 : store.gets / n,
      savesPerStep: store === undefined ? 0 : store.saves / n,
      cpuUs: (used.user + used.system) / n,
      redisCpuUs: (redisCpu * 1e6) / n,
    };
  } finally {
    await bus.stop();
    await deleteKeys(admin, prefix);
  }
}

/** A redis-server of the bench's own, or REDIS_URL. */
async function startRedis(): Promise<LocalRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, stop: () => undefined };
  return startRedisServer('harrier-bench-redis-');
}

async function main(): Promise<void> {
  const redis = await startRedis();
  redisUrl = redis.url;
  admin = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    const version = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown';
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    console.log(
      `Harrier saga benchmark — Node ${process.version} (${process.platform}/${process.arch}, ${cpu}, ${cpus().length} CPUs), Redis ${version} at ${describeRedisUrl(redisUrl)}${process.env.REDIS_URL ? '' : ' (started by the bench)'}`,
    );
    console.log(
      `N = ${N} events per run after a ${WARM_UP}-event warm-up of each side, concurrency ${CONCURRENCY}, rows alternate plain/saga, median of ${ROUNDS} rounds\n`,
    );
    const began = performance.now();
    if (ONLY !== undefined) {
      // One side alone, for a profile (`node --cpu-prof`): no table, no ratio.
      await run(ONLY, WARM_UP, 10);
      for (const shape of SHAPES) {
        for (let round = 0; round < ROUNDS; round++) {
          const sample = await run(ONLY, N, shape.eventsPerInstance);
          console.log(
            `${ONLY}, ${shape.label}: ${fmtRate(sample.rate)} msg/s, CPU us/msg node ${fmtRate(sample.cpuUs)}, Redis ${fmtRate(sample.redisCpuUs)}`,
          );
        }
      }
      return;
    }
    await run('plain', WARM_UP, 10);
    await run('saga', WARM_UP, 10);

    const summary: string[][] = [];
    const rounds: string[][] = [];
    const ratios: number[] = [];
    const breakdowns: {
      label: string;
      plain: ReadonlyMap<string, number> | undefined;
      saga: ReadonlyMap<string, number> | undefined;
    }[] = [];
    for (const shape of SHAPES) {
      const plain: Sample[] = [];
      const saga: Sample[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        plain.push(await run('plain', N, shape.eventsPerInstance));
        saga.push(await run('saga', N, shape.eventsPerInstance));
      }
      const p = median(plain.map((s) => s.rate));
      const s = median(saga.map((x) => x.rate));
      // Each saga run over the plain run just before it: drift between rounds cancels out.
      const paired = median(saga.map((x, i) => x.rate / (plain[i]?.rate ?? Number.NaN)));
      ratios.push(paired);
      summary.push([
        `${shape.label}, ${fmtRate(N / shape.eventsPerInstance)} instances`,
        fmtRate(p),
        fmtRate(s),
        `${(s / p).toFixed(2)}x`,
        `${paired.toFixed(2)}x`,
        median(plain.map((x) => x.commandsPerMessage)).toFixed(1),
        median(saga.map((x) => x.commandsPerMessage)).toFixed(1),
        `${median(saga.map((x) => x.getsPerStep)).toFixed(2)} + ${median(saga.map((x) => x.savesPerStep)).toFixed(2)}`,
        `${fmtRate(median(plain.map((x) => x.cpuUs)))} / ${fmtRate(median(saga.map((x) => x.cpuUs)))}`,
        `${fmtRate(median(plain.map((x) => x.redisCpuUs)))} / ${fmtRate(median(saga.map((x) => x.redisCpuUs)))}`,
      ]);
      breakdowns.push({ label: shape.label, plain: plain.at(-1)?.commands, saga: saga.at(-1)?.commands });
      rounds.push(
        [`plain, ${shape.label}`, ...plain.map((x) => fmtRate(x.rate))],
        [`saga,  ${shape.label}`, ...saga.map((x) => fmtRate(x.rate))],
        [`saga/plain`, ...saga.map((x, i) => `${(x.rate / (plain[i]?.rate ?? Number.NaN)).toFixed(2)}x`)],
      );
    }
    console.log(
      table(
        [
          'workload',
          'plain msg/s',
          'saga msg/s',
          'saga/plain',
          'median of paired',
          'plain cmds sent/msg',
          'saga cmds sent/msg',
          'store get + save /step',
          'node CPU us/msg plain / saga',
          'Redis CPU us/msg plain / saga',
        ],
        summary,
      ),
    );
    console.log('\nEvery round (msg/s; plain and saga alternate):');
    console.log(table(['run', ...Array.from({ length: ROUNDS }, (_, i) => `round ${i + 1}`)], rounds));
    for (const { label, plain, saga } of breakdowns) {
      const names = [...new Set([...(plain?.keys() ?? []), ...(saga?.keys() ?? [])])].sort();
      const body = names
        .map((name) => [name, plain?.get(name) ?? 0, saga?.get(name) ?? 0] as const)
        .filter(([, p, s]) => p >= 0.01 || s >= 0.01)
        .map(([name, p, s]) => [name, p.toFixed(2), s.toFixed(2), (s - p).toFixed(2)]);
      console.log(`\nRedis commands sent per message by name, ${label} (last round):`);
      console.log(table(['command', 'plain', 'saga', 'saga - plain'], body));
    }
    const worst = Math.min(...ratios);
    console.log(
      `\nTarget saga >= 0.5x plain: ${worst >= 0.5 ? 'met' : 'NOT met'} (lowest median of paired ratios ${worst.toFixed(2)}x). Every run validated: all instances completed with the expected state.`,
    );
    console.log(`Total ${((performance.now() - began) / 1000).toFixed(1)} s`);
  } finally {
    await admin.quit();
    redis.stop();
  }
}

await main();
