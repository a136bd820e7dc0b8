import { Container } from 'inversify';
import { describe, expect, it } from 'vitest';
import { CommandHandler } from '../../../src/index.js';
import { HandlerContext, HandlerRegistry, createContainerInvoker } from '../../../src/extend.js';
import { ReserveStock } from './fixtures.js';

@CommandHandler(ReserveStock)
class SyncHandler {
  handle(): string {
    return 'ok';
  }
}

@CommandHandler(ReserveStock)
class ThrowingHandler {
  handle(): never {
    throw new Error('refused');
  }
}

const entryOf = (handler: new () => object) => {
  const entry = HandlerRegistry.build([handler], [ReserveStock]).singleHandler(ReserveStock.type);
  if (entry === undefined) throw new Error('no entry');
  return entry;
};

// The handlers never read their context: an instance with no fields is enough.
const context = Object.create(HandlerContext.prototype) as HandlerContext;

describe('createContainerInvoker (harrier/extend)', () => {
  it('returns a promise for a synchronous handler, so an invoker that wraps it with .then keeps working', async () => {
    const inner = createContainerInvoker(new Container());
    const result = inner(entryOf(SyncHandler), 'handle', { orderId: 'o' }, context);
    expect(result).toBeInstanceOf(Promise);
    await expect(result.then((value) => `${String(value)}!`)).resolves.toBe('ok!');
  });

  it('rejects with what a synchronous handler throws, instead of throwing', async () => {
    const inner = createContainerInvoker(new Container());
    let result: Promise<unknown> | undefined;
    expect(() => {
      result = inner(entryOf(ThrowingHandler), 'handle', { orderId: 'o' }, context);
    }).not.toThrow();
    await expect(result).rejects.toThrow('refused');
  });
});
