import 'reflect-metadata';
import { describe, expect, it } from 'vitest';
import {
  CommandHandler,
  HarrierError,
  createBus,
  silentLogger,
  type MessageContext,
} from '../../../src/index.js';
import type { HandlerEntry, HandlerInvoker } from '../../../src/extend.js';
import { PlaceOrder } from './fixtures.js';

@CommandHandler(PlaceOrder)
class PlaceOrderHandler {
  constructor(private readonly accept: boolean) {}

  handle(): { accepted: boolean } {
    return { accepted: this.accept };
  }
}

describe('createBus', () => {
  describe('invoke', () => {
    it('calls each handler through the given invoker instead of the container', async () => {
      const calls: { handler: string; method: string; payload: unknown; messageId: string }[] = [];
      // A class the container could not build (its constructor takes a boolean): only invoke can.
      const instance = new PlaceOrderHandler(true);
      const invoke: HandlerInvoker = (entry: HandlerEntry, method, payload, context: MessageContext) => {
        calls.push({ handler: entry.name, method, payload, messageId: context.messageId });
        return (instance as unknown as Record<string, (p: unknown, c: MessageContext) => unknown>)[method]?.(
          payload,
          context,
        );
      };
      const bus = createBus({ handlers: [PlaceOrderHandler], invoke, logger: silentLogger });
      await bus.start();
      try {
        await expect(bus.execute(PlaceOrder, { orderId: 'o-1', amount: 3 })).resolves.toEqual({
          accepted: true,
        });
        expect(calls).toEqual([
          {
            handler: 'PlaceOrderHandler',
            method: 'handle',
            payload: { orderId: 'o-1', amount: 3 },
            messageId: expect.any(String) as string,
          },
        ]);
      } finally {
        await bus.stop();
      }
    });

    it('is refused with messageScope, which only the container uses', () => {
      const attempt = (): unknown =>
        createBus({ handlers: [PlaceOrderHandler], invoke: () => undefined, messageScope: {} });
      expect(attempt).toThrow(HarrierError);
      expect(attempt).toThrow(/messageScope cannot be combined with invoke/);
    });

    it('is refused when it is not a function', () => {
      const attempt = (): unknown =>
        createBus({ invoke: 'nest' as unknown as HandlerInvoker, logger: silentLogger });
      expect(attempt).toThrow(/invoke is a string: pass a function/);
    });
  });
});
