import { InMemoryBroker } from '../broker/in-memory-broker.js';
import type { OutgoingMessage } from '../broker/message-broker.js';
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
   * scheduled message when nothing else is runnable, so backoff never makes a test wait.
   * @defaultValue a new {@link ManualClock} (virtual time)
   */
  readonly clock?: Clock;
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
    private readonly capture: (message: OutgoingMessage) => void,
  ) {
    super({ clock });
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

/**
 * Creates a bus for tests: in-memory broker, virtual clock, silent logger, captured messages and
 * `whenIdle()`. It is started already.
 *
 * @example
 * ```ts
 * const bus = await createTestBus({ handlers: [PlaceOrderHandler] });
 * await bus.send(PlaceOrder, { orderId: 'o-1' });
 * await bus.whenIdle();
 * expect(bus.messagesOf(OrderPlaced)).toHaveLength(1);
 * ```
 */
export async function createTestBus(options: TestBusOptions = {}): Promise<TestBus> {
  const clock = options.clock ?? new ManualClock();
  const sent: CapturedMessage[] = [];
  const published: CapturedMessage[] = [];
  const broker = new CapturingBroker(clock, (message) => {
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
  });
  const bus = createBus({ logger: silentLogger, ...options, broker, clock });
  const dispatcher = dispatcherOf(bus);
  if (dispatcher === undefined)
    throw new HarrierError('internal', 'createTestBus needs a bus made by createBus');

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
          `whenIdle timed out: ${stats.ready} ready, ${stats.inFlight} in flight, ${stats.waiting} waiting, ${dispatcher.activeCount} handlers running; is the bus started, or is a handler stuck?`,
        );
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

  const testBus = Object.assign(bus, {
    clock,
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
