import { InMemoryBroker, type DeliveryOrder } from '../broker/in-memory-broker.js';
import type { OutgoingMessage } from '../broker/message-broker.js';
import { isSeed } from '../broker/seeded-random.js';
import { dispatcherOf, createBus, type BusOptions, type MessageBus } from '../bus/message-bus.js';
import type { Clock } from '../clock/clock.js';
import { ManualClock } from '../clock/manual-clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { silentLogger } from '../logging/logger.js';
import type { MessageDefinition, MessageKind, PayloadOf } from '../messages/definition.js';
import type { Envelope } from '../messages/envelope.js';

/** A message the test bus saw go to the broker. */
export interface CapturedMessage<P = unknown> {
  readonly id: string;
  readonly kind: MessageKind;
  readonly type: string;
  readonly payload: P;
  readonly envelope: Envelope<P>;
  /** The encoded envelope exactly as handed to the broker (signed, when the bus signs). */
  readonly body: string;
  /** Not before this time (scheduled messages). */
  readonly deliverAt: number | undefined;
}

/** Options of {@link createTestBus}. */
export interface TestBusOptions extends Omit<BusOptions, 'broker' | 'clock'> {
  /**
   * The clock. With the default virtual clock, `whenIdle()` jumps time forward to the next retry or
   * scheduled message when nothing else is runnable (or when all that runs is waiting for a settle
   * retry, such as a dead-letter write after the store failed), so backoff never makes a test wait.
   * @defaultValue a new {@link ManualClock} (virtual time)
   */
  readonly clock?: Clock;
  /**
   * Delivery order of the test bus's broker. With `'shuffled'`, messages that are not `ordered` are
   * handled in a random order, as competing Redis workers may handle them, so a test fails when the
   * code under test relies on an order its definitions never asked for; `ordered` definitions keep
   * per-key publish order. `'fifo'` delivers in publish order.
   * @defaultValue 'shuffled'
   */
  readonly deliveryOrder?: DeliveryOrder;
  /**
   * Seed of the shuffle. A failing test reports its seed; pass it here (or set `HARRIER_SEED`) to
   * replay the same order.
   * @defaultValue the `HARRIER_SEED` environment variable when set, else a random seed
   */
  readonly seed?: number;
}

/** Options of {@link TestBus.whenIdle}. */
export interface WhenIdleOptions {
  /**
   * Wall-clock ms to wait before failing with the broker's counts.
   * @defaultValue 10000
   */
  readonly timeoutMs?: number;
  /**
   * Also run delayed work (retries, scheduled messages) by moving the virtual clock forward.
   * Ignored with a real clock, where delayed work is simply awaited.
   * @defaultValue true
   */
  readonly includeDelayed?: boolean;
}

/** A bus on the in-memory broker with hooks for assertions. */
export interface TestBus extends MessageBus {
  readonly broker: InMemoryBroker;
  readonly clock: Clock;
  /** The seed of the broker's shuffle: `createTestBus({ seed })` or `HARRIER_SEED` replays it. */
  readonly seed: number;
  /** Every command sent, in order (also those sent by handlers). */
  readonly sent: CapturedMessage[];
  /** Every event published, in order (also those published by handlers). */
  readonly published: CapturedMessage[];
  /** Resolves once nothing is ready, in flight or (by default) delayed. */
  whenIdle(options?: WhenIdleOptions): Promise<void>;
  /** The captured messages of one definition, payloads typed. */
  messagesOf<D extends MessageDefinition>(definition: D): CapturedMessage<PayloadOf<D>>[];
}

class CapturingBroker extends InMemoryBroker {
  constructor(
    clock: Clock,
    deliveryOrder: DeliveryOrder,
    seed: number | undefined,
    private readonly capture: (message: OutgoingMessage) => void,
  ) {
    super({ clock, deliveryOrder, ...(seed !== undefined ? { seed } : {}) });
  }

  // Only what the broker accepted is captured: a refused message (no-route) was never sent.
  override async publish(message: OutgoingMessage): Promise<void> {
    await super.publish(message);
    this.capture(message);
  }

  override async publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
    await super.publishBatch(messages);
    for (const message of messages) this.capture(message);
  }
}

/** The seed from `HARRIER_SEED`, if set. */
function seedFromEnvironment(): number | undefined {
  const raw = process.env.HARRIER_SEED;
  if (raw === undefined || raw.trim() === '') return undefined;
  const seed = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !isSeed(seed))
    throw new HarrierError(
      'invalid-option',
      `HARRIER_SEED=${JSON.stringify(raw)} is not a seed: set it to the whole number a failing test reported, or unset it`,
    );
  return seed;
}

const replayHint = (seed: number): string =>
  `createTestBus delivered in shuffled order with seed ${seed}; replay it with createTestBus({ seed: ${seed} }) or HARRIER_SEED=${seed}`;

/** vitest, when this process runs under it (it sets `VITEST`); undefined under any other runner. */
let vitest: Promise<typeof import('vitest') | undefined> | undefined;

/**
 * Prints the seed when the vitest test that made the bus fails; under another runner, or outside a
 * test, does nothing.
 *
 * @remarks
 * vitest is an optional peer dependency: it is imported only when running under it, so
 * `harrier/testing` loads under Jest or `node:test` without vitest installed.
 */
async function reportSeedOnFailure(seed: number): Promise<void> {
  if (process.env.VITEST === undefined) return;
  vitest ??= import('vitest').catch(() => undefined);
  const runner = await vitest;
  if (runner === undefined) return;
  try {
    runner.onTestFailed(() => {
      console.error(
        `${replayHint(seed)}. If the test relies on the order in which messages are handled, make their definitions ordered (ordered: true with a partitionKey) or stop relying on it.`,
      );
    });
  } catch {
    // Called outside a running test (beforeAll, a script): nobody to report to.
  }
}

/**
 * Creates a bus for tests: in-memory broker delivering in a seeded random order, virtual clock,
 * silent logger, captured messages and `whenIdle()`. It is started already.
 *
 * @remarks
 * Messages whose definition is not `ordered` may be handled in any order on Redis, so the test bus
 * handles them in a random order too (see {@link TestBusOptions.deliveryOrder}). When the vitest
 * test that made the bus fails, the seed is printed on stderr with how to replay it.
 *
 * @example
 * ```ts
 * const bus = await createTestBus({ handlers: [PlaceOrderHandler] });
 * await bus.send(PlaceOrder, { orderId: 'o-1' });
 * await bus.whenIdle();
 * expect(bus.messagesOf(OrderPlaced)).toHaveLength(1);
 * ```
 * @throws HarrierError `invalid-option` when `seed` or `HARRIER_SEED` is not a non-negative whole number.
 */
export async function createTestBus(options: TestBusOptions = {}): Promise<TestBus> {
  const clock = options.clock ?? new ManualClock();
  const deliveryOrder = options.deliveryOrder ?? 'shuffled';
  const sent: CapturedMessage[] = [];
  const published: CapturedMessage[] = [];
  const broker = new CapturingBroker(
    clock,
    deliveryOrder,
    options.seed ?? seedFromEnvironment(),
    (message) => {
      let envelope: Envelope;
      try {
        envelope = JSON.parse(message.body) as Envelope;
      } catch {
        return;
      }
      const captured: CapturedMessage = {
        id: message.id,
        kind: message.kind,
        type: message.type,
        payload: envelope.payload,
        envelope,
        body: message.body,
        deliverAt: message.deliverAt,
      };
      (message.kind === 'event' ? published : sent).push(captured);
    },
  );
  const { deliveryOrder: _order, seed: _seed, ...busOptions } = options;
  const bus = createBus({ logger: silentLogger, ...busOptions, broker, clock });
  const dispatcher = dispatcherOf(bus);
  if (dispatcher === undefined)
    throw new HarrierError('invalid-argument', 'createTestBus needs a bus made by createBus');

  const whenIdle = async (idle: WhenIdleOptions = {}): Promise<void> => {
    const deadline = Date.now() + (idle.timeoutMs ?? 10_000);
    const includeDelayed = idle.includeDelayed ?? true;
    for (;;) {
      // Let resolved handlers run their continuations before looking.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const stats = broker.stats();
      const busy = stats.ready > 0 || stats.inFlight > 0 || dispatcher.activeCount > 0;
      if (!busy) {
        if (!includeDelayed || stats.waiting === 0) return;
        if (clock instanceof ManualClock) {
          const next = clock.nextTimerAt();
          if (next !== undefined) {
            clock.advanceTo(next);
            continue;
          }
          return;
        }
      }
      if (Date.now() > deadline) {
        throw new HarrierError(
          'not-idle',
          `whenIdle timed out: ${stats.ready} ready, ${stats.inFlight} in flight, ${stats.waiting} waiting, ${dispatcher.activeCount} handlers running${dispatcher.isPaused() ? ', the endpoint paused by an outage (a handler keeps failing with a transient error)' : ''}; is the bus started, or is a handler stuck?${deliveryOrder === 'shuffled' ? ` (${replayHint(broker.seed)})` : ''}`,
        );
      }
      // Deliveries whose settle step waits for a retry (a dead-letter write after the store failed)
      // are moved on only by time: when they are all that runs, time moves on for them.
      const onlySettleWaits =
        dispatcher.activeCount > 0 && dispatcher.settleWaitCount === dispatcher.activeCount;
      // Paused by an outage, with nothing running: only time brings the next probe.
      const onlyPaused = dispatcher.isPaused() && dispatcher.activeCount === 0 && stats.inFlight === 0;
      if ((onlySettleWaits || onlyPaused) && clock instanceof ManualClock) {
        const next = clock.nextTimerAt();
        if (next !== undefined) {
          clock.advanceTo(next);
          continue;
        }
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(finish, 50);
        const offBroker = broker.onChange(finish);
        const offDispatcher = dispatcher.onChange(finish);
        function finish(): void {
          clearTimeout(timer);
          offBroker();
          offDispatcher();
          resolve();
        }
      });
    }
  };

  if (deliveryOrder === 'shuffled') await reportSeedOnFailure(broker.seed);
  const testBus = Object.assign(bus, {
    clock,
    seed: broker.seed,
    sent,
    published,
    whenIdle,
    messagesOf<D extends MessageDefinition>(definition: D): CapturedMessage<PayloadOf<D>>[] {
      return [...sent, ...published].filter((m) => m.type === definition.type) as CapturedMessage<
        PayloadOf<D>
      >[];
    },
  }) as unknown as TestBus;
  await bus.start();
  return testBus;
}
