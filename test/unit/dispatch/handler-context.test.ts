import 'reflect-metadata';
import { describe, expect, it } from 'vitest';
import {
  CommandHandler,
  EventHandler,
  InMemoryBroker,
  createBus,
  silentLogger,
  type MessageContext,
} from '../../../src/index.js';
import { HandlerContext } from '../../../src/extend.js';
import { OrderPlaced, ReserveStock } from '../bus/fixtures.js';
import { waitFor } from '../../helpers/local-redis.js';

interface Seen {
  readonly context: MessageContext;
  readonly signals: readonly AbortSignal[];
}

/** Runs one `execute` and one received event; returns the context each handler was given. */
async function contextsOfBothPaths(): Promise<{ executed: Seen; received: Seen }> {
  const seen: Record<string, Seen> = {};
  const see = (path: string, context: MessageContext): void => {
    seen[path] = { context, signals: [context.signal, context.signal] };
  };
  @CommandHandler(ReserveStock)
  class Executed {
    handle(_payload: unknown, context: MessageContext): void {
      see('executed', context);
      context.publish(OrderPlaced, { orderId: 'o-1', amount: 1 });
    }
  }
  @EventHandler(OrderPlaced)
  class Received {
    handle(_payload: unknown, context: MessageContext): void {
      see('received', context);
    }
  }
  const bus = createBus({
    broker: new InMemoryBroker(),
    handlers: [Executed, Received],
    logger: silentLogger,
  });
  await bus.start();
  try {
    await bus.execute(ReserveStock, { orderId: 'o-1' });
    await waitFor('the published event to be handled', () => seen.received !== undefined, {
      timeoutMs: 5_000,
    });
  } finally {
    await bus.stop();
  }
  const { executed, received } = seen;
  if (executed === undefined || received === undefined) throw new Error('a handler did not run');
  return { executed, received };
}

describe('HandlerContext', () => {
  // Each path has its own context class (no shared constructor, for execute's speed): both must stay
  // HandlerContexts, with the behaviour the base class gives them.
  describe('given to the handler of execute and of a received message', () => {
    it('is a HandlerContext on both paths', async () => {
      const { executed, received } = await contextsOfBothPaths();
      expect(executed.context).toBeInstanceOf(HandlerContext);
      expect(received.context).toBeInstanceOf(HandlerContext);
    });

    it('gives the same abort signal on every read, on both paths', async () => {
      const { executed, received } = await contextsOfBothPaths();
      for (const { signals } of [executed, received]) {
        expect(signals[0]).toBeInstanceOf(AbortSignal);
        expect(signals[1]).toBe(signals[0]);
      }
    });

    it("records what execute's handler publishes, caused by the executed message", async () => {
      const { executed, received } = await contextsOfBothPaths();
      expect(received.context.causationId).toBe(executed.context.messageId);
      expect(received.context.correlationId).toBe(executed.context.correlationId);
    });
  });
});
