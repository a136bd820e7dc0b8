import { describe, expect, it } from 'vitest';
import { CommandHandler, InMemoryBroker, createBus, silentLogger } from '../../../src/index.js';
import type { OutgoingMessage } from '../../../src/broker/message-broker.js';
import { ReserveStock } from '../bus/fixtures.js';
import { waitFor } from '../../helpers/local-redis.js';

const msg = (n: number): OutgoingMessage => ({
  id: `0190a5c4-0000-7000-8000-${String(n).padStart(12, '0')}`,
  kind: 'command',
  type: ReserveStock.type,
  body: '{}',
});

describe('review of the send path: in-memory receiver', () => {
  it('return() during a pending next() takes nothing; the message goes to another receiver', async () => {
    const broker = new InMemoryBroker();
    await broker.register('e', [{ handler: 'h', kind: 'command', types: [ReserveStock.type] }]);
    const a = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
    const pending = a.next();
    await new Promise((r) => setImmediate(r));
    await a.return?.();
    await broker.publish(msg(1));
    expect(await pending).toEqual({ done: true, value: undefined });
    expect(broker.stats()).toMatchObject({ ready: 1, inFlight: 0 });
    const b = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
    const got = await b.next();
    expect(got.done).toBe(false);
    await b.return?.();
  });

  it('an abort during a pending next() ends it, and a later publish wakes nobody wrongly', async () => {
    const broker = new InMemoryBroker();
    await broker.register('e', [{ handler: 'h', kind: 'command', types: [ReserveStock.type] }]);
    const abort = new AbortController();
    const a = broker.receiver({ endpoint: 'e', signal: abort.signal })[Symbol.asyncIterator]();
    const pending = a.next();
    abort.abort();
    expect(await pending).toEqual({ done: true, value: undefined });
    // a second receiver waiting must still be woken by a publish
    const b = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
    const waiting = b.next();
    await new Promise((r) => setImmediate(r));
    await broker.publish(msg(2));
    expect((await waiting).done).toBe(false);
  });
});

describe('review of the send path: dispatcher slots', () => {
  it('never runs more handlers than concurrency, with failures and retries', async () => {
    let running = 0;
    let max = 0;
    const seen = new Map<string, number>();
    @CommandHandler(ReserveStock, { retry: { attempts: 3, backoff: { baseMs: 1, maxMs: 2 } } })
    class Handler {
      async handle(p: { orderId: string }) {
        running++;
        max = Math.max(max, running);
        try {
          const n = (seen.get(p.orderId) ?? 0) + 1;
          seen.set(p.orderId, n);
          if (Number(p.orderId) % 3 === 0) await new Promise((r) => setTimeout(r, 1));
          if (Number(p.orderId) % 4 === 0 && n === 1) throw new Error('once');
          if (Number(p.orderId) % 7 === 0) throw new Error('always');
        } finally {
          running--;
        }
      }
    }
    const broker = new InMemoryBroker();
    let done = 0;
    let dead = 0;
    const bus = createBus({
      broker,
      handlers: [Handler],
      logger: silentLogger,
      concurrency: 3,
      hooks: {
        onHandled: () => {
          done++;
        },
        onDeadLettered: () => {
          dead++;
        },
      },
    });
    await bus.start();
    for (let i = 1; i <= 300; i++) await bus.send(ReserveStock, { orderId: String(i) });
    await waitFor('300 messages handled or dead-lettered', () => done + dead === 300, { timeoutMs: 10_000 });
    expect(max).toBeLessThanOrEqual(3);
    expect(dead).toBe(Math.floor(300 / 7));
    await bus.stop();
  });

  it('a stop mid-flight loses nothing: a second bus on the same broker handles the rest', async () => {
    const handled = new Set<string>();
    let gate: (() => void) | undefined;
    @CommandHandler(ReserveStock)
    class Handler {
      async handle(p: { orderId: string }) {
        if (p.orderId === '5' && gate === undefined) await new Promise<void>((r) => (gate = r));
        handled.add(p.orderId);
      }
    }
    const broker = new InMemoryBroker();
    const first = createBus({
      endpoint: 'e',
      broker,
      handlers: [Handler],
      logger: silentLogger,
      concurrency: 2,
    });
    for (let i = 1; i <= 50; i++) await first.send(ReserveStock, { orderId: String(i) });
    await first.start();
    await waitFor('the first bus to hold message 5', () => gate !== undefined, { timeoutMs: 5000 });
    await first.stop({ gracePeriodMs: 0, closeBroker: false });
    gate?.();
    const second = createBus({ endpoint: 'e', broker, handlers: [Handler], logger: silentLogger });
    await second.start();
    await waitFor(
      'all 50 handled and acked',
      () => handled.size === 50 && broker.stats().inFlight === 0 && broker.stats().ready === 0,
      { timeoutMs: 5000 },
    );
    await second.stop();
  });
});

describe('review of the send path: routes once registered', () => {
  it('two buses on one broker, sends before and after start, and after a stop that keeps the broker', async () => {
    const handledBy: string[] = [];
    @CommandHandler(ReserveStock)
    class Handler {
      handle(p: { orderId: string }) {
        handledBy.push(p.orderId);
      }
    }
    const broker = new InMemoryBroker();
    const a = createBus({ endpoint: 'a', broker, handlers: [Handler], logger: silentLogger });
    const b = createBus({ endpoint: 'b', broker, handlers: [], logger: silentLogger });
    await expect(b.send(ReserveStock, { orderId: 'b0' })).rejects.toMatchObject({ code: 'no-route' });
    await a.send(ReserveStock, { orderId: 'a0' });
    await a.start();
    await a.send(ReserveStock, { orderId: 'a1' });
    await b.send(ReserveStock, { orderId: 'b1' });
    await waitFor('3 handled', () => handledBy.length === 3, { timeoutMs: 5000 });
    await a.stop({ closeBroker: false });
    const again = createBus({ endpoint: 'a', broker, handlers: [Handler], logger: silentLogger });
    await again.send(ReserveStock, { orderId: 'a2' });
    await again.start();
    await waitFor('4 handled', () => handledBy.length === 4, { timeoutMs: 5000 });
    expect(handledBy.sort()).toEqual(['a0', 'a1', 'a2', 'b1']);
    await again.stop();
  });
});
