import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  InMemoryDeadLetterStore,
  ManualClock,
  TransientError,
  createBus,
  silentLogger,
  type MessageBus,
  type MessageContext,
  type PausedEvent,
  type ResumedEvent,
} from '../../../src/index.js';
import { OutageBreaker, type Delivery, type ReceiverOptions } from '../../../src/extend.js';
import { ReserveStock } from '../bus/fixtures.js';

/** Resolves once `condition` holds, checking every few ms; fails after `timeout` ms. */
function waitFor(condition: () => boolean, timeout = 5_000): Promise<void> {
  return vi.waitFor(
    () => {
      if (!condition()) throw new Error('condition not met in time');
    },
    { timeout, interval: 2 },
  );
}

/** A dependency the handler calls: while `down`, calls fail as the given error says. */
class Dependency {
  down = false;
  calls = 0;
  constructor(readonly failure: () => unknown) {}
  call(): void {
    this.calls++;
    if (this.down) throw this.failure();
  }
}

let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
});

function outageBus(
  dependency: Dependency,
  options: { readonly isTransient?: (e: unknown) => boolean | undefined } = {},
) {
  const handled: { orderId: string; attempt: number }[] = [];
  const paused: PausedEvent[] = [];
  const resumed: ResumedEvent[] = [];
  @CommandHandler(ReserveStock)
  class Handler {
    handle(payload: { orderId: string }, ctx: MessageContext): void {
      dependency.call();
      handled.push({ orderId: payload.orderId, attempt: ctx.attempt });
    }
  }
  const broker = new InMemoryBroker();
  const deadLetters = new InMemoryDeadLetterStore();
  bus = createBus({
    broker,
    deadLetters,
    handlers: [Handler],
    logger: silentLogger,
    concurrency: 4,
    // Few attempts, no backoff: an outage that spent attempts would dead-letter at once.
    retry: { attempts: 2, immediate: 1 },
    outage: { probeBaseMs: 20, probeMaxMs: 80 },
    hooks: {
      onPaused: (event) => void paused.push(event),
      onResumed: (event) => void resumed.push(event),
    },
    ...(options.isTransient !== undefined ? { isTransient: options.isTransient } : {}),
  });
  return { bus, broker, deadLetters, handled, paused, resumed };
}

describe('Dispatcher', () => {
  describe('when a dependency is unreachable', () => {
    it('pauses, spends no attempt, dead-letters nothing, probes one message at a time, and resumes', async () => {
      const dependency = new Dependency(() =>
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      );
      const { bus, broker, deadLetters, handled, paused, resumed } = outageBus(dependency);
      dependency.down = true;
      await bus.start();
      for (let i = 0; i < 50; i++) await bus.send(ReserveStock, { orderId: `o-${i}` });

      await waitFor(() => paused.length === 1 && dependency.calls >= 10);
      expect(bus.paused).toBe(true);
      expect(paused[0]).toMatchObject({ endpoint: bus.endpoint, error: { code: 'ECONNREFUSED' } });
      // Paused: only probes reach the handler, one at a time (the first calls are the 4 slots).
      const callsWhilePaused = dependency.calls;
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(dependency.calls - callsWhilePaused).toBeLessThanOrEqual(300 / 20 + 1);

      dependency.down = false;
      await waitFor(() => handled.length === 50 && broker.stats().inFlight === 0);
      expect(resumed).toHaveLength(1);
      expect(resumed[0]!.pausedMs).toBeGreaterThan(0);
      expect(bus.paused).toBe(false);
      expect(await deadLetters.count()).toBe(0);
      // Not one attempt was spent on the outage.
      expect(handled.every((h) => h.attempt === 1)).toBe(true);
      expect(new Set(handled.map((h) => h.orderId)).size).toBe(50);
      expect(broker.stats().inFlight).toBe(0);
    });

    it('takes a TransientError thrown by the handler as an outage', async () => {
      const dependency = new Dependency(() => new TransientError('payments API down'));
      const { bus, deadLetters, handled, paused } = outageBus(dependency);
      dependency.down = true;
      await bus.start();
      for (let i = 0; i < 5; i++) await bus.send(ReserveStock, { orderId: `o-${i}` });
      await waitFor(() => paused.length === 1 && dependency.calls >= 8);
      dependency.down = false;
      await waitFor(() => handled.length === 5);
      expect(handled.every((h) => h.attempt === 1)).toBe(true);
      expect(await deadLetters.count()).toBe(0);
    });

    it('takes what isTransient marks as an outage, and what it refuses as a message failure', async () => {
      class HttpDown extends Error {}
      const dependency = new Dependency(() => new HttpDown('503 from the CRM'));
      const { bus, deadLetters, handled, paused } = outageBus(dependency, {
        isTransient: (error) => (error instanceof HttpDown ? true : undefined),
      });
      dependency.down = true;
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'o-1' });
      await waitFor(() => paused.length === 1 && dependency.calls >= 3);
      dependency.down = false;
      await waitFor(() => handled.length === 1);
      expect(await deadLetters.count()).toBe(0);
    });
  });

  describe('when one message keeps meeting an "outage" that other messages get through', () => {
    it('counts its attempts once it probed maxProbesPerMessage times in a row, dead-letters it, and leaves the endpoint running', async () => {
      let badCalls = 0;
      const handled: string[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        handle(payload: { orderId: string }): void {
          if (payload.orderId === 'gone-host') {
            badCalls++;
            // A webhook to a host that no longer exists: a socket error, for this message only.
            throw Object.assign(new Error('getaddrinfo ENOTFOUND hooks.gone.example'), { code: 'ENOTFOUND' });
          }
          handled.push(payload.orderId);
        }
      }
      const deadLetters = new InMemoryDeadLetterStore();
      const broker = new InMemoryBroker();
      bus = createBus({
        broker,
        deadLetters,
        handlers: [Handler],
        logger: silentLogger,
        concurrency: 1,
        retry: { attempts: 3, immediate: 2 },
        outage: { probeBaseMs: 10, probeMaxMs: 20, maxProbesPerMessage: 3 },
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'gone-host' });
      for (let i = 0; i < 5; i++) await bus.send(ReserveStock, { orderId: `o-${i}` });
      await waitFor(
        () => handled.length === 5 && broker.stats().ready === 0 && broker.stats().inFlight === 0,
      );
      const [record] = (await deadLetters.list()).records;
      expect(record).toMatchObject({ reason: 'handler-failed', error: { code: 'ENOTFOUND' } });
      // At the head of a concurrency-1 queue it is every probe: each 3rd probe in a row counts.
      expect(badCalls).toBeGreaterThanOrEqual(3);
      expect(record?.attemptCount).toBe(3);
      expect(bus.paused).toBe(false);
    });
  });

  describe('when one message meets an "outage" again after other messages got through', () => {
    it('counts its attempt and dead-letters it at the end, without waiting for maxProbesPerMessage', async () => {
      const handled: string[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        async handle(payload: { orderId: string }): Promise<void> {
          if (payload.orderId === 'gone-host') {
            throw Object.assign(new Error('connect ECONNREFUSED 10.9.9.9:443'), { code: 'ECONNREFUSED' });
          }
          await new Promise((resolve) => setTimeout(resolve, 1));
          handled.push(payload.orderId);
        }
      }
      const deadLetters = new InMemoryDeadLetterStore();
      const broker = new InMemoryBroker();
      bus = createBus({
        broker,
        deadLetters,
        handlers: [Handler],
        logger: silentLogger,
        concurrency: 4,
        retry: { attempts: 3, immediate: 2 },
        outage: { probeBaseMs: 10, probeMaxMs: 20, maxProbesPerMessage: 1_000 },
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'gone-host' });
      for (let i = 0; i < 40; i++) await bus.send(ReserveStock, { orderId: `o-${i}` });
      await waitFor(
        () => handled.length === 40 && broker.stats().ready === 0 && broker.stats().inFlight === 0,
      );
      await waitFor(() => !bus!.paused);
      expect((await deadLetters.list()).records.map((r) => r.attemptCount)).toEqual([3]);
    });
  });

  describe('when the receiver fails just after the probe was let through', () => {
    it('lets the next probe go instead of waiting for ever', async () => {
      let down = true;
      let failNext = false;
      const handled: string[] = [];
      @CommandHandler(ReserveStock)
      class Handler {
        handle(payload: { orderId: string }): void {
          if (down) throw new TransientError('the database is down');
          handled.push(payload.orderId);
        }
      }
      class HiccupBroker extends InMemoryBroker {
        override receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
          const inner = super.receiver(options)[Symbol.asyncIterator]();
          return {
            [Symbol.asyncIterator]: () => ({
              next: () => {
                if (!failNext) return inner.next();
                failNext = false;
                return Promise.reject(new Error('receiver hiccup'));
              },
              return: () => inner.return?.() ?? Promise.resolve({ done: true, value: undefined }),
            }),
          };
        }
      }
      const paused: PausedEvent[] = [];
      bus = createBus({
        broker: new HiccupBroker(),
        handlers: [Handler],
        logger: silentLogger,
        outage: { probeBaseMs: 20, probeMaxMs: 40 },
        hooks: { onPaused: (event) => void paused.push(event) },
      });
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'a' });
      await waitFor(() => paused.length === 1);
      failNext = true;
      down = false;
      await waitFor(() => handled.length === 1, 3_000);
      expect(bus.paused).toBe(false);
    });
  });

  describe('when the handler fails on its own', () => {
    it('does not pause: the message spends its attempts and is dead-lettered', async () => {
      const dependency = new Dependency(() => new Error('order o-1 is malformed'));
      const { bus, broker, deadLetters, paused } = outageBus(dependency);
      dependency.down = true;
      await bus.start();
      await bus.send(ReserveStock, { orderId: 'o-1' });
      await waitFor(
        () => dependency.calls === 2 && broker.stats().inFlight === 0 && broker.stats().ready === 0,
      );
      expect(await deadLetters.count()).toBe(1);
      expect(paused).toHaveLength(0);
      expect(bus.paused).toBe(false);
    });
  });
});

describe('OutageBreaker', () => {
  function breaker() {
    const clock = new ManualClock(0);
    const events: string[] = [];
    const b = new OutageBreaker(
      clock,
      silentLogger,
      { endpoint: 'shop' },
      { probeBaseMs: 100, probeMaxMs: 400, maxProbesPerMessage: 10 },
      {
        paused: (e) => void events.push(`paused ${e.probeInMs}`),
        resumed: (e) => void events.push(`resumed ${e.pausedMs} ${e.failedProbes}`),
      },
    );
    return { clock, events, b, signal: new AbortController().signal };
  }

  describe('.admit', () => {
    it('lets one probe through when it is due, doubles the wait after each failed probe up to probeMaxMs, and closes on success', async () => {
      const { clock, events, b, signal } = breaker();
      expect(await b.admit(signal)).toBe('go');
      b.tripped(new Error('down'));
      let admitted = false;
      void b.admit(signal).then((answer) => (admitted = answer === 'probe'));
      clock.advance(99);
      await Promise.resolve();
      expect(admitted).toBe(false);
      clock.advance(1);
      await vi.waitFor(() => {
        expect(admitted).toBe(true);
      });
      // A second caller waits while the probe is out.
      let second = false;
      void b.admit(signal).then((answer) => (second = answer === 'probe'));
      b.tripped(new Error('still down'));
      clock.advance(199);
      await Promise.resolve();
      expect(second).toBe(false);
      clock.advance(1);
      await vi.waitFor(() => {
        expect(second).toBe(true);
      });
      b.tripped(new Error('still down'));
      b.admit(signal).catch(() => undefined);
      clock.advance(400);
      await Promise.resolve();
      b.succeeded();
      expect(b.isPaused()).toBe(false);
      expect(events).toEqual(['paused 100', 'resumed 700 2']);
    });

    it('lets the next probe go after the current wait when a probe ends with no verdict', async () => {
      const { clock, b, signal } = breaker();
      b.tripped(new Error('down'));
      clock.advance(100);
      expect(await b.admit(signal)).toBe('probe');
      b.probeEnded();
      let next = false;
      void b.admit(signal).then((answer) => (next = answer === 'probe'));
      clock.advance(99);
      await Promise.resolve();
      expect(next).toBe(false);
      clock.advance(1);
      await vi.waitFor(() => {
        expect(next).toBe(true);
      });
    });

    it('answers false at once when the signal aborts', async () => {
      const { b } = breaker();
      b.tripped(new Error('down'));
      const abort = new AbortController();
      const admitted = b.admit(abort.signal);
      abort.abort();
      expect(await admitted).toBe('stopped');
    });
  });
});
