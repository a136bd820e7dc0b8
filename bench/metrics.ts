/**
 * What `harrierMetrics()` costs, in one run, side by side:
 *
 * 1. Per handler call, the hooks alone (`process(info)` + `end(handled)`, no handler), in ns per call
 *    (median of {@link ROUNDS} rounds of {@link CALLS} calls after a tenth as many to warm up; one
 *    call site serves every set-up, so it is polymorphic and slower than a bus's own): no telemetry; `harrierMetrics()` with
 *    no SDK registered (the global no-op meter, which the check recognises); the same hooks on a
 *    meter the check does not recognise but whose instruments are the API's no-ops (what every call
 *    would cost without the check: the attribute object is built and handed to a no-op); and with the
 *    SDK's `MeterProvider` and a reader (the cost when on).
 * 2. In-memory `send` -> handle -> ack throughput (messages per second, median of {@link ROUNDS}
 *    rounds of N after a warm-up, one producer awaiting each send, a fresh bus per round) with the
 *    same four set-ups.
 *
 * Run: `npm run bench:metrics` (compiles src/ and bench/ into .bench/ first). Set BENCH_N to change N
 * (default 20000).
 */
import 'reflect-metadata';
import { performance } from 'node:perf_hooks';
import { setImmediate as macrotask } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createNoopMeter, type MeterProvider } from '@opentelemetry/api';
import { MeterProvider as SdkMeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { z } from 'zod';
import {
  CommandHandler,
  createBus,
  defineCommand,
  silentLogger,
  type HandlesCommand,
  type MessageTelemetry,
  type PayloadOf,
} from '../src/index.js';
import { harrierMetrics } from '../src/telemetry/index.js';
import { Counter, fmtRate, median, table } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const WARM_UP = 2_000;
const ROUNDS = 5;
const CALLS = 200_000;
const RUN_TIMEOUT_MS = 60_000;

// A full GC between runs needs --expose-gc, which the npm script does not pass: switched on here.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

class QuietReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/** A provider whose meter is not the API's no-op one, while its instruments are: no check can skip them. */
const unrecognisedNoop: MeterProvider = { getMeter: () => Object.create(createNoopMeter()) as never };

interface Setup {
  readonly name: string;
  telemetry(): MessageTelemetry | undefined;
}

const setups: readonly Setup[] = [
  { name: 'no telemetry', telemetry: () => undefined },
  { name: 'harrierMetrics(), no SDK', telemetry: () => harrierMetrics() },
  {
    name: 'no-op instruments, check bypassed',
    telemetry: () => harrierMetrics({ meterProvider: unrecognisedNoop }),
  },
  {
    name: 'SDK MeterProvider + reader',
    telemetry: () =>
      harrierMetrics({ meterProvider: new SdkMeterProvider({ readers: [new QuietReader()] }) }),
  },
];

const PlaceOrder = defineCommand('bench.PlaceOrder', {
  schema: z.object({ orderId: z.string(), amount: z.number().int().positive() }),
});

@CommandHandler(PlaceOrder)
class PlaceOrderHandler implements HandlesCommand<typeof PlaceOrder> {
  handle(payload: PayloadOf<typeof PlaceOrder>): void {
    if (payload.amount < 0) throw new Error('unreachable');
  }
}

const info = {
  envelope: {
    v: 1,
    id: '0190a0b0-0000-7000-8000-000000000001',
    kind: 'command',
    type: 'bench.PlaceOrder',
    payload: { orderId: 'o-1', amount: 1 },
    meta: { correlationId: '0190a0b0-0000-7000-8000-000000000001', occurredAt: '', headers: {} },
  },
  handler: 'PlaceOrderHandler',
  handlerKind: 'command',
  endpoint: 'bench',
  attempt: 1,
  inProcess: false,
} as const;
const HANDLED = { kind: 'handled' } as const;

/** ns per `process` + `end` pair; NaN without telemetry (the pipeline then calls no hook). */
function hookCost(telemetry: MessageTelemetry | undefined): number {
  if (telemetry === undefined) return Number.NaN;
  for (let i = 0; i < CALLS / 10; i++) telemetry.process(info)?.end(HANDLED);
  const started = performance.now();
  for (let i = 0; i < CALLS; i++) telemetry.process(info)?.end(HANDLED);
  return ((performance.now() - started) * 1e6) / CALLS;
}

async function sendRate(telemetry: MessageTelemetry | undefined): Promise<number> {
  const handled = new Counter(RUN_TIMEOUT_MS);
  const bus = createBus({
    logger: silentLogger,
    handlers: [PlaceOrderHandler],
    hooks: {
      onHandled: () => {
        handled.hit();
      },
    },
    ...(telemetry !== undefined ? { telemetry } : {}),
  });
  await bus.start();
  try {
    const sendAll = async (count: number): Promise<void> => {
      const target = handled.count + count;
      for (let i = 0; i < count; i++) await bus.send(PlaceOrder, { orderId: `o-${i}`, amount: 1 });
      await handled.until(target);
    };
    await sendAll(WARM_UP);
    const started = performance.now();
    await sendAll(N);
    return N / ((performance.now() - started) / 1000);
  } finally {
    await bus.stop();
  }
}

const hooks = new Map<string, number[]>();
const rates = new Map<string, number[]>();
for (let round = 0; round < ROUNDS; round++) {
  // Interleaved, and each round starts at another set-up, so drift of the machine and the place in
  // a round touch every set-up alike; a full GC before each run, so none pays for another's garbage.
  for (let k = 0; k < setups.length; k++) {
    const setup = setups[(round + k) % setups.length] as Setup;
    await macrotask();
    gc();
    const telemetry = setup.telemetry();
    hooks.set(setup.name, [...(hooks.get(setup.name) ?? []), hookCost(telemetry)]);
    rates.set(setup.name, [...(rates.get(setup.name) ?? []), await sendRate(setup.telemetry())]);
  }
}

const baseRate = median(rates.get('no telemetry') ?? []);
console.log(`harrierMetrics cost: ${ROUNDS} rounds, ${CALLS.toLocaleString('en-US')} hook calls, N=${N}\n`);
console.log(
  table(
    ['set-up', 'process+end ns/call', 'send->ack msg/s', 'vs none'],
    setups.map(({ name }) => {
      const rate = median(rates.get(name) ?? []);
      return [
        name,
        name === 'no telemetry' ? '-' : median(hooks.get(name) ?? []).toFixed(1),
        fmtRate(rate),
        `${(((rate - baseRate) / baseRate) * 100).toFixed(1)}%`,
      ];
    }),
  ),
);
